"""PyTorch operators: ``tc_autotune::conv2d`` and ``tc_autotune::dense``, and their eager launch path.

Both are ``torch.library`` custom ops with fake implementations, so ``torch.compile`` traces
them without graph breaks (Inductor calls them as extern kernels) and ``mode="reduce-overhead"``
captures their launches in its CUDA graphs.  Their layouts are the kernels' own:

    conv2d(data NHWC, weight, scale?, bias?, residual? NHWC, stride[2], padding[4],
           dilation[2], activation, out_dtype, groups=1, weight_layout="HWIO") -> NHWC
    dense(a (..., K), weight (N, K), scale?, bias?, residual? (..., N), activation, out_dtype,
          scale_a?, scale_b?) -> (..., N)

``scale``/``bias`` are fp32 per output channel; ``activation`` is "none", "relu" or "gelu" (the
tanh approximation); the epilogue is ``act(acc * scale + bias + residual)`` (``epilogue.py``).
Operands are fp16 or bf16 (fp32 too: cast to fp16 copies); ``conv2d_nhwc`` and ``dense_nk`` write
fp16, or bf16 for bf16 operands, unless told another ``out_dtype`` (bf16 operands: fp32 or bf16).
A conv's weight is read in place in the layout it comes in: HWIO [R, S, C/G, K], or OIHW
[K, C/G, R, S] (``weight_layout="OIHW"``: an ``nn.Conv2d``'s weight), which in channels_last
memory is read as OHWI through its permuted view (the same memory).  A depthwise conv
(``groups`` = C) is no Tensor Core case: PyTorch's conv runs it, counted as a fallback.

``dense`` also takes fp8 operands (``float8_e4m3fn`` a, ``float8_e4m3fn`` or ``float8_e5m2`` weight)
with their per-tensor scales ``scale_a`` and ``scale_b`` (fp32, one element, as ``torch._scaled_mm``):
``act(scale_a * scale_b * (a @ weight.T) * scale + bias + residual)``, bf16 unless told another
``out_dtype`` (fp32, fp16, bf16).

Eager code does not go through the dispatcher: ``conv2d_nhwc`` / ``dense_nk`` find the kernel's
``TorchLaunch`` in a dict by a cheap key (shapes, dtypes, device, epilogue, the active logs) and
launch it: a few microseconds of Python.  While dynamo traces they call the op instead.

The kernels are launched with Programmatic Dependent Launch on sm_90+ (each may start while the
one before it in the stream finishes: ``build_cache.model_pdl``; ``TC_AUTOTUNE_PDL=0`` turns it
off), read when a call's kernel is bound: nothing is added per call.

A call the kernels cannot serve (CPU tensors, a dtype or layout they cannot take in place, a
shape the template refuses) runs the same math with PyTorch's ops instead: correct, counted in
``fallbacks()`` and reported once per cause as a ``FallbackWarning``.
"""

from __future__ import annotations

import collections
import logging
import warnings
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from ..api import build_cache
from ..workloads import epilogue
from ..api.apply import check_scales, dense_workload_of, user_logs, workload_of
from ..workloads.conv_weights import DEPTHWISE, TO_HWIO
from .launch import TorchLaunch, dtype_name

log = logging.getLogger(__name__)

ACTIVATIONS = ("none", "relu", "gelu")


class FallbackWarning(UserWarning):
    """A call ran PyTorch's ops instead of a tuned kernel (said once per cause)."""


_FALLBACKS: collections.Counter = collections.Counter()


def fallbacks() -> dict[tuple[str, str], int]:
    """{(op, reason): calls} of the calls that ran PyTorch's ops instead of a kernel."""
    return dict(_FALLBACKS)


def reset_fallbacks() -> None:
    _FALLBACKS.clear()


