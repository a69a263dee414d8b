"""Measuring candidates: parallel builds, isolated runners on every device, checked timings.

Builds (TVM lowering + nvcc, ~1 s of CPU each) run in a pool of worker
processes, one per core by default, with the work shipped by cloudpickle.  Each
built kernel is exported to a shared library, its cubin left in the disk cache.
Built kernels go to whichever runner is free (``dispatch.Dispatcher``): one
process per local GPU (``runner.LocalRunner``) or one RPC session per remote
server (``rpc_runner.RpcRunner``).  A runner loads each kernel, checks it against
the fp32 reference on random inputs (output poisoned with NaN first), and only
then times it with TVM's time_evaluator.  A crash, hang or illegal memory access
kills only that runner; the candidate is recorded as a run error/timeout and a
fresh runner takes the next one.  A runner that fails itself is restarted or
dropped and its candidate measured elsewhere; with none left, ``AllDevicesLost``.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import logging
import multiprocessing as mp
import os
import queue
import tempfile
import time
from pathlib import Path

import cloudpickle
import numpy as np

from . import cuda, tasks
from .devices import LocalDevice, RpcDevice
from .dispatch import AllDevicesLost, Dispatcher
from .gpu import GpuInfo, gpu_for_arch
from .kernel import compile_kernel
from .results import MeasureErrorNo, MeasureResult
from .rpc_runner import RpcRunner
from .runner import START_TIMEOUT, LocalRunner, MeasureOptions
from .space import Conv2dConfig
from .template import workspaces
from .workloads import get as get_workload

__all__ = ["MeasureErrorNo", "MeasureResult", "MeasureOptions", "LocalMeasurer", "LocalRunner", "RpcRunner",
           "AllDevicesLost", "make_runners", "time_kernel"]

log = logging.getLogger(__name__)


def time_kernel(kernel, *args, number: int = 20, repeat: int = 30,
                min_repeat_ms: int = 0, warmup: int = 3) -> list[float]:
    """Seconds per launch of a built kernel on ``args`` (its inputs, then out), one entry
    per repeat (TVM's time_evaluator)."""
    evaluator = kernel.time_evaluator(number=number, repeat=repeat, min_repeat_ms=int(min_repeat_ms))
    for _ in range(warmup):
        kernel(*args)
    return list(evaluator(*args).results)


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
    """Lower, nvcc-compile (cubin into the disk cache) and export one candidate."""
    start = time.time()
    try:
        workload = get_workload(spec)
        kernel = compile_kernel(workload, Conv2dConfig(**knobs), gpu_for_arch(arch), nvcc_timeout)
        path = os.path.join(out_dir, f"{os.getpid()}_{time.monotonic_ns()}.so")
        kernel.executable.export_library(path)
        return path, None, time.time() - start
    except cuda.CudaCompileError as err:
        return None, f"nvcc: {err}", time.time() - start
    except Exception as err:  # TVM schedule/lowering errors are configs that cannot build
        return None, f"{type(err).__name__}: {str(err)[-1500:]}", time.time() - start


class LocalMeasurer:
    """``measurer(configs) -> results`` for one workload, on every device of ``options.devices``
    (local GPUs or RPC servers; local GPU 0 without any).

    Use as a context manager (or call ``close()``): it owns a build pool, the runners and a
    temporary directory holding the inputs and exported kernels.  ``runners`` replaces the
    runners ``options.devices`` would make (tests pass fakes).  Each result names the device
    that measured it (``MeasureResult.device``).
    """

    def __init__(self, space, options: MeasureOptions | None = None, runners=None):
        self.options = options or MeasureOptions()
        self._tmp = tempfile.TemporaryDirectory(prefix="tc_autotune_measure_")
        workers = self.options.build_workers or os.cpu_count() or 1
        self._pool_args = dict(max_workers=workers, mp_context=mp.get_context("spawn"))
        self._pool = cf.ProcessPoolExecutor(**self._pool_args)
        runners = list(runners) if runners is not None else make_runners(self._tmp.name, self.options)
        self._runner = runners[0]  # the first device's runner (its GpuInfo is the run's)
        # A runner that neither answers nor times out itself within this is hung.
        hang = self.options.run_timeout + START_TIMEOUT + 30
        self._dispatcher = Dispatcher(runners, hang_timeout=hang)
        self.use_space(space)

    def use_space(self, space) -> None:
        """Measure another workload with the same build pool and runners (no restart cost)."""
        self.space, self.workload, self.arch = space, space.workload, space.gpu.arch
        self._key = hashlib.sha1(str(self.workload).encode()).hexdigest()[:16]
        path = os.path.join(self._tmp.name, f"{self._key}.npz")
        if not os.path.exists(path):  # the task's random inputs and fp32 reference
            task = tasks.of(self.workload)
            inputs = task.inputs(self.workload, seed=0)
            np.savez(path, **{f"input_{i}": array for i, array in enumerate(inputs)},
                     reference=task.reference(self.workload, *inputs))

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
        self._dispatcher.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._tmp.cleanup()

    def _restart_pool(self):
        for process in list(getattr(self._pool, "_processes", {}).values()):
            process.kill()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = cf.ProcessPoolExecutor(**self._pool_args)

    def _submit(self, config):
        payload = cloudpickle.dumps((_build_one, (str(self.workload), config.as_dict(), self.arch,
                                                  self._tmp.name, self.options.build_timeout)))
        return self._pool.submit(_run_pickled, payload)

    def __call__(self, configs) -> list[MeasureResult]:
        """Results in the order of ``configs``; raises ``AllDevicesLost`` (with the finished
        results) when no device is left to measure on."""
        results: list[MeasureResult | None] = [None] * len(configs)
        events: queue.Queue = queue.Queue()  # ("built", i, future) and ("ran", i, status, payload, label)
        submitted = {}
        for i, config in enumerate(configs):
            reason = self.space.why_invalid(config)
            if reason:
                results[i] = MeasureResult((), MeasureErrorNo.INVALID_CONFIG, reason)
            else:
                submitted[i] = time.time()
                self._submit(config).add_done_callback(lambda f, i=i: events.put(("built", i, f)))
        building, running = set(submitted), set()
        # Builds share one deadline; runs happen beside them, on the runners' threads.
        deadline = time.time() + self.options.build_timeout + 5 * len(building) / self._pool_args["max_workers"]
        def handle(event):
            if event[0] == "built" and event[1] in building:
                _, i, future = event
                building.discard(i)
                so_path = self._built(future, i, submitted[i], results)
                if so_path is not None:
                    running.add(i)
                    _, out_shape, out_dtype = tasks.of(self.workload).signature(self.workload)[-1]
                    tensors = [(out_shape, out_dtype), *workspaces(self.workload, configs[i])]
                    self._dispatcher.submit((so_path, self._key, tensors),
                                            lambda status, payload, label, i=i, so_path=so_path: events.put(
                                                ("ran", i, status, payload, label, so_path)))
            elif event[0] == "ran" and event[1] in running:
                _, i, status, payload, label, so_path = event
                running.discard(i)
                Path(so_path).unlink(missing_ok=True)
                results[i] = _run_result(status, payload, label, time.time() - submitted[i])

        while building or running:
            try:
                handle(events.get(timeout=0.5))
            except queue.Empty:
                pass
            if not self._dispatcher.alive and running:
                while not events.empty():  # what finished before the last device went
                    handle(events.get())
                lost = ", ".join(s.label for s in self._dispatcher.slots)
                raise AllDevicesLost(f"every device is lost ({lost}); {len(building) + len(running)} "
                                     "candidates of the batch were not measured", results)
            self._dispatcher.check_hung()
            if building and time.time() > deadline:
                for i in building:
                    results[i] = MeasureResult((), MeasureErrorNo.BUILD_TIMEOUT,
                                               f"build took over {self.options.build_timeout:.0f} s",
                                               time.time() - submitted[i])
                building = set()
                self._restart_pool()
        return results

    def _built(self, future, i: int, submitted: float, results: list) -> str | None:
        """The exported library of a finished build, or None with the build's error in results."""
        try:
            so_path, error, _build_s = future.result()
        except Exception as err:  # a worker died
            self._restart_pool()
            results[i] = MeasureResult((), MeasureErrorNo.BUILD_ERROR, f"build worker failed: {err}",
                                       time.time() - submitted)
            return None
        if error:
            results[i] = MeasureResult((), MeasureErrorNo.BUILD_ERROR, error, time.time() - submitted)
            return None
        return so_path


def _run_result(status: str, payload, label: str, elapsed: float) -> MeasureResult:
    if status == "ok":
        return MeasureResult(tuple(payload), MeasureErrorNo.NO_ERROR, "", elapsed, device=label)
    code = {"wrong": MeasureErrorNo.WRONG_RESULT, "timeout": MeasureErrorNo.RUN_TIMEOUT}.get(
        status, MeasureErrorNo.RUN_ERROR)
    return MeasureResult((), code, str(payload), elapsed, device=label)
