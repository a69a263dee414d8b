"""An analytic prior: a hand-made estimate of a config's relative throughput.

It picks the default config (``ConfigSpace.default_config``), seeds the tuner's first
batch, and the cost model sees it as a feature and starts from it (zero-shot).
"""

from __future__ import annotations

import math

import numpy as np

from .intrinsic_paths import PATHS
from .gemm import OUT_BYTES, a_is_matrix, spatial_tile
from .knobs import code
from .rules import derive_rows, per_block_m

# Per intrinsic code: the factor of a swizzled path, 0 where padded-row offsets count instead.
_SWIZZLE_WEIGHT = np.array([p.prior_weight if p.swizzled else 0.0 for p in PATHS.values()])
_SQUARE_WMMA = code("wmma", "m16n16k16")
# wgmma_in_flight=1 by stages (H100 sweep of the seed workloads' best configs):
# 0.69-0.97x of waiting at 2 stages; 0.95-1.10x at 3 (0.95-1.04x of the best waiting): neutral.
_IN_FLIGHT_WEIGHT = {2: 0.85}
# warp_specialized=1, by how A is loaded: TMA boxes (dense, 1x1 convs, spatial tiles) 1.05-1.2x
# against the shipped best configs when written (H100).  A gathered by the producer's threads
# was 0.9-0.97x then; in the H100 histories since (every gathered-A conv tuned, the producer
# kernel's best against plain wgmma's best where no k-slice splits the channels) it wins 17 of 26,
# geomean 1.07x, so it weighs a little over the plain path, not under it.
_WARP_SPECIALIZED_WEIGHT = {True: 1.1, False: 1.05}
# tma_store=1 by output dtype: C through shared memory and TMA stores, on the H100 1.02-1.09x with
# fp32 output, 1.24-1.37x with fp16 (from registers an fp16 pair is a 4-byte store: TMA gains more);
# bf16 output taken as fp16's (its pairs are 4-byte stores too; not measured apart)
_TMA_STORE_WEIGHT = {"float32": 1.05, "float16": 1.3, "bfloat16": 1.3}
# group_pack=P multiplies P times the task's flops (B's block-diagonal zeros), which costs time only
# where that makes the kernel compute-bound: past this many flops per byte of the input and output
# tensors (about where a kernel of this template, ~500 TFLOP/s of Tensor Core work over ~3.3 TB/s,
# turns compute-bound on an H100; a guess, unmeasured when written).
_RIDGE_FLOPS_PER_BYTE = 150.0
# swap_ab by the stages knob (its ring: 8, 12, 16 stages): a GEMV-like dense streams its weights, so
# the deepest ring that fits keeps most bytes in flight (cuBLAS's 64x8 fp8 kernel: 16 stages).
# Unmeasured when written; its padding (M rows to swap_ab instead of 64) counts in ``padding``.
_SWAP_STAGES_WEIGHT = {2: 0.9, 3: 0.95, 4: 1.0}
# fp32 input on the warp-specialized kernel: its producer's threads load and convert A and B with
# at most 32 KB in flight per block, against TMA's whole ring.  H200, the fp16 twins' records so
# converted against the cast kernel and a plain path's zero-shot pick: 0.45-0.47x on compute-bound
# 3x3 convs, 0.85x and 1.0x on the 1x1s at 14x14 with 1024 channels (the cast kernel's extra pass
# hurts most there).
_CONVERTING_PRODUCER_WEIGHT = 0.45
# A conv whose A is gathered (not a matrix), on a path without a producer warpgroup, where a block's
# k-slice splits A's runs (its channels per filter tap are not a multiple of block_k): each vector
# of the A tile then computes its own tap, a division and a remainder per load in the main loop.
# H100 logs (every gathered-A conv tuned, best config of each path against the workload's best):
# wgmma 2.46x off split, 1.09x aligned; mma 1.94x against 1.35x; WMMA ~2x either way.
_SPLIT_RUN_WEIGHT = {code("intrinsic", "wgmma"): 0.45, code("intrinsic", "mma"): 0.7}


def _a_boxed_weight(view, block_m: np.ndarray) -> np.ndarray:
    """The warp-specialized kernel's factor per row: TMA boxes of A or an A gathered by threads.
    Row boxes (``gemm.row_tile``, strided convs) count as gathered: measured 0.95-1.15x of the
    gathered A on the H100, not the 1.05-1.2x of a matrix or spatial box."""
    if a_is_matrix(view):
        return np.full(len(block_m), _WARP_SPECIALIZED_WEIGHT[True])
    return per_block_m(block_m, lambda bm: _WARP_SPECIALIZED_WEIGHT[spatial_tile(view, bm) is not None], float)


def _block_diagonal_weight(view, packs: np.ndarray) -> np.ndarray:
    """group_pack's factor per row: the roofline time of the task's flops over that of P times as
    many (1 where both are memory-bound, and for P = 1)."""
    moved = (math.prod(view.a.shape) * view.element_bytes
             + math.prod(view.c.shape) * OUT_BYTES.get(view.out_dtype, view.element_bytes))
    intensity = view.flops / moved
    packs = np.asarray(packs, dtype=np.float64)
    return np.minimum(1.0, _RIDGE_FLOPS_PER_BYTE / (packs * intensity)) / min(1.0, _RIDGE_FLOPS_PER_BYTE / intensity)


