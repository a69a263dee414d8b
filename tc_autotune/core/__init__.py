"""The tuning problem itself, free of any search or GPU: the task registry (``tasks``: a workload
kind; its template and baseline bound by the package face) and the tasks (``builtin_tasks``), the
config space over any template on a GPU it is given (``config_space``), the template protocol
(which loads a template's TVM side by the name the template gives), and what a measurement
produces.  It imports no template and no backend."""
