"""fp32 references on the host (conv2d, dense), to check every kernel that is built or timed.

A task's inputs are its operands, then its fused epilogue's inputs (``epilogue.input_specs``);
the reference applies that epilogue to the fp32 result (``epilogue.reference``).  A bf16 (fp8)
workload's arrays are ml_dtypes' (``host_dtypes``: numpy has neither)."""

from __future__ import annotations

import numpy as np

from . import epilogue
from .conv_weights import TO_HWIO
from .dense import DenseWorkload
from .conv2d import Conv2dWorkload
from .host_dtypes import ML_DTYPES, host_dtype


def as_operand(array: np.ndarray, workload, dtype: str | None = None) -> np.ndarray:
    """An input in fp32, rounded as the kernel's Tensor Core operands hold it: to ``dtype`` (default
    the workload's) where that is bf16 or fp8, else to fp16 (fp32 input is cast to fp16 copies
    first).  Exact for arrays already of that dtype."""
    rounding = ML_DTYPES.get(dtype or workload.dtype, np.float16)
    return np.asarray(array).astype(rounding).astype(np.float32)


def random_inputs(workload: Conv2dWorkload, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Random data and weights (never zeros), scaled so outputs stay O(1) in fp16, then the
    epilogue's inputs."""
    rng = np.random.default_rng(seed)
    fan_in = workload.kernel_h * workload.kernel_w * workload.in_channels // workload.groups
    dtype = host_dtype(workload.dtype)
    data = rng.uniform(-1.0, 1.0, workload.data_shape).astype(dtype)
    weight = (rng.uniform(-1.0, 1.0, workload.weight_shape) / np.sqrt(fan_in)).astype(dtype)
    return data, weight, *epilogue.random_inputs(workload, rng)  # drawn last: operands as if plain


def conv2d_reference(workload: Conv2dWorkload, data: np.ndarray, weight: np.ndarray,
                     *epilogue_inputs: np.ndarray) -> np.ndarray:
    """NHWC x HWIO -> NHWC in float32 (inputs rounded to fp16 or bf16 first, as the kernel does:
    ``as_operand``), through the workload's epilogue; the weight in the workload's layout, each
    group's output channels from its input channels."""
    wl = workload
    x = as_operand(data, wl)
    w = as_operand(np.transpose(weight, TO_HWIO[wl.weight_layout]), wl)
    g, cg, kg = wl.groups, wl.in_channels // wl.groups, wl.out_channels // wl.groups
    top, left, bottom, right = wl.padding
    x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    (sh, sw), (dh, dw) = wl.stride, wl.dilation
    oh, ow = wl.out_height, wl.out_width
    out = np.zeros(wl.out_shape, np.float32)
    for r in range(wl.kernel_h):
        for s in range(wl.kernel_w):
            patch = x[:, r * dh: r * dh + (oh - 1) * sh + 1: sh, s * dw: s * dw + (ow - 1) * sw + 1: sw, :]
            if g == 1:
                out += (patch.reshape(-1, wl.in_channels) @ w[r, s]).reshape(out.shape)
                continue
            rows = patch.reshape(-1, g, cg)  # [pixel, group, channel] @ the group's [channel, out]
            taps = w[r, s].reshape(cg, g, kg).transpose(1, 0, 2)
            out += np.einsum("pgc,gck->pgk", rows, taps).reshape(out.shape)
    return epilogue.reference(wl, out, *epilogue_inputs)


def dense_inputs(workload: DenseWorkload, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Random A and weight (never zeros), scaled so outputs stay O(1) in fp16, then (fp8) the
    per-tensor scales and the epilogue's inputs."""
    rng = np.random.default_rng(seed)
    if workload.scaled:
        return _fp8_inputs(workload, rng)
    dtype = host_dtype(workload.dtype)
    data = rng.uniform(-1.0, 1.0, workload.a_shape).astype(dtype)
    weight = (rng.uniform(-1.0, 1.0, workload.b_shape) / np.sqrt(workload.k)).astype(dtype)
    return data, weight, *epilogue.random_inputs(workload, rng)  # drawn last: operands as if plain


def _fp8_inputs(workload: DenseWorkload, rng) -> tuple[np.ndarray, ...]:
    """fp8 operands as a quantized model holds them: values spread over fp8's range rather than
    the tiny ones of a 1/sqrt(K) weight (subnormal in e4m3), the scales bringing the output back to
    O(1): scale_a * scale_b * sqrt(K) * 4/3 (A's and B's RMS) is ~0.3.  Scales != 1, so a kernel that
    drops one is wrong; then the epilogue's inputs."""
    data = rng.uniform(-4.0, 4.0, workload.a_shape).astype(host_dtype(workload.dtype))
    weight = rng.uniform(-1.0, 1.0, workload.b_shape).astype(host_dtype(workload.weight_dtype))
    scale_a = rng.uniform(0.2, 0.3, (1,)).astype(np.float32)
    scale_b = (rng.uniform(0.5, 1.5, (1,)) / np.sqrt(workload.k)).astype(np.float32)
    return data, weight, scale_a, scale_b, *epilogue.random_inputs(workload, rng)


def dense_reference(workload: DenseWorkload, data: np.ndarray, weight: np.ndarray,
                    *inputs: np.ndarray) -> np.ndarray:
    """A @ B (B = weight, or its transpose for ``b=nk``) in float32, inputs rounded to fp16, bf16 or
    fp8 (``as_operand``), times scale_a * scale_b for fp8 (the first two of ``inputs``; the product in
    fp32, as the kernels and torch._scaled_mm take it), through the workload's epilogue (the rest)."""
    a = as_operand(data, workload)
    b = as_operand(weight, workload, workload.weight_dtype)
    acc = a @ (b if workload.b_layout == "kn" else b.T)
    if workload.scaled:
        (scale_a, scale_b), inputs = inputs[:2], inputs[2:]
        acc = acc * (np.float32(scale_a[0]) * np.float32(scale_b[0]))
    return epilogue.reference(workload, acc, *inputs)
