"""The one measurement every runner makes, on the device it measures on: check, then time, one
built kernel on a workload's bench.

``check_and_time``: the output poisoned with NaN, one run checked against the fp32 reference
(``results.check_error_then_time``), then the package's timer (``backends.cuda.timer``: CUDA-graph
replays, the first repeat dropped; records name it ``results.CUDA_TIMER``).  The check runs on the
device: a ``Bench`` holds the workload's inputs, reference, output and its NaN-filled template
there, set up once per workload (and RPC session), and the ``checker`` kernel reduces the output
to two numbers, so per candidate no output-sized array crosses to the host (or the network).  The
local runner (``runner``) and the RPC runner (``rpc_runner``) both measure with it; neither
imports the other.
"""

from __future__ import annotations

import os

import numpy as np
import tvm

from ..backends.cuda import timer
from ..core.results import check_error_then_time, relative_error_of_sums
from .runner_protocol import MeasureOptions
from ..workloads.host_dtypes import host_dtype


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


__all__ = ["load_inputs", "checker_path", "Bench", "timer_options", "check_and_time"]