def _lookup(table: dict, values: np.ndarray, default: float = 1.0) -> np.ndarray:
    out = np.full(values.shape, default, dtype=np.float64)
    for key, weight in table.items():
        out[values == key] = weight
    return out


def prior_score(space, pos: np.ndarray) -> np.ndarray:
    """A hand-made estimate of relative throughput, before anything is measured.

    Product of: padding waste, how well the grid fills the SMs (last-wave idle
    SMs), data reuse of the block tile (saturating near 128x128, falling off for
    huge tiles that spill or starve the grid), warps per block, and mild
    preferences for wide vector loads, a 32-64 deep k-tile, the square WMMA shape
    and padded shared-memory rows (or a swizzled path, by its ``prior_weight``), a
    pipelined (multi-stage) k-loop, wgmma groups kept in flight across k-steps, a
    warp-specialized wgmma kernel (but with fp32 input, which its producer converts), a mild cost
    for split-K's second kernel, and a heavy one for a plain mma or wgmma k-loop whose k-slices
    split a gathered A's channels.
    """
    return prior_of(space, derive_rows(space, pos))


def prior_of(space, v: dict[str, np.ndarray]) -> np.ndarray:
    """``prior_score`` of rows already through ``rules.derive``."""
    # the GEMM each row computes (group_pack's: its block-diagonal zeros count as work here, and
    # in the roofline factor below)
    m, n, k, groups = space.view.m, v["gemm_n"], v["gemm_k"], v["gemm_groups"]
    bm, bn, bk, split, gm, gn, gk = (v[x].astype(np.float64)
                                     for x in ("bm", "bn", "bk", "split_k", "gm", "gn", "gk"))
    padding = (m * n * k) / (gm * bm * gn * bn * gk * bk * split)
    waves = gm * gn * split * groups / space.gpu.sm_count  # every group's GEMM
    wave_use = waves / np.ceil(waves)
    intensity = bm * bn / (bm + bn)
    reuse = np.minimum(1.0, intensity / 48.0) * np.where(bm * bn > 256 * 128, 0.6, 1.0)
    warps = _lookup({1: 0.5, 2: 0.8, 4: 1.0, 8: 0.9, 16: 0.7}, v["warps"])
    vec = (_lookup({1: 0.45, 2: 0.65, 4: 0.85}, v["vec_a"]) * _lookup({1: 0.8, 2: 0.9, 4: 0.95}, v["vec_b"])
           * _lookup({1: 0.9, 2: 0.95}, v["vec_c"]))
    chunk = _lookup({1: 0.85, 8: 0.75}, v["chunk"])
    shape = _lookup({_SQUARE_WMMA: 1.0}, v["wmma"], default=0.9)
    # Padded rows matter to WMMA; a swizzled path has no padding and its own weight.
    swizzled = _SWIZZLE_WEIGHT[v["intrinsic"]]
    offsets = np.where(swizzled > 0, swizzled,
                       _lookup({0: 0.85}, v["offset_a"]) * _lookup({0: 0.8}, v["offset_b"]))
    stages = np.where(v["swap_ab"] > 0, _lookup(_SWAP_STAGES_WEIGHT, v["stages"]),
                      _lookup({1: 0.8, 4: 0.85}, v["stages"]))  # H100 sweep: 2-3 stages best, 4 costs occupancy
    # wgmma_in_flight: the Tensor Cores work through the barrier and cp.async wait between k-steps
    # (predicted 1.05-1.1x; measured a wash at 3 stages and a loss at 2).
    in_flight = np.where(v["wgmma_in_flight"] == 1, _lookup(_IN_FLIGHT_WEIGHT, v["stages"]), 1.0)
    # warp_specialized: a producer warpgroup keeps the stages full, no block barrier per k-step
    # (tma_im2col: A is one TMA box a k-step, whatever the conv)
    boxed = np.where(v["tma_im2col"] > 0, _WARP_SPECIALIZED_WEIGHT[True], _a_boxed_weight(space.context.view, v["bm"]))
    stored = np.where(v["tma_store"] > 0, _TMA_STORE_WEIGHT.get(space.view.out_dtype, 1.0), 1.0)
    converting = _CONVERTING_PRODUCER_WEIGHT if space.view.dtype != space.view.operand_dtype else 1.0
    specialized = np.where(v["warp_specialized"] > 0, boxed * stored * converting, 1.0)
    # Split-K: a fuller grid (counted in wave_use) against a second kernel and fp32 partials.
    splitting = np.where(split > 1, 0.9, 1.0)
    packing = np.where(v["group_pack"] > 1, _block_diagonal_weight(space.view, v["group_pack"]), 1.0)
    return (padding * wave_use * reuse * warps * vec * chunk * shape * offsets * stages * in_flight * specialized
            * splitting * packing * _split_run_weight(space.view, v))


def _split_run_weight(view, v: dict[str, np.ndarray]) -> np.ndarray:
    """The factor of a gathered A whose runs a k-slice splits, on the paths without a producer."""
    if a_is_matrix(view):
        return np.ones(len(v["bk"]))
    split = (view.a.run % v["bk"] != 0) & (v["warp_specialized"] == 0)
    return np.where(split, _lookup(_SPLIT_RUN_WEIGHT, v["intrinsic"]), 1.0)
