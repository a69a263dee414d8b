"""What a measurement produces, and the rule every timing obeys: check, then time.

A kernel's output is poisoned with NaN, the kernel runs once, and its result is compared
with the fp32 reference (relative L2 error below ``TOLERANCE``; a NaN or Inf left is wrong);
only a kernel that computed the right thing is timed (by ``backends.cuda.timer``).  The
benchmark and the baselines go through ``check_then_time``; the runners through
``check_error_then_time`` with the error from the sums the device-side checker returns
(``relative_error_of_sums``).  No TVM here: records
and tuners use these types.
"""

from __future__ import annotations

import enum
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

TOLERANCE = 1e-2  # relative L2 error against the fp32 reference

# What timed a measurement.  Today one timer times everything: ``backends.cuda.timer``
# (CUDA_TIMER), for the tuner's runners, the benchmark, nightly's re-times and the baselines.
# Records of the two timers before it stay readable: TVM's time_evaluator (the tuner's runners:
# eager launches) and a CUDA graph's replay through PyTorch (nightly's re-times where PyTorch
# ran), which saved 1.1-2.6 us a call on an H100 (docs/BENCHMARKS.md, 'Timing method: our
# launches timed as the baseline's').  Figures of different timers are never compared: not even
# CUDA_TIMER's with CUDA_GRAPH's, graph replays both, since they fill a repeat differently
# (CUDA_TIMER raises the graph's launches until a replay lasts min_repeat_ms; CUDA_GRAPH sized
# it from eager launches, host cost included), drop different repeats and launch on different
# streams: alike to a few percent is not identical, and a best must not change hands for it.
# A change to how the timer measures gets a new name here.
TIME_EVALUATOR, CUDA_GRAPH, CUDA_TIMER = "time_evaluator", "cuda_graph", "cuda_timer"
TIMERS = (TIME_EVALUATOR, CUDA_GRAPH, CUDA_TIMER)
TIMER = CUDA_TIMER  # what times a measurement made today


class MeasureErrorNo(enum.IntEnum):
    """Why a candidate has no time.  Stored as an int in records."""

    NO_ERROR = 0
    INVALID_CONFIG = 1
    BUILD_ERROR = 2
    BUILD_TIMEOUT = 3
    RUN_ERROR = 4
    RUN_TIMEOUT = 5
    WRONG_RESULT = 6


@dataclass(frozen=True)
class MeasureResult:
    """One measurement: all repeat times (seconds), an error code and its message."""

    costs: tuple[float, ...]
    error_no: MeasureErrorNo = MeasureErrorNo.NO_ERROR
    error_msg: str = ""
    all_cost: float = 0.0  # wall seconds spent on this candidate (build + run)
    timestamp: float = field(default_factory=time.time)
    # What measured it ("cuda:1 GPU-<uuid>", "rpc:<key>@host:port"); not part of its identity.
    device: str | None = field(default=None, compare=False)
    timer: str = TIMER  # one of TIMERS: today's, unless the measurement is an old one
    # The key of the kernel it timed (``backends.cuda.code_hash``), where the build that made it
    # said; its record carries it.  Not part of its identity.
    code_hash: str | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR and len(self.costs) > 0

    @property
    def seconds(self) -> float:
        """Median of the repeat times; inf for a failed measurement."""
        return statistics.median(self.costs) if self.ok else float("inf")


def relative_l2_error(result: np.ndarray, reference: np.ndarray) -> float:
    """||result - reference|| / ||reference||; inf when the result has NaN or Inf."""
    result = result.astype(np.float64)
    if not np.all(np.isfinite(result)):
        return float("inf")
    reference = reference.astype(np.float64)
    return float(np.linalg.norm(result - reference) / max(np.linalg.norm(reference), 1e-30))


def relative_error_of_sums(squared_error: float, squared_reference: float, nonfinite: float) -> float:
    """``relative_l2_error`` from the sums a device checker returns (``checker``): the sum of
    squared errors, of the squared reference, and how many outputs are NaN or Inf."""
    if nonfinite or not math.isfinite(squared_error):
        return float("inf")
    return math.sqrt(squared_error) / max(math.sqrt(squared_reference), 1e-30)


def check_then_time(run: Callable[[], None], output: Callable[[], np.ndarray], reference: np.ndarray,
                    timer: Callable[[], object], tolerance: float = TOLERANCE) -> tuple[object | None, float]:
    """(``timer()`` or None, relative error): ``run()`` once into an output the caller poisoned
    with NaN, compare ``output()`` with ``reference``, and time only a right result."""
    return check_error_then_time(run, lambda: relative_l2_error(output(), reference), timer, tolerance)


def check_error_then_time(run: Callable[[], None], error: Callable[[], float], timer: Callable[[], object],
                          tolerance: float = TOLERANCE) -> tuple[object | None, float]:
    """``check_then_time`` where ``error()`` computes the relative error itself (on the device)."""
    run()
    err = error()
    if not err < tolerance:
        return None, err
    return timer(), err
