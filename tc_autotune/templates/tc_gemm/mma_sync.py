"""ldmatrix + mma.sync intrinsics (the ``mma`` intrinsic path, sm_80+) at 16x16x16: a warp's
16x16 operand and accumulator tiles as 32 lanes x 8 values, loaded from (XOR-swizzled) shared
memory with ldmatrix.x4 and multiplied with two m16n8k16 mma.sync; registered like WMMA's
(``intrinsics``), for fp16 or bf16 operands (both 16-bit: the same ldmatrix, the same layouts)."""

from __future__ import annotations

from tvm.script import tirx as T

from .operand_layout import COL_MAJOR, ROW_MAJOR, b_tag
from .intrinsics import MMA_TILE, IntrinsicNames, _register, dtype_tag

# A 16x16 fp16 operand tile or fp32 accumulator tile lives in a warp as 32 lanes x 8 values;
# element (i, j) sits at lane 4*(i%8) + (j%8)//2, slot 4*(j//8) + 2*(i//8) + j%2 (the
# m16n8k16 fragment layout, which ldmatrix.x4 produces from four 8x8 sub-tiles).
_WARP = 32
_SLOTS = MMA_TILE * MMA_TILE // _WARP  # 8 values per lane


def mma_fragment_layout(i, j):
    """(lane, slot) of element (i, j) of a 16x16 tile held by a warp."""
    return 4 * (i % 8) + (j % 8) // 2, 4 * (j // 8) + 2 * (i // 8) + j % 2


# mma.sync's name of an operand dtype
_PTX_TYPES = {"float16": "fp16", "bfloat16": "bf16"}


def _ldmatrix(transpose: bool, smem_scope: str, b_layout: str = ROW_MAJOR, dtype: str = "float16"):
    """A 16x16 fp16 (bf16) tile in shared memory into the warp's fragment layout (ldmatrix.x4).
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
        smem = T.match_buffer(s, (MMA_TILE, MMA_TILE), dtype, align=64, offset_factor=MMA_TILE,
                              scope=smem_scope)
        frag = T.match_buffer(w, (_WARP, _SLOTS), dtype, align=64, offset_factor=MMA_TILE,
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
        smem = T.match_buffer(s, (MMA_TILE, MMA_TILE), dtype, align=64, offset_factor=MMA_TILE,
                              scope=smem_scope, strides=[s0, s1])
        frag = T.match_buffer(w, (_WARP, _SLOTS), dtype, align=64, offset_factor=MMA_TILE,
                              scope="warp")
        with T.sblock("root"):
            T.reads(smem[0:MMA_TILE, 0:MMA_TILE])
            T.writes(frag[0:_WARP, 0:_SLOTS])
            for tx in T.thread_binding(0, _WARP, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.ldmatrix(
                    transpose, 4, ".b16", frag.data, frag.elem_offset + _SLOTS * tx,
                    smem.access_ptr("r"), address(tx, s0), dtype=dtype))

    return desc, impl


def _mma_sync(dtype: str = "float16"):
    """C[16x16] += A[16x16] @ B[16x16] as two m16n8k16 mma.sync (left and right 8 columns)."""
    ptx_type = _PTX_TYPES[dtype]

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (_WARP, _SLOTS), dtype, align=64, offset_factor=MMA_TILE, scope="warp")
        B = T.match_buffer(b, (_WARP, _SLOTS), dtype, align=64, offset_factor=MMA_TILE, scope="warp")
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
        A = T.match_buffer(a, (_WARP, _SLOTS), dtype, align=64, offset_factor=MMA_TILE, scope="warp")
        B = T.match_buffer(b, (_WARP, _SLOTS), dtype, align=64, offset_factor=MMA_TILE, scope="warp")
        C = T.match_buffer(c, (_WARP, _SLOTS), "float32", align=64, offset_factor=MMA_TILE, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:_WARP, 0:_SLOTS], A[0:_WARP, 0:_SLOTS], B[0:_WARP, 0:_SLOTS])
            T.writes(C[0:_WARP, 0:_SLOTS])
            for tx in T.thread_binding(0, _WARP, "threadIdx.x"):
                for half in T.unroll(2):
                    T.evaluate(T.ptx_legacy.mma(
                        "m16n8k16", "row", "col", ptx_type, ptx_type, "fp32",
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


def mma_intrinsics(smem_scope: str = "shared.dyn", b_layout: str = ROW_MAJOR,
                   dtype: str = "float16") -> IntrinsicNames:
    """Register (once per process) and name the ldmatrix + mma.sync intrinsics (16x16x16),
    B's tile stored [k][n] (row_major) or [n][k] (col_major), of ``dtype`` operands."""
    return _register(f"mma_16x16x16_{smem_scope.replace('.', '_')}{b_tag(b_layout)}{dtype_tag(dtype)}", {
        "fill": _mma_fill,
        "load_a": lambda: _ldmatrix(False, smem_scope, dtype=dtype),
        "load_b": lambda: _ldmatrix(b_layout == ROW_MAJOR, smem_scope, b_layout, dtype),
        "mma": lambda: _mma_sync(dtype),
        "store": lambda: _mma_store(smem_scope),
    })
