"""The task registry: what a tuning log's records key on.

A task is an operator family the package can tune: its name (written in every record), its
workload type (parses the spec a record holds), the tensors a kernel takes, the host
reference and the baseline it is checked and compared against, its knob space, and the
version of its kernel generator (records of another version are stale) and its GEMM view
(``gemm.GemmView``: M, N, K, dtypes, the operands' layout and index maps), which is all the
space, the rules and the template read.  The template registers the function that lowers a
(workload, config) with ``templates``.  A new task (dense, a fused epilogue) is one more
``register`` call plus its template.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..measure import baseline
from ..workloads import epilogue
from ..templates.tc_gemm import gemm
from ..workloads.dense import DenseWorkload
from ..workloads.reference import conv2d_reference, dense_inputs, dense_reference, random_inputs
from .config_space import ConfigSpace
from .template import Template
from ..templates.tc_gemm.template import TC_GEMM
from ..workloads.conv2d import Conv2dWorkload


@dataclass(frozen=True)
class Task:
    """One operator family."""

    name: str  # the record's task name
    workload_type: type  # has .parse(spec) and str(); frozen (keys caches)
    signature: Callable  # workload -> [(tensor name, shape, dtype)]: inputs then output
    reference: Callable  # (workload, *inputs) -> fp32 output on the host
    inputs: Callable  # (workload, seed) -> random inputs (signature order)
    # (workload, *inputs, reference, number=, repeat=, min_repeat_ms=) -> (seconds or None, error):
    # checked, then timed by the one timer (``measure.baseline``)
    baseline: Callable | None
    gemm_view: Callable  # workload -> gemm.GemmView: what the space and template see
    template: Template  # knobs, rules, prior, features, lowering (``core.template``)
    baseline_name: str = "cuDNN"  # what reports call the baseline (their ``baseline`` field)

    @property
    def template_version(self) -> int:
        """Records of another version are stale; the template bumps it when the generated code
        changes (tc_gemm: ``generator.FINGERPRINTS``, ``DENSE_FINGERPRINTS``)."""
        return self.template.versions[self.name]

    def space(self, workload, gpu=None) -> ConfigSpace:
        """The template's knob space for one workload (on ``gpu``, default: local or sm_90)."""
        return ConfigSpace(workload, gpu, template=self.template)

    def lower(self, workload, config, target):
        """The template's TVM Executable for one (workload, config) (see ``templates``)."""
        return self.template.lower(self.name, workload, config, target)


_TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add a task; its workload type's GEMM view becomes ``gemm.view_of``'s for that type."""
    if task.name in _TASKS:
        raise ValueError(f"task {task.name!r} is registered twice")
    gemm.views(task.workload_type)(task.gemm_view)
    _TASKS[task.name] = task
    return task


def of(workload) -> Task:
    """The task whose workload type ``workload`` is."""
    for task in _TASKS.values():
        if isinstance(workload, task.workload_type):
            return task
    raise KeyError(f"no task for {type(workload).__name__} workloads")


def names() -> list[str]:
    return list(_TASKS)


def get(name: str) -> Task:
    try:
        return _TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r} (known: {', '.join(_TASKS)})") from None


def templates(name: str):
    """Decorator: the template's ``lower(workload, config, target)`` of task ``name``."""
    return get(name).template.lowers(name)


def _signature(wl, operands):
    """The operands' (name, shape, dtype), the epilogue's inputs, then the output's: the
    kernel's arguments before its workspaces."""
    return [*operands, *epilogue.workload_input_specs(wl), ("out", wl.out_shape, wl.out_dtype)]


def _conv2d_signature(wl: Conv2dWorkload):
    return _signature(wl, [("data", wl.data_shape, wl.dtype), ("weight", wl.weight_shape, wl.dtype)])


CONV2D = register(Task(
    name="conv2d_nhwc_tensorcore.cuda",
    workload_type=Conv2dWorkload,
    signature=_conv2d_signature,
    reference=conv2d_reference,
    inputs=random_inputs,
    baseline=baseline.checked_cudnn_time,
    gemm_view=gemm.conv2d_view,
    template=TC_GEMM,
    baseline_name="cuDNN",
))


def _dense_signature(wl: DenseWorkload):
    return _signature(wl, [("data", wl.a_shape, wl.dtype), ("weight", wl.b_shape, wl.dtype)])


DENSE = register(Task(
    name="dense_tensorcore.cuda",
    workload_type=DenseWorkload,
    signature=_dense_signature,
    reference=dense_reference,
    inputs=dense_inputs,
    baseline=baseline.checked_cublas_time,
    gemm_view=gemm.dense_view,
    template=TC_GEMM,  # the conv2d template's generator (generator.DENSE_FINGERPRINTS)
    baseline_name="cuBLAS",
))
