"""Tensor Core intrinsics for the template: the registry of the intrinsics it defines, and WMMA of
every fragment shape (``mma_sync``: ldmatrix + mma.sync; ``wgmma_intrinsic``: Hopper's warpgroup MMA).
Each comes for a B tile stored [k][n] in shared memory (row-major, N contiguous) and one stored
[n][k] (column-major, K contiguous: an nn.Linear weight's layout, copied with vector loads along K),
and for fp16 or bf16 operands (``dtype``; sm_80+ for bf16), always accumulating in fp32.

TVM 0.27 registers only 16x16x16 WMMA intrinsics, and importing the module that
does so parses ~100 TVMScript functions (~25 s).  These modules define the five
intrinsics a Tensor Core GEMM needs (fill, load A, load B, mma, store), for WMMA
at any (m, n, k) and for ldmatrix/mma.sync at 16x16x16, and register them lazily
in TVM's intrinsic registry, which is the only global state the package keeps.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from .operand_layout import COL_MAJOR, ROW_MAJOR, b_tag

_PREFIX = "tc_autotune"


@dataclass(frozen=True)
class IntrinsicNames:
    """Registered names of one intrinsic family."""

    fill: str
    load_a: str
    load_b: str
    mma: str
    store: str


def _fragment_index(buf, stride, rows, cols):
    """Which fragment of a fragment-scope buffer ``buf`` (by its element offset) is meant."""
    return buf.elem_offset // stride // rows * (stride // cols) + buf.elem_offset % stride // cols


def dtype_tag(dtype: str) -> str:
    """What an intrinsic's registered name adds for its operands' dtype: nothing for fp16 (the
    names from before bf16), "_bf16" for bf16."""
    return {"float16": "", "bfloat16": "_bf16"}[dtype]


def _load(rows: int, cols: int, mnk: tuple[int, int, int], scope_in: str, scope_frag: str,
          layout: str = ROW_MAJOR, dtype: str = "float16"):
    """A (rows x cols) tile of shared memory into a fragment; ``layout`` says which of the
    fragment's axes the tile's rows are (col_major B: a [n][k] tile)."""
    m, n, k = mnk

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        src = T.match_buffer(a, (rows, cols), dtype, align=64, offset_factor=cols, scope=scope_in)
        dst = T.match_buffer(c, (rows, cols), dtype, align=64, offset_factor=cols, scope=scope_frag)
        with T.sblock("root"):
            T.reads(src[0:rows, 0:cols])
            T.writes(dst[0:rows, 0:cols])
            for i, j in T.grid(rows, cols):
                with T.sblock("load"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    dst[vi, vj] = src[vi, vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, c: T.handle) -> None:
        s1 = T.int32()
        s0 = T.int32()
        d1 = T.int32()
        d0 = T.int32()
        src = T.match_buffer(a, (rows, cols), dtype, align=64, offset_factor=cols,
                             scope=scope_in, strides=[s1, s0])
        dst = T.match_buffer(c, (rows, cols), dtype, align=64, offset_factor=cols,
                             scope=scope_frag, strides=[d1, d0])
        with T.sblock("root"):
            T.reads(src[0:rows, 0:cols])
            T.writes(dst[0:rows, 0:cols])
            T.evaluate(T.tvm_load_matrix_sync(
                dst.data, m, n, k, _fragment_index(dst, d1, rows, cols),
                src.access_ptr("r", ptr_type=dtype), s1, layout, dtype="void"))

    return desc, impl


def _fill(mnk):
    m, n, k = mnk

    @T.prim_func(s_tir=True)
    def desc(c: T.handle) -> None:
        acc = T.match_buffer(c, (m, n), "float32", align=64, offset_factor=n, scope="wmma.accumulator")
        with T.sblock("root"):
            T.reads()
            T.writes(acc[0:m, 0:n])
            for i, j in T.grid(m, n):
                with T.sblock("init"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    acc[vi, vj] = T.float32(0)

    @T.prim_func(s_tir=True)
    def impl(c: T.handle) -> None:
        d1 = T.int32()
        d0 = T.int32()
        acc = T.match_buffer(c, (m, n), "float32", align=64, offset_factor=n,
                             scope="wmma.accumulator", strides=[d1, d0])
        with T.sblock("root"):
            T.reads()
            T.writes(acc[0:m, 0:n])
            T.evaluate(T.tvm_fill_fragment(acc.data, m, n, k, _fragment_index(acc, d1, m, n),
                                           T.float32(0), dtype="void"))

    return desc, impl


def _store(mnk, scope_out: str):
    m, n, k = mnk

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        acc = T.match_buffer(a, (m, n), "float32", align=64, offset_factor=n, scope="wmma.accumulator")
        dst = T.match_buffer(c, (m, n), "float32", align=64, offset_factor=n, scope=scope_out)
        with T.sblock("root"):
            T.reads(acc[0:m, 0:n])
            T.writes(dst[0:m, 0:n])
            for i, j in T.grid(m, n):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    dst[vi, vj] = acc[vi, vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, c: T.handle) -> None:
        s1 = T.int32()
        s0 = T.int32()
        d1 = T.int32()
        d0 = T.int32()
        acc = T.match_buffer(a, (m, n), "float32", align=64, offset_factor=n,
                             scope="wmma.accumulator", strides=[d1, d0])
        dst = T.match_buffer(c, (m, n), "float32", align=64, offset_factor=n,
                             scope=scope_out, strides=[s1, s0])
        with T.sblock("root"):
            T.reads(acc[0:m, 0:n])
            T.writes(dst[0:m, 0:n])
            T.evaluate(T.tvm_store_matrix_sync(
                acc.data, m, n, k, _fragment_index(acc, d1, m, n),
                dst.access_ptr("w", ptr_type="float32"), s1, "row_major", dtype="void"))

    return desc, impl


def _mma(mnk, b_layout: str = ROW_MAJOR, dtype: str = "float16"):
    """C += A B on fragments (fp16 or bf16, fp32 C); B's fragment is (k, n), or (n, k) for a
    col_major B."""
    m, n, k = mnk
    b_shape = (n, k) if b_layout == COL_MAJOR else (k, n)
    b_index = (lambda kk, j: (j, kk)) if b_layout == COL_MAJOR else (lambda kk, j: (kk, j))

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (m, k), dtype, align=64, offset_factor=k, scope="wmma.matrix_a")
        B = T.match_buffer(b, b_shape, dtype, align=64, offset_factor=b_shape[1], scope="wmma.matrix_b")
        C = T.match_buffer(c, (m, n), "float32", align=64, offset_factor=n, scope="wmma.accumulator")
        with T.sblock("root"):
            T.reads(C[0:m, 0:n], A[0:m, 0:k], B[0:b_shape[0], 0:b_shape[1]])
            T.writes(C[0:m, 0:n])
            for i, j, kk in T.grid(m, n, k):
                with T.sblock(""):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                    b_at = T.meta_var(b_index(vk, vj))
                    C[vi, vj] = C[vi, vj] + T.Cast("float32", A[vi, vk]) * T.Cast("float32", B[b_at])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        a1 = T.int32()
        a0 = T.int32()
        b1 = T.int32()
        b0 = T.int32()
        c1 = T.int32()
        c0 = T.int32()
        A = T.match_buffer(a, (m, k), dtype, align=64, offset_factor=k,
                           scope="wmma.matrix_a", strides=[a1, a0])
        B = T.match_buffer(b, b_shape, dtype, align=64, offset_factor=b_shape[1],
                           scope="wmma.matrix_b", strides=[b1, b0])
        C = T.match_buffer(c, (m, n), "float32", align=64, offset_factor=n,
                           scope="wmma.accumulator", strides=[c1, c0])
        with T.sblock("root"):
            T.reads(C[0:m, 0:n], A[0:m, 0:k], B[0:b_shape[0], 0:b_shape[1]])
            T.writes(C[0:m, 0:n])
            T.evaluate(T.tvm_mma_sync(
                C.data, _fragment_index(C, c1, m, n),
                A.data, _fragment_index(A, a1, m, k),
                B.data, _fragment_index(B, b1, *b_shape),
                C.data, _fragment_index(C, c1, m, n), dtype="void"))

    return desc, impl


# The 16x16 tile of the ldmatrix/mma.sync fragments and of the accumulators wgmma writes (WMMA's
# 16x16x16 accumulator fragments): the mma path and the wgmma path both tile by it.
MMA_TILE = 16


_REGISTERING = threading.Lock()


def _register(tag: str, make: dict) -> IntrinsicNames:
    """Register the family ``tag`` once per process: ``make`` maps a role to (desc, impl) makers."""
    names = IntrinsicNames(**{role: f"{_PREFIX}_{role}_{tag}" for role in make})
    with _REGISTERING:  # threads building kernels at once must not register twice
        try:
            TensorIntrin.get(names.mma)
            return names
        except Exception:  # not registered yet in this process
            pass
        for role, maker in make.items():
            TensorIntrin.register(getattr(names, role), *maker())
    return names


def wmma_intrinsics(mnk: tuple[int, int, int], smem_scope: str = "shared.dyn",
                    b_layout: str = ROW_MAJOR, dtype: str = "float16") -> IntrinsicNames:
    """Register (once per process) and name the intrinsics of one WMMA shape, B's tile
    stored [k][n] (row_major) or [n][k] (col_major, loaded as a col_major matrix_b), of
    ``dtype`` operands (float16, bfloat16)."""
    m, n, k = mnk
    b_tile = (n, k) if b_layout == COL_MAJOR else (k, n)
    tag = f"wmma_{m}x{n}x{k}_{smem_scope.replace('.', '_')}{b_tag(b_layout)}{dtype_tag(dtype)}"
    return _register(tag, {
        "fill": lambda: _fill(mnk),
        "load_a": lambda: _load(m, k, mnk, smem_scope, "wmma.matrix_a", dtype=dtype),
        "load_b": lambda: _load(*b_tile, mnk, smem_scope, "wmma.matrix_b", b_layout, dtype),
        "mma": lambda: _mma(mnk, b_layout, dtype),
        "store": lambda: _store(mnk, smem_scope),
    })


