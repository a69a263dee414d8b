"""Timing whole models and single calls the way PyTorch users run them, against PyTorch in the
same mode and the same process (``scripts/benchmark_models.py``).

Per model and batch, each side's output is checked against an fp32 PyTorch reference first, then:

* ``eager``: one forward per call from Python, host overhead included (wall time per forward,
  median of repeats after warm-up);
* ``graph``: the forward captured by hand in a ``torch.cuda.CUDAGraph`` and replayed;
* ``reduce-overhead`` / ``max-autotune`` / ``default``: ``torch.compile`` of each side in that
  mode (``fullgraph=True`` for ours: a graph break would be a bug), timed as eager calls;
* ``kernels``: the sum of each side's CUDA kernel times per forward, from the profiler (CUPTI).

``call_overhead`` times the host side of one small conv called each way (the raw function, the
kernel object, ``tc.conv2d``, the fused module, ``F.conv2d``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from ..api import build_cache
from ..api import functional
from ..measure.profiler import kernel_seconds
from .. import workloads
from . import models, ops
from .optimize import FusedConv2d, optimize


@dataclass
class ModelRow:
    model: str
    batch: int
    mode: str
    ours_ms: float | None
    torch_ms: float | None
    note: str = ""

    @property
    def speedup(self) -> float | None:
        return self.torch_ms / self.ours_ms if self.ours_ms and self.torch_ms else None

    def as_dict(self) -> dict:
        return {**asdict(self), "speedup": self.speedup}


def _sync_ms(fn, iters: int, repeats: int) -> float:
    """Median wall time of one ``fn()`` in ms: ``iters`` calls per repeat, synchronised."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / iters * 1e3)
    return statistics.median(samples)


def _host_ms(fn, iters: int, repeats: int) -> float:
    """Median host time to issue one ``fn()`` in ms (``iters`` calls, then a sync outside the
    clock): where it reaches the wall time per call, the host, not the GPU, sets the pace."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        samples.append((time.perf_counter() - start) / iters * 1e3)
        torch.cuda.synchronize()
    return statistics.median(samples)


def graph_of(fn, example):
    """``fn(example)`` captured in a CUDA graph (warmed up on a side stream first): returns
    ``replay()``, which reruns it on the captured input buffer."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(example)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(example)
    return graph.replay


def kernel_ms(fn, iters: int = 20) -> float:
    """Sum of the CUDA kernels' device time per ``fn()`` call, from the profiler (CUPTI), in ms."""
    return kernel_seconds(fn, iters) * 1e3


def rel_err(out, ref) -> float:
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-6))


def build_model(name: str, batch: int):
    """(fp16 channels-last PyTorch model on the GPU, example input, fp32 reference model)."""
    if name == "resnet50":
        reference = models.resnet50().cuda()
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        model = models.resnet50().cuda().half().to(memory_format=torch.channels_last)
        return model, x.half().to(memory_format=torch.channels_last), reference, x
    if name == "resnet50-layer3":  # the largest stage alone, on its input (channels-last)
        reference = models.resnet50().layer3.cuda()
        x = torch.randn(batch, 512, 28, 28, device="cuda")
        model = models.resnet50().layer3.cuda().half().to(memory_format=torch.channels_last)
        return model, x.half().to(memory_format=torch.channels_last), reference, x
    if name.startswith("mlp"):
        reference = models.mlp_block().cuda()
        x = torch.randn(batch, 4096, device="cuda")
        return models.mlp_block().cuda().half(), x.half(), reference, x
    raise ValueError(f"unknown model {name!r} (resnet50, mlp)")


def model_rows(name: str, batch: int, modes=("eager", "graph", "kernels", "reduce-overhead"), measure=None):
    """Every mode's row for one model and batch (see the module), outputs checked first; rows
    are yielded as they are measured, and a compile mode that fails is a row saying why.
    ``measure``: ``optimize``'s (True: each layer the faster of ours and PyTorch's; default: the
    untuned layers only)."""
    model, x, reference, x32 = build_model(name, batch)
    with torch.no_grad():
        expected = reference(x32)
        start = time.perf_counter()
        ours = optimize(model, (x,), measure=measure)
        build_s = time.perf_counter() - start
        err_ours, err_torch = rel_err(ours(x), expected), rel_err(model(x), expected)
    note = f"err vs fp32: ours {err_ours:.1e}, PyTorch {err_torch:.1e}"
    yield ModelRow(name, batch, "check", None, None, note + f"; optimize {build_s:.1f} s; "
                   f"{ours.tc_autotune_report.summary()}")
    if err_ours > max(5e-2, 5 * err_torch):
        yield ModelRow(name, batch, "WRONG", None, None, "not timed: our output is wrong")
        return
    iters = 50 if batch <= 8 else 20
    with torch.no_grad():
        for mode in modes:
            if mode == "eager":
                yield ModelRow(name, batch, mode, _sync_ms(lambda: ours(x), iters, 15),
                               _sync_ms(lambda: model(x), iters, 15))
            elif mode == "graph":
                ours_replay, torch_replay = graph_of(ours, x), graph_of(model, x)
                yield ModelRow(name, batch, mode, _sync_ms(ours_replay, iters, 15), _sync_ms(torch_replay, iters, 15))
            elif mode == "kernels":
                # a PDL kernel's device time runs from its early start: its wait for the one before counts
                note = "PDL on: our kernels' times include their waits" if build_cache.model_pdl() else ""
                yield ModelRow(name, batch, mode, kernel_ms(lambda: ours(x)), kernel_ms(lambda: model(x)), note)
            else:
                try:
                    yield _compiled_row(name, batch, mode, ours, model, x, expected)
                except Exception as err:  # noqa: BLE001 (a compiler error is a result to report)
                    yield ModelRow(name, batch, mode, None, None,
                                   f"failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}")