def _fall_back(op: str, reason: str, what: str = "runs PyTorch's ops instead") -> None:
    """Count a call that ``what`` (default: ran PyTorch's ops) because of ``reason``; said once."""
    _FALLBACKS[(op, reason)] += 1
    if _FALLBACKS[(op, reason)] == 1:
        log.warning("tc_autotune::%s %s: %s", op, what, reason)
        warnings.warn(f"tc_autotune::{op} {what}: {reason} (counted in "
                      "tc_autotune.pytorch.fallbacks(); said once)", FallbackWarning, stacklevel=3)


def copied_weight(reason: str) -> None:
    """Count a conv weight that no kernel path reads in place, so a layer holds a copy."""
    _fall_back("conv2d", reason, "copies the weight")


# ---- the eager launch path ---------------------------------------------------------------------
_LAUNCHES: dict[tuple, TorchLaunch | ValueError] = {}
_is_compiling = torch.compiler.is_compiling


def clear_launches() -> None:
    """Forget every bound kernel (the next call looks the kernels up again)."""
    _LAUNCHES.clear()


def _bind(key: tuple, workload_of_call, device: torch.device) -> TorchLaunch | ValueError:
    """The kernel of ``workload_of_call()`` bound to ``device``, or the ValueError that says why
    no kernel serves these calls; cached under ``key`` either way."""
    try:
        if device.type != "cuda":
            raise ValueError(f"the tensors are on {device}: the kernels run on CUDA GPUs")
        found = TorchLaunch(build_cache.kernel(workload_of_call(), pdl=build_cache.model_pdl()), device)
    except ValueError as err:
        found = err
    _LAUNCHES[key] = found
    return found


def _hashable(value):
    return value if value.__class__ is int else tuple(value)


FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _default_out_dtype(operand) -> torch.dtype:
    """The output dtype when none is given: bf16 for bf16 and fp8 operands (bf16 ones write fp32 or
    bf16; fp8 ones a quantized model's activations, as its bf16 layers'), else fp16."""
    return torch.bfloat16 if operand.dtype == torch.bfloat16 or operand.dtype in FP8 else torch.float16


def conv2d_key(stride, padding, dilation, activation, out_dtype, groups=1, weight_layout="HWIO") -> tuple:
    """The part of a conv call's cache key that a layer fixes (``FusedConv2d`` makes it once),
    normalised to the form the op's calls under torch.compile spell it, so that a layer's
    eager calls and its op's calls share one bound kernel."""
    return (tuple(_pair(stride)), tuple(_quad(padding)), tuple(_pair(dilation)), activation or "none",
            _dtype(out_dtype), int(groups), weight_layout)


def in_place_weight(weight, weight_layout: str):
    """(tensor, layout) a kernel reads ``weight`` as, without a copy: an OIHW-shaped weight in
    channels_last memory (``nn.Conv2d.weight`` of a channels_last model) is its OHWI view; any
    other as it is (a non-contiguous one is then refused by the launch, naming it)."""
    if weight_layout == "OIHW" and not weight.is_contiguous() and weight.is_contiguous(
            memory_format=torch.channels_last):
        return weight.permute(0, 2, 3, 1), "OHWI"
    return weight, weight_layout


def conv2d_nhwc(data, weight, scale=None, bias=None, residual=None, stride=1, padding=0, dilation=1,
                activation=None, out_dtype=None, out=None, fallback=True, static_key=None, groups=1,
                weight_layout="HWIO"):
    """The conv2d kernel of these tensors (see the module), launched on torch's current stream:
    eager through the cached launch, under ``torch.compile`` as ``tc_autotune::conv2d``.  With
    ``fallback``, a call no kernel can serve runs PyTorch's ops (counted); without, it raises
    the ValueError that says why.  ``static_key``: ``conv2d_key`` of the other arguments.
    ``out_dtype`` None: fp16, bf16 for bf16 operands."""
    activation = activation or "none"
    out_dtype = out_dtype or _default_out_dtype(data)
    if _is_compiling():
        return torch.ops.tc_autotune.conv2d(data, weight, scale, bias, residual, _pair(stride),
                                            _quad(padding), _pair(dilation), activation, _dtype(out_dtype),
                                            groups, weight_layout)
    return conv2d_eager(data, weight, scale, bias, residual, stride, padding, dilation, activation, out_dtype, out,
                         fallback, static_key, groups, weight_layout)


