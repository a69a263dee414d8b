"""Kernel device time from the CUDA profiler: the second view of every ratio.

The timer (``backends.cuda.timer``) gives wall time per call of a replayed CUDA graph: what a
graph-captured model sees.  This gives the sum of the CUDA kernels' own durations per call,
as CUPTI records them (through ``torch.profiler``): the kernels alone, whatever launching them
costs either side.  Needs PyTorch with CUDA (imported here, inside the function).
"""

from __future__ import annotations


def kernel_seconds(fn, iters: int = 50) -> float:
    """Sum of the CUDA kernels' device time per ``fn()`` call, in seconds: one warm-up call,
    then ``iters`` calls under the profiler (every kernel they launch counts, copies and
    casts included: a baseline's extra kernels are its cost)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    total_us = sum(e.self_device_time_total for e in prof.key_averages() if e.device_type == cuda)
    return total_us / iters / 1e6
