"""``tc.conv2d`` and ``tc.dense``: a tuned kernel called on arrays, the workload read from them.

The kernel of a workload is the one ``build`` would make with no config (best record of the
active logs, else zero-shot), taken from the disk cache (``build_cache``) and kept for the
process; for torch tensors, built with PDL as a model's layers are (``build_cache.model_pdl``).
torch tensors on a GPU take the cached launch of ``pytorch.ops`` (no workload is made or parsed
per call, and ``torch.compile`` sees the ``tc_autotune`` custom ops); numpy, TVM and other
DLPack arrays go through ``Kernel.__call__``.
"""

from __future__ import annotations

import functools

from . import build_cache
from .apply import active_logs, check_scales, dense_workload_of, is_fp8, workload_of
from ..workloads.epilogue import of_inputs as epilogue_of
from .kernel import _gpu_of, _is_torch, require_gpu


@functools.lru_cache(maxsize=64)
def _cached_kernel(workload, logs: tuple[tuple[str, bool], ...], pdl: bool = False):
    return build_cache.kernel(workload, logs=logs, pdl=pdl)


def conv2d(data, weight, stride=1, padding=0, dilation=1, out_dtype="float32", *,
           scale=None, bias=None, residual=None, activation=None, out=None, groups=1, weight_layout="HWIO"):
    """NHWC conv2d on Tensor Cores with the fused epilogue that the given ``scale``, ``bias``,
    ``residual`` and ``activation`` ("relu", "gelu") spell: the workload comes from the arrays,
    the kernel from the best record (built once per workload and log set).  ``weight`` is HWIO
    [R, S, C/G, K], or OIHW [K, C/G, R, S] / OHWI [K, R, S, C/G] as ``weight_layout`` says, read
    in place; ``groups``: a grouped conv.  Returns ``out`` (written in place) or a new torch
    tensor for torch inputs, else a TVM tensor."""
    if _on_torch_gpu(data):  # the cached launch: no spec parsed, no workload made per call
        return _torch_ops().conv2d_nhwc(data, weight, scale, bias, residual, stride, padding, dilation,
                                        activation, out_dtype, out=out, fallback=False, groups=groups,
                                        weight_layout=weight_layout)
    fused = epilogue_of(scale, bias, residual, activation)
    workload = workload_of(data, weight, stride, padding, dilation, out_dtype, str(fused), groups, weight_layout)
    return _run(workload, out, data, weight, scale, bias, residual)


def dense(a, weight, *, weight_layout="nk", out_dtype="float32", scale=None, bias=None, residual=None,
          activation=None, out=None, scale_a=None, scale_b=None):
    """``a @ weight.T`` for an (N, K) ``weight`` (``weight_layout="nk"``, nn.Linear's) or
    ``a @ weight`` for a (K, N) one ("kn"), ``a`` (M, K) or (batch, M, K), with a fused
    epilogue, as ``conv2d``.  fp8 operands (float8_e4m3fn ``a``, float8_e4m3fn or float8_e5m2
    (N, K) ``weight``) need their per-tensor scales ``scale_a`` and ``scale_b`` (fp32, one
    element), applied before the epilogue, as ``torch._scaled_mm``."""
    if scale_a is not None or scale_b is not None or is_fp8(a):
        check_scales(a, scale_a, scale_b)
    if weight_layout == "nk" and len(a.shape) == 2 and _on_torch_gpu(a):
        return _torch_ops().dense_nk(a, weight, scale, bias, residual, activation, out_dtype, out=out,
                                     fallback=False, scale_a=scale_a, scale_b=scale_b)
    fused = epilogue_of(scale, bias, residual, activation)
    workload = dense_workload_of(a, weight, weight_layout, out_dtype, str(fused))
    return _run(workload, out, a, weight, scale_a, scale_b, scale, bias, residual)


@functools.cache
def _torch_ops():
    """``tc_autotune.pytorch.ops``, imported on first use (it imports torch), then looked up
    for a few tens of nanoseconds instead of an import statement's ~0.4 us per call."""
    from ..pytorch import ops

    return ops


def _on_torch_gpu(tensor) -> bool:
    return getattr(tensor, "is_cuda", False) and _is_torch(tensor)


def _run(workload, out, *inputs):
    """The cached kernel of ``workload`` on the operands and the epilogue's given inputs."""
    if _gpu_of(inputs) is None:
        require_gpu()  # host operands go to GPU 0: say there is none before building a kernel
    # torch tensors: a model's call, launched with PDL as its layers' (``pytorch.ops``)
    pdl = any(_is_torch(x) for x in (*inputs, out)) and build_cache.model_pdl()
    kernel = _cached_kernel(workload, active_logs(), pdl)
    return kernel(*(x for x in inputs if x is not None), out=out)
