"""The tuning problem itself, free of any search or GPU: tasks (a workload kind with its template,
space and baseline), the config space, and what a measurement produces."""
