"""One tuning job: resume from the log, search, record every measurement, compare with the baseline.

This is what ``scripts/tune.py`` (and nightly jobs) call: the roles (space,
tuner, measurer, records) are wired together here and nowhere else.  Every run
measures, in its first batch, the default config, the config apply would pick
today and the best stale record's config, so a tuned best never loses to them;
and it learns from the shipped histories of this GPU's arch unless told not to.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..measure import baseline
from ..database import records
from ..core import tasks
from . import zero_shot_train
from ..api.apply import best_config, choose_config
from ..backends.cuda.toolkit import nvcc_version
from ..backends.cuda.timer import TimerError
from ..backends.cuda.gpu import GpuInfo, NoGpuError, default_gpu, local_gpu, probe_local_gpu  # noqa: F401 (NoGpuError: autotune's API)
from ..api.build import build
from ..measure.checked_timing import checked_kernel_time, task_arrays
from ..measure.devices import RpcDevice, choose_local, local_devices
from ..measure.dispatch import AllDevicesLost, RunnerFault
from ..measure.measurer import LocalMeasurer, MeasureOptions
from ..database.records import shipped_log_files
from ..core.results import TIMER
from ..measure.rpc_runner import RpcRunner, free_servers
from ..templates.tc_gemm.knobs import TcGemmConfig
from ..search.progress import progress_logger
from ..search.xgb_tuner import TUNERS, make_tuner  # noqa: F401 (TUNERS: autotune's API)
from ..workloads.dense import DenseWorkload
from ..workloads.conv2d import Conv2dWorkload

log = logging.getLogger(__name__)


def measurement_devices(indices=None, tracker=None, key: str | None = None, sessions: int | None = None,
                        options: MeasureOptions | None = None) -> tuple[GpuInfo, tuple]:
    """(the GPU the run tunes for, the devices that measure): local GPUs (``indices`` as
    nvidia-smi numbers them; default every GPU of GPU 0's model) or, with ``tracker`` (host,
    port) and ``key``, ``sessions`` RPC sessions (default: one per free server of the key)
    whose device limits are read from the remote GPU.  NoGpuError when there is nothing to
    measure on; ValueError for GPUs that do not exist or are of different models."""
    if tracker is not None:
        rpc = RpcDevice(tracker[0], tracker[1], key)
        options = options or MeasureOptions()
        try:
            sessions = sessions or max(1, free_servers(rpc, options.rpc_connect_s))
            probe = RpcRunner("", options, rpc)
            gpu = probe.connect()
            probe.stop()  # frees the server for the run's own sessions
        except RunnerFault as err:
            raise NoGpuError(str(err)) from None
        return gpu, (rpc,) * sessions
    probe = probe_local_gpu()
    gpu = probe.gpu
    if gpu is None:
        raise NoGpuError(f"{probe.no_gpu_message()}: tuning measures on the GPU, run it on a machine with "
                         "one (or measure on remote GPUs with --rpc-tracker)")
    return gpu, tuple(choose_local(tuple(indices) if indices else None, gpu.name, local_devices()))


@dataclass
class TuneSummary:
    """What a tuning job found; seconds are medians, the baseline (cuDNN, cuBLAS) measured in
    the same process as the re-timed best."""

    workload: Conv2dWorkload
    log: str
    trials: int = 0
    resumed: int = 0  # earlier records of this workload on this GPU (never re-measured)
    other_records: int = 0  # other workloads, GPUs, stale or shipped records: training data
    default_seconds: float | None = None  # the default config, measured in this search
    errors: int = 0
    elapsed: float = 0.0
    best_config: TcGemmConfig | None = None
    best_seconds: float | None = None  # from the log (tuner's measurement)
    final_seconds: float | None = None  # best config re-timed beside the baseline
    baseline_seconds: float | None = None  # the task's baseline (tasks.Task.baseline_of)
    error_counts: dict = field(default_factory=dict)
    devices: int = 1  # devices measuring at the start
    batches: list = field(default_factory=list)  # (seconds since start, configs) after each batch

    @property
    def configs_per_minute(self) -> float | None:
        """Measured configs per minute after the first batch (which pays for starting the build
        workers and runners), else over the whole run."""
        if len(self.batches) >= 2:
            (t0, _), (t1, _) = self.batches[0], self.batches[-1]
            n = sum(count for _, count in self.batches[1:])
            return n / (t1 - t0) * 60 if t1 > t0 else None
        if self.batches and self.batches[0][0] > 0:
            return self.batches[0][1] / self.batches[0][0] * 60
        return None

    @property
    def baseline_ratio(self) -> float | None:
        """Baseline time / tuned time: 1.0 is parity, above is faster than the baseline."""
        if self.baseline_seconds and self.final_seconds:
            return self.baseline_seconds / self.final_seconds
        return None

    def describe(self, gpu_name: str) -> str:
        """The end-of-job report ``tune.py`` prints."""
        def timing(label, seconds, extra=""):
            return (f"   {label}: {seconds * 1e3:.4f} ms = "
                    f"{self.workload.flops / seconds / 1e12:.1f} TFLOP/s{extra}")

        lines = [f"== {self.workload} on {gpu_name}: {self.trials} trials in {self.elapsed:.0f} s, "
                 f"{self.errors} errors {self.error_counts} -> {self.log}",
                 f"   resumed from {self.resumed} earlier records on this GPU; {self.other_records} records "
                 "of other workloads, GPUs or template versions to learn from"]
        if self.configs_per_minute:
            lines.append(f"   throughput: {self.configs_per_minute:.1f} configs/min on {self.devices} device(s) "
                         "(after the first batch)")
        if self.best_config is None:
            return "\n".join(lines + ["   no valid config measured"])
        lines.append(f"   best config: {self.best_config.as_dict()}")
        lines.append(timing("best (search)", self.best_seconds))
        if self.default_seconds:
            lines.append(timing("default config (search)", self.default_seconds,
                                f"; tuned is {self.default_seconds / self.best_seconds:.2f}x faster"))
        if self.final_seconds:
            lines.append(timing("best (re-timed)", self.final_seconds))
        if self.baseline_seconds:
            name = tasks.of(self.workload).baseline_of(self.workload)  # cuDNN, cuBLAS, torch._scaled_mm
            lines.append(timing(f"{name} (PyTorch, same run)", self.baseline_seconds,
                                f"; {name}/tuned time ratio {self.baseline_ratio:.2f}" if self.baseline_ratio else ""))
        return "\n".join(lines)


@dataclass
class Retimed:
    """A best config re-timed in one process beside the default config and the task's baseline
    (cuDNN, cuBLAS) (seconds, None where not measured or wrong)."""

    tuned_s: float | None
    default_s: float | None = None
    baseline_s: float | None = None
    timer: str = TIMER  # what timed all three (results.TIMERS): the one timer


def _transfer_records(transfer_logs, shipped: bool, log_path: str, arch: str) -> list:
    """Records of the shipped histories (this arch's, when ``shipped``) and of
    ``transfer_logs`` (all of them), not counting the tuning log itself; exact duplicates
    (a best log and its history) count once."""
    found = []
    if shipped:
        files = [f for f in shipped_log_files() if f.resolve() != Path(log_path).resolve()]
        found += [r for r in records.load(files) if r.arch == arch]
    found += records.load(list(transfer_logs))
    return records.unique(found)


def first_configs(space, earlier, gpu, zero_shot: bool = True) -> list[TcGemmConfig]:
    """What the first batch measures before the search picks anything: the config apply
    would pick today (a record, a zero-shot prediction or the default), the best stale
    record's config of this workload on this GPU (its old time no longer counts), the
    default config and the template's starting configs (``Template.starting_configs``: tc_gemm's
    warp-specialized tilings, Hopper only).  Without ``zero_shot`` (``--no-transfer``) nothing learnt
    from other workloads' histories is measured: only a record of this workload stands for apply's pick."""
    if zero_shot:
        picks = [choose_config(space.workload, gpu, warn=False).config]  # a record, zero-shot or default
    else:
        found = best_config(space.workload, gpu)
        picks = [found[0]] if found else []
    stale = [r for r in earlier if r.workload == space.workload and r.stale and r.ok and r.gpu == gpu.name]
    for record in sorted(stale, key=lambda r: r.seconds)[:1]:
        try:
            picks.append(space.from_entity(record.config))
        except ValueError:
            pass
    picks.append(space.default_config())
    return picks + space.template.starting_configs(space)


def tune_workload(workload: Conv2dWorkload | DenseWorkload, n_trial: int, log_path, tuner: str = "xgb",
                  batch_size: int = 16, early_stopping: int | None = None, seed: int | None = None,
                  options: MeasureOptions | None = None, transfer_logs=(), shipped_transfer: bool = True,
                  compare_baseline: bool = True, gpu: GpuInfo | None = None, deadline: float | None = None,
                  measurer_factory=None, measurer=None, compare_cudnn: bool | None = None) -> TuneSummary:
    """Tune ``workload`` for ``n_trial`` new measurements, appending each to ``log_path``.

    Configs already in the log for this workload and GPU are not measured again and
    seed the model; the log's other records, the shipped histories of this GPU's arch
    (unless ``shipped_transfer`` is False) and the records of ``transfer_logs`` (other
    workloads, this one on other GPUs, stale ones) pre-train it.
    ``deadline`` (time.time()) stops the search after the batch that crosses it.
    ``measurer_factory(space, options)`` replaces the GPU measurer (tests use a synthetic one);
    an open ``measurer`` (with ``use_space``) is reused across workloads and left open.
    ``compare_baseline``: re-time the best beside the task's baseline at the end
    (``compare_cudnn`` is its earlier name).
    """
    if compare_cudnn is not None:
        compare_baseline = compare_cudnn
    gpu = gpu or local_gpu()
    if gpu is None:
        raise NoGpuError(f"{probe_local_gpu().no_gpu_message()}: tuning needs one to measure on")
    log_path = str(log_path)
    space = tasks.of(workload).space(workload, gpu)
    search = make_tuner(tuner, space, seed)
    own = list(records.load(log_path))
    transfer = _transfer_records(transfer_logs, shipped_transfer, log_path, gpu.arch)
    summary = TuneSummary(workload, log_path)
    summary.resumed = search.load_history(own)
    search.load_transfer(transfer)
    summary.other_records = search.other_records
    if shipped_transfer:  # the tuning side retrains the stored zero-shot model where it is stale
        zero_shot_train.refresh_stored_model()  # (apply's pick, measured first, reads it)
    first = search.measure_first(first_configs(space, own + transfer, gpu, zero_shot=shipped_transfer))
    log.info("%s: space of %d configs; resuming with %d records of it on this GPU; learning from %d others "
             "(other workloads, GPUs or template versions; %d from %s); %d configs to measure first "
             "(today's pick, stale best, default, warp-specialized tilings)", workload, len(space), summary.resumed,
             summary.other_records, len(transfer),
             " and ".join((["the shipped histories"] if shipped_transfer else [])
                          + (["--transfer-log"] if transfer_logs else [])) or "nowhere else", len(first))
    start = time.time()
    provenance = None

    if measurer is not None:
        measurer.use_space(space)
        context = contextlib.nullcontext(measurer)
    else:
        context = (measurer_factory or LocalMeasurer)(space, options)
    with context as measurer:
        n_devices = getattr(measurer, "n_devices", None) or (options.n_devices if options else 1)

        def record(configs, results):
            nonlocal provenance
            if provenance is None:
                provenance = records.make_provenance(gpu, cuda=nvcc_version())
            records.append(log_path, [records.stamped(f"cuda -arch={gpu.arch}", space, c, r, _with_device(provenance, r))
                                      for c, r in zip(configs, results) if r is not None])
            for r in results:
                if r is not None:
                    summary.error_counts[r.error_no.name] = summary.error_counts.get(r.error_no.name, 0) + 1

        def measured(configs, results):
            record(configs, results)
            summary.batches.append((time.time() - start, len(results)))

        callbacks = [progress_logger(n_trial, log)]
        if deadline is not None:
            callbacks.append(_stop_at(deadline))
        # Every device busy: each batch has batch_size configs per device.
        summary.devices = n_devices
        search.tune(n_trial, _Recording.of(measurer, measured, record), batch_size=batch_size * n_devices,
                    early_stopping=early_stopping, callbacks=callbacks)
    summary.trials = search.trials
    summary.errors = sum(n for name, n in summary.error_counts.items() if name != "NO_ERROR")
    summary.elapsed = time.time() - start
    default = space.default_config()
    summary.default_seconds = min((r.seconds for c, r in search.history if c == default and r.ok), default=None)
    best = search.best()
    if best:
        summary.best_config, summary.best_seconds = best
        if compare_baseline:
            try:
                summary.final_seconds, summary.baseline_seconds = compare_with_baseline(workload, best[0])
            except TimerError as err:  # the tune's records are in the log: its summary stays
                log.error("%s: the best config could not be re-timed beside the baseline: %s", workload, err)
    return summary


class _Recording:
    """The measurer as the tuner sees it: every finished measurement goes to the log as its
    batch is measured (``measured``), or what finished when every device was lost
    (``record``).  ``of`` keeps a streaming measurer a stream."""

    def __init__(self, measurer, measured, record):
        self.measurer, self.measured, self.record = measurer, measured, record

    @staticmethod
    def of(measurer, measured, record) -> "_Recording":
        return (_RecordingStream if hasattr(measurer, "submit") else _Recording)(measurer, measured, record)

    def __call__(self, configs):
        try:
            results = self.measurer(configs)
        except AllDevicesLost as lost:  # keep what the batch finished, then end the run
            self.record(configs, lost.results)
            raise
        self.measured(configs, results)
        return results


class _RecordingStream(_Recording):
    """A streaming measurer (the tuner keeps a batch in flight ahead): a batch is recorded when
    it is collected, or what it finished when it is cancelled (a stop, an interrupt, an error,
    every device lost)."""

    def submit(self, configs):
        return configs, self.measurer.submit(configs)

    def collect(self, handle):
        configs, batch = handle
        results = self.measurer.collect(batch)  # on AllDevicesLost, cancel hands over what finished
        self.measured(configs, results)
        return results

    def cancel(self, handle):
        configs, batch = handle
        results = self.measurer.cancel(batch)
        self.record(configs, results)
        return results


def _with_device(provenance: dict, result) -> dict:
    """The run's provenance plus the device that measured ``result`` (where known)."""
    device = getattr(result, "device", None)
    return {**provenance, "device": device} if device else provenance


