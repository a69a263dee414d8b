"""The runner protocol and the local runner: check, then time, one built kernel on one GPU.

A runner has ``run(artifact, inputs key, tensors) -> (status, payload)`` (("ok", costs) or
("wrong" | "error" | "timeout", message)), ``device`` (the ``GpuInfo`` it measures on, with
its limits), ``label`` (what records name as the device: "cuda:1 GPU-<uuid>", "rpc:<key>@...")
and ``stop()``.  A candidate's own failure is a status; a failure of the runner itself (it
cannot start, its GPU or connection is gone) raises ``dispatch.RunnerFault`` so the candidate
goes back to the queue.  ``check_and_time`` is the one measurement every runner makes: output
poisoned with NaN, one run checked against the fp32 reference (``results.check_error_then_time``),
then the package's timer (``backends.cuda.timer``: CUDA-graph replays, the first repeat
dropped; records name it ``results.CUDA_TIMER``).  The check runs on the device: a ``Bench``
holds the workload's inputs, reference, output and its NaN-filled template there, set up once
per workload (and RPC session), and the ``checker`` kernel reduces the output to two numbers,
so per candidate no output-sized array crosses to the host (or the network).

``LocalRunner`` is one spawned process owning one GPU (``CUDA_VISIBLE_DEVICES`` set to it):
a crash, hang or illegal memory access kills only that process.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import threading

import numpy as np
import tvm

from ..backends.cuda import nvcc, tensormap_bf16, timer
from .devices import LocalDevice
from .dispatch import RunnerFault
from ..backends.cuda.gpu import GpuInfo, gpu_from_device
from ..core.results import check_error_then_time, relative_error_of_sums
from .runner_protocol import MeasureOptions, serve
from ..workloads.host_dtypes import host_dtype

log = logging.getLogger(__name__)

START_TIMEOUT = 120.0  # seconds a runner may take to start (TVM import, CUDA context)


def load_inputs(inputs_dir: str, key: str):
    """(numpy inputs, fp32 reference) stored by the measurer under ``key``; bf16 inputs, which npz
    reads back as raw 2-byte values, as bf16 again (by the dtypes stored beside them)."""
    arrays = np.load(os.path.join(inputs_dir, f"{key}.npz"))
    count = sum(name.startswith("input_") for name in arrays.files)
    inputs = [arrays[f"input_{i}"] for i in range(count)]
    if "dtypes" in arrays.files:
        inputs = [a.view(host_dtype(str(name))) for a, name in zip(inputs, arrays["dtypes"])]
    return inputs, arrays["reference"]


def checker_path(inputs_dir: str, key: str, device_type: str) -> str:
    """Where the measurer exports the output checker of workload ``key`` for a device kind."""
    return os.path.join(inputs_dir, f"{key}.{device_type}.check.so")


class Bench:
    """One workload's tensors on one device (local, or remote through RPC), set up once for
    every candidate: the inputs, the fp32 reference, the output and a NaN-filled template of
    it, and the output checker.  Per candidate the output is poisoned by a copy on the device
    and the checker's two numbers come back."""

    def __init__(self, dev, arrays, reference: np.ndarray, checker_module):
        self.dev = dev
        self.inputs = [tvm.runtime.tensor(a, device=dev) for a in arrays]
        self._reference = tvm.runtime.tensor(reference.astype(np.float32), device=dev)
        self._squared_reference = float(np.sum(np.square(reference, dtype=np.float64)))
        self._check = checker_module["main"]  # the checker's function, named as a kernel's
        self._stats = tvm.runtime.empty((2,), "float64", device=dev)
        self._out_spec, self._out, self._poison = None, None, None

    @classmethod
    def load(cls, inputs_dir: str, key: str, dev, device_type: str, load_module) -> "Bench":
        """The bench of workload ``key`` on ``dev``; ``load_module(path)`` loads the exported
        checker there (``tvm.runtime.load_module``, or upload and load through RPC)."""
        arrays, reference = load_inputs(inputs_dir, key)
        return cls(dev, arrays, reference, load_module(checker_path(inputs_dir, key, device_type)))

    def arguments(self, tensors) -> list:
        """A kernel's arguments: the inputs, the output poisoned with NaN (a device copy of the
        template) and fresh workspaces; ``tensors`` the (shape, dtype) of the output, then of
        each workspace."""
        (shape, dtype), *workspace_specs = tensors
        if self._out_spec != (tuple(shape), dtype):
            self._poison = tvm.runtime.tensor(np.full(shape, np.nan, host_dtype(dtype)), device=self.dev)
            self._out = tvm.runtime.empty(shape, dtype, device=self.dev)
            self._out_spec = (tuple(shape), dtype)
        self._poison.copyto(self._out)
        workspaces = [tvm.runtime.empty(s, d, device=self.dev) for s, d in workspace_specs]
        return [*self.inputs, self._out, *workspaces]

    def error(self) -> float:
        """Relative L2 error of the last output against the reference (inf if any is NaN/Inf)."""
        self._check(self._out, self._reference, self._stats)
        squared_error, nonfinite = self._stats.numpy()
        return relative_error_of_sums(float(squared_error), self._squared_reference, float(nonfinite))


