"""The ``tc_autotune`` operator library: ``tc_autotune::conv2d`` and ``tc_autotune::dense``
registered with ``torch.library`` (schemas, the CUDA implementations, fake implementations for
tracing, an autograd kernel that refuses a backward).  The ops' layouts and the eager launch path
behind them are ``ops.py``'s; importing ``tc_autotune.pytorch`` registers them."""

from __future__ import annotations

import sys

import torch

from ..workloads.conv_weights import TO_HWIO
from .ops import check_activation, conv2d_eager, dense_eager

# Defined with torch.library's schema API rather than ``custom_op``: a compiled graph without
# CUDA graphs (torch.compile's default mode) calls the op once per layer per forward, and
# custom_op's Python wrappers cost ~30 us per call on the GPU machine against ~4 us for a
# plain dispatcher kernel.  What custom_op would add is kept: a fake implementation, and an
# autograd kernel that refuses to run where a gradient is wanted (the kernels have no backward).
_LIB = torch.library.Library("tc_autotune", "DEF")
_LIB.define("conv2d(Tensor data, Tensor weight, Tensor? scale, Tensor? bias, Tensor? residual, int[] stride, "
            "int[] padding, int[] dilation, str activation, ScalarType out_dtype, int groups=1, "
            "str weight_layout=\"HWIO\") -> Tensor")
# scale_a, scale_b: fp8's per-tensor scales, last and optional so the schema's calls before fp8 hold
_LIB.define("dense(Tensor a, Tensor weight, Tensor? scale, Tensor? bias, Tensor? residual, str activation, "
            "ScalarType out_dtype, Tensor? scale_a=None, Tensor? scale_b=None) -> Tensor")


def _conv2d_impl(data, weight, scale, bias, residual, stride, padding, dilation, activation, out_dtype, groups=1,
                 weight_layout="HWIO"):
    """NHWC conv2d with a fused epilogue on a tuned Tensor Core kernel (see the module)."""
    check_activation(activation)
    return _uncompiled(conv2d_eager)(data, weight, scale, bias, residual, stride, padding, dilation, activation,
                                     out_dtype, out=None, fallback=True, static_key=None, groups=groups,
                                     weight_layout=weight_layout)


def _dense_impl(a, weight, scale, bias, residual, activation, out_dtype, scale_a=None, scale_b=None):
    """``act(a @ weight.T * scale + bias + residual)`` on a tuned Tensor Core kernel."""
    check_activation(activation)
    return _uncompiled(dense_eager)(a, weight, scale, bias, residual, activation, out_dtype, out=None,
                                    fallback=True, scale_a=scale_a, scale_b=scale_b)


def _conv2d_fake(data, weight, scale, bias, residual, stride, padding, dilation, activation, out_dtype, groups=1,
                 weight_layout="HWIO"):
    check_activation(activation)
    n, h, w, _ = data.shape
    r, s, _, k = (weight.shape[axis] for axis in TO_HWIO[weight_layout])
    top, left, bottom, right = padding
    oh = (h + top + bottom - dilation[0] * (r - 1) - 1) // stride[0] + 1
    ow = (w + left + right - dilation[1] * (s - 1) - 1) // stride[1] + 1
    return data.new_empty((n, oh, ow, k), dtype=out_dtype)


def _dense_fake(a, weight, scale, bias, residual, activation, out_dtype, scale_a=None, scale_b=None):
    check_activation(activation)
    return a.new_empty((*a.shape[:-1], weight.shape[0]), dtype=out_dtype)


def _inference_only(name: str):
    """The op's autograd kernel: runs the op below autograd, or refuses where a gradient of
    the result would be wanted (it would silently be missing)."""
    op = getattr(torch.ops.tc_autotune, name).default

    def autograd_kernel(*args):
        if torch.is_grad_enabled():
            for arg in args:
                if isinstance(arg, torch.Tensor) and arg.requires_grad:
                    raise RuntimeError(f"tc_autotune::{name} has no backward (inference kernels): call it under "
                                       "torch.no_grad() or torch.inference_mode(), or on tensors that do not "
                                       "require grad")
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args)

    return autograd_kernel


def _register(op_name: str, impl, fake) -> None:
    _LIB.impl(op_name, impl, "CompositeExplicitAutograd")
    _LIB.impl(op_name, _inference_only(op_name), "Autograd")
    torch.library.register_fake(f"tc_autotune::{op_name}", fake, lib=_LIB)


_register("conv2d", _conv2d_impl, _conv2d_fake)
_register("dense", _dense_impl, _dense_fake)


_UNCOMPILED: dict = {}


def _uncompiled(func):
    """``func`` where dynamo never traces it.  A compiled graph calls the op's implementation
    with dynamo's frame hook still set, and its first call for a shape builds a kernel (logs,
    files, TVM: nothing to trace; a generator there ends a ``fullgraph=True`` compile).  Only
    where dynamo is loaded already (importing it costs seconds)."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return func
    if func not in _UNCOMPILED:
        _UNCOMPILED[func] = dynamo.disable(func, recursive=True)
    return _UNCOMPILED[func]
