"""A ``Tuner.tune`` callback that logs one line per batch: throughput so far, errors, ETA."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from .tuner import Tuner


@dataclass
class ProgressLogger:
    """A ``tune`` callback logging one line per batch: throughput so far, errors, ETA."""

    total: int
    log: logging.Logger = field(default_factory=lambda: logging.getLogger(__name__))
    errors: int = 0

    def __call__(self, tuner: Tuner, configs, results) -> None:
        self.errors += sum(not r.ok for r in results)
        flops = tuner.workload.flops
        batch_best = max((flops / r.seconds for r in results if r.ok), default=0.0)
        elapsed = time.monotonic() - (tuner.started_at or time.monotonic())
        done = max(tuner.trials, 1)
        eta = elapsed / done * max(self.total - tuner.trials, 0)
        self.log.info("%s: %d/%d trials | batch best %.2f TFLOP/s | best %.2f TFLOP/s | "
                      "%d errors | elapsed %s | ETA %s", tuner.workload, tuner.trials, self.total,
                      batch_best / 1e12, tuner.best_flops / 1e12, self.errors,
                      _clock(elapsed), _clock(eta))


def progress_logger(total: int, log: logging.Logger | None = None) -> ProgressLogger:
    return ProgressLogger(total, log or logging.getLogger(__name__))


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"
