"""cuDNN (conv2d, channels-last fp16) and cuBLAS (dense, ``torch.matmul``) through PyTorch:
the figures every tuned kernel is judged by.

PyTorch is optional: ``available()`` says whether it can run here.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from .results import TOLERANCE, check_then_time
from .dense_workloads import DenseWorkload
from .workloads import Conv2dWorkload


def available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def cudnn_conv2d(workload: Conv2dWorkload, data: np.ndarray, weight: np.ndarray):
    """(run, output) for the workload on cuDNN: ``run()`` launches once; inputs are fp16 NHWC."""
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    wl = workload
    dev = torch.device("cuda")
    x = torch.from_numpy(data.astype(np.float16)).to(dev).permute(0, 3, 1, 2)  # NCHW view of NHWC
    x = x.contiguous(memory_format=torch.channels_last)
    w = torch.from_numpy(weight.astype(np.float16)).to(dev).permute(3, 2, 0, 1)  # OIHW
    w = w.contiguous(memory_format=torch.channels_last)
    top, left, bottom, right = wl.padding
    if (top, left) != (bottom, right):
        x = F.pad(x, (left, right, top, bottom))
        padding = 0
    else:
        padding = (top, left)

    def run():
        return F.conv2d(x, w, stride=wl.stride, padding=padding, dilation=wl.dilation)

    out = run()
    torch.cuda.synchronize()
    return run, out.permute(0, 2, 3, 1).float().cpu().numpy()


def checked_cudnn_time(workload: Conv2dWorkload, data, weight, reference, number: int = 20,
                       repeat: int = 30, min_repeat_ms: float = 10) -> tuple[float | None, float]:
    """(median seconds or None, relative error): cuDNN is timed only when its result is right."""
    return _checked_time(cudnn_conv2d(workload, data, weight), reference, number, repeat, min_repeat_ms)


def cublas_dense(workload: DenseWorkload, data: np.ndarray, weight: np.ndarray):
    """(run, output) for the workload on cuBLAS: ``torch.matmul`` of the fp16 tensors with fp16
    output whatever ``out_dtype`` is (an fp32 cast would add a kernel to the timing)."""
    import torch

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    dev = torch.device("cuda")
    a = torch.from_numpy(data.astype(np.float16)).to(dev)
    b = torch.from_numpy(weight.astype(np.float16)).to(dev)
    if workload.b_layout == "nk":
        b = b.t()  # a transposed view: cuBLAS reads the (N, K) weight as is

    def run():
        return torch.matmul(a, b)

    out = run()
    torch.cuda.synchronize()
    return run, out.float().cpu().numpy()


def checked_cublas_time(workload: DenseWorkload, data, weight, reference, number: int = 20,
                        repeat: int = 30, min_repeat_ms: float = 10) -> tuple[float | None, float]:
    """(median seconds or None, relative error): cuBLAS is timed only when its result is right."""
    return _checked_time(cublas_dense(workload, data, weight), reference, number, repeat, min_repeat_ms)


def _checked_time(run_out, reference, number, repeat, min_repeat_ms) -> tuple[float | None, float]:
    run, out = run_out  # ran once: its output is fresh
    return check_then_time(lambda: None, lambda: out, reference,
                           lambda: median(time_launches(run, number, repeat, min_repeat_ms=min_repeat_ms)),
                           TOLERANCE)


def time_launches(run, number: int = 20, repeat: int = 30, warmup: int = 10,
                  min_repeat_ms: float = 0) -> list[float]:
    """Seconds per ``run()``, one entry per repeat (each the mean of ``number`` launches,
    raised until a repeat lasts ``min_repeat_ms``, as TVM's time_evaluator does for ours).

    The launches are captured in a CUDA graph and replayed, so small convolutions are
    timed on the GPU rather than on PyTorch's per-call host overhead (~15-20 us), which
    is what our kernels' TVM time_evaluator measures too.  Falls back to eager launches
    where capture fails.
    """
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (and cuDNN's algorithm search) off the capture
        for _ in range(warmup):
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if min_repeat_ms > 0:  # steady state: enough back-to-back launches per timed repeat
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            run()
        end.record()
        end.synchronize()
        per_launch_ms = max(start.elapsed_time(end) / number, 1e-4)
        number = min(max(number, math.ceil(min_repeat_ms / per_launch_ms)), 4096)
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(number):
                run()
        launch = graph.replay
    except Exception:  # capture unsupported here: time eager launches
        def launch():
            for _ in range(number):
                run()
    launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / number)
    return times


def median(values) -> float:
    return statistics.median(values)
