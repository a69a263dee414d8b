"""Measuring candidates on the GPU: parallel builds, an isolated runner, checked timings.

Builds (TVM lowering + nvcc, ~1 s of CPU each) run in a pool of worker
processes, one per core by default, with the work shipped by cloudpickle.  Each
built kernel is exported to a shared library, its cubin left in the disk cache.
One runner process owns the GPU: it loads each kernel, checks it against the
fp32 reference on random inputs (output poisoned with NaN first), and only then
times it with TVM's time_evaluator.  A crash, hang or illegal memory access
kills only the runner; the candidate is recorded as a run error/timeout and a
fresh runner takes the next one.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import logging
import multiprocessing as mp
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import cloudpickle
import numpy as np
import tvm

from . import cuda
from .gpu import GpuInfo, gpu_for_arch
from .kernel import compile_conv2d
from .reference import conv2d_reference, random_inputs
from .results import TOLERANCE, MeasureErrorNo, MeasureResult, check_then_time
from .space import Conv2dConfig
from .template import workspaces
from .workloads import Conv2dWorkload

__all__ = ["MeasureErrorNo", "MeasureResult", "MeasureOptions", "LocalMeasurer", "LocalRunner",
           "time_kernel"]

log = logging.getLogger(__name__)


def time_kernel(kernel, data, weight, out, number: int = 20, repeat: int = 30,
                min_repeat_ms: int = 0, warmup: int = 3) -> list[float]:
    """Seconds per launch of a built kernel, one entry per repeat (TVM's time_evaluator)."""
    evaluator = kernel.time_evaluator(number=number, repeat=repeat, min_repeat_ms=int(min_repeat_ms))
    for _ in range(warmup):
        kernel(data, weight, out)
    return list(evaluator(data, weight, out).results)


@dataclass(frozen=True)
class MeasureOptions:
    """How candidates are built and timed."""

    build_workers: int = 0  # 0: one per CPU core
    build_timeout: float = 60.0  # seconds per build
    run_timeout: float = 30.0  # seconds per candidate on the GPU (load, check, time)
    repeat: int = 5  # timed repeats, each at least min_repeat_ms long
    min_repeat_ms: int = 20
    tolerance: float = TOLERANCE  # relative L2 error against the fp32 reference


# ---- building (worker processes) ---------------------------------------------
def _run_pickled(payload: bytes):
    func, args = cloudpickle.loads(payload)
    return func(*args)


def _build_one(spec: str, knobs: dict, arch: str, out_dir: str, nvcc_timeout: float):
    """Lower, nvcc-compile (cubin into the disk cache) and export one candidate."""
    start = time.time()
    try:
        workload = Conv2dWorkload.parse(spec)
        kernel = compile_conv2d(workload, Conv2dConfig(**knobs), gpu_for_arch(arch), nvcc_timeout)
        path = os.path.join(out_dir, f"{os.getpid()}_{time.monotonic_ns()}.so")
        kernel.executable.export_library(path)
        return path, None, time.time() - start
    except cuda.CudaCompileError as err:
        return None, f"nvcc: {err}", time.time() - start
    except Exception as err:  # TVM schedule/lowering errors are configs that cannot build
        return None, f"{type(err).__name__}: {str(err)[-1500:]}", time.time() - start


# ---- running (one isolated process owning the GPU) --------------------------------
def _device_report(dev) -> GpuInfo:
    """The device a runner measures on and the limits the space checks configs against."""
    major, minor = dev.compute_version.split(".")
    arch = f"sm_{major}{minor}"
    nominal = gpu_for_arch(arch)
    return GpuInfo(dev.device_name, arch, dev.multi_processor_count, dev.max_threads_per_block,
                   nominal.max_smem_per_block)


def _runner_main(conn, inputs_dir: str, options: MeasureOptions):
    """Serve (so_path, inputs key, [(shape, dtype)] of the output and workspaces) requests until
    the pipe closes; exit after any run error.  The kernel's arguments are the stored inputs,
    then one tensor per spec: the first is the output, poisoned with NaN and checked against
    the stored reference; the rest are workspaces."""
    cuda.install_compile_callback()
    dev = tvm.cuda(0)
    conn.send(("ready", _device_report(dev)))
    cache = {}
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        so_path, key, tensors = request
        try:
            if key not in cache:
                cache.clear()
                arrays = np.load(os.path.join(inputs_dir, f"{key}.npz"))
                inputs = [tvm.runtime.tensor(arrays[f"input_{i}"], device=dev)
                          for i in range(sum(name.startswith("input_") for name in arrays.files))]
                cache[key] = (inputs, arrays["reference"])
            inputs, reference = cache[key]
            module = tvm.runtime.load_module(so_path)
            func = module["main"]
            (out_shape, out_dtype), *extra_specs = tensors
            out = tvm.runtime.tensor(np.full(out_shape, np.nan, out_dtype), device=dev)
            args = [*inputs, out, *(tvm.runtime.empty(shape, dtype, device=dev) for shape, dtype in extra_specs)]

            def run():
                func(*args)
                dev.sync()

            def timer():
                # One more repeat than kept: the first ran slow (clocks, caches) on ~5-10 us
                # kernels, by up to 30% (H200 nightly, 2026-11-22), and skewed their medians.
                evaluator = module.time_evaluator("main", dev, number=1, repeat=options.repeat + 1,
                                                  min_repeat_ms=int(options.min_repeat_ms))
                return list(evaluator(*args).results)[1:]

            costs, err = check_then_time(run, out.numpy, reference, timer, options.tolerance)
            if costs is None:
                conn.send(("wrong", f"relative L2 error {err:.3g} against the fp32 reference"))
                continue
            conn.send(("ok", costs))
        except Exception as err:
            conn.send(("error", f"{type(err).__name__}: {str(err)[-1500:]}"))
            return  # the CUDA context may be broken: let the parent start a fresh runner


class LocalRunner:
    """The runner protocol, for the local GPU: ``run(artifact, inputs key, tensors)`` checks
    and times one exported kernel in a process that owns the GPU (restarted on death, killed
    on timeout); ``device`` is the GPU it measured on, with its limits (a ``GpuInfo``).
    Per-device and RPC runners implement the same two members."""

    def __init__(self, inputs_dir: str, options: MeasureOptions):
        self.inputs_dir, self.options = inputs_dir, options
        self.ctx = mp.get_context("spawn")
        self.process = None
        self.conn = None
        self.device: GpuInfo | None = None

    @property
    def device_name(self) -> str | None:
        return self.device.name if self.device else None

    def _start(self):
        parent, child = self.ctx.Pipe()
        self.process = self.ctx.Process(target=_runner_main, args=(child, self.inputs_dir, self.options),
                                        daemon=True)
        self.process.start()
        child.close()
        self.conn = parent
        if not parent.poll(120):
            self.stop()
            raise RuntimeError("the GPU runner did not start within 120 s")
        try:
            _, self.device = parent.recv()
        except EOFError:
            self.stop()
            raise RuntimeError("the GPU runner died at start (no CUDA GPU?)") from None

    def stop(self):
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
        self.process, self.conn = None, None

    def run(self, so_path: str, key: str, tensors) -> tuple[str, object]:
        """Check and time one exported kernel on the inputs stored under ``key``; ``tensors``
        is the (shape, dtype) of the output, then of each workspace (``template.workspaces``).
        Returns (status, payload): ("ok", costs), ("wrong" | "error" | "timeout", message)."""
        if self.process is None or not self.process.is_alive():
            self._start()
        self.conn.send((so_path, key, [(tuple(shape), dtype) for shape, dtype in tensors]))
        if not self.conn.poll(self.options.run_timeout):
            self.stop()
            return "timeout", f"no result within {self.options.run_timeout:.0f} s"
        try:
            status, payload = self.conn.recv()
        except EOFError:
            code = self.process.exitcode if self.process else None
            self.stop()
            return "error", f"the runner process died (exit code {code})"
        if status == "error":
            self.stop()
        return status, payload


class LocalMeasurer:
    """``measurer(configs) -> results`` for one workload on the local GPU.

    Use as a context manager (or call ``close()``): it owns a build pool, a runner
    process and a temporary directory holding the inputs and exported kernels.
    """

    def __init__(self, space, options: MeasureOptions | None = None):
        self.options = options or MeasureOptions()
        self._tmp = tempfile.TemporaryDirectory(prefix="tc_autotune_measure_")
        workers = self.options.build_workers or os.cpu_count() or 1
        self._pool_args = dict(max_workers=workers, mp_context=mp.get_context("spawn"))
        self._pool = cf.ProcessPoolExecutor(**self._pool_args)
        self._runner = LocalRunner(self._tmp.name, self.options)
        self.use_space(space)

    def use_space(self, space) -> None:
        """Measure another workload with the same build pool and runner (no restart cost)."""
        self.space, self.workload, self.arch = space, space.workload, space.gpu.arch
        self._key = hashlib.sha1(str(self.workload).encode()).hexdigest()[:16]
        path = os.path.join(self._tmp.name, f"{self._key}.npz")
        if not os.path.exists(path):
            data, weight = random_inputs(self.workload, seed=0)
            np.savez(path, input_0=data, input_1=weight,
                     reference=conv2d_reference(self.workload, data, weight))

    @property
    def device_name(self) -> str | None:
        return self._runner.device_name

    @property
    def device(self) -> GpuInfo | None:
        """The GPU the runner measured on, with its limits (None before the first run)."""
        return self._runner.device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._runner.stop()
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
        results: list[MeasureResult | None] = [None] * len(configs)
        futures = {}
        for i, config in enumerate(configs):
            reason = self.space.why_invalid(config)
            if reason:
                results[i] = MeasureResult((), MeasureErrorNo.INVALID_CONFIG, reason)
            else:
                futures[self._submit(config)] = (i, time.time())
        # Builds share one deadline; time spent running finished builds does not count.
        deadline = time.time() + self.options.build_timeout + 5 * len(futures) / self._pool_args["max_workers"]
        pending = set(futures)
        while pending:
            done, pending = cf.wait(pending, timeout=max(0.0, deadline - time.time()),
                                    return_when=cf.FIRST_COMPLETED)
            if not done:
                for future in pending:
                    i, submitted = futures[future]
                    results[i] = MeasureResult((), MeasureErrorNo.BUILD_TIMEOUT,
                                               f"build took over {self.options.build_timeout:.0f} s",
                                               time.time() - submitted)
                self._restart_pool()
                break
            for future in done:
                i, submitted = futures[future]
                run_start = time.time()
                tensors = [(self.workload.out_shape, self.workload.out_dtype),
                           *workspaces(self.workload, configs[i])]
                results[i] = self._run_built(future, submitted, tensors)
                deadline += time.time() - run_start
        return results

    def _run_built(self, future, submitted: float, tensors) -> MeasureResult:
        try:
            so_path, error, _build_s = future.result()
        except Exception as err:  # a worker died
            self._restart_pool()
            return MeasureResult((), MeasureErrorNo.BUILD_ERROR, f"build worker failed: {err}",
                                 time.time() - submitted)
        if error:
            return MeasureResult((), MeasureErrorNo.BUILD_ERROR, error, time.time() - submitted)
        try:
            status, payload = self._runner.run(so_path, self._key, tensors)
        except RuntimeError as err:
            return MeasureResult((), MeasureErrorNo.RUN_ERROR, str(err), time.time() - submitted)
        finally:
            Path(so_path).unlink(missing_ok=True)
        elapsed = time.time() - submitted
        if status == "ok":
            return MeasureResult(tuple(payload), MeasureErrorNo.NO_ERROR, "", elapsed)
        code = {"wrong": MeasureErrorNo.WRONG_RESULT, "timeout": MeasureErrorNo.RUN_TIMEOUT}.get(
            status, MeasureErrorNo.RUN_ERROR)
        return MeasureResult((), code, str(payload), elapsed)
