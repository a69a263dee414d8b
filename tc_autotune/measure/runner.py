"""The runner protocol and the local runner: one built kernel checked, then timed, on one GPU.

A runner has ``run(artifact, inputs key, tensors) -> (status, payload)`` (("ok", costs) or
("wrong" | "error" | "timeout", message)), ``device`` (the ``GpuInfo`` it measures on, with
its limits), ``label`` (what records name as the device: "cuda:1 GPU-<uuid>", "rpc:<key>@...")
and ``stop()``.  A candidate's own failure is a status; a failure of the runner itself (it
cannot start, its GPU or connection is gone) raises ``dispatch.RunnerFault`` so the candidate
goes back to the queue.  Every runner measures with ``bench.check_and_time`` on a ``bench.Bench``
of the workload: checked on the device against the fp32 reference, then timed by the package's
timer.

``LocalRunner`` is one spawned process owning one GPU (``CUDA_VISIBLE_DEVICES`` set to it):
a crash, hang or illegal memory access kills only that process.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import threading

import tvm

from ..backends.cuda import nvcc, tensormap_bf16
from .bench import Bench, check_and_time
from .devices import LocalDevice
from .dispatch import RunnerFault
from ..backends.cuda.gpu import GpuInfo, gpu_from_device
from .runner_protocol import MeasureOptions, serve

log = logging.getLogger(__name__)

START_TIMEOUT = 120.0  # seconds a runner may take to start (TVM import, CUDA context)


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
