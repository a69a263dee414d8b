"""WMMA tensor intrinsics for every fragment shape the template uses.

TVM 0.27 registers only 16x16x16 WMMA intrinsics, and importing the module that
does so parses ~100 TVMScript functions (~25 s).  This module defines the five
intrinsics a WMMA GEMM needs (fill, load A, load B, mma, store) for any
(m, n, k) and registers them lazily in TVM's intrinsic registry, which is the
only global state the package keeps.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

_PREFIX = "tc_autotune_wmma"


@dataclass(frozen=True)
class WmmaIntrinsics:
    """Registered names of one (m, n, k) intrinsic family."""

    fill: str
    load_a: str
    load_b: str
    mma: str
    store: str


def _fragment_index(buf, stride, rows, cols):
    """Which fragment of a fragment-scope buffer ``buf`` (by its element offset) is meant."""
    return buf.elem_offset // stride // rows * (stride // cols) + buf.elem_offset % stride // cols


def _load(rows: int, cols: int, mnk: tuple[int, int, int], scope_in: str, scope_frag: str):
    m, n, k = mnk

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        src = T.match_buffer(a, (rows, cols), "float16", align=64, offset_factor=cols, scope=scope_in)
        dst = T.match_buffer(c, (rows, cols), "float16", align=64, offset_factor=cols, scope=scope_frag)
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
        src = T.match_buffer(a, (rows, cols), "float16", align=64, offset_factor=cols,
                             scope=scope_in, strides=[s1, s0])
        dst = T.match_buffer(c, (rows, cols), "float16", align=64, offset_factor=cols,
                             scope=scope_frag, strides=[d1, d0])
        with T.sblock("root"):
            T.reads(src[0:rows, 0:cols])
            T.writes(dst[0:rows, 0:cols])
            T.evaluate(T.tvm_load_matrix_sync(
                dst.data, m, n, k, _fragment_index(dst, d1, rows, cols),
                src.access_ptr("r", ptr_type="float16"), s1, "row_major", dtype="void"))

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


def _mma(mnk):
    m, n, k = mnk

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (m, k), "float16", align=64, offset_factor=k, scope="wmma.matrix_a")
        B = T.match_buffer(b, (k, n), "float16", align=64, offset_factor=n, scope="wmma.matrix_b")
        C = T.match_buffer(c, (m, n), "float32", align=64, offset_factor=n, scope="wmma.accumulator")
        with T.sblock("root"):
            T.reads(C[0:m, 0:n], A[0:m, 0:k], B[0:k, 0:n])
            T.writes(C[0:m, 0:n])
            for i, j, kk in T.grid(m, n, k):
                with T.sblock(""):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                    C[vi, vj] = C[vi, vj] + T.Cast("float32", A[vi, vk]) * T.Cast("float32", B[vk, vj])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        a1 = T.int32()
        a0 = T.int32()
        b1 = T.int32()
        b0 = T.int32()
        c1 = T.int32()
        c0 = T.int32()
        A = T.match_buffer(a, (m, k), "float16", align=64, offset_factor=k,
                           scope="wmma.matrix_a", strides=[a1, a0])
        B = T.match_buffer(b, (k, n), "float16", align=64, offset_factor=n,
                           scope="wmma.matrix_b", strides=[b1, b0])
        C = T.match_buffer(c, (m, n), "float32", align=64, offset_factor=n,
                           scope="wmma.accumulator", strides=[c1, c0])
        with T.sblock("root"):
            T.reads(C[0:m, 0:n], A[0:m, 0:k], B[0:k, 0:n])
            T.writes(C[0:m, 0:n])
            T.evaluate(T.tvm_mma_sync(
                C.data, _fragment_index(C, c1, m, n),
                A.data, _fragment_index(A, a1, m, k),
                B.data, _fragment_index(B, b1, k, n),
                C.data, _fragment_index(C, c1, m, n), dtype="void"))

    return desc, impl


_REGISTERING = threading.Lock()


def wmma_intrinsics(mnk: tuple[int, int, int], smem_scope: str = "shared.dyn") -> WmmaIntrinsics:
    """Register (once per process) and name the intrinsics of one WMMA shape."""
    m, n, k = mnk
    tag = f"{m}x{n}x{k}_{smem_scope.replace('.', '_')}"
    names = WmmaIntrinsics(
        fill=f"{_PREFIX}_fill_{tag}",
        load_a=f"{_PREFIX}_load_a_{tag}",
        load_b=f"{_PREFIX}_load_b_{tag}",
        mma=f"{_PREFIX}_mma_{tag}",
        store=f"{_PREFIX}_store_{tag}",
    )
    with _REGISTERING:  # threads building kernels at once must not register twice
        try:
            TensorIntrin.get(names.mma)
            return names
        except Exception:  # not registered yet in this process
            pass
        TensorIntrin.register(names.fill, *_fill(mnk))
        TensorIntrin.register(names.load_a, *_load(m, k, mnk, smem_scope, "wmma.matrix_a"))
        TensorIntrin.register(names.load_b, *_load(k, n, mnk, smem_scope, "wmma.matrix_b"))
        TensorIntrin.register(names.store, *_store(mnk, smem_scope))
        TensorIntrin.register(names.mma, *_mma(mnk))
    return names
