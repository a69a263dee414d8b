"""A built kernel timed in this process (the benchmark's rows, nightly's and the tuner's re-times):
run once on NaN-poisoned output, checked against the fp32 reference, and only then timed by the
package's one timer (``Kernel.time``), on the task's random inputs (``task_arrays``), which the
task's baseline takes too.

Measurement, not a tuning run: the runs that compare (``tuning.benchmark``, ``tuning.autotune``'s
re-times) call it side by side, and it needs only a kernel, a task and the timing rule
(``core.results.check_then_time``).
"""

from __future__ import annotations

import logging

import numpy as np
import tvm

from ..core import tasks
from ..core.results import TOLERANCE, check_then_time
from ..workloads.host_dtypes import host_dtype

log = logging.getLogger(__name__)


def checked_kernel_time(kernel, workload, *arrays, number: int = 20, repeat: int = 50,
                        min_repeat_ms: float = 10) -> tuple[float | None, float]:
    """(median seconds or None, relative error) on ``arrays`` (the task's inputs, then the
    reference): run once on NaN-poisoned output, check against the reference, and time only
    a kernel whose result is right.

    Timed by the package's one timer (``Kernel.time``: CUDA-graph replays of back-to-back
    launches, each repeat at least ``min_repeat_ms``, the first dropped), as the baseline is
    (``baseline.time_torch``) and as the runners time: both sides of a ratio pay the same
    per-launch cost, none of TVM's eager 1.1-2.6 us a call (docs/BENCHMARKS.md, 'Timing method:
    our launches timed as the baseline's')."""
    *inputs, reference = arrays
    dev = tvm.cuda(0)
    out = tvm.runtime.tensor(np.full(workload.out_shape, np.nan, host_dtype(workload.out_dtype)), device=dev)
    args = [*(tvm.runtime.tensor(a, device=dev) for a in inputs), out]
    times, err = check_then_time(
        lambda: kernel(*args), out.numpy, reference,
        lambda: kernel.time(*args, device=dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                            warmup=10),
        TOLERANCE)
    if times is None:
        log.error("%s: kernel %s is WRONG (relative error %.3g); not timed", workload, kernel.config, err)
        return None, err
    return float(np.median(times)), err


def task_arrays(workload, seed: int = 0) -> tuple:
    """The task's random inputs (``seed``), then their fp32 reference: what
    ``checked_kernel_time`` and the task's baseline take."""
    task = tasks.of(workload)
    inputs = task.inputs(workload, seed=seed)
    return (*inputs, task.reference(workload, *inputs))


__all__ = ["checked_kernel_time", "task_arrays"]
