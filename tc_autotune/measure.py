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
import enum
import hashlib
import logging
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import cloudpickle
import numpy as np

log = logging.getLogger(__name__)


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
    tolerance: float = 1e-2  # relative L2 error against the fp32 reference


# ---- building (worker processes) ---------------------------------------------
def _run_pickled(payload: bytes):
    func, args = cloudpickle.loads(payload)
    return func(*args)


def _build_one(spec: str, knobs: dict, arch: str, out_dir: str, nvcc_timeout: float):
    """Lower, nvcc-compile (cubin into the disk cache) and export one candidate."""
    from . import cuda
    from .gpu import gpu_for_arch
    from .kernel import compile_conv2d
    from .space import Conv2dConfig
    from .workloads import Conv2dWorkload

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
def _runner_main(conn, inputs_dir: str, options: MeasureOptions):
    """Serve (so_path, spec) requests until the pipe closes; exit after any run error."""
    import tvm

    from . import cuda
    from .reference import relative_l2_error

    cuda.install_compile_callback()
    dev = tvm.cuda(0)
    conn.send(("ready", dev.device_name))
    cache = {}
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        so_path, key, out_shape, out_dtype, workspaces = request
        try:
            if key not in cache:
                cache.clear()
                arrays = np.load(os.path.join(inputs_dir, f"{key}.npz"))
                cache[key] = (tvm.runtime.tensor(arrays["data"], device=dev),
                              tvm.runtime.tensor(arrays["weight"], device=dev), arrays["reference"])
            data, weight, reference = cache[key]
            module = tvm.runtime.load_module(so_path)
            func = module["main"]
            out = tvm.runtime.tensor(np.full(out_shape, np.nan, out_dtype), device=dev)
            extra = tuple(tvm.runtime.empty(shape, dtype, device=dev) for shape, dtype in workspaces)
            func(data, weight, out, *extra)
            dev.sync()
            err = relative_l2_error(out.numpy(), reference)
            if not err < options.tolerance:
                conn.send(("wrong", f"relative L2 error {err:.3g} against the fp32 reference"))
                continue
            # One more repeat than kept: the first ran slow (clocks, caches) on ~5-10 us kernels,
            # by up to 30% (H200 nightly, 2026-11-22), and skewed their medians.
            evaluator = module.time_evaluator("main", dev, number=1, repeat=options.repeat + 1,
                                              min_repeat_ms=int(options.min_repeat_ms))
            costs = list(evaluator(data, weight, out, *extra).results)[1:]
            conn.send(("ok", costs))
        except Exception as err:
            conn.send(("error", f"{type(err).__name__}: {str(err)[-1500:]}"))
            return  # the CUDA context may be broken: let the parent start a fresh runner


class _Runner:
    """The parent's handle on the runner process: restart on death, kill on timeout."""

    def __init__(self, inputs_dir: str, options: MeasureOptions):
        self.inputs_dir, self.options = inputs_dir, options
        self.ctx = mp.get_context("spawn")
        self.process = None
        self.conn = None
        self.device_name = None

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
            _, self.device_name = parent.recv()
        except EOFError:
            self.stop()
            raise RuntimeError("the GPU runner died at start (no CUDA GPU?)") from None

    def stop(self):
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
        self.process, self.conn = None, None

    def run(self, so_path: str, key: str, workload, workspaces=()) -> tuple[str, object]:
        """Check and time one exported kernel; ``workspaces`` is ``template.workspaces(...)``:
        the (shape, dtype) of each buffer allocated for the call after ``out``."""
        if self.process is None or not self.process.is_alive():
            self._start()
        self.conn.send((so_path, key, workload.out_shape, workload.out_dtype, list(workspaces)))
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
        self._runner = _Runner(self._tmp.name, self.options)
        self.use_space(space)

    def use_space(self, space) -> None:
        """Measure another workload with the same build pool and runner (no restart cost)."""
        from .reference import conv2d_reference, random_inputs

        self.space, self.workload, self.arch = space, space.workload, space.gpu.arch
        self._key = hashlib.sha1(str(self.workload).encode()).hexdigest()[:16]
        path = os.path.join(self._tmp.name, f"{self._key}.npz")
        if not os.path.exists(path):
            data, weight = random_inputs(self.workload, seed=0)
            np.savez(path, data=data, weight=weight,
                     reference=conv2d_reference(self.workload, data, weight))

    @property
    def device_name(self) -> str | None:
        return self._runner.device_name

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
        from .template import workspaces

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
                results[i] = self._run_built(future, submitted, workspaces(self.workload, configs[i]))
                deadline += time.time() - run_start
        return results

    def _run_built(self, future, submitted: float, workspaces=()) -> MeasureResult:
        try:
            so_path, error, _build_s = future.result()
        except Exception as err:  # a worker died
            self._restart_pool()
            return MeasureResult((), MeasureErrorNo.BUILD_ERROR, f"build worker failed: {err}",
                                 time.time() - submitted)
        if error:
            return MeasureResult((), MeasureErrorNo.BUILD_ERROR, error, time.time() - submitted)
        try:
            status, payload = self._runner.run(so_path, self._key, self.workload, workspaces)
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
