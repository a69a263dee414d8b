"""The tuning problem itself, free of any search or GPU: tasks (a workload kind; its template and
baseline bound by the package face), the config space over any template (``config_space``), the
template protocol, and what a measurement produces.  It imports no template."""
