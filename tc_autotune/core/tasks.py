"""The task registry: what a tuning log's records key on.

A task is an operator family the package can tune: its name (written in every record), its
workload type (parses the spec a record holds), the tensors a kernel takes, and the host
reference and random inputs every kernel is checked with.  ``Task`` is that record of facts,
and this module is the registry a record's task name and a workload's type are looked up in
(``get``, ``of``).  The tasks themselves are defined from the workloads they compute
(``core.builtin_tasks``: conv2d and dense), and registered as that module loads: the package
face imports it first, so a record of any task is readable wherever the package is.  The
registry imports nothing of the package (no workload, no template, no space: a task is given
its template, as a space is): the records (``database.record``) read it below the workloads'
spec parsers and presets and below the space, which a task makes through its template
(``Task.space``: ``Template.space``).

Which template makes a task's kernels (its knob space, rules, prior, lowering, and the
``source_hash`` its records are keyed by: ``database.record``) and what its timings are compared with (cuDNN, cuBLAS)
are not facts of the workloads either: the package face (``tc_autotune/__init__``) chooses
them, at the top, and binds them here (``use_template``, ``use_baseline``) before any other
module of the package loads.  So core/, search/ and database/ reach a template only through a
task or a space, and import none.  A new task is one more ``register`` call (beside conv2d's and
dense's) plus a template that serves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# task name -> the template that makes its kernels (a ``core.template.Template``), and the function
# that times its baseline ((workload, *inputs, reference) -> (seconds or None, error)): bound at the top.
_TEMPLATES: dict = {}
_BASELINES: dict[str, Callable] = {}


@dataclass(frozen=True)
class Task:
    """One operator family."""

    name: str  # the record's task name
    workload_type: type  # has .parse(spec) and str(); frozen (keys caches)
    signature: Callable  # workload -> [(tensor name, shape, dtype)]: inputs then output
    reference: Callable  # (workload, *inputs) -> fp32 output on the host
    inputs: Callable  # (workload, seed) -> random inputs (signature order)
    # what reports call the baseline (their ``baseline`` field), or workload -> that name
    baseline_name: str | Callable = "cuDNN"

    @property
    def template(self):
        """The template that makes this task's kernels (a ``core.template.Template``: ``use_template``)."""
        try:
            return _TEMPLATES[self.name]
        except KeyError:
            raise LookupError(f"no template makes task {self.name!r}'s kernels: import tc_autotune, whose face "
                              "binds each task to its template (core.tasks.use_template)") from None

    @property
    def baseline(self) -> Callable | None:
        """(workload, *inputs, reference, number=, repeat=, min_repeat_ms=) -> (seconds or None,
        error): the vendor library's time, checked, then timed by the one timer (``measure.baseline``,
        bound by ``use_baseline``); None where none is bound."""
        return _BASELINES.get(self.name)

    def baseline_of(self, workload) -> str:
        """What reports call ``workload``'s baseline (``baseline_name``)."""
        return self.baseline_name(workload) if callable(self.baseline_name) else self.baseline_name

    def space(self, workload, gpu):
        """The template's knob space (a ``core.config_space.ConfigSpace``) for one workload on
        ``gpu`` (``backends.cuda.gpu``: the local one is ``default_gpu()``)."""
        return self.template.space(workload, gpu)

    def lower(self, workload, config, target, pdl: bool = False):
        """The template's TVM Executable for one (workload, config) (see ``Template.lowers``);
        ``pdl``: launched with Programmatic Dependent Launch (``Template.lower``)."""
        return self.template.lower(self.name, workload, config, target, pdl)

    def schedule(self, workload, config):
        """The template's scheduled TensorIR module of one (workload, config), not yet lowered
        (``Template.schedule``)."""
        return self.template.schedule(self.name, workload, config)


_TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add a task."""
    if task.name in _TASKS:
        raise ValueError(f"task {task.name!r} is registered twice")
    _TASKS[task.name] = task
    return task


def use_template(template, *tasks: Task) -> None:
    """``template`` makes the kernels of ``tasks`` (the package face's choice)."""
    for task in tasks:
        _TEMPLATES[task.name] = template


def use_baseline(task: Task, timed: Callable) -> None:
    """``timed(workload, *inputs, reference)`` times ``task``'s baseline (the package face's choice)."""
    _BASELINES[task.name] = timed


def lowering_modules() -> list[str]:
    """The TVM side of each template bound to a task (``Template.lowering_module``), each once:
    what lowering the tasks' kernels loads, and so what a server that forks builders loads first."""
    return list(dict.fromkeys(t.lowering_module for t in _TEMPLATES.values() if t.lowering_module))


def of(workload) -> Task:
    """The task whose workload type ``workload`` is."""
    return of_type(type(workload))


def of_type(workload_type: type) -> Task:
    """The task whose workloads are ``workload_type``'s (or a subclass's)."""
    for task in _TASKS.values():
        if issubclass(workload_type, task.workload_type):
            return task
    raise KeyError(f"no task for {workload_type.__name__} workloads")


def names() -> list[str]:
    return list(_TASKS)


def get(name: str) -> Task:
    try:
        return _TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r} (known: {', '.join(_TASKS)})") from None