def timer_options(options: MeasureOptions) -> dict:
    """What a runner asks of the timer (``timer.time_launches``): ``options.repeat`` kept
    repeats (the timer drops one more, the first), each raised to ``options.min_repeat_ms``
    from one launch."""
    return dict(number=1, repeat=options.repeat, min_repeat_ms=float(options.min_repeat_ms))


def check_and_time(module, bench: Bench, tensors, options: MeasureOptions, time=None) -> tuple[str, object]:
    """Check ``module["main"]`` on the bench's device (local or remote) against the reference,
    then time it.  ``tensors`` are the (shape, dtype) of the output, then of each workspace;
    ``time(module, args) -> costs`` times it (default: the timer in this process, on the
    bench's device; an RPC runner's times it on the server).  Returns ("ok", costs) or
    ("wrong", message)."""
    func = module["main"]
    args = bench.arguments(tensors)

    def run():
        func(*args)
        bench.dev.sync()

    def local(module, args):
        return timer.time_function(func, bench.dev, args, **timer_options(options))

    costs, err = check_error_then_time(run, bench.error, lambda: (time or local)(module, args), options.tolerance)
    if costs is None:
        return "wrong", f"relative L2 error {err:.3g} against the fp32 reference"
    return "ok", costs


# ---- the local runner (one isolated process per GPU) -----------------------------------
def _runner_main(conn, inputs_dir: str, options: MeasureOptions):
    """The GPU runner process: set up CUDA, then ``serve`` check-and-time requests on GPU 0 (the
    one ``CUDA_VISIBLE_DEVICES`` left it)."""
    nvcc.install_compile_callback()
    tensormap_bf16.register()  # the host code of tma_im2col kernels calls it (fp16's and bf16's)
    dev = tvm.cuda(0)
    benches = {}

    def measure(so_path, key, tensors):
        if key not in benches:  # one workload's bench at a time (device memory)
            benches.clear()
            benches[key] = Bench.load(inputs_dir, key, dev, LocalRunner.device_type, tvm.runtime.load_module)
        return check_and_time(tvm.runtime.load_module(so_path), benches[key], tensors, options)

    serve(conn, gpu_from_device(dev), measure)


_SPAWN_LOCK = threading.Lock()  # the child's environment is the parent's at spawn time


class LocalRunner:
    """The runner protocol for one local GPU (``device``: a ``devices.LocalDevice``, None for
    GPU 0 as this process sees it): a spawned process owning it, restarted after a crash,
    killed after ``run_timeout``.  ``main(conn, inputs_dir, options)`` is what the process runs
    (``_runner_main``; tests give a module-level stand-in that ``serve``s without a GPU)."""

    device_type = "cuda"  # the kind of device its checker is built for

    def __init__(self, inputs_dir: str, options: MeasureOptions, device: LocalDevice | None = None,
                 main=None):
        self.inputs_dir, self.options, self.local = inputs_dir, options, device
        self.main = main or _runner_main
        self.ctx = mp.get_context("spawn")
        self.process = None
        self.conn = None
        self.device: GpuInfo | None = None

    @property
    def label(self) -> str | None:
        if self.local is not None:
            return self.local.label
        return self.device.name if self.device else None

    @property
    def device_name(self) -> str | None:
        return self.device.name if self.device else None

    def _start(self):
        parent, child = self.ctx.Pipe()
        self.process = self.ctx.Process(target=self.main, args=(child, self.inputs_dir, self.options),
                                        daemon=True)
        env = self.local.environment() if self.local is not None else {}
        with _SPAWN_LOCK:
            saved = {name: os.environ.get(name) for name in env}
            try:
                os.environ.update(env)
                self.process.start()
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
        child.close()
        self.conn = parent
        if not parent.poll(START_TIMEOUT):
            self.stop()
            raise RunnerFault(f"the GPU runner ({self.label or 'GPU 0'}) did not start within {START_TIMEOUT:.0f} s")
        try:
            _, self.device = parent.recv()
        except EOFError:
            self.stop()
            raise RunnerFault(f"the GPU runner ({self.label or 'GPU 0'}) died at start (no CUDA GPU?)") from None

    def stop(self):
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
        self.process, self.conn = None, None

    def run(self, so_path: str, key: str, tensors) -> tuple[str, object]:
        """Check and time one exported kernel on the inputs stored under ``key``; ``tensors``
        is the (shape, dtype) of the output, then of each workspace (``template.workspaces``).
        Returns (status, payload): ("ok", costs), ("wrong" | "error" | "timeout", message);
        raises ``RunnerFault`` when the runner cannot (re)start."""
        if self.process is None or not self.process.is_alive():
            self._start()
        self.conn.send((so_path, key, [(tuple(shape), dtype) for shape, dtype in tensors]))
        if not self.conn.poll(self.options.run_timeout):
            self.stop()
            return "timeout", f"no result within {self.options.run_timeout:.0f} s"
        try:
            status, payload = self.conn.recv()
        except EOFError:
            if self.process is not None:
                self.process.join(5)  # the pipe closes as the process dies: reap it for its exit code
            code = self.process.exitcode if self.process else None
            self.stop()
            self._start()  # the kernel killed it (its error), unless no runner starts again (a fault)
            return "error", f"the runner process died (exit code {code})"
        if status == "error":
            self.stop()
        return status, payload
