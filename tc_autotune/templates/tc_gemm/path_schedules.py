"""Each intrinsic path's schedule of the GEMM block (``intrinsic_paths.schedules`` registers them):
WMMA fragments on padded tiles, ldmatrix + mma.sync on XOR-swizzled tiles, and wgmma on
128-byte-swizzled tiles, with its groups kept in flight across k-steps (``wgmma_in_flight``).
Each takes the operands' dtype (``dtype``: float16, bfloat16), which picks its intrinsics."""

from __future__ import annotations

import tvm
import tvm_ffi

from .operand_layout import COL_MAJOR, ROW_MAJOR
from .intrinsic_paths import schedules
from .intrinsics import MMA_TILE, wmma_intrinsics
from .knobs import TcGemmConfig
from .mma_sync import mma_fragment_layout, mma_intrinsics
from .staging import SMEM, align_c_tile, fragment_tiles, stage_operands, tile_block
from .wgmma_intrinsic import wgmma_drain, wgmma_intrinsic
from .wgmma_source import WGMMA_ATOM, WGMMA_K


@schedules("wmma")
def _schedule_wmma(sch, gemm, loops, config: TcGemmConfig, inline_out: str | None, b_layout: str,
                   dtype: str = "float16"):
    """WMMA fragments on padded shared tiles (a col_major B: [n][k] rows, padded along K,
    loaded as col_major matrix_b fragments); returns the (ko, ki) loops."""
    wm, wn, wk = config.wmma_mnk
    names = wmma_intrinsics(config.wmma_mnk, SMEM, b_layout, dtype)
    by, tz, ko, ki, i_w = tile_block(sch, loops, config, config.wmma_mnk)
    scopes = ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator")
    c_frag, a_shared, b_shared, a_frag, b_frag = stage_operands(
        sch, gemm, by, tz, ko, ki, config, scopes, inline_out)
    if config.offset_a:
        sch.storage_align(a_shared, 0, axis=-2, factor=config.block_k + config.offset_a, offset=0)
    if config.offset_b:
        b_row = config.block_k if b_layout == COL_MAJOR else config.block_n
        sch.storage_align(b_shared, 0, axis=-2, factor=b_row + config.offset_b, offset=0)

    # Fragment loads: split into wmma tiles and tensorize.
    a_rows, a_cols = sch.get_loops(a_frag)[-2:]
    a_ro, a_ri = sch.split(a_rows, [None, wm])
    sch.reorder(a_ro, a_ri, a_cols)
    if b_layout == COL_MAJOR:  # [n][k]: fragments along the rows
        b_load = fragment_tiles(sch, b_frag, wn, wk)
    else:
        b_load, b_cols = sch.get_loops(b_frag)[-2:]
        b_co, b_ci = sch.split(b_cols, [None, wn])
        sch.reorder(b_co, b_load, b_ci)
    sch.tensorize(a_ri, names.load_a)
    sch.tensorize(b_load, names.load_b)

    # Accumulator store: per warp tile, fragment by fragment.
    store_name = sch.get(c_frag).name_hint
    sch.tensorize(fragment_tiles(sch, c_frag, wm, wn), names.store)

    init = sch.decompose_reduction(gemm, ko)
    sch.tensorize(sch.get_loops(init)[-2], names.fill)
    sch.tensorize(i_w, names.mma)
    align_c_tile(sch, store_name, config)
    return ko, ki