def conv2d_eager(data, weight, scale, bias, residual, stride, padding, dilation, activation, out_dtype, out,
                  fallback, static_key, groups, weight_layout):
    """``conv2d_nhwc`` now, compiling or not: the op's implementation, which a backend may run mid-compile."""
    weight, layout = in_place_weight(weight, weight_layout)
    # The arguments as given make the key (normalising them costs more than the rest of the
    # call): two spellings of one conv are two keys bound to the same cached kernel.
    key = (static_key or (_hashable(stride), _hashable(padding), _hashable(dilation), activation, out_dtype,
                          groups, weight_layout),
           data.shape, data.dtype, data.device, weight.shape, layout, scale is None, bias is None, residual is None,
           user_logs())
    launch = _LAUNCHES.get(key)
    if launch is None:
        launch = _bind(key, lambda: _conv_workload(
            data, weight, stride, padding, dilation, dtype_name(out_dtype),
            str(epilogue.of_inputs(scale, bias, residual, None if activation == "none" else activation)),
            groups, layout), data.device)
    try:
        if launch.__class__ is not TorchLaunch:
            raise launch
        return launch(*_given(data, weight, scale, bias, residual), out=out)
    except ValueError as err:
        if not fallback:
            raise
        _fall_back("conv2d", str(err))
    result = conv2d_reference(data, weight, scale, bias, residual, _pair(stride), _quad(padding), _pair(dilation),
                              activation, _dtype(out_dtype), groups, layout)
    return result if out is None else out.copy_(result)


def _conv_workload(data, weight, stride, padding, dilation, out_dtype, fused, groups, layout):
    """``workload_of`` a conv call; a depthwise one's ValueError says why in words without its
    shape, so that it is reported once, whatever the layers."""
    if groups > 1 and groups == data.shape[-1]:
        raise ValueError(DEPTHWISE)
    return workload_of(data, weight, stride, padding, dilation, out_dtype, fused, groups, layout)


def _given(*tensors) -> list:
    return [t for t in tensors if t is not None]


def dense_nk(a, weight, scale=None, bias=None, residual=None, activation=None, out_dtype=None,
             out=None, fallback=True, scale_a=None, scale_b=None):
    """``act(a @ weight.T * scale + bias + residual)`` for an (N, K) weight (nn.Linear's) and an
    ``a`` of any leading dims (folded into M): as ``conv2d_nhwc``.  fp8 operands: times
    ``scale_a * scale_b`` first (see the module; one-element scales, 0-d ones viewed as such)."""
    activation = activation or "none"
    out_dtype = out_dtype or _default_out_dtype(a)
    if _is_compiling():  # the op's implementation checks the scales when it runs
        return torch.ops.tc_autotune.dense(a, weight, scale, bias, residual, activation, _dtype(out_dtype),
                                           scale_a, scale_b)
    return dense_eager(a, weight, scale, bias, residual, activation, out_dtype, out, fallback, scale_a, scale_b)


def dense_eager(a, weight, scale, bias, residual, activation, out_dtype, out, fallback, scale_a, scale_b):
    """``dense_nk`` run now, compiling or not (as ``conv2d_eager``)."""
    if scale_a is not None or scale_b is not None or a.dtype in FP8:
        check_scales(a, scale_a, scale_b)
        scale_a, scale_b = scale_a.reshape(1), scale_b.reshape(1)
    key = ("dense", a.shape, a.dtype, a.device, weight.shape, weight.dtype, activation, _dtype(out_dtype),
           scale_a is None, scale is None, bias is None, residual is None, user_logs())
    flat, res, flat_out = _rows(a), _rows(residual), _rows(out)
    launch = _LAUNCHES.get(key)
    if launch is None:
        launch = _bind(key, lambda: dense_workload_of(
            flat, weight, "nk", dtype_name(out_dtype),
            str(epilogue.of_inputs(scale, bias, residual, None if activation == "none" else activation))),
            a.device)
    try:
        if launch.__class__ is not TorchLaunch:
            raise launch
        result = launch(*_given(flat, weight, scale_a, scale_b, scale, bias, res), out=flat_out)
        return out if out is not None else result if a.dim() == 2 else result.view(*a.shape[:-1], -1)
    except ValueError as err:
        if not fallback:
            raise
        _fall_back("dense", str(err))
    result = dense_reference(a, weight, scale, bias, residual, activation, _dtype(out_dtype), scale_a, scale_b)
    return result if out is None else out.copy_(result)


