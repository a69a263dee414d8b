"""The ``wgmma`` path's intrinsic (Hopper, compiled for sm_90a): a warpgroup's wgmma.mma_async on
shared-memory descriptors, as a TensorIR intrinsic whose implementation calls the device
function ``wgmma_source`` writes, and the call that drains the groups in flight."""

from __future__ import annotations

import tvm
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from .operand_layout import COL_MAJOR, ROW_MAJOR, b_tag
from .intrinsics import _PREFIX, _REGISTERING, MMA_TILE, _fragment_index, dtype_tag
from .wgmma_source import WGMMA_ATOM, WGMMA_K, WGMMA_M, wgmma_drain_source, wgmma_name, wgmma_source


def _wgmma(n: int, smem_scope: str, b_layout: str = ROW_MAJOR, in_flight: bool = False,
           dtype: str = "float16"):
    """C[16 x n] (this warp's rows of a warpgroup slab) += A[16 x 64] @ B[64 x n] (fp16 or bf16)."""
    from tvm.backend.cuda.op import cuda_func_call

    atoms = n // WGMMA_ATOM
    if b_layout == COL_MAJOR:  # [n][64 k]
        b_shape, b_index, atom_bytes = (n, WGMMA_K), (lambda j, k: (j, k)), (lambda stride: 0)
    else:  # 64-column atoms [n / 64][64 k][64 n], the atom stride in bytes
        b_shape, b_index = (atoms, WGMMA_K, WGMMA_ATOM), (lambda j, k: (j // WGMMA_ATOM, k, j % WGMMA_ATOM))
        atom_bytes = lambda stride: stride * 2  # noqa: E731
    b_whole = tuple(slice(0, extent) for extent in b_shape)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (MMA_TILE, WGMMA_K), dtype, align=64, offset_factor=1, scope=smem_scope)
        B = T.match_buffer(b, b_shape, dtype, align=64, offset_factor=1, scope=smem_scope)
        C = T.match_buffer(c, (MMA_TILE, n), "float32", align=64, offset_factor=MMA_TILE,
                           scope="wmma.accumulator")
        with T.sblock("root"):
            T.reads(C[0:MMA_TILE, 0:n], A[0:MMA_TILE, 0:WGMMA_K], B[b_whole])
            T.writes(C[0:MMA_TILE, 0:n])
            for i, j, k in T.grid(MMA_TILE, n, WGMMA_K):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    b_at = T.meta_var(b_index(vj, vk))
                    C[vi, vj] = C[vi, vj] + T.Cast("float32", A[vi, vk]) * T.Cast("float32", B[b_at])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        a1 = T.int32()
        a0 = T.int32()
        b2 = T.int32()
        b1 = T.int32()
        b0 = T.int32()
        c1 = T.int32()
        c0 = T.int32()
        A = T.match_buffer(a, (MMA_TILE, WGMMA_K), dtype, align=64, offset_factor=1, scope=smem_scope,
                           strides=[a1, a0])
        B = T.match_buffer(b, b_shape, dtype, align=64, offset_factor=1,
                           scope=smem_scope, strides=[b2, b1, b0][-len(b_shape):])
        C = T.match_buffer(c, (MMA_TILE, n), "float32", align=64, offset_factor=MMA_TILE,
                           scope="wmma.accumulator", strides=[c1, c0])
        with T.sblock("root"):
            T.reads(C[0:MMA_TILE, 0:n], A[0:MMA_TILE, 0:WGMMA_K], B[b_whole])
            T.writes(C[0:MMA_TILE, 0:n])
            # The instruction reads the warpgroup's 64 rows: from this warp's 16 rows back to
            # the first of its slab (the template stores the four warps' rows as one slab).
            T.evaluate(cuda_func_call(
                wgmma_name(n, b_layout, in_flight, dtype), C.data, _fragment_index(C, c1, MMA_TILE, MMA_TILE),
                A.access_ptr("r", offset=-(A.elem_offset // (MMA_TILE * a1) % (WGMMA_M // MMA_TILE))
                             * MMA_TILE * a1),
                B.access_ptr("r"), atom_bytes(b2), source_code=wgmma_source(n, b_layout, in_flight, dtype)))

    return desc, impl


def wgmma_intrinsic(n: int, smem_scope: str = "shared.dyn", b_layout: str = ROW_MAJOR,
                    in_flight: bool = False, dtype: str = "float16") -> str:
    """Register (once per process) and name the wgmma intrinsic for warpgroup tiles n wide,
    B's tile in 64-column atoms (row_major) or [n][k] rows (col_major); ``in_flight``: its
    group still runs when the call returns (``wgmma_drain`` waits for the last one); ``dtype``:
    the operands' (float16, bfloat16)."""
    name = f"{_PREFIX}_wgmma_m64n{n}k64_{smem_scope.replace('.', '_')}{b_tag(b_layout)}{dtype_tag(dtype)}"
    name += "_in_flight" if in_flight else ""
    with _REGISTERING:
        try:
            TensorIntrin.get(name)
        except Exception:  # not registered yet in this process
            TensorIntrin.register(name, *_wgmma(n, smem_scope, b_layout, in_flight, dtype))
    return name


def wgmma_drain(accumulators, fragments: int):
    """The call of ``wgmma_drain_source`` on ``accumulators`` (a wmma.accumulator buffer)."""
    from tvm.backend.cuda.op import cuda_func_call

    name, source = wgmma_drain_source(fragments)
    return tvm.tirx.Evaluate(cuda_func_call(name, accumulators, source_code=source))
