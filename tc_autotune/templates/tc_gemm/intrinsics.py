"""Tensor Core intrinsics for the template: WMMA of every fragment shape, and
ldmatrix + mma.sync.  Each comes for a B tile stored [k][n] in shared memory (row-major,
N contiguous) and one stored [n][k] (column-major, K contiguous: an nn.Linear weight's
layout, copied with vector loads along K).

TVM 0.27 registers only 16x16x16 WMMA intrinsics, and importing the module that
does so parses ~100 TVMScript functions (~25 s).  This module defines the five
intrinsics a Tensor Core GEMM needs (fill, load A, load B, mma, store), for WMMA
at any (m, n, k) and for ldmatrix/mma.sync at 16x16x16, and registers them lazily
in TVM's intrinsic registry, which is the only global state the package keeps.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import tvm
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from .gemm import COL_MAJOR, ROW_MAJOR

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


def _load(rows: int, cols: int, mnk: tuple[int, int, int], scope_in: str, scope_frag: str,
          layout: str = ROW_MAJOR):
    """A (rows x cols) tile of shared memory into a fragment; ``layout`` says which of the
    fragment's axes the tile's rows are (col_major B: a [n][k] tile)."""
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
                src.access_ptr("r", ptr_type="float16"), s1, layout, dtype="void"))

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


def _mma(mnk, b_layout: str = ROW_MAJOR):
    """C += A B on fragments; B's fragment is (k, n), or (n, k) for a col_major B."""
    m, n, k = mnk
    b_shape = (n, k) if b_layout == COL_MAJOR else (k, n)
    b_index = (lambda kk, j: (j, kk)) if b_layout == COL_MAJOR else (lambda kk, j: (kk, j))

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (m, k), "float16", align=64, offset_factor=k, scope="wmma.matrix_a")
        B = T.match_buffer(b, b_shape, "float16", align=64, offset_factor=b_shape[1], scope="wmma.matrix_b")
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
        A = T.match_buffer(a, (m, k), "float16", align=64, offset_factor=k,
                           scope="wmma.matrix_a", strides=[a1, a0])
        B = T.match_buffer(b, b_shape, "float16", align=64, offset_factor=b_shape[1],
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


def _b_tag(b_layout: str) -> str:
    """The suffix of an intrinsic family's names for a B tile stored in ``b_layout``."""
    return "" if b_layout == ROW_MAJOR else "_bcol"


def wmma_intrinsics(mnk: tuple[int, int, int], smem_scope: str = "shared.dyn",
                    b_layout: str = ROW_MAJOR) -> IntrinsicNames:
    """Register (once per process) and name the intrinsics of one WMMA shape, B's tile
    stored [k][n] (row_major) or [n][k] (col_major, loaded as a col_major matrix_b)."""
    m, n, k = mnk
    b_tile = (n, k) if b_layout == COL_MAJOR else (k, n)
    return _register(f"wmma_{m}x{n}x{k}_{smem_scope.replace('.', '_')}{_b_tag(b_layout)}", {
        "fill": lambda: _fill(mnk),
        "load_a": lambda: _load(m, k, mnk, smem_scope, "wmma.matrix_a"),
        "load_b": lambda: _load(*b_tile, mnk, smem_scope, "wmma.matrix_b", b_layout),
        "mma": lambda: _mma(mnk, b_layout),
        "store": lambda: _store(mnk, smem_scope),
    })


# ---- ldmatrix + mma.sync (the "mma" intrinsic knob) -----------------------------------
# A 16x16 fp16 operand tile or fp32 accumulator tile lives in a warp as 32 lanes x 8 values;
# element (i, j) sits at lane 4*(i%8) + (j%8)//2, slot 4*(j//8) + 2*(i//8) + j%2 (the
# m16n8k16 fragment layout, which ldmatrix.x4 produces from four 8x8 sub-tiles).
MMA_TILE = 16
_WARP = 32
_SLOTS = MMA_TILE * MMA_TILE // _WARP  # 8 values per lane


def mma_fragment_layout(i, j):
    """(lane, slot) of element (i, j) of a 16x16 tile held by a warp."""
    return 4 * (i % 8) + (j % 8) // 2, 4 * (j // 8) + 2 * (i // 8) + j % 2


def _ldmatrix(transpose: bool, smem_scope: str, b_layout: str = ROW_MAJOR):
    """A 16x16 fp16 tile in shared memory into the warp's fragment layout (ldmatrix.x4).
    Lane t gives the address of row t % 16, column block t // 16; B stored [k][n] is loaded
    with .trans so both operands end up in the same layout.  B stored [n][k] (col_major)
    is loaded without .trans, its 8x8 blocks in the order (n, k) = (0, 0), (0, 8), (8, 0),
    (8, 8): lane t gives row 8 (t // 16) + t % 8, column block t // 8 % 2, and the mma
    reads the registers it would read from the [k][n] tile loaded with .trans."""
    col_b = b_layout == COL_MAJOR
    at = (lambda i, j: mma_fragment_layout(j, i)) if col_b else mma_fragment_layout  # of smem[i, j]
    if col_b:
        address = lambda tx, stride: stride * (8 * (tx // 16) + tx % 8) + 8 * (tx // 8 % 2)  # noqa: E731
    else:
        address = lambda tx, stride: stride * (tx % 16) + 8 * (tx // 16)  # noqa: E731

    @T.prim_func(s_tir=True)
    def desc(w: T.handle, s: T.handle) -> None:
        smem = T.match_buffer(s, (MMA_TILE, MMA_TILE), "float16", align=64, offset_factor=MMA_TILE,
                              scope=smem_scope)
        frag = T.match_buffer(w, (_WARP, _SLOTS), "float16", align=64, offset_factor=MMA_TILE,
                              scope="warp")
        with T.sblock("root"):
            T.reads(smem[0:MMA_TILE, 0:MMA_TILE])
            T.writes(frag[0:_WARP, 0:_SLOTS])
            for i, j in T.grid(MMA_TILE, MMA_TILE):
                with T.sblock("load"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    lane, slot = T.meta_var(at(vi, vj))
                    T.reads(smem[vi, vj])
                    T.writes(frag[lane, slot])
                    frag[lane, slot] = smem[vi, vj]

    @T.prim_func(s_tir=True)
    def impl(w: T.handle, s: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        smem = T.match_buffer(s, (MMA_TILE, MMA_TILE), "float16", align=64, offset_factor=MMA_TILE,
                              scope=smem_scope, strides=[s0, s1])
        frag = T.match_buffer(w, (_WARP, _SLOTS), "float16", align=64, offset_factor=MMA_TILE,
                              scope="warp")
        with T.sblock("root"):
            T.reads(smem[0:MMA_TILE, 0:MMA_TILE])
            T.writes(frag[0:_WARP, 0:_SLOTS])
            for tx in T.thread_binding(0, _WARP, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.ldmatrix(
                    transpose, 4, ".b16", frag.data, frag.elem_offset + _SLOTS * tx,
                    smem.access_ptr("r"), address(tx, s0), dtype="float16"))

    return desc, impl


def _mma_sync():
    """C[16x16] += A[16x16] @ B[16x16] as two m16n8k16 mma.sync (left and right 8 columns)."""

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (_WARP, _SLOTS), "float16", align=64, offset_factor=MMA_TILE, scope="warp")
        B = T.match_buffer(b, (_WARP, _SLOTS), "float16", align=64, offset_factor=MMA_TILE, scope="warp")
        C = T.match_buffer(c, (_WARP, _SLOTS), "float32", align=64, offset_factor=MMA_TILE, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:_WARP, 0:_SLOTS], A[0:_WARP, 0:_SLOTS], B[0:_WARP, 0:_SLOTS])
            T.writes(C[0:_WARP, 0:_SLOTS])
            for i, j, k in T.grid(MMA_TILE, MMA_TILE, MMA_TILE):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    lc, sc = T.meta_var(mma_fragment_layout(vi, vj))
                    la, sa = T.meta_var(mma_fragment_layout(vi, vk))
                    lb, sb = T.meta_var(mma_fragment_layout(vk, vj))
                    T.reads(C[lc, sc], A[la, sa], B[lb, sb])
                    T.writes(C[lc, sc])
                    C[lc, sc] = C[lc, sc] + T.Cast("float32", A[la, sa]) * T.Cast("float32", B[lb, sb])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (_WARP, _SLOTS), "float16", align=64, offset_factor=MMA_TILE, scope="warp")
        B = T.match_buffer(b, (_WARP, _SLOTS), "float16", align=64, offset_factor=MMA_TILE, scope="warp")
        C = T.match_buffer(c, (_WARP, _SLOTS), "float32", align=64, offset_factor=MMA_TILE, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:_WARP, 0:_SLOTS], A[0:_WARP, 0:_SLOTS], B[0:_WARP, 0:_SLOTS])
            T.writes(C[0:_WARP, 0:_SLOTS])
            for tx in T.thread_binding(0, _WARP, "threadIdx.x"):
                for half in T.unroll(2):
                    T.evaluate(T.ptx_legacy.mma(
                        "m16n8k16", "row", "col", "fp16", "fp16", "fp32",
                        A.data, A.elem_offset + tx * _SLOTS,
                        B.data, B.elem_offset + tx * _SLOTS + half * (_SLOTS // 2),
                        C.data, C.elem_offset + tx * _SLOTS + half * (_SLOTS // 2),
                        False, dtype="float32"))

    return desc, impl


def _mma_fill():
    @T.prim_func(s_tir=True)
    def desc(c: T.handle) -> None:
        C = T.match_buffer(c, (_WARP, _SLOTS), "float32", scope="warp")
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:_WARP, 0:_SLOTS])
            for i, j in T.grid(MMA_TILE, MMA_TILE):
                with T.sblock("init"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    lane, slot = T.meta_var(mma_fragment_layout(vi, vj))
                    T.reads()
                    T.writes(C[lane, slot])
                    C[lane, slot] = T.float32(0)

    @T.prim_func(s_tir=True)
    def impl(c: T.handle) -> None:
        C = T.match_buffer(c, (_WARP, _SLOTS), "float32", scope="warp", offset_factor=1)
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:_WARP, 0:_SLOTS])
            for tx in T.thread_binding(0, _WARP, "threadIdx.x"):
                T.evaluate(T.cuda.mma_fill_legacy(_SLOTS, C.data, C.elem_offset, dtype="float32"))

    return desc, impl


def _fragment_element(lane, slot):
    """Inverse of ``mma_fragment_layout``: the (row, col) a lane's slot holds."""
    return 8 * (slot % 4 // 2) + lane // 4, 8 * (slot // 4) + (lane % 4) * 2 + slot % 2


def _mma_store(smem_scope: str):
    """Accumulator tile -> row-major fp32 tile in shared memory, each lane its 8 values.
    (Plain stores: TVM's mma_store builtin needs a global index-map function that only
    its own intrinsic module registers.)"""

    @T.prim_func(s_tir=True)
    def desc(c: T.handle, s: T.handle) -> None:
        C = T.match_buffer(c, (_WARP, _SLOTS), "float32", scope="warp")
        smem = T.match_buffer(s, (MMA_TILE, MMA_TILE), "float32", scope=smem_scope)
        with T.sblock("root"):
            T.reads(C[0:_WARP, 0:_SLOTS])
            T.writes(smem[0:MMA_TILE, 0:MMA_TILE])
            for i, j in T.grid(MMA_TILE, MMA_TILE):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    lane, slot = T.meta_var(mma_fragment_layout(vi, vj))
                    T.reads(C[lane, slot])
                    T.writes(smem[vi, vj])
                    smem[vi, vj] = C[lane, slot]

    @T.prim_func(s_tir=True)
    def impl(c: T.handle, s: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        C = T.match_buffer(c, (_WARP, _SLOTS), "float32", scope="warp", offset_factor=1)
        smem = T.match_buffer(s, (MMA_TILE, MMA_TILE), "float32", scope=smem_scope, offset_factor=1,
                              strides=[s0, s1])
        with T.sblock("root"):
            T.reads(C[0:_WARP, 0:_SLOTS])
            T.writes(smem[0:MMA_TILE, 0:MMA_TILE])
            for tx in T.thread_binding(0, _WARP, "threadIdx.x"):
                for slot in T.serial(_SLOTS):
                    row, col = T.meta_var(_fragment_element(tx, slot))
                    smem[row, col] = C[tx, slot]

    return desc, impl


def mma_intrinsics(smem_scope: str = "shared.dyn", b_layout: str = ROW_MAJOR) -> IntrinsicNames:
    """Register (once per process) and name the ldmatrix + mma.sync intrinsics (16x16x16),
    B's tile stored [k][n] (row_major) or [n][k] (col_major)."""
    return _register(f"mma_16x16x16_{smem_scope.replace('.', '_')}{_b_tag(b_layout)}", {
        "fill": _mma_fill,
        "load_a": lambda: _ldmatrix(False, smem_scope),
        "load_b": lambda: _ldmatrix(b_layout == ROW_MAJOR, smem_scope, b_layout),
        "mma": _mma_sync,
        "store": lambda: _mma_store(smem_scope),
    })


# ---- wgmma (the "wgmma" intrinsic knob; Hopper, compiled for sm_90a) --------------------
# A warpgroup (4 consecutive warps) computes a 64 x N tile with wgmma.mma_async, reading A
# and B straight from shared memory through matrix descriptors.  Warp w of the group owns
# rows 16w..16w+15; its accumulators are WMMA 16x16 fp32 accumulator fragments, whose 8
# values per thread (x[0..7]) sit where the m16n8k16 layout above puts them, which is also
# where wgmma writes them (per 8 columns: rows r and r + 8, two adjacent columns).  So the
# WMMA fill and store intrinsics serve wgmma, and TVM's warp-memory lowering (which cannot
# hand a custom call a pointer to registers) is not involved.
# Shared tiles use the 128-byte swizzle (16-byte chunk c of a 128-byte row r sits at c ^ r%8,
# TVM's permuted layout for 64-element fp16 rows): A is K-major, 64-row slabs of (row, 64 k);
# B is MN-major in 64-column atoms, (N / 64, 64 k, 64 n), its atom stride passed in bytes,
# or, stored [n][k] (col_major), K-major rows (n, 64 k) like A's: wgmma's native B layout.
# With groups in flight (``in_flight``), a call waits only for the previous call's group; the
# accumulators stay "+f" operands of every asm that touches them while a group runs (ptxas
# would serialize the wgmmas if any other instruction did), up to ``wgmma_drain``.
WGMMA_M = 64  # rows of one warpgroup instruction
WGMMA_K = 64  # k of one call: a 128-byte swizzled row of fp16, four k16 instructions
WGMMA_ATOM = 64  # columns of one B atom
_ACC_FRAGMENT = "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>"


def _wgmma_name(n: int, b_layout: str, in_flight: bool = False) -> str:
    return f"tc_wgmma_m64n{n}k64{_b_tag(b_layout)}{'_in_flight' if in_flight else ''}"


def _wgmma_source(n: int, b_layout: str = ROW_MAJOR, in_flight: bool = False) -> str:
    """The device function of one call: four chained m64n{n}k16 wgmma, then wait for them
    (``in_flight``: for the previous call's only, so this call's group runs on).
    A col_major B is K-major like A (same descriptor, same k-steps, not transposed)."""
    regs = ",".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(c[first + {i // 8}].x[{i % 8}])' for i in range(n // 2))
    da, db = n // 2, n // 2 + 1
    if b_layout == COL_MAJOR:  # b_atom_bytes is unused
        b_lbo, b_step, trans_b, lbo_note, steps = (
            "(1ull << 16)", 2, 0, "unused: A and B are K-major", "+32 B along the A and B rows")
    else:
        b_lbo, b_step, trans_b, lbo_note, steps = (
            "((unsigned long long)((b_atom_bytes & 0x3FFFF) >> 4) << 16)", 128, 1,
            "B: the atom stride; unused for A", "+32 B along the A rows, +16 rows (2048 B) of B")
    return f"""
__device__ __forceinline__ void {_wgmma_name(n, b_layout, in_flight)}({_ACC_FRAGMENT}* c, int first, const void* a,
                                                    const void* b, unsigned b_atom_bytes) {{
  // c[first], c[first + 1], ...: this warp's 16 x {n} accumulators, 16 columns per fragment.
  // Descriptors: start address, leading byte offset ({lbo_note}),
  // stride byte offset (8 swizzled rows: 1024 B), 128-byte swizzle; in 16-byte units.
  const unsigned long long a0 = (unsigned long long)((__cvta_generic_to_shared(a) & 0x3FFFF) >> 4)
      | (1ull << 16) | (64ull << 32) | (1ull << 62);
  const unsigned long long b0 = (unsigned long long)((__cvta_generic_to_shared(b) & 0x3FFFF) >> 4)
      | {b_lbo} | (64ull << 32) | (1ull << 62);
  asm volatile("fence.proxy.async.shared::cta;\\nwgmma.fence.sync.aligned;\\n" ::: "memory");
#pragma unroll
  for (int k = 0; k < 4; ++k) {{  // k16 steps: {steps}
    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, %{da}, %{db}, 1, 1, 1, 0, {trans_b};\\n"
                 : {outs} : "l"(a0 + 2 * k), "l"(b0 + {b_step} * k));
  }}
  asm volatile("wgmma.commit_group.sync.aligned;\\nwgmma.wait_group.sync.aligned {int(in_flight)};\\n" ::: "memory");
}}
"""


def _wgmma(n: int, smem_scope: str, b_layout: str = ROW_MAJOR, in_flight: bool = False):
    """C[16 x n] (this warp's rows of a warpgroup slab) += A[16 x 64] @ B[64 x n]."""
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
        A = T.match_buffer(a, (MMA_TILE, WGMMA_K), "float16", align=64, offset_factor=1, scope=smem_scope)
        B = T.match_buffer(b, b_shape, "float16", align=64, offset_factor=1, scope=smem_scope)
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
        A = T.match_buffer(a, (MMA_TILE, WGMMA_K), "float16", align=64, offset_factor=1, scope=smem_scope,
                           strides=[a1, a0])
        B = T.match_buffer(b, b_shape, "float16", align=64, offset_factor=1,
                           scope=smem_scope, strides=[b2, b1, b0][-len(b_shape):])
        C = T.match_buffer(c, (MMA_TILE, n), "float32", align=64, offset_factor=MMA_TILE,
                           scope="wmma.accumulator", strides=[c1, c0])
        with T.sblock("root"):
            T.reads(C[0:MMA_TILE, 0:n], A[0:MMA_TILE, 0:WGMMA_K], B[b_whole])
            T.writes(C[0:MMA_TILE, 0:n])
            # The instruction reads the warpgroup's 64 rows: from this warp's 16 rows back to
            # the first of its slab (the template stores the four warps' rows as one slab).
            T.evaluate(cuda_func_call(
                _wgmma_name(n, b_layout, in_flight), C.data, _fragment_index(C, c1, MMA_TILE, MMA_TILE),
                A.access_ptr("r", offset=-(A.elem_offset // (MMA_TILE * a1) % (WGMMA_M // MMA_TILE))
                             * MMA_TILE * a1),
                B.access_ptr("r"), atom_bytes(b2), source_code=_wgmma_source(n, b_layout, in_flight)))

    return desc, impl


def wgmma_intrinsic(n: int, smem_scope: str = "shared.dyn", b_layout: str = ROW_MAJOR,
                    in_flight: bool = False) -> str:
    """Register (once per process) and name the wgmma intrinsic for warpgroup tiles n wide,
    B's tile in 64-column atoms (row_major) or [n][k] rows (col_major); ``in_flight``: its
    group still runs when the call returns (``wgmma_drain`` waits for the last one)."""
    name = f"{_PREFIX}_wgmma_m64n{n}k64_{smem_scope.replace('.', '_')}{_b_tag(b_layout)}"
    name += "_in_flight" if in_flight else ""
    with _REGISTERING:
        try:
            TensorIntrin.get(name)
        except Exception:  # not registered yet in this process
            TensorIntrin.register(name, *_wgmma(n, smem_scope, b_layout, in_flight))
    return name


def wgmma_drain_source(fragments: int) -> tuple[str, str]:
    """(name, CUDA source) of the device function that waits for every wgmma group in flight
    before the ``fragments`` 16x16 accumulators it takes are read.  Its asm takes them as
    operands, so the compiler keeps every read of them after the wait."""
    name = f"tc_wgmma_drain_{fragments}"
    regs = ", ".join(f'"+f"(c[{i // 8}].x[{i % 8}])' for i in range(8 * fragments))
    source = f"""
__device__ __forceinline__ void {name}({_ACC_FRAGMENT}* c) {{
  asm volatile("wgmma.wait_group.sync.aligned 0;\\n" : {regs} :: "memory");
}}
"""
    return name, source


def wgmma_drain(accumulators, fragments: int):
    """The call of ``wgmma_drain_source`` on ``accumulators`` (a wmma.accumulator buffer)."""
    from tvm.backend.cuda.op import cuda_func_call

    name, source = wgmma_drain_source(fragments)
    return tvm.tirx.Evaluate(cuda_func_call(name, accumulators, source_code=source))