def _fragment_layout_map(ndim: int, transposed: bool = False):
    """A warp-scope buffer [..., rows, cols] -> [..., row tile, col tile, lane, slot]
    (16x16 fragments; a split-K accumulator has its slice index in front).  ``transposed``:
    the buffer holds the operand's transpose (a col_major B, [n][k]), whose element [i, j]
    goes where the operand's [j, i] would."""

    def to_fragments(*idx):
        i, j = idx[-2:]
        row, col = (j, i) if transposed else (i, j)  # of the operand
        return (*idx[:-2], i // MMA_TILE, j // MMA_TILE, *mma_fragment_layout(row % MMA_TILE, col % MMA_TILE))

    return tvm.tirx.IndexMap.from_func(to_fragments, ndim=ndim, index_dtype="int32")


@schedules("mma")
def _schedule_mma(sch, gemm, loops, config: TcGemmConfig, inline_out: str | None, b_layout: str,
                  dtype: str = "float16"):
    """ldmatrix + mma.sync on XOR-swizzled shared tiles (TVM's permuted layout: 16-byte
    chunk c of row r is stored at chunk c ^ (r % 8), so the cp.async writes of whole rows
    and the ldmatrix reads of 8 rows both hit 8 distinct bank groups; a col_major B's rows
    are along K); returns (ko, ki)."""
    names = mma_intrinsics(SMEM, b_layout, dtype)
    # The 16x16x16 MMA is the innermost block; the tile loops above it are scheduled.
    i, j, kk = loops
    i, i_mma = sch.split(i, [None, MMA_TILE])
    j, j_mma = sch.split(j, [None, MMA_TILE])
    kk, k_mma = sch.split(kk, [None, MMA_TILE])
    sch.reorder(i, j, kk, i_mma, j_mma, k_mma)
    tile = sch.blockize(i_mma)
    by, tz, ko, ki, _ = tile_block(sch, (i, j, kk), config, (1, 1, 1))
    c_frag, a_shared, b_shared, a_frag, b_frag = stage_operands(
        sch, tile, by, tz, ko, ki, config, ("warp", "warp", "warp"), inline_out)
    sch.annotate(a_shared, "permuted_layout", 1)
    sch.annotate(b_shared, "permuted_layout", 1)

    load_a, load_b = (fragment_tiles(sch, frag, MMA_TILE, MMA_TILE) for frag in (a_frag, b_frag))
    sch.transform_layout(a_frag, ("write", 0), _fragment_layout_map(2))
    sch.transform_layout(b_frag, ("write", 0), _fragment_layout_map(2, transposed=b_layout == COL_MAJOR))
    # C is (z, M, N) with split-K's slices or a grouped view's GEMMs
    sch.transform_layout(c_frag, ("read", 0), _fragment_layout_map(len(sch.get(c_frag).reads[0].region)))
    store = fragment_tiles(sch, c_frag, MMA_TILE, MMA_TILE)
    frag_names = [sch.get(b).name_hint for b in (a_frag, b_frag)]
    store_name = sch.get(c_frag).name_hint

    init = sch.decompose_reduction(tile, ko)
    sch.tensorize(load_a, names.load_a)
    sch.tensorize(load_b, names.load_b)
    for name in frag_names:  # ldmatrix addresses follow the swizzle of the tiles they read
        sch.annotate(sch.get_sblock(name + "_o"), "permuted_layout", 1)
    sch.tensorize(sch.get_loops(gemm)[-3], names.mma)
    sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], names.fill)
    sch.tensorize(store, names.store)
    align_c_tile(sch, store_name, config)
    return ko, ki


