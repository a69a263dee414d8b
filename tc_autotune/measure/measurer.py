"""Measuring candidates: parallel builds, isolated runners on every device, checked timings.

Builds (TVM lowering + nvcc, ~1 s of CPU each) run in a pool of worker
processes, one per core by default, with the work shipped by cloudpickle.  Each
built kernel is exported to a shared library, its cubin left in the disk cache.
Built kernels go to whichever runner is free (``dispatch.Dispatcher``): one
process per local GPU (``runner.LocalRunner``) or one RPC session per remote
server (``rpc_runner.RpcRunner``).  A runner loads each kernel, checks it against
the fp32 reference on random inputs (output poisoned with NaN first; the check
runs on the device, ``checker``), and only then times it with the package's
timer (``backends.cuda.timer``).  A crash, hang or illegal memory access kills only that runner;
the candidate is recorded as a run error/timeout and a fresh runner takes the
next one.  A runner that fails itself is restarted or dropped and its candidate
measured elsewhere; with none left, ``AllDevicesLost``.

Batches stream: ``submit(configs)`` returns at once, ``collect(batch)`` waits for its
results, ``cancel(batch)`` stops it.  The tuner submits the next batch before
collecting the current one, so the next batch builds while this one runs and its
kernels are queued for the runners as soon as this one's runs drain (an earlier
batch's runs go first); ``measurer(configs)`` is submit then collect.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import itertools
import logging
import multiprocessing as mp
import os
import tempfile
import threading
import time
from pathlib import Path

import cloudpickle
import numpy as np

from ..backends.cuda import checker, nvcc
from ..core import tasks
from .devices import LocalDevice, RpcDevice
from .dispatch import AllDevicesLost, Dispatcher
from ..backends.cuda.gpu import GpuInfo, gpu_for_arch
from ..api.kernel import compile_kernel
from ..core.results import TIMER, MeasureErrorNo, MeasureResult
from .rpc_runner import RpcRunner
from .bench import checker_path
from .runner import START_TIMEOUT, LocalRunner
from .runner_protocol import MeasureOptions
from ..workloads.names import get as get_workload

__all__ = ["MeasureErrorNo", "MeasureResult", "MeasureOptions", "LocalMeasurer", "LocalRunner", "RpcRunner",
           "AllDevicesLost", "make_runners", "time_kernel"]

log = logging.getLogger(__name__)


def time_kernel(kernel, *args, number: int = 20, repeat: int = 30, min_repeat_ms: float = 0,
                warmup: int = 10, device=None) -> list[float]:
    """Seconds per launch of a built kernel on ``args`` (its inputs, then out), one entry
    per repeat: ``Kernel.time``, the package's one timer (``backends.cuda.timer``)."""
    return kernel.time(*args, device=device, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                       warmup=warmup)


def make_runners(inputs_dir: str, options: MeasureOptions) -> list:
    """One runner per device of ``options.devices`` (one local runner on GPU 0 without any)."""
    runners = []
    for device in options.devices or (None,):
        if isinstance(device, RpcDevice):
            runners.append(RpcRunner(inputs_dir, options, device))
        elif device is None or isinstance(device, LocalDevice):
            runners.append(LocalRunner(inputs_dir, options, device))
        else:
            raise TypeError(f"not a device: {device!r}")
    return runners


# ---- building (worker processes) ---------------------------------------------
def _run_pickled(payload: bytes):
    func, args = cloudpickle.loads(payload)
    return func(*args)


def _build_one(spec: str, knobs: dict, arch: str, out_dir: str, nvcc_timeout: float):
    """Lower, nvcc-compile (cubin into the disk cache) and export one candidate: (library,
    None, seconds, the kernel's code hash, which its record carries), or (None, error, seconds, None)."""
    start = time.time()
    try:
        workload = get_workload(spec)
        config = tasks.of(workload).template.config_type(**knobs)
        kernel = compile_kernel(workload, config, gpu_for_arch(arch), nvcc_timeout)
        path = os.path.join(out_dir, f"{os.getpid()}_{time.monotonic_ns()}.so")
        kernel.executable.export_library(path)
        return path, None, time.time() - start, kernel.code_hash
    except nvcc.CudaCompileError as err:
        return None, f"nvcc: {err}", time.time() - start, None
    except Exception as err:  # TVM schedule/lowering errors are configs that cannot build
        return None, f"{type(err).__name__}: {str(err)[-1500:]}", time.time() - start, None