def _compiled_row(name, batch, mode, ours, model, x, expected) -> ModelRow:
    """``torch.compile`` of both sides in ``mode`` ("default", "reduce-overhead", "max-autotune";
    ours with fullgraph=True), checked, then timed as eager calls."""
    torch._dynamo.reset()
    start = time.perf_counter()
    compiled_ours = torch.compile(ours, mode=None if mode == "default" else mode, fullgraph=True)
    err = rel_err(compiled_ours(x), expected)
    ours_compile = time.perf_counter() - start
    start = time.perf_counter()
    compiled_torch = torch.compile(model, mode=None if mode == "default" else mode)
    err_torch = rel_err(compiled_torch(x), expected)
    torch_compile = time.perf_counter() - start
    iters = 50 if batch <= 8 else 20
    ours_ms = _sync_ms(lambda: compiled_ours(x), iters, 15)
    torch_ms = _sync_ms(lambda: compiled_torch(x), iters, 15)
    host = _host_ms(lambda: compiled_ours(x), iters, 5), _host_ms(lambda: compiled_torch(x), iters, 5)
    return ModelRow(name, batch, mode, ours_ms, torch_ms, f"err ours {err:.1e} / PyTorch {err_torch:.1e}; compile "
                    f"ours {ours_compile:.0f} s / PyTorch {torch_compile:.0f} s; host per call ours "
                    f"{host[0]:.3f} / PyTorch {host[1]:.3f} ms")


# ---- one call's host time ------------------------------------------------------------------------
def call_overhead(spec: str = "rfc-3x3-b1", calls: int = 200, repeats: int = 50) -> dict[str, float]:
    """Host microseconds per call of one conv, issued ``calls`` at a time (few enough that the
    GPU's queue never fills, so the loop's time is the host's), median of ``repeats``."""
    wl = workloads.get(spec)
    kernel = build_cache.kernel(wl, pdl=build_cache.model_pdl())  # the kernel the op paths below bind
    data = torch.randn(wl.data_shape, device="cuda").half()
    weight = torch.randn(wl.weight_shape, device="cuda").half() * 0.05
    out = torch.empty(wl.out_shape, device="cuda", dtype=getattr(torch, wl.out_dtype))
    launch = kernel.torch_launch(data.device)
    x_nchw = data.permute(0, 3, 1, 2)  # channels-last NCHW: what F.conv2d and the module take
    w_oihw = weight.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
    conv = torch.nn.Conv2d(wl.in_channels, wl.out_channels, (wl.kernel_h, wl.kernel_w), stride=wl.stride,
                           padding=wl.padding[:2], bias=False).cuda().half().to(memory_format=torch.channels_last)
    module = FusedConv2d.of(conv)
    pad, stride = wl.padding[:2], wl.stride
    ways = {
        "raw function": lambda: launch.function(data, weight, out, *launch.workspaces),
        "kernel(...)": lambda: kernel(data, weight, out=out),
        "tc.conv2d": lambda: functional.conv2d(data, weight, stride, pad, out_dtype=wl.out_dtype, out=out),
        "torch.ops.tc_autotune.conv2d": lambda: torch.ops.tc_autotune.conv2d(
            data, weight, None, None, None, list(stride), list(wl.padding), [1, 1], "none", torch.float32),
        "FusedConv2d module (fp16 out)": lambda: module(x_nchw),
        "F.conv2d": lambda: F.conv2d(x_nchw, w_oihw, None, stride, pad),
    }
    result = {}
    for name, fn in ways.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
        result[name] = statistics.median(samples)
    result["fallbacks"] = sum(ops.fallbacks().values())
    return result


def first_forward(name: str, batch: int) -> dict[str, float]:
    """Seconds to import the package, optimize ``name`` at ``batch`` (its kernels built or
    loaded from the disk cache) and run the first forward, in this process."""
    model, x, _, _ = build_model(name, batch)
    start = time.perf_counter()
    with torch.no_grad():
        ours = optimize(model, (x,))
        ready = time.perf_counter()
        ours(x)
        torch.cuda.synchronize()
    report = ours.tc_autotune_report
    return {"optimize_s": ready - start, "trace_s": report.trace_seconds, "kernels_s": report.build_seconds,
            "first_forward_s": time.perf_counter() - start, "kernels": len(report.workloads),
            "untuned": len(report.untuned), "layers": report.layers}
