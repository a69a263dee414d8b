"""Measured choice between a fused layer and PyTorch's own (``optimize(..., measure=True)``).

A tuned record is fast where it was tuned, and a zero-shot config is a guess: on a shape nobody
tuned, or beside a vendor kernel that fuses what ours does, PyTorch's layer can be the faster.
With ``measure=True`` ``optimize`` times each fusable layer both ways on the GPU, on random
inputs of the example inputs' shapes, and keeps PyTorch's where it is faster, as Inductor's
``max-autotune`` picks between its templates and cuBLAS by timing them.

Each side is timed the way a graph-captured model runs it: replays of a CUDA graph of
back-to-back calls (``measure.baseline.time_torch``, the package's one timer).  PyTorch's side is
the model's own ops for the layer (the conv or linear, its batch norm, residual add and
activation), copied out of the traced graph, so it is exactly what the model would run.  Before
timing, the fused layer's output is checked against PyTorch's: a layer that disagrees stays
PyTorch's, whatever its time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx

from ..core.results import TOLERANCE, check_error_then_time, relative_error_of_sums
from ..measure.baseline import median, time_torch
from . import fusion

# PyTorch's layer is kept only when it is faster by both margins.  A layer timed alone predicts its
# share of a model to a few percent and a few microseconds, not better: in a model the fused
# kernels start early behind each other (Programmatic Dependent Launch) and Inductor fuses around
# PyTorch's ops.  On an H100, ResNet-50 batch 1's fc timed alone was 5.3 us PyTorch's against 5.9
# fused, and switching it made the model 16 us slower under torch.compile's reduce-overhead.  The
# choice is a guard against a config that is far off (a zero-shot miss), not a tie-breaker.
MARGIN = 0.10  # PyTorch's at least this much faster, relatively
MIN_GAIN = 2e-6  # and by at least this many seconds a call
REPEATS = 15  # graph replays per side (each of ``NUMBER`` calls); the median is compared
NUMBER = 20


@dataclass(frozen=True)
class Timing:
    """One layer timed both ways: seconds per call, and the fused output's relative L2 error
    against PyTorch's."""

    ours: float
    pytorch: float
    error: float

    @property
    def keep_pytorch(self) -> bool:
        """PyTorch's layer stays: the fused one disagrees, or is slower beyond both margins."""
        return not self.error < TOLERANCE or (self.pytorch * (1 + MARGIN) < self.ours
                                          and self.ours - self.pytorch > MIN_GAIN)

    def why_pytorch(self) -> str:
        """Why PyTorch's layer stays (``OptimizeReport.left``)."""
        if not self.error < TOLERANCE:
            return (f"the fused layer disagreed with PyTorch's (relative L2 error {self.error:.1e} on random "
                    "inputs): kept PyTorch's")
        return (f"PyTorch's layer is faster when timed: {self.pytorch * 1e6:.1f} us against the fused "
                f"{self.ours * 1e6:.1f} us")


def pytorch_layer(gm: fx.GraphModule, layer: fusion.Layer) -> fx.GraphModule:
    """The layer's own ops (``layer.nodes``: the conv or linear, then what fuses into it) as a
    module of (input[, residual]) that shares ``gm``'s submodules."""
    graph = fx.Graph()
    env = {layer.nodes[0].args[0]: graph.placeholder("x")}
    if layer.residual is not None:
        env[layer.residual] = graph.placeholder("residual")
    for node in layer.nodes:
        env[node] = graph.node_copy(node, lambda arg: env[arg])
    graph.output(env[layer.nodes[-1]])
    return fx.GraphModule(gm, graph)


def example_tensor(node: fx.Node, device) -> torch.Tensor:
    """Random values of the shape, dtype and memory format that shape propagation saw at ``node``."""
    meta = node.meta["tensor_meta"]
    x = torch.randn(tuple(meta.shape), device=device).to(meta.dtype)
    return x.contiguous(memory_format=torch.channels_last) if getattr(meta, "channels_last", False) else x


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``core.results.relative_l2_error`` of two tensors, its sums taken where they are (the GPU)."""
    out, ref = out.float(), ref.float()
    return relative_error_of_sums(float(((out - ref) ** 2).sum()), float((ref ** 2).sum()),
                                  float((~torch.isfinite(out)).sum()))


def time_both(fused: torch.nn.Module, theirs: torch.nn.Module, args: tuple) -> Timing:
    """Check ``fused(*args)`` against ``theirs(*args)``, then time each (median seconds per call):
    the package's check-then-time, so a wrong fused layer is never timed."""
    with torch.no_grad():
        expected = theirs(*args)
        seconds, error = check_error_then_time(
            lambda: None, lambda: relative_error(fused(*args), expected),
            lambda: [median(time_torch(lambda f=f: f(*args), number=NUMBER, repeat=REPEATS)) for f in (fused, theirs)])
    return Timing(*(seconds or (float("nan"), float("nan"))), error)


def time_layer(gm: fx.GraphModule, layer: fusion.Layer, fused: torch.nn.Module, device) -> Timing:
    """``layer`` timed as the fused module and as the model's own ops, on random inputs of its shapes."""
    args = (example_tensor(layer.nodes[0].args[0], device),)
    if layer.residual is not None:
        args += (example_tensor(layer.residual, device),)
    return time_both(fused, pytorch_layer(gm, layer), args)


def layer_key(gm: fx.GraphModule, layer: fusion.Layer) -> tuple:
    """What a layer's timing depends on: its workload (shapes, dtypes, epilogue) and the ops
    PyTorch runs for it (a batch norm, or not).  Layers of one key share one timing."""
    return fusion.workload(layer, gm), layer.kind, layer.bn is not None, layer.activation


def device_of(gm: fx.GraphModule) -> torch.device:
    """The device of the model's parameters (and so of its inputs)."""
    for tensor in [*gm.parameters(), *gm.buffers()]:
        return tensor.device
    return torch.device("cuda")
