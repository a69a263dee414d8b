"""Probe configs: a few (workload, config) pairs per Tensor Core path that tests compile with nvcc,
read the generated code of, and run on the GPU (``tests/test_dense.py``, ``test_codegen.py``,
``test_gpu_dense.py``, ``test_gpu_wgmma_in_flight.py``, ``test_tma_probe.py``, ``test_bf16.py``,
``test_gpu_bf16.py``, ``test_fp8.py``, ``test_gpu_fp8.py``).

They once fingerprinted the generator for a hand-bumped template version; records are keyed by
hashes of the code and of the template's sources now (``database.record``), so only the sets
that tests still use for what the kernels do are left.  No TVM here.
"""

from __future__ import annotations

from .knobs import TcGemmConfig
from ...workloads.names import get

_BASE = dict(block_row_warps=2, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=2, chunk=2,
             wmma="m16n16k16", offset_a=8, offset_b=8, offset_c=4, vec_a=8, vec_b=8, vec_c=4)
_SWIZZLED = dict(offset_a=0, offset_b=0)
_WGMMA = dict(_SWIZZLED, intrinsic="wgmma", block_row_warps=4, chunk=4)
PROBE_ARCH = "sm_90"

# Dense: both weight layouts, every WMMA shape and intrinsic path on the (N, K) weight
# (vector loads along K of 16, 8 and 2 bytes: K = 264, 100, 9), batched A, M=16 with
# split-K, fp16 output.
DENSE_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=200,n=136,k=264", {}),
    ("dense:m=200,n=136,k=264,b=nk,out_dtype=float16", dict(stages=2)),
    ("dense:batch=2,m=100,n=136,k=264,b=nk", dict(_SWIZZLED, intrinsic="mma", stages=3, frag_buffers=2)),
    ("dense:m=16,n=4096,k=4096,b=nk", dict(wmma="m8n32k16", block_row_warps=1, warp_row_tiles=2, split_k=8,
                                           stages=2)),
    ("dense:m=256,n=256,k=512", dict(_WGMMA, warp_col_tiles=4, stages=2)),
    ("dense:m=256,n=256,k=512,b=nk", dict(_WGMMA, warp_col_tiles=4, stages=2)),
    ("dense:m=96,n=72,k=100,b=nk", dict(wmma="m32n8k16", warp_row_tiles=1, warp_col_tiles=4, vec_a=4, vec_b=4)),
    ("dense:m=40,n=24,k=9,b=nk", dict(vec_a=1, vec_b=1, block_row_warps=1, block_col_warps=1, chunk=1)),
)

# wgmma groups in flight across k-steps (wgmma_in_flight=1): 2-4 stages, split-K, both
# warpgroup widths, fp16 output, fp32 input, a fused epilogue; each task's apart.
_IN_FLIGHT = dict(_WGMMA, wgmma_in_flight=1)
IN_FLIGHT_PROBES: tuple[tuple[str, dict], ...] = (
    ("rfc-3x3-b256", dict(_IN_FLIGHT, warp_col_tiles=8, block_col_warps=1, stages=3)),
    ("tutorial", dict(_IN_FLIGHT, warp_col_tiles=4, stages=2)),
    ("resnet50-res5-3x3-512-512-s2-b1", dict(_IN_FLIGHT, warp_col_tiles=4, warp_row_tiles=1, split_k=4, stages=4)),
    ("n=3,h=17,w=23,c=40,k=72,r=5,s=3,stride=2x1,pad=2x1,dilation=2,out_dtype=float16",
     dict(_IN_FLIGHT, warp_col_tiles=4, warp_row_tiles=1, block_col_warps=1, stages=2)),
    ("n=8,h=14,c=256,k=256,r=3,pad=1,dtype=float32", dict(_IN_FLIGHT, warp_col_tiles=4, stages=3)),
    ("rfc-3x3-b256-bias_residual_relu", dict(_IN_FLIGHT, warp_col_tiles=4, warp_row_tiles=4, stages=3)),
)
DENSE_IN_FLIGHT_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=256,n=256,k=512", dict(_IN_FLIGHT, warp_col_tiles=4, stages=3)),
    ("dense:m=256,n=256,k=512,b=nk,out_dtype=float16", dict(_IN_FLIGHT, warp_col_tiles=4, stages=2)),
    ("dense:m=64,n=1024,k=4096,b=nk", dict(_IN_FLIGHT, warp_row_tiles=1, warp_col_tiles=8, block_col_warps=1,
                                           split_k=4, stages=3)),
)

# bf16 operands (dtype=bfloat16) on every path, fp32 and bf16 output, fused epilogues: WMMA at its
# three shapes and mma.sync (sm_80+), wgmma with groups waited for and in flight, and the
# warp-specialized kernel with A by TMA boxes, gathered, by TMA im2col and C by TMA stores (sm_90a).
_WS = dict(_IN_FLIGHT, block_row_warps=4, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, offset_c=0,
           vec_c=1, stages=4, warp_specialized=1)