def _stop_at(deadline: float):
    """A tune callback that ends the search once the wall-clock deadline has passed."""

    def stop(tuner, configs, results):
        if time.time() >= deadline:
            log.info("%s: wall-clock budget spent after %d trials", tuner.workload, tuner.trials)
            return True
        return False

    return stop


def compare_with_baseline(workload: Conv2dWorkload, config: TcGemmConfig, repeat: int = 50):
    """(tuned seconds, the task's baseline's seconds or None), both medians timed here, both
    checked first."""
    timed = retime_against_default(workload, config, repeat=repeat, with_default=False)
    return timed.tuned_s, timed.baseline_s


def retime_against_default(workload: Conv2dWorkload, config: TcGemmConfig, repeat: int = 50,
                           with_default: bool = True):
    """A ``Retimed``: ``config``, the default config and the task's baseline timed in this
    process on the same inputs, by the one timer, each checked against the fp32 reference
    first (None where wrong)."""
    configs = {"tuned": config}
    if with_default:
        configs["default"] = tasks.of(workload).space(workload, default_gpu()).default_config()  # built here
    seconds, baseline_s = time_configs(workload, configs, repeat=repeat)
    return Retimed(seconds["tuned"], seconds.get("default"), baseline_s, TIMER)


def time_configs(workload: Conv2dWorkload, configs: dict, repeat: int = 50):
    """({name: seconds or None}, baseline seconds or None): each distinct config of ``configs``
    built and timed once in this process, beside the task's baseline (cuDNN, cuBLAS), on the
    same inputs, each checked against the fp32 reference first (None where wrong or missing)."""
    task = tasks.of(workload)
    arrays = task_arrays(workload, seed=1)
    timed: dict = {}
    for config in configs.values():
        if config in timed:
            continue
        timed[config], err = checked_kernel_time(build(workload, config), workload, *arrays, repeat=repeat)
        if timed[config] is None:
            log.error("%s: config %s gives a wrong result (error %.3g) on fresh inputs", workload, config, err)
    baseline_s = None
    if baseline.available() and task.baseline is not None:
        baseline_s, _ = task.baseline(workload, *arrays, repeat=repeat)
    return {name: timed[config] for name, config in configs.items()}, baseline_s
