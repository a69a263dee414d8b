"""Kernel device time from the CUDA profiler: the second view of every ratio.

The timer (``backends.cuda.timer``) gives wall time per call of a replayed CUDA graph: what a
graph-captured model sees.  This gives the sum of the CUDA kernels' own durations per call,
as CUPTI records them (through ``torch.profiler``): the kernels alone, whatever launching them
costs either side.  Needs PyTorch with CUDA (imported here, inside the function).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelTime:
    """One CUDA kernel (by name) of a profiled call: device seconds and launches per call."""
    name: str
    seconds: float
    launches: float


def kernel_table(fn, iters: int = 50) -> list[KernelTime]:
    """Each CUDA kernel ``fn()`` launches, with its device time per call: one warm-up call, then
    ``iters`` calls under the profiler (every kernel counts, copies and casts included)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    return [KernelTime(e.key, e.self_device_time_total / iters / 1e6, e.count / iters)
            for e in prof.key_averages() if e.device_type == cuda and e.self_device_time_total > 0]


def kernel_seconds(fn, iters: int = 50) -> float:
    """Sum of the CUDA kernels' device time per ``fn()`` call, in seconds (``kernel_table``'s
    rows: a baseline's extra kernels are its cost)."""
    return sum(k.seconds for k in kernel_table(fn, iters))