@schedules("wgmma")
def _schedule_wgmma(sch, gemm, loops, config: TcGemmConfig, inline_out: str | None, b_layout: str,
                    dtype: str = "float16"):
    """wgmma on 128-byte-swizzled shared tiles (see ``wgmma_source``).  The four warps along M
    (threadIdx.y) are a warpgroup and each warpgroup (threadIdx.z) owns warp_col_tiles * 16
    columns.  A warp keeps its rows contiguous (its accumulators and the epilogue are the
    WMMA path's), while one wgmma takes 16 rows of each warp: the A tile's rows are permuted
    in shared memory so that slab s of the four warps is one 64-row block.  A col_major B
    stays [n][64 k], K-major rows like A's (wgmma's native B).  Returns (ko, None)."""
    n_wg = config.warp_col_tiles * MMA_TILE
    names = wmma_intrinsics((MMA_TILE, MMA_TILE, MMA_TILE), SMEM)  # fill and store
    i, j, kk = loops
    bx, ty, slab, i_w = sch.split(i, [None, config.block_row_warps, config.warp_row_tiles, MMA_TILE])
    by, tz, j_w = sch.split(j, [None, config.block_col_warps, n_wg])
    ko, k_w = sch.split(kk, [None, WGMMA_K])
    sch.reorder(bx, by, ty, tz, ko, slab, i_w, j_w, k_w)
    sch.bind(bx, "blockIdx.x")
    sch.bind(by, "blockIdx.y")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tz, "threadIdx.z")
    c_frag, a_shared, b_shared, _, _ = stage_operands(
        sch, gemm, by, tz, ko, None, config, (None, None, "wmma.accumulator"), inline_out)
    # A rows (block, warp, slab, row) -> (block, slab, warp, row); a row_major B in 64-column
    # atoms, (N / 64, K, 64).  Both swizzled by TVM's permuted layout (last two dims: 64-wide rows).
    bm, per_warp = config.block_m, config.warp_row_tiles * MMA_TILE
    sch.transform_layout(a_shared, ("write", 0), lambda m, k: (
        m // bm, m % per_warp // MMA_TILE, m % bm // per_warp, m % MMA_TILE, k))
    if b_layout == ROW_MAJOR:
        sch.transform_layout(b_shared, ("write", 0), lambda k, n: (n // WGMMA_ATOM, k, n % WGMMA_ATOM))
    sch.annotate(a_shared, "permuted_layout", 1)
    sch.annotate(b_shared, "permuted_layout", 1)

    store_name = sch.get(c_frag).name_hint
    sch.tensorize(fragment_tiles(sch, c_frag, MMA_TILE, MMA_TILE), names.store)
    init = sch.decompose_reduction(gemm, ko)
    fill_rows, fill_cols = sch.get_loops(init)[-2:]
    fill_o, fill_i = sch.split(fill_cols, [None, MMA_TILE])
    sch.reorder(fill_o, fill_rows, fill_i)
    sch.tensorize(fill_rows, names.fill)
    sch.tensorize(i_w, wgmma_intrinsic(n_wg, SMEM, b_layout, in_flight=bool(config.wgmma_in_flight), dtype=dtype))
    align_c_tile(sch, store_name, config)
    if config.wgmma_in_flight:
        _copies_for_groups_in_flight(sch, ko, (a_shared, b_shared))
    return ko, None


# ---- wgmma groups in flight across k-steps (wgmma_in_flight=1) ---------------------------
# A k-step's wgmma call returns with its group still running and waits only for the previous
# call's.  The pipelined ko body is [copies, compute] with the compute first (``schedule_gemm``):
# wait for step ko's cp.async group, barrier, issue wgmma(ko), wait for wgmma(ko - 1), barrier
# (every warpgroup is done with ko - 1), then the copies of step ko + stages - 1 into the
# buffers step ko - 1 read.  After the loop, ``drain_after`` waits for the last groups.
def _copies_for_groups_in_flight(sch, ko, copies) -> None:
    """Put the copies' loop nests under ``ko`` into one loop of one iteration, so the software
    pipeline sees a single producer.  (With the compute first and the A and B copies apart,
    TVM 0.27 counts them as two cp.async groups per k-step but commits them as one, and its
    cp.async wait lets one group too many run.)  With two stages TVM would keep one buffer
    per tile, as the copy comes after the compute that reads it; the group in flight still
    reads it, so each copy is double-buffered."""
    tops = []
    for block in copies:
        loops = sch.get_loops(block)
        depth = next(d for d, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(ko)))
        tops.append(sch.add_unit_loop(loops[depth + 1]))
        sch.annotate(block, "double_buffer_scope", 0)
    sch.merge(*tops)


def drain_after(sch, ko, config: TcGemmConfig) -> tvm.IRModule:
    """The module with a block calling ``wgmma_drain`` right after the ko loop (so after the
    pipeline's last steps, which TVM unrolls after it) and before the barrier that precedes
    the accumulator store: no group still reads the A and B tiles when the C tile overwrites
    them.  The block declares this warp's accumulator tile (as ``_schedule_wgmma`` tiles M
    and N), which keeps the accumulator array compacted to one warp's fragments."""
    bound, sref = {}, sch.get_sref(ko).parent
    while sref is not None:  # the block, warp and K-slice indices around ko
        if isinstance(sref.stmt, tvm.tirx.For) and sref.stmt.thread_binding is not None:
            bound[sref.stmt.thread_binding.thread_tag] = sref.stmt.loop_var
        sref = sref.parent
    root = sch.get(sch.get_sblock("root"))
    accumulators = next(buf for buf in root.alloc_buffers if buf.scope() == "wmma.accumulator")
    rows, cols = config.warp_row_tiles * MMA_TILE, config.warp_col_tiles * MMA_TILE
    row = (bound["blockIdx.x"] * config.block_row_warps + bound["threadIdx.y"]) * rows
    col = (bound["blockIdx.y"] * config.block_col_warps + bound["threadIdx.z"]) * cols
    tile = (slice(row, row + rows), slice(col, col + cols))
    if len(accumulators.shape) == 3:  # C[z]: split-K's slice or a grouped view's GEMM
        tile = (slice(bound["blockIdx.z"], bound["blockIdx.z"] + 1), *tile)
    region = accumulators[tile]
    call = wgmma_drain(accumulators.data, config.warp_row_tiles * config.warp_col_tiles)
    drain = tvm.s_tir.SBlockRealize([], True, tvm.s_tir.SBlock([], [region], [region], "wgmma_drain", call))
    loop = sch.get(ko)

    def insert(seq):  # the drain after ko in the sequence that holds it
        if not any(child.same_as(loop) for child in seq.seq):
            return seq
        return tvm.tirx.SeqStmt([stmt for child in seq.seq
                                 for stmt in ((child, drain) if child.same_as(loop) else (child,))])

    func = sch.mod["main"]
    return tvm.IRModule({"main": func.with_body(tvm_ffi.structural_map(func.body, (tvm.tirx.SeqStmt, insert)))})
