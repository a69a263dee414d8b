"""The template's features of configs: what a config does to the workload (tile shapes, waves
on the GPU, padding waste, reuse, k-loop length, the problem size) rather than only its raw knob
values, so a model trained on the measurements of one workload says something useful about
another (transfer learning).  Moved from ``search.cost_model``, which now asks the space's
template (``Template.features``) and so knows nothing of these knobs.
"""

from __future__ import annotations

import numpy as np

from .intrinsic_paths import PATHS
from .knobs import WMMA_SHAPES, code
from .rules import derive_rows

_WMMA_NAMES = tuple(WMMA_SHAPES)
_LOG2_KNOBS = ("block_row_warps", "block_col_warps", "warp_row_tiles", "warp_col_tiles", "chunk")
_MAX_THREADS_PER_SM = 2048
_MAX_BLOCKS_PER_SM = 32
# One indicator feature per path besides WMMA, named after it; swizzled paths by code.
_OTHER_PATHS = tuple(name for name in PATHS if name != "wmma")
_SWIZZLED = np.array([p.swizzled for p in PATHS.values()])


def block_tiles(space, pos: np.ndarray) -> np.ndarray:
    """(n, 4) rows of block M, N, K and warps: what sets a config's tiling apart."""
    v = derive_rows(space, pos)
    return np.stack([v["bm"], v["bn"], v["bk"], v["warps"]], axis=1)


# ---- features -------------------------------------------------------------------
FEATURE_NAMES = (
    *(f"log2_{k}" for k in _LOG2_KNOBS),
    *(f"wmma_{w}" for w in _WMMA_NAMES),
    "a_conflict_ways", "b_conflict_ways", "offset_c", "log2_vec_a", "log2_vec_b", "log2_vec_c",
    "log2_block_m", "log2_block_n", "log2_block_k", "threads", "warps", "log2_smem_bytes",
    "acc_fragments", "tile_intensity", "log2_blocks", "waves", "last_wave_use",
    "resident_blocks", "occupancy_waves", "padding_efficiency", "log2_flops_per_block",
    "log2_k_trips", "log2_M", "log2_N", "log2_K", "stages", "frag_buffers", "log2_split_k", *_OTHER_PATHS,
    "wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b", "ping_pong", "tma_im2col", "tma_store",
    "setmaxnreg", "log2_group_pack", "log2_gemm_groups", "swap_ab", "prior",
)


def _fragment_load_conflicts(v: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Shared-memory bank-conflict ways of the A and B fragment loads (8 rows of 16 bytes):
    a padded row stride of s 16-byte units puts the rows on 8 / gcd(s, 8) distinct bank
    groups; the swizzled tiles of the mma and wgmma paths are conflict-free.  Transferable where
    the raw offsets are not: offset 0 is bad for WMMA but the only choice for mma and wgmma."""
    swizzled = _SWIZZLED[v["intrinsic"]]
    ways = [np.where(swizzled, 1, np.gcd((v[size] + v[offset]) // 8, 8))
            for size, offset in (("bk", "offset_a"), ("b_row", "offset_b"))]
    return tuple(w.astype(np.float64) for w in ways)


def features_of(space, v: dict, prior_of) -> np.ndarray:
    """The features of rows already through ``rules.derive``; ``prior_of(space, v)``: the prior
    on those rows (passed in so that this module does not import ``prior``: one level lower)."""
    # the GEMM of each row (group_pack's: N, K and the GEMMs of its packed groups)
    m, n, k = space.view.m, v["gemm_n"], v["gemm_k"]
    sm = space.gpu.sm_count
    f = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    gm, gn, gk, blocks = v["gm"], v["gn"], v["gk"], v["blocks"]
    waves = blocks / sm
    last_wave = waves / np.ceil(waves)
    resident = np.minimum.reduce([
        np.full(blocks.shape, _MAX_BLOCKS_PER_SM),
        _MAX_THREADS_PER_SM // v["threads"],
        np.maximum(1, space.gpu.max_smem_per_block // v["smem"]),
    ])
    padded = f(gm * v["bm"]) * f(gn * v["bn"]) * f(gk * v["bk"] * v["split_k"])
    bm, bn = f(v["bm"]), f(v["bn"])
    cols = [
        *(np.log2(f(v[name])) for name in _LOG2_KNOBS),
        *(f(v["wmma"] == i) for i in range(len(_WMMA_NAMES))),
        *_fragment_load_conflicts(v), f(v["offset_c"]),
        np.log2(f(v["vec_a"])), np.log2(f(v["vec_b"])), np.log2(f(v["vec_c"])),
        np.log2(bm), np.log2(bn), np.log2(f(v["bk"])),
        f(v["threads"]), f(v["warps"]), np.log2(f(v["smem"])),
        f(v["frags"]), bm * bn / (bm + bn), np.log2(f(blocks)), waves, last_wave,
        f(resident), blocks / (sm * resident), (m * n * k) / padded,
        np.log2(2.0 * bm * bn * f(gk * v["bk"])), np.log2(f(gk)),
        np.full(blocks.shape, np.log2(m)), np.log2(f(n)), np.log2(f(k)),
        f(v["stages"]), f(v["frag_buffers"]), np.log2(f(v["split_k"])),
        *(f(v["intrinsic"] == code("intrinsic", name)) for name in _OTHER_PATHS), f(v["wgmma_in_flight"]),
        f(v["warp_specialized"]), f(v["consumers_along_m"]), f(v["multicast_b"]), f(v["ping_pong"]), f(v["tma_im2col"]),
        f(v["tma_store"]), f(v["setmaxnreg"]), np.log2(f(v["group_pack"])), np.log2(f(v["gemm_groups"])),
        f(v["swap_ab"] > 0),
        prior_of(space, v),
    ]
    return np.stack(cols, axis=1).astype(np.float32)
