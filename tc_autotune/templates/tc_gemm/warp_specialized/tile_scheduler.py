"""Which tiles of C a block computes, and in which order: one tile a block in a grouped raster
order, or (``warp_specialized=2``) a persistent block per SM walking the tiles, the stage ring
running on across them so the producer loads the next tile while the consumers store this one;
with ``ping_pong`` the block's two consumer warpgroups take its tiles in turn.  Split-K: the K
slice of each block of a cluster."""

from __future__ import annotations

import math

from ..knobs import PRODUCER_THREADS
from .layout import BlockLayout

RASTER_GROUP = 8  # M tiles per group of the block order (L2 reuse, as CUTLASS's and Triton's swizzle)


def grid_tiles(lay: BlockLayout) -> tuple[int, int]:
    """(M tiles, N tiles) of C; with multicast whole pairs: an odd last M tile gets a partner past
    M that loads and stores nothing."""
    grid_m = lay.tile.grid_m if lay.tile else math.ceil(lay.view.m / lay.bm)
    if lay.multicast:
        grid_m += grid_m % 2
    return grid_m, math.ceil(lay.view.n / lay.bn)


def grid(lay: BlockLayout) -> tuple[int, int]:
    """The launch: a block per tile (split-K: per tile and K slice); persistent, the most blocks it
    takes, one per tile: it launches at most one per SM of the GPU it runs on (``kernel.KernelPlan``)."""
    grid_m, grid_n = grid_tiles(lay)
    return (grid_m * grid_n, 1) if lay.persistent else (grid_m * lay.split, grid_n)


def k_steps(lay: BlockLayout) -> str:
    """The ring's depth and the k-steps KT this block runs: all of them, or its cluster rank's K slice."""
    kt = lay.kt
    if lay.split == 1:
        return f"\n  constexpr int STAGES = {lay.stages}, KT = {kt};"
    return f"""
  constexpr int STAGES = {lay.stages}, SLICE = {-(-kt // lay.split)};  // k-steps per K slice
  const int split_rank = blockIdx.x % {lay.split}, kt_begin = split_rank * SLICE, KT = min(SLICE, {kt} - kt_begin);"""


def first_k(lay: BlockLayout) -> str:
    """The GEMM k-step of the block's k-loop step kt."""
    return "kt" if lay.split == 1 else "(kt_begin + kt)"


def block_tile(lay: BlockLayout) -> str:
    """A non-persistent block's tile, from its place in the grouped block order (split-K: the
    place of its cluster, blockIdx.x / split along M)."""
    if lay.split == 1:
        linear, rows_m = "blockIdx.y * gridDim.x + blockIdx.x", "(int)gridDim.x"
    else:
        linear, rows_m = f"blockIdx.y * {grid_tiles(lay)[0]} + blockIdx.x / {lay.split}", grid_tiles(lay)[0]
    return f"""
  // Blocks in groups of {RASTER_GROUP} M tiles, N fastest within a group: a wave of blocks shares
  // a few A row panels and B column panels in L2 instead of sweeping all of A for each N tile.""" + _coords(
        lay, "  ", f"const int linear = {linear}, ", "linear", rows_m, "gridDim.y")


def tile_coords(lay: BlockLayout, indent: str) -> str:
    """A persistent block's tile number ``tile``, in the same grouped order, as its coordinates."""
    grid_m, grid_n = grid_tiles(lay)
    return _coords(lay, indent, "const int ", "tile", grid_m, grid_n)


def _coords(lay: BlockLayout, indent: str, declare: str, linear: str, rows_m, cols_n) -> str:
    """(m_tile, n_tile) of place ``linear`` in groups of RASTER_GROUP M tiles (of ``rows_m``),
    N fastest within a group (of ``cols_n``), then the tile's rows and first column.  ``declare``
    starts the first declaration."""
    lines = [f"{declare}per_group = {RASTER_GROUP} * {cols_n};",
             f"const int first_m = {linear} / per_group * {RASTER_GROUP};",
             f"const int group_m = min({rows_m} - first_m, {RASTER_GROUP});",
             f"const int m_tile = first_m + {linear} % per_group % group_m, n_tile = {linear} % per_group / group_m;",
             *_block_rows(lay), f"const int n0 = n_tile * {lay.bn};"]
    return "".join(f"\n{indent}{line}" for line in lines)


