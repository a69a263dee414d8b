"""One tuning job: resume from the log, search, record every measurement, compare with cuDNN.

This is what ``scripts/tune.py`` (and nightly jobs) call: the roles (space,
tuner, measurer, records) are wired together here and nowhere else.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field

from . import records
from .cuda import nvcc_version
from .gpu import GpuInfo, local_gpu
from .measure import MeasureOptions
from .space import Conv2dConfig, conv2d_space
from .workloads import Conv2dWorkload

log = logging.getLogger(__name__)

TUNERS = ("xgb", "random", "grid")


class NoGpuError(RuntimeError):
    """Tuning needs a CUDA GPU and there is none."""


@dataclass
class TuneSummary:
    """What a tuning job found; seconds are medians, cuDNN measured in the same process."""

    workload: Conv2dWorkload
    log: str
    trials: int = 0
    resumed: int = 0  # earlier records of this workload on this GPU (never re-measured)
    other_records: int = 0  # of other workloads or GPUs: the xgb tuner's training data
    errors: int = 0
    elapsed: float = 0.0
    best_config: Conv2dConfig | None = None
    best_seconds: float | None = None  # from the log (tuner's measurement)
    final_seconds: float | None = None  # best config re-timed beside cuDNN
    cudnn_seconds: float | None = None
    error_counts: dict = field(default_factory=dict)

    @property
    def cudnn_ratio(self) -> float | None:
        """cuDNN time / tuned time: 1.0 is parity, above is faster than cuDNN."""
        if self.cudnn_seconds and self.final_seconds:
            return self.cudnn_seconds / self.final_seconds
        return None


def make_tuner(name: str, space, seed: int | None = None):
    from . import tuner

    classes = {"xgb": tuner.XGBTuner, "random": tuner.RandomTuner, "grid": tuner.GridTuner}
    if name not in classes:
        raise ValueError(f"unknown tuner {name!r} (choose from {', '.join(TUNERS)})")
    return classes[name](space, seed=seed)


def _earlier_records(log_path: str, transfer_logs) -> list:
    """Every record of the log and the transfer logs: the tuner keeps this workload's on
    this GPU as history and learns from the rest (other workloads, other GPUs)."""
    return list(records.load([log_path, *transfer_logs]))


def tune_workload(workload: Conv2dWorkload, n_trial: int, log_path, tuner: str = "xgb",
                  batch_size: int = 16, early_stopping: int | None = None, seed: int | None = None,
                  options: MeasureOptions | None = None, transfer_logs=(), compare_cudnn: bool = True,
                  gpu: GpuInfo | None = None, deadline: float | None = None,
                  measurer_factory=None, measurer=None) -> TuneSummary:
    """Tune ``workload`` for ``n_trial`` new measurements, appending each to ``log_path``.

    Configs already in the log for this workload and GPU are not measured again and
    seed the model; the other records of the log and ``transfer_logs`` (other workloads,
    and this one on other GPUs) pre-train it.
    ``deadline`` (time.time()) stops the search after the batch that crosses it.
    ``measurer_factory(space, options)`` replaces the GPU measurer (tests use a synthetic one);
    an open ``measurer`` (with ``use_space``) is reused across workloads and left open.
    """
    from .measure import LocalMeasurer
    from .tuner import progress_logger

    gpu = gpu or local_gpu()
    if gpu is None:
        raise NoGpuError("no CUDA GPU found: tuning needs one to measure on")
    log_path = str(log_path)
    space = conv2d_space(workload, gpu)
    search = make_tuner(tuner, space, seed)
    earlier = _earlier_records(log_path, transfer_logs)
    summary = TuneSummary(workload, log_path)
    summary.resumed = search.load_history(earlier)
    summary.other_records = search.other_records
    log.info("%s: space of %d configs; resuming with %d records of it on this GPU; %d others "
             "(other workloads or GPUs) to learn from, of %d read", workload, len(space), summary.resumed,
             summary.other_records, len(earlier))
    start = time.time()
    provenance = None

    if measurer is not None:
        measurer.use_space(space)
        context = contextlib.nullcontext(measurer)
    else:
        context = (measurer_factory or LocalMeasurer)(space, options)
    with context as measurer:
        def measure_and_record(configs):
            nonlocal provenance
            results = measurer(configs)
            if provenance is None:
                provenance = records.make_provenance(gpu, cuda=nvcc_version())
            records.append(log_path, [records.Record.from_measurement(f"cuda -arch={gpu.arch}", space, c, r,
                                                                      provenance)
                                      for c, r in zip(configs, results)])
            for r in results:
                summary.error_counts[r.error_no.name] = summary.error_counts.get(r.error_no.name, 0) + 1
            return results

        callbacks = [progress_logger(n_trial, log)]
        if deadline is not None:
            callbacks.append(_stop_at(deadline))
        search.tune(n_trial, measure_and_record, batch_size=batch_size,
                    early_stopping=early_stopping, callbacks=callbacks)
    summary.trials = search.trials
    summary.errors = sum(n for name, n in summary.error_counts.items() if name != "NO_ERROR")
    summary.elapsed = time.time() - start
    best = search.best()
    if best:
        summary.best_config, summary.best_seconds = best
        if compare_cudnn:
            summary.final_seconds, summary.cudnn_seconds = compare_with_cudnn(workload, best[0])
    return summary


def _stop_at(deadline: float):
    """A tune callback that ends the search once the wall-clock deadline has passed."""

    def stop(tuner, configs, results):
        if time.time() >= deadline:
            log.info("%s: wall-clock budget spent after %d trials", tuner.workload, tuner.trials)
            return True
        return False

    return stop


def compare_with_cudnn(workload: Conv2dWorkload, config: Conv2dConfig, repeat: int = 50):
    """(tuned seconds, cuDNN seconds or None), both medians timed here, both checked first."""
    from . import baseline
    from .benchmark import checked_kernel_time
    from .kernel import build_conv2d
    from .reference import conv2d_reference, random_inputs

    data, weight = random_inputs(workload, seed=1)
    reference = conv2d_reference(workload, data, weight)
    tuned, err = checked_kernel_time(build_conv2d(workload, config), workload, data, weight, reference,
                                     repeat=repeat)
    if tuned is None:
        log.error("%s: best config %s gives a wrong result (error %.3g) on fresh inputs", workload, config, err)
        return None, None
    cudnn = None
    if baseline.available():
        cudnn, _ = baseline.checked_cudnn_time(workload, data, weight, reference, repeat=repeat)
    return tuned, cudnn
