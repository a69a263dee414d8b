"""The tasks the package tunes: conv2d (NHWC) and dense, each registered with ``core.tasks`` as
this module loads.

A task is facts of its workloads: the workload type that parses a record's spec, the tensors a
kernel takes (the operands, a fused epilogue's inputs, then the output), the fp32 host
reference and the random inputs every kernel is checked with, and what reports call its
baseline.  So the tasks are defined here, from ``workloads`` alone, a floor above the registry
that records read (``core.tasks``).  The package face imports this module before anything else
loads and binds each task's template and baseline (``tasks.use_template``, ``use_baseline``).
"""

from __future__ import annotations

from ..workloads import epilogue
from ..workloads.conv2d import Conv2dWorkload
from ..workloads.dense import DenseWorkload
from ..workloads.reference import conv2d_reference, dense_inputs, dense_reference, random_inputs
from .tasks import Task, register


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
))


# fp8 dense's per-tensor scales: fp32 1-element tensors after the operands, as torch._scaled_mm's
SCALES = (("scale_a", (1,), "float32"), ("scale_b", (1,), "float32"))


def _dense_signature(wl: DenseWorkload):
    operands = [("data", wl.a_shape, wl.dtype), ("weight", wl.b_shape, wl.weight_dtype)]
    return _signature(wl, operands + list(SCALES) * wl.scaled)


def _dense_baseline_name(wl: DenseWorkload) -> str:
    return "torch._scaled_mm" if wl.scaled else "cuBLAS"  # fp8: cuBLASLt's scaled GEMM


DENSE = register(Task(
    name="dense_tensorcore.cuda",
    workload_type=DenseWorkload,
    signature=_dense_signature,
    reference=dense_reference,
    inputs=dense_inputs,
    baseline_name=_dense_baseline_name,
))
