"""cuDNN (conv2d, channels-last fp16) and cuBLAS (dense, ``torch.matmul``) through PyTorch:
the figures every tuned kernel is judged by.  A bf16 workload's baseline computes in bf16 (its
output and epilogue too), every other one's in fp16 (``torch_dtype``); an fp8 dense's is
``torch._scaled_mm`` (cuBLASLt's fp8 GEMM), writing the workload's output dtype.

A fused workload's baseline is the conv (matmul) followed by its epilogue as PyTorch ops,
unfused, as a user writes it (torchvision's ResNet: in-place adds, ``ReLU(inplace=True)``; a
dense's bias through ``F.linear``, as ``nn.Linear`` adds it, inside cuBLASLt's GEMM):
``mul_`` by scale, ``add_`` bias, ``add_`` the residual, ``relu_`` or ``gelu(approximate=
"tanh")``, each its own kernel, in fp16 or bf16 (the conv's output dtype, with copies of the
epilogue's inputs in it, as such a model holds them), timed with the conv as one unit.

A baseline is timed by the timer our kernels are timed by (``time_torch``).  PyTorch is
optional: ``available()`` says whether it can run here.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import replace

import numpy as np

from ..backends.cuda import timer
from ..workloads import epilogue
from ..workloads.conv_weights import TO_HWIO
from ..core.results import TOLERANCE, check_then_time
from ..workloads.dense import DenseWorkload
from ..workloads.conv2d import Conv2dWorkload

log = logging.getLogger(__name__)


def available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def torch_dtype(workload):
    """The torch dtype the vendor libraries compute a workload in: bf16 for bf16 operands, else fp16
    (fp32 input: fp16, as our kernels' copies)."""
    import torch

    return torch.bfloat16 if workload.dtype == "bfloat16" else torch.float16


def device_tensor(array, dtype, device="cuda"):
    """A host array (numpy, or ml_dtypes' bf16 and fp8, which ``torch.from_numpy`` does not take) on
    the GPU (``device``) as ``dtype``: through fp32, which holds fp16, bf16 and fp8 values exactly."""
    import torch

    return torch.from_numpy(np.asarray(array, dtype=np.float32)).to(device=device, dtype=dtype)


def torch_epilogue(workload, arrays, channel_view, tensor_view, dtype=None, device="cuda"):
    """``finish(y)``: the workload's epilogue applied to PyTorch's fp16 (bf16) output ``y`` (see the
    module), on device copies of ``arrays`` (its inputs) in that dtype (``dtype``, default
    ``torch_dtype``'s); ``channel_view`` shapes a per-channel vector and ``tensor_view`` the
    residual like ``y``."""
    import torch.nn.functional as F

    fused = epilogue.parse(workload.epilogue)
    dtype = dtype or torch_dtype(workload)
    held = {name: device_tensor(a, dtype, device) for name, a in zip(fused.inputs, arrays)}
    held = {name: (tensor_view if name == "residual" else channel_view)(t) for name, t in held.items()}

    def finish(y):
        if fused.scale:
            y = y.mul_(held["scale"])
        if fused.bias:
            y = y.add_(held["bias"])
        if fused.residual:
            y = y.add_(held["residual"])
        if fused.activation == "relu":
            y = F.relu_(y)
        elif fused.activation == "gelu":
            y = F.gelu(y, approximate="tanh")
        return y

    return finish


def cudnn_conv2d(workload: Conv2dWorkload, data: np.ndarray, weight: np.ndarray, *epilogue_inputs):
    """(run, output) for the workload on cuDNN: ``run()`` launches the conv once (grouped: with
    PyTorch's ``groups``), then the epilogue's ops; inputs are fp16 (bf16) NHWC (the residual NHWC
    too), the weight in the workload's layout, which cuDNN is given as its channels-last OIHW.
    fp32 input (``dtype=float32``): the tensors stay fp32 and ``run()`` casts both to fp16 before
    the conv, as a PyTorch user runs an fp32 conv on the Tensor Cores (our kernel reads the fp32
    tensors on every call too)."""
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    wl = workload
    held = torch.float32 if wl.dtype == "float32" else torch_dtype(wl)
    x = device_tensor(data, held).permute(0, 3, 1, 2)  # NCHW view of NHWC
    x = x.contiguous(memory_format=torch.channels_last)
    hwio = np.transpose(weight, TO_HWIO[wl.weight_layout])
    w = device_tensor(hwio, held).permute(3, 2, 0, 1)  # OIHW
    w = w.contiguous(memory_format=torch.channels_last)
    top, left, bottom, right = wl.padding
    if (top, left) != (bottom, right):
        x = F.pad(x, (left, right, top, bottom))
        padding = 0
    else:
        padding = (top, left)

    finish = torch_epilogue(wl, epilogue_inputs, lambda t: t.reshape(1, -1, 1, 1),
                            lambda t: t.permute(0, 3, 1, 2))  # NCHW views, as the conv's output

    cast = (lambda t: t.to(torch.float16)) if held == torch.float32 else (lambda t: t)  # keeps channels-last

    def run():
        return finish(F.conv2d(cast(x), cast(w), stride=wl.stride, padding=padding, dilation=wl.dilation,
                               groups=wl.groups))

    out = run()
    torch.cuda.synchronize()
    return run, out.permute(0, 2, 3, 1).float().cpu().numpy()


def checked_cudnn_time(workload: Conv2dWorkload, *arrays, number: int = 20, repeat: int = 30,
                       min_repeat_ms: float = 10) -> tuple[float | None, float]:
    """(median seconds or None, relative error) of ``cudnn_conv2d`` on ``arrays`` (the task's
    inputs, then the reference): cuDNN is timed only when its result is right."""
    *inputs, reference = arrays
    return _checked_time(cudnn_conv2d(workload, *inputs), reference, number, repeat, min_repeat_ms)


def cublas_dense(workload: DenseWorkload, data: np.ndarray, weight: np.ndarray, *epilogue_inputs):
    """(run, output) for the workload on cuBLAS: ``torch.matmul`` of the fp16 (bf16) tensors with
    fp16 (bf16) output whatever ``out_dtype`` is (an fp32 cast would add a kernel to the timing),
    then the epilogue's ops; a bias without a scale before it through ``F.linear``, in the GEMM.
    Reductions stay fp32, as ours (no reduced-precision split-K sums).
    fp8: ``scaled_mm_dense``."""
    if workload.scaled:
        return scaled_mm_dense(workload, data, weight, *epilogue_inputs)
    import torch

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    a = device_tensor(data, torch_dtype(workload))
    b = device_tensor(weight, torch_dtype(workload))
    if workload.b_layout == "nk":
        b = b.t()  # a transposed view: cuBLAS reads the (N, K) weight as is

    fused = epilogue.parse(workload.epilogue)
    if fused.bias and not fused.scale:
        # nn.Linear's way (F.linear: addmm), which cuBLASLt runs with the bias added in the GEMM's
        # epilogue; a separate add would charge the baseline a kernel no PyTorch model launches
        rest, arrays, bias = _bias_apart(workload, epilogue_inputs, torch_dtype(workload))
        finish = torch_epilogue(rest, arrays, lambda t: t, lambda t: t)

        def run():
            return finish(torch.nn.functional.linear(a, b.t(), bias))
    else:
        finish = torch_epilogue(workload, epilogue_inputs, lambda t: t, lambda t: t)

        def run():
            return finish(torch.matmul(a, b))

    out = run()
    torch.cuda.synchronize()
    return run, out.float().cpu().numpy()


def _bias_apart(workload, epilogue_inputs, dtype, device="cuda"):
    """(the workload without its epilogue's bias, the other epilogue inputs, the bias as a ``dtype``
    device tensor): for a baseline whose GEMM adds the bias itself."""
    fused = epilogue.parse(workload.epilogue)
    rest = replace(workload, epilogue=str(replace(fused, bias=False)))
    arrays = [array for name, array in zip(fused.inputs, epilogue_inputs) if name != "bias"]
    return rest, arrays, device_tensor(epilogue_inputs[fused.inputs.index("bias")], dtype, device)


def scaled_mm_dense(workload: DenseWorkload, data: np.ndarray, weight: np.ndarray, scale_a: np.ndarray,
                    scale_b: np.ndarray, *epilogue_inputs, device: str = "cuda"):
    """(run, output) for an fp8 workload on cuBLASLt: ``torch._scaled_mm`` of the fp8 tensors (A
    row-major, B the (N, K) weight's transposed view: column-major, as it asks) with the per-tensor
    scales, writing the workload's output dtype (it writes fp32, fp16 and bf16 alike), with the
    bias fused where ``_scaled_mm`` takes it (added after scaling, in the output's dtype: fp16 or
    bf16 output, an epilogue without a per-channel scale), then the epilogue's other ops in the
    output's dtype (fp32 output: all of them, in fp32).  A batch folds into M (it takes 2-D A).

    ``use_fast_accum=True``: cuBLASLt accumulates in the Tensor Cores' accumulators throughout, as
    our kernels do (wgmma's fp8 accumulation, never promoted to CUDA-core fp32 partway): like with
    like, as the fp16 baselines keep cuBLAS's reductions in fp32 because ours are.  ``device``: "cpu"
    runs PyTorch's CPU ``_scaled_mm`` (the tests, on a machine without a GPU)."""
    import torch

    out_dtype = getattr(torch, workload.out_dtype)
    a = device_tensor(data, torch.float8_e4m3fn, device).reshape(-1, workload.k)
    b = device_tensor(weight, getattr(torch, workload.weight_dtype), device).t()  # (K, N), column-major
    scales = [device_tensor(s, torch.float32, device) for s in (scale_a, scale_b)]
    fused = epilogue.parse(workload.epilogue)
    # what _scaled_mm fuses: a bias of a 2-byte output, unless the epilogue's scale comes before it
    fuse_bias = fused.bias and not fused.scale and out_dtype != torch.float32
    rest, arrays, bias = _bias_apart(workload, epilogue_inputs, out_dtype, device) if fuse_bias else (
        workload, epilogue_inputs, None)
    finish = torch_epilogue(rest, arrays, lambda t: t, lambda t: t.reshape(-1, workload.n), out_dtype, device)

    def run():
        return finish(torch._scaled_mm(a, b, scale_a=scales[0], scale_b=scales[1], bias=bias, out_dtype=out_dtype,
                                       use_fast_accum=True))

    out = run()
    if device != "cpu":
        torch.cuda.synchronize()
    return run, out.float().cpu().numpy().reshape(workload.out_shape)


def scaled_mm_refusal(workload) -> str | None:
    """Why ``torch._scaled_mm`` cannot run ``workload`` (it takes a K and an N that are multiples of
    16 only), or None: asked before any tensor is made, so a benchmark says it in one line."""
    if getattr(workload, "scaled", False) and (workload.k % 16 or workload.n % 16):
        return f"torch._scaled_mm takes K and N that are multiples of 16, not K={workload.k}, N={workload.n}"
    return None


def checked_cublas_time(workload: DenseWorkload, *arrays, number: int = 20, repeat: int = 30,
                        min_repeat_ms: float = 10) -> tuple[float | None, float | None]:
    """(median seconds or None, relative error) of ``cublas_dense`` on ``arrays`` (the task's
    inputs, then the reference): cuBLAS is timed only when its result is right.  A shape the
    baseline cannot take: (None, None), said once in the log."""
    why = scaled_mm_refusal(workload)
    if why is not None:
        log.warning("%s: no baseline: %s", workload, why)
        return None, None
    *inputs, reference = arrays
    return _checked_time(cublas_dense(workload, *inputs), reference, number, repeat, min_repeat_ms)


def runner(workload, *inputs):
    """(run, output) of the task's baseline on ``inputs``: cuDNN for a conv2d, cuBLAS for a dense."""
    return (cublas_dense if isinstance(workload, DenseWorkload) else cudnn_conv2d)(workload, *inputs)


def _checked_time(run_out, reference, number, repeat, min_repeat_ms) -> tuple[float | None, float]:
    run, out = run_out  # ran once: its output is fresh
    return check_then_time(lambda: None, lambda: out, reference,
                           lambda: median(time_torch(run, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)),
                           TOLERANCE)


def time_torch(run, **options) -> list[float]:
    """Seconds per ``run()`` (PyTorch ops on the current GPU), one figure per repeat, by the
    package's one timer (``timer.time_launches``: replays of a CUDA graph of ``run()``s, first
    repeat dropped), as our kernels are timed.  ``run()`` launches on the timer's stream:
    PyTorch's current stream is set to it (``torch.cuda.ExternalStream``), and cuDNN and cuBLAS
    take PyTorch's current stream on each call.  ``options``: ``timer.time_launches``' own.

    The graph is captured by the CUDA driver, not ``torch.cuda.graph``, so PyTorch's caching
    allocator does not know: the ops' intermediate tensors are served from the blocks the
    warm-up left cached on the timer's stream (same shapes, same stream), freed and reused in
    stream order inside the graph, and nothing else allocates while it is replayed; the graph
    is destroyed before the timer returns.
    """
    import torch

    def on_stream(handle):
        return torch.cuda.stream(torch.cuda.ExternalStream(handle))

    return timer.time_launches(run, on_stream=on_stream, device=torch.cuda.current_device(), **options)


def median(values) -> float:
    return statistics.median(values)