BF16_PROBES: tuple[tuple[str, dict], ...] = (
    ("n=2,h=14,c=64,k=128,r=3,pad=1,dtype=bfloat16", dict(stages=2)),
    ("dense:m=200,n=136,k=264,b=nk,dtype=bfloat16,out_dtype=bfloat16,epilogue=bias_gelu",
     dict(wmma="m8n32k16", block_row_warps=1, stages=2)),
    ("n=3,h=17,w=15,c=24,k=40,r=3,pad=1x2x0x1,dtype=bfloat16,out_dtype=bfloat16,epilogue=scale_bias_residual_relu",
     dict(wmma="m32n8k16", warp_row_tiles=1, warp_col_tiles=4)),
    ("n=2,h=14,c=64,k=128,r=3,pad=1,dtype=bfloat16,out_dtype=bfloat16",
     dict(_SWIZZLED, intrinsic="mma", stages=3, frag_buffers=2)),
    ("dense:batch=2,m=100,n=136,k=264,b=nk,dtype=bfloat16", dict(_SWIZZLED, intrinsic="mma", split_k=2, stages=2)),
    ("n=4,h=14,c=128,k=128,r=3,pad=1,dtype=bfloat16,out_dtype=bfloat16,epilogue=bias_relu",
     dict(_WGMMA, warp_col_tiles=4, stages=2)),
    ("dense:m=256,n=256,k=512,b=nk,dtype=bfloat16", dict(_IN_FLIGHT, warp_col_tiles=4, stages=3)),
    ("n=4,h=14,c=128,k=256,r=3,pad=1,dtype=bfloat16", _WS),
    ("dense:m=130,n=192,k=520,b=nk,dtype=bfloat16,out_dtype=bfloat16,epilogue=bias_residual_gelu",
     dict(_WS, warp_col_tiles=4, consumers_along_m=1, tma_store=1)),
    ("n=2,h=9,w=11,c=16,k=128,r=3,pad=2,dilation=2,dtype=bfloat16,out_dtype=bfloat16,epilogue=bias_residual_relu",
     dict(_WS, warp_col_tiles=4, stages=3)),
    ("n=3,h=17,w=23,c=64,k=128,r=3,s=5,pad=1x2,stride=2x1,dtype=bfloat16,out_dtype=bfloat16",
     dict(_WS, block_col_warps=1, warp_specialized=2, tma_im2col=1)),
)


# fp8 dense (e4m3 A, e4m3 or e5m2 B, per-tensor scales): the warp-specialized kernel only, at each
# output dtype, a fused epilogue, split-K, the persistent kernel with TMA stores, ping-pong with
# setmaxnreg, consumers along M with B multicast, a batch, a single token (M=1) and an odd N (sm_90a).
_WS_FP8 = dict(_WS, block_col_warps=1, warp_row_tiles=1)
FP8_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:batch=2,m=40,n=192,k=1024,b=nk,dtype=float8_e4m3,b_dtype=float8_e5m2,out_dtype=float16,epilogue=bias_gelu",
     dict(_WS_FP8, warp_col_tiles=8, split_k=2)),
    ("dense:m=256,n=256,k=1024,b=nk,dtype=float8_e4m3,out_dtype=float32",
     dict(_WS, warp_specialized=2, tma_store=1)),
    ("dense:m=300,n=512,k=1024,b=nk,dtype=float8_e4m3,out_dtype=bfloat16,epilogue=bias_residual_relu",
     dict(_WS, block_col_warps=1, warp_specialized=2, ping_pong=1, setmaxnreg=1, tma_store=1)),
    ("dense:m=512,n=256,k=256,b=nk,dtype=float8_e4m3,out_dtype=float16",
     dict(_WS, consumers_along_m=1, multicast_b=1, wgmma_in_flight=0, stages=2)),
    ("dense:m=1,n=4096,k=4096,b=nk,dtype=float8_e4m3,b_dtype=float8_e5m2,out_dtype=bfloat16",
     dict(_WS_FP8, warp_col_tiles=4, split_k=8)),
    ("dense:m=130,n=99,k=208,b=nk,dtype=float8_e4m3,out_dtype=float32,epilogue=scale_bias_relu",
     dict(_WS_FP8, block_col_warps=2, warp_col_tiles=4, stages=2)),
)


# swap_ab (a small-M dense computed as C^T = B^T A^T, the weight's rows the wgmma's M side): fp8 and
# 16-bit operands, 8-64 tokens a block (a half-fragment wgmma at 8), the deep ring, split-K, persistent,
# two consumers along the weight rows or along K (an odd count of k-steps), an e5m2 B, a batch, an odd
# N, fused epilogues (sm_90a).
_SWAP = dict(_WS_FP8, warp_col_tiles=4, swap_ab=8)
SWAP_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=16,n=4096,k=4096,b=nk,dtype=float8_e4m3,out_dtype=bfloat16,epilogue=bias", _SWAP),
    ("dense:m=40,n=1088,k=1024,b=nk,out_dtype=float16,epilogue=bias", dict(_SWAP, swap_ab=16, split_k=2)),
    ("dense:m=1,n=4096,k=4096,b=nk,dtype=float8_e4m3,b_dtype=float8_e5m2,out_dtype=float32",
     dict(_SWAP, warp_specialized=2)),
    ("dense:batch=2,m=20,n=520,k=1040,b=nk,dtype=bfloat16,out_dtype=bfloat16,epilogue=bias_residual_gelu",
     dict(_SWAP, swap_ab=64, block_col_warps=2, warp_row_tiles=2, consumers_along_m=1, stages=2)),
    ("dense:m=40,n=99,k=208,b=nk,dtype=float8_e4m3,out_dtype=float16,epilogue=scale_bias_relu",
     dict(_SWAP, swap_ab=16, wgmma_in_flight=0, stages=2)),
    ("dense:m=16,n=520,k=1040,b=nk,out_dtype=float16,epilogue=bias_gelu", dict(_SWAP, block_col_warps=2)),
    ("dense:m=40,n=1088,k=1024,b=nk,dtype=float8_e4m3,out_dtype=bfloat16,epilogue=scale_bias_relu",
     dict(_SWAP, swap_ab=16, block_col_warps=2, stages=3)),
)


def probe_kernels(probes):
    """The probes as (workload, config) pairs: each probe's knobs are changes from ``_BASE``."""
    return [(get(name), TcGemmConfig(**{**_BASE, **changes})) for name, changes in probes]