class _Batch:
    """A submitted batch: its results so far and its candidates still building or running."""

    def __init__(self, seq: int, configs, workload, key: str, out_spec: tuple):
        self.seq, self.configs, self.workload, self.key = seq, list(configs), workload, key
        self.out_spec = out_spec  # the output's (shape, dtype)
        self.results: list[MeasureResult | None] = [None] * len(self.configs)
        self.submitted = time.time()
        self.building: dict = {}  # index -> its build's future
        self.running: dict = {}  # index -> its dispatcher job
        self.deadline = float("inf")  # for its builds
        self.closed = False  # collected or cancelled: nothing more comes in

    @property
    def pending(self) -> int:
        return len(self.building) + len(self.running)

    def elapsed(self) -> float:
        return time.time() - self.submitted


def _storable(array: np.ndarray) -> np.ndarray:
    """``array`` as npz reads it back: ml_dtypes' (user-defined numpy dtypes: bf16, fp8) as unsigned
    ints of their size, viewed back by their dtype's name (``bench.load_inputs``)."""
    return array.view(f"u{array.itemsize}") if array.dtype.isbuiltin == 2 else array


class LocalMeasurer:
    """``measurer(configs) -> results`` for one workload, on every device of ``options.devices``
    (local GPUs or RPC servers; local GPU 0 without any), and the same as a stream:
    ``submit(configs)``, ``collect(batch)``, ``cancel(batch)``.

    Use as a context manager (or call ``close()``): it owns a build pool, the runners and a
    temporary directory holding the inputs, the output checkers and exported kernels.
    ``runners`` replaces the runners ``options.devices`` would make (tests pass fakes).  Each
    result names the device that measured it (``MeasureResult.device``).
    """

    def __init__(self, space, options: MeasureOptions | None = None, runners=None):
        self.options = options or MeasureOptions()
        self._tmp = tempfile.TemporaryDirectory(prefix="tc_autotune_measure_")
        workers = self.options.build_workers or os.cpu_count() or 1
        self._pool_args = dict(max_workers=workers, mp_context=mp.get_context("spawn"))
        self._pool = cf.ProcessPoolExecutor(**self._pool_args)
        self._pool_broken = False
        runners = list(runners) if runners is not None else make_runners(self._tmp.name, self.options)
        self._runner = runners[0]  # the first device's runner (its GpuInfo is the run's)
        # A runner that neither answers nor times out itself within this is hung.
        hang = self.options.run_timeout + START_TIMEOUT + 30
        self._dispatcher = Dispatcher(runners, hang_timeout=hang)
        self._lock = threading.RLock()  # batches are updated from build and runner threads
        self._changed = threading.Condition(self._lock)
        self._batches: list[_Batch] = []  # submitted, not yet collected or cancelled
        self._seq = itertools.count()
        self.use_space(space)

    def use_space(self, space) -> None:
        """Measure another workload with the same build pool and runners (no restart cost)."""
        self.space, self.workload, self.arch = space, space.workload, space.gpu.arch
        self._key = hashlib.sha1(str(self.workload).encode()).hexdigest()[:16]
        path = os.path.join(self._tmp.name, f"{self._key}.npz")
        task = tasks.of(self.workload)
        if not os.path.exists(path):  # the task's random inputs and fp32 reference
            inputs = task.inputs(self.workload, seed=0)
            # with their dtypes' names: npz keeps a bf16 (ml_dtypes) array's bytes but not its dtype,
            # and writes fp8's with a descriptor it cannot read back ('<f1'): their bytes as uints
            np.savez(path, **{f"input_{i}": _storable(array) for i, array in enumerate(inputs)},
                     reference=task.reference(self.workload, *inputs), dtypes=[a.dtype.name for a in inputs])
        _, out_shape, out_dtype = task.signature(self.workload)[-1]
        self._out_spec = (out_shape, out_dtype)
        for device_type in {getattr(s.runner, "device_type", None) for s in self._dispatcher.slots} - {None}:
            check = checker_path(self._tmp.name, self._key, device_type)
            if not os.path.exists(check):  # the runners' output checker, built once per workload
                checker.export(check, out_shape, out_dtype, checker.target_for(device_type, self.arch))

    @property
    def inputs_dir(self) -> str:
        return self._tmp.name

    @property
    def n_devices(self) -> int:
        """Devices still measuring."""
        return self._dispatcher.alive

    @property
    def device_name(self) -> str | None:
        return getattr(self.device, "name", None)

    @property
    def device(self) -> GpuInfo | None:
        """The GPU the first runner measured on, with its limits (None before the first run)."""
        return self._runner.device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for batch in list(self._batches):
            self.cancel(batch)
        self._dispatcher.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._tmp.cleanup()

    # ---- the stream --------------------------------------------------------------
    def __call__(self, configs) -> list[MeasureResult]:
        """Results in the order of ``configs``; raises ``AllDevicesLost`` (with the finished
        results) when no device is left to measure on."""
        batch = self.submit(configs)
        try:
            return self.collect(batch)
        finally:
            self.cancel(batch)  # nothing once collected; after an interrupt, stops the rest

    def submit(self, configs) -> _Batch:
        """Start measuring ``configs``: invalid ones are results at once, the others queue for
        the build pool and then for the runners (behind the runs of earlier batches)."""
        with self._lock:
            batch = _Batch(next(self._seq), configs, self.workload, self._key, self._out_spec)
            self._batches.append(batch)
            for i, config in enumerate(batch.configs):
                reason = self.space.why_invalid(config)
                if reason:
                    batch.results[i] = MeasureResult((), MeasureErrorNo.INVALID_CONFIG, reason)
                else:
                    self._build(batch, i)
            batch.deadline = self._build_deadline()
        return batch

    def collect(self, batch: _Batch) -> list[MeasureResult]:
        """The results of a submitted batch in the order of its configs, once all are in.
        Raises ``AllDevicesLost`` (with the finished results) when no device is left; then
        ``cancel`` still hands over what finished."""
        while True:
            with self._lock:
                if not batch.pending:
                    self._close(batch)
                    return list(batch.results)
                if not self._dispatcher.alive:
                    lost = ", ".join(s.label for s in self._dispatcher.slots)
                    raise AllDevicesLost(f"every device is lost ({lost}); {batch.pending} candidates of the "
                                         "batch were not measured", list(batch.results))
                self._changed.wait(0.5)
            self._dispatcher.check_hung()
            self._check_builds()

    def cancel(self, batch: _Batch) -> list[MeasureResult | None]:
        """Stop measuring a batch: builds not started are dropped, queued runs skipped (a run
        under way finishes unrecorded).  Returns what had finished (None elsewhere); all None
        once the batch was collected or cancelled."""
        with self._lock:
            if batch.closed:
                return [None] * len(batch.configs)
            building, running = list(batch.building.values()), list(batch.running.values())
            batch.building.clear()
            batch.running.clear()
            self._close(batch)
        for future in building:
            future.cancel()
        for job in running:
            job.cancel()
        return list(batch.results)

    def _close(self, batch: _Batch) -> None:
        batch.closed = True
        self._batches.remove(batch)

    # ---- builds ------------------------------------------------------------------
    def _submit(self, config):
        payload = cloudpickle.dumps((_build_one, (str(self.workload), config.as_dict(), self.arch,
                                                  self._tmp.name, self.options.build_timeout)))
        return self._pool.submit(_run_pickled, payload)

    def _build(self, batch: _Batch, i: int) -> None:
        """Queue candidate ``i`` of ``batch`` for the build pool (with the lock held)."""
        if self._pool_broken:
            self._restart_pool()
        try:
            future = self._submit(batch.configs[i])
        except cf.BrokenExecutor:
            self._restart_pool()
            future = self._submit(batch.configs[i])
        batch.building[i] = future
        pool = self._pool
        future.add_done_callback(lambda f: self._built(batch, i, f, pool))

    def _build_deadline(self) -> float:
        """Builds share one deadline: the build timeout plus 5 s per queued build and worker."""
        queued = sum(len(b.building) for b in self._batches)
        return time.time() + self.options.build_timeout + 5 * queued / self._pool_args["max_workers"]

    def _built(self, batch: _Batch, i: int, future, pool) -> None:
        """A build finished (a pool thread): its kernel queues for the runners, or its error is
        the candidate's result."""
        with self._lock:
            if batch.closed or batch.building.get(i) is not future:  # cancelled, timed out, rebuilt
                _discard(future)
                return
            del batch.building[i]
            code = None
            try:  # (library, error, seconds[, code hash]): a build that names no code hash is allowed
                so_path, error, _build_s, *code = future.result()
                code = code[0] if code else None
            except Exception as err:  # a worker died
                self._pool_broken |= pool is self._pool
                so_path, error = None, f"build worker failed: {err}"
            if error:
                batch.results[i] = MeasureResult((), MeasureErrorNo.BUILD_ERROR, error, batch.elapsed())
            else:
                tensors = [batch.out_spec, *tasks.of(batch.workload).template.workspaces(batch.workload, batch.configs[i])]
                batch.running[i] = self._dispatcher.submit(
                    (so_path, batch.key, tensors),
                    lambda status, payload, label: self._ran(batch, i, so_path, status, payload, label, code),
                    priority=batch.seq)
            self._changed.notify_all()

    def _check_builds(self) -> None:
        """Builds past their batch's deadline are timeouts; a dead worker or a timeout restarts
        the pool (the other queued builds go to the new one)."""
        with self._lock:
            now = time.time()
            late = [b for b in self._batches if b.building and now > b.deadline]
            for batch in late:
                for i in batch.building:
                    batch.results[i] = MeasureResult((), MeasureErrorNo.BUILD_TIMEOUT,
                                                     f"build took over {self.options.build_timeout:.0f} s",
                                                     batch.elapsed())
                batch.building.clear()
            if late or self._pool_broken:
                self._restart_pool()
                self._changed.notify_all()

    def _restart_pool(self) -> None:
        """A fresh pool (the old one's workers killed); builds still queued are submitted again."""
        queued = [(batch, i) for batch in self._batches for i in batch.building]
        for batch in self._batches:
            batch.building.clear()  # the old pool's futures count for nothing now
        for process in list(getattr(self._pool, "_processes", {}).values()):
            process.kill()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = cf.ProcessPoolExecutor(**self._pool_args)
        self._pool_broken = False
        for batch, i in queued:
            self._build(batch, i)
        for batch in {batch for batch, _ in queued}:
            batch.deadline = self._build_deadline()

    # ---- runs --------------------------------------------------------------------
    def _ran(self, batch: _Batch, i: int, so_path: str, status: str, payload, label: str,
             code: str | None = None) -> None:
        """A run finished (a runner thread); a cancelled one counts for nothing."""
        Path(so_path).unlink(missing_ok=True)
        with self._lock:
            if batch.running.pop(i, None) is None:
                return
            batch.results[i] = _run_result(status, payload, label, batch.elapsed(), code)
            self._changed.notify_all()


def _discard(future) -> None:
    """Remove the library of a build whose result is no longer wanted."""
    if future.done() and not future.cancelled() and future.exception() is None:
        so_path = future.result()[0]
        if so_path:
            Path(so_path).unlink(missing_ok=True)


def _run_result(status: str, payload, label: str, elapsed: float, code_hash: str | None = None) -> MeasureResult:
    if status == "ok":  # every runner times with the one timer (bench.check_and_time)
        return MeasureResult(tuple(payload), MeasureErrorNo.NO_ERROR, "", elapsed, device=label, timer=TIMER,
                             code_hash=code_hash)
    code = {"wrong": MeasureErrorNo.WRONG_RESULT, "timeout": MeasureErrorNo.RUN_TIMEOUT}.get(
        status, MeasureErrorNo.RUN_ERROR)
    return MeasureResult((), code, str(payload), elapsed, device=label, code_hash=code_hash)