def _block_rows(lay: BlockLayout) -> list[str]:
    """The tile's rows m0.. (m_end: the last stored + 1).  A spatial tile's are whole output rows of
    one image (or whole images), from its image img0 and output row oh0; a row tile's are C's rows
    m0 .. m0 + rows * width; with im2col the first output pixel's image and first tap's input row
    and column, where TMA starts the box."""
    m, tile = lay.view.m, lay.tile
    if tile is None:
        rows = [f"const int m0 = m_tile * {lay.bm}, m_end = {m};"]
        if lay.im2col:
            im, (sh, sw), (pad_top, pad_left) = lay.view.a.map, lay.view.a.map.stride, lay.view.a.map.pad
            hw = im.out_height * im.out_width
            rows.append(f"const int a_img = m0 / {hw}, a_h = m0 % {hw} / {im.out_width} * {sh} - {pad_top}, "
                        f"a_w = m0 % {im.out_width} * {sw} - {pad_left};")
        return rows
    if lay.row_boxes:
        return [f"const int m0 = m_tile * {tile.pixels}, m_end = min(m0 + {tile.pixels}, {m});"]
    hw = tile.height * tile.width
    images_end = f"min(img0 + {tile.images}, {tile.batch}) * {hw}"  # the first row past the tile's images
    return [f"const int img0 = m_tile / {tile.tiles_per_image} * {tile.images}, "
            f"oh0 = m_tile % {tile.tiles_per_image} * {tile.rows};",
            f"const int m0 = img0 * {hw} + oh0 * {tile.width};",
            f"const int m_end = {images_end} < m0 + {tile.pixels} ? {images_end} : m0 + {tile.pixels};"]


# ---- persistent blocks --------------------------------------------------------------------------
# One block per SM walks tiles blockIdx.x, + gridDim.x, ...; the ring's steps (it) run on across
# tiles.  Ping-pong: consumer warpgroup wg takes the block's tiles wg, wg + 2, ... (ring steps from
# wg * KT on, skipping the other's KT), and its main loop starts once the other's previous one has
# passed its last stage (named barriers 2 + wg), so the ring's phases stay in step and one's
# epilogue runs under the other's wgmmas.
def producer_tiles(lay: BlockLayout) -> str:
    """The producer's tile loop: every tile of the block."""
    return f"for (int tile = blockIdx.x; tile < {math.prod(grid_tiles(lay))}; tile += gridDim.x) {{"


def consumer_tiles(lay: BlockLayout) -> str:
    """A consumer warpgroup's tile loop: every tile of the block, or with ping-pong its turns'."""
    first, step = ("blockIdx.x + wg * gridDim.x", "2 * gridDim.x") if lay.ping_pong else ("blockIdx.x", "gridDim.x")
    return f"for (int tile = {first}; tile < {math.prod(grid_tiles(lay))}; tile += {step}) {{"


def consumer_first_step(lay: BlockLayout) -> str:
    """The ring step of a consumer warpgroup's first k-step."""
    return "wg * KT" if lay.ping_pong else "0"


def wait_turn(lay: BlockLayout) -> str:
    """Ping-pong: before its main loop, a warpgroup waits for the other's turn to end."""
    if not lay.ping_pong:
        return ""
    return f"""
    if (tile >= (int)gridDim.x) asm volatile("bar.sync %0, {2 * PRODUCER_THREADS};" :: "r"(2 + wg) : "memory");  // the other's turn ends"""


def hand_over(lay: BlockLayout) -> str:
    """Ping-pong: after its main loop, a warpgroup gives the other its turn (if it has a tile)."""
    if not lay.ping_pong:
        return ""
    return f"""
    if (tile + (int)gridDim.x < {math.prod(grid_tiles(lay))}) asm volatile("bar.arrive %0, {2 * PRODUCER_THREADS};" :: "r"(3 - wg) : "memory");  // its turn"""


def skip_turn(lay: BlockLayout) -> str:
    """Ping-pong: the ring steps of the other warpgroup's tile."""
    return "\n    it += KT;  // the other warpgroup's tile" if lay.ping_pong else ""
