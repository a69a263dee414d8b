"""Measuring candidates on the GPU: parallel builds, an isolated runner, checked timings.

(Only the result types live here so far; the builder/runner follow.)
"""

from __future__ import annotations

import enum
import statistics
import time
from dataclasses import dataclass, field


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

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR and len(self.costs) > 0

    @property
    def seconds(self) -> float:
        """Median of the repeat times; inf for a failed measurement."""
        return statistics.median(self.costs) if self.ok else float("inf")


def time_kernel(kernel, data, weight, out, number: int = 20, repeat: int = 30,
                min_repeat_ms: float = 0, warmup: int = 3) -> list[float]:
    """Seconds per launch of a built kernel, one entry per repeat (TVM's time_evaluator)."""
    evaluator = kernel.time_evaluator(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    for _ in range(warmup):
        kernel(data, weight, out)
    return list(evaluator(data, weight, out).results)