def _rows(tensor):
    """A contiguous tensor's (rows, last dim) view; anything else as it is (the launch then
    refuses it, naming why)."""
    if tensor is None or tensor.dim() == 2 or not tensor.is_contiguous():
        return tensor
    return tensor.view(-1, tensor.shape[-1])


def _pair(value) -> list[int]:
    return [int(value)] * 2 if isinstance(value, int) else [int(v) for v in value]


def _quad(value) -> list[int]:
    """Padding as (top, left, bottom, right), as workloads spell it."""
    values = [int(value)] if isinstance(value, int) else [int(v) for v in value]
    return values * 4 if len(values) == 1 else values * 2 if len(values) == 2 else values


def _dtype(value) -> torch.dtype:
    return value if isinstance(value, torch.dtype) else getattr(torch, value)


# ---- PyTorch's ops: the fallback and the reference ----------------------------------------------
TORCH_OPS = SimpleNamespace(maximum=torch.clamp_min, tanh=torch.tanh, let=lambda x, f: f(x))


def _epilogue(acc, channel_dim: int, scale, bias, residual, activation):
    """``epilogue.Epilogue.apply`` (the one formula) on an fp32 torch tensor."""
    fused = epilogue.Epilogue(scale is not None, bias is not None, residual is not None,
                              None if activation == "none" else activation)
    shape = [1] * acc.dim()
    shape[channel_dim] = -1
    per_channel = {name: t.float().view(shape) for name, t in (("scale", scale), ("bias", bias)) if t is not None}
    return fused.apply(acc, TORCH_OPS, residual=None if residual is None else residual.float(), **per_channel)


def _compute_dtype(tensor) -> torch.dtype:
    # CPUs lack fast fp16 convs; fp8 has no F.linear (its values are exact in fp32)
    return torch.float32 if tensor.device.type == "cpu" or tensor.dtype in FP8 else tensor.dtype


def conv2d_reference(data, weight, scale, bias, residual, stride, padding, dilation, activation, out_dtype,
                     groups=1, weight_layout="HWIO"):
    """The op's math with PyTorch's ops: NHWC in and out (channels last, so no copy either way
    on the GPU), the weight as OIHW from its layout, the epilogue in fp32 as the kernels do it."""
    compute = _compute_dtype(data)
    x = data.permute(0, 3, 1, 2).to(compute)
    w = weight.permute(*(TO_HWIO[weight_layout][axis] for axis in (3, 2, 0, 1))).to(compute)
    top, left, bottom, right = padding
    if (top, left) != (bottom, right):
        x, pad = F.pad(x, (left, right, top, bottom)), (0, 0)
    else:
        pad = (top, left)
    acc = F.conv2d(x, w, None, stride, pad, dilation, groups).float()
    res = None if residual is None else residual.permute(0, 3, 1, 2)
    out = _epilogue(acc, 1, scale, bias, res, activation).to(out_dtype)
    return out.permute(0, 2, 3, 1).contiguous()


def dense_reference(a, weight, scale, bias, residual, activation, out_dtype, scale_a=None, scale_b=None):
    compute = _compute_dtype(a)
    acc = F.linear(a.to(compute), weight.to(compute)).float()
    if scale_a is not None:  # fp8: the per-tensor scales before the epilogue, as the kernels
        acc = acc * (scale_a.float() * scale_b.float())
    return _epilogue(acc, acc.dim() - 1, scale, bias, residual, activation).to(out_dtype)


def check_activation(activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
