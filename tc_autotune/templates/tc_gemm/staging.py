"""What every intrinsic path's schedule does alike: the block tile's loops bound to blocks and
warps, and the operands' and the accumulators' trips through shared memory (cooperative vector
copies, fragment tiles, the C tile's padding)."""

from __future__ import annotations

from .knobs import TcGemmConfig

SMEM = "shared.dyn"


def cooperative_copy(sch, block, config: TcGemmConfig, vec: int):
    """All threads of the block copy a 2-D tile, ``vec`` contiguous elements each."""
    loops = sch.get_loops(block)
    fused = sch.fuse(*loops[-2:])
    _, ty, tz, tx, vi = sch.split(
        fused, [None, config.block_row_warps, config.block_col_warps, 32, vec]
    )
    sch.bind(ty, "threadIdx.y")
    sch.bind(tz, "threadIdx.z")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(vi)


def tile_block(sch, loops, config: TcGemmConfig, tile_mnk):
    """m -> [bx, ty, warp_row_tiles, tm], n -> [by, tz, warp_col_tiles, tn], k -> [ko, chunk, tk]
    (tile loops outermost to innermost), bound to blocks and warps."""
    i, j, kk = loops
    tm, tn, tk = tile_mnk
    bx, ty, i_t, i_w = sch.split(i, [None, config.block_row_warps, config.warp_row_tiles, tm])
    by, tz, j_t, j_w = sch.split(j, [None, config.block_col_warps, config.warp_col_tiles, tn])
    ko, ki, k_w = sch.split(kk, [None, config.chunk, tk])
    sch.reorder(bx, by, ty, tz, ko, ki, i_t, j_t, i_w, j_w, k_w)
    sch.bind(bx, "blockIdx.x")
    sch.bind(by, "blockIdx.y")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tz, "threadIdx.z")
    return by, tz, ko, ki, i_w


def stage_output(sch, gemm, by, tz, acc_scope: str, inline_out: str | None):
    """Accumulators (per warp) -> shared C tile (per block) -> global.  Returns (c_frag, c_shared)."""
    c_shared = sch.cache_write(gemm, 0, SMEM)
    c_frag = sch.cache_write(gemm, 0, acc_scope)
    sch.reverse_compute_at(c_frag, tz, preserve_unit_loops=True)
    sch.reverse_compute_at(c_shared, by, preserve_unit_loops=True)
    if inline_out is not None:  # the output block (else split-K's sum kernel writes the output)
        sch.reverse_compute_inline(sch.get_sblock(inline_out))
    return c_frag, c_shared


def stage_operands(sch, gemm, by, tz, ko, ki, config: TcGemmConfig, frag_scopes, inline_out: str | None):
    """Accumulators -> shared C tile (per block) -> global; global -> shared A/B tiles (per
    ko) -> fragments (per chunk step, unless ``frag_scopes`` has None for A and B: wgmma
    reads shared memory itself); cooperative vector copies.  Returns the blocks:
    (c_frag, a_shared, b_shared, a_frag, b_frag), the fragments None when not staged."""
    c_frag, c_shared = stage_output(sch, gemm, by, tz, frag_scopes[2], inline_out)
    a_shared = sch.cache_read(gemm, 0, SMEM)
    b_shared = sch.cache_read(gemm, 1, SMEM)
    a_frag = b_frag = None
    if frag_scopes[0] is not None:
        a_frag = sch.cache_read(gemm, 0, frag_scopes[0])
        b_frag = sch.cache_read(gemm, 1, frag_scopes[1])
        sch.compute_at(a_frag, ki, preserve_unit_loops=True)
        sch.compute_at(b_frag, ki, preserve_unit_loops=True)
    sch.compute_at(a_shared, ko, preserve_unit_loops=True)
    sch.compute_at(b_shared, ko, preserve_unit_loops=True)
    sch.compute_inline(sch.get_sblock("A"))
    sch.compute_inline(sch.get_sblock("B"))
    cooperative_copy(sch, a_shared, config, config.vec_a)
    cooperative_copy(sch, b_shared, config, config.vec_b)
    cooperative_copy(sch, c_shared, config, config.vec_c)
    return c_frag, a_shared, b_shared, a_frag, b_frag


def fragment_tiles(sch, block, rows: int, cols: int):
    """Split a block's last two loops into (rows x cols) fragment tiles, tile loops outside;
    returns the inner row loop, where a fragment load or store intrinsic is tensorized."""
    r, c = sch.get_loops(block)[-2:]
    r_o, r_i = sch.split(r, [None, rows])
    c_o, c_i = sch.split(c, [None, cols])
    sch.reorder(r_o, c_o, r_i, c_i)
    return r_i


def align_c_tile(sch, store_name: str, config: TcGemmConfig) -> None:
    if config.offset_c:
        # After tensorize: the tensorized store block is the C tile's writer now.
        sch.storage_align(sch.get_sblock(store_name + "_o"), 0, axis=-2,
                          factor=config.block_n + config.offset_c, offset=0)
