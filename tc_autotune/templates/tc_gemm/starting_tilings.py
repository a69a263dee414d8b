"""The warp-specialized kernel's starting tilings: the configs a tune on Hopper measures first
(``Template.starting_configs``).  Search data, not code generation: no TVM, and not in the
``warp_specialized`` package, which writes the kernel."""

from __future__ import annotations

from .knobs import TcGemmConfig
from .packing import why_not_packed

# The tilings cuBLAS's and cuDNN's own Hopper kernels use (their profiles say which) and the ones
# that measured best on the H100, as knob changes: a first batch measures them
# (``starting_configs``), since the kernel's good region is too small for a short search to
# find (rfc-3x3-b32: 1.01 of cuDNN hand-picked, 0.87 after 64 trials without them).
_IN_FLIGHT_4_STAGES = dict(intrinsic="wgmma", wmma="m16n16k16", wgmma_in_flight=1, stages=4, vec_a=8, vec_b=8,
                           vec_c=1, offset_a=0, offset_b=0, offset_c=0, block_row_warps=4, chunk=4, split_k=1,
                           frag_buffers=1)
# The persistent ones store C with TMA (tma_store) where it applies: 1.02-1.09x on the H100.
_STORED = dict(tma_store=1)
STARTING_TILINGS: tuple[dict, ...] = (
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=1),  # 128x256
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=2, **_STORED),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=1),  # 128x128
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=1, warp_col_tiles=8, warp_specialized=1),  # 64x256
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=1, warp_col_tiles=4, warp_specialized=1),  # 64x64
    # 64x128 in 4 K slices: where the tiles alone leave most SMs idle (small M, few channels)
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=1, warp_col_tiles=8, warp_specialized=1, split_k=4),
    # consumers along M (cuBLAS's cooperative 128x256: one m64n256 per consumer), persistent, with B
    # multicast to a pair of blocks; and 128x128 as two m64n128 consumers (2-15% faster than a column split)
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=1,
         consumers_along_m=1),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=2,
         consumers_along_m=1, **_STORED),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=1,
         consumers_along_m=1, multicast_b=1),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=4, warp_specialized=1,
         consumers_along_m=1),
    # the same in 4 K slices: a whole 128-row M of a weight-streaming dense (M = 128) on 4x the blocks
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=4, warp_specialized=1,
         consumers_along_m=1, split_k=4),
    # 128x96 on a 6-stage ring, one consumer or two along M (a dense with an (N, K) weight only): a
    # weight-streaming GEMM of one M tile puts a third more blocks on the SMs than with 128-column
    # tiles, with more k-steps in flight (cuBLAS's M = 128 kernel: 96x128 tiles, 7 stages)
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=2, warp_col_tiles=4, warp_specialized=1,
         consumer_n=96, stages=3, deep_ring=1),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=4, warp_specialized=1,
         consumers_along_m=1, consumer_n=96, stages=3, deep_ring=1),
    # ping-pong at 128x128 and 64x256 (one m64n256 a warpgroup): the fastest kernels of those tiles
    # on the H100, best where 128x256 tiles are too few to fill the GPU; with the producer's
    # registers moved to the consumers (setmaxnreg: 1.02-1.05x on ping-pong)
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=2,
         ping_pong=1, setmaxnreg=1, **_STORED),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=1, warp_col_tiles=8, warp_specialized=2,
         ping_pong=1, setmaxnreg=1, **_STORED),
    # A by TMA im2col (convs only): no rows lost where whole output rows do not fill a block;
    # 1.15-1.2x the best earlier kernel on the 14x14 seeds at 128x256
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=2,
         consumers_along_m=1, tma_im2col=1, **_STORED),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=1,
         tma_im2col=1),
)


# fp8 only, unmeasured when written: fp16's small-M dense records are mma.sync kernels, which have no
# fp8 twin, so an fp8 GEMV-like M (1-16 tokens streaming the weights) starts from the warp-specialized
# kernel's 64-row tiles in 8 K slices (a cluster of 8), 64 and 128 columns wide.
FP8_STARTING_TILINGS: tuple[dict, ...] = (
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=1, warp_col_tiles=4, warp_specialized=1, split_k=8),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=1, warp_col_tiles=8, warp_specialized=1, split_k=8),
)


# swap_ab (a dense of M <= 128 with an (N, K) weight, fp16, bf16 or fp8; invalid elsewhere): 64 weight
# rows x 8, 16 or 64 tokens a block on a 16-stage ring (the stages knob's 4; fewer where the shared memory
# runs out), as cuBLAS's nvjet *_64x8_* fp8 kernels; 8 tokens in 2 K slices for the grid; 8 tokens with
# two consumer warpgroups taking the k-steps in turn (on an H100 the fastest fp8 kernel of the
# 11008 x 4096 GEMV, 1.06x torch._scaled_mm, where no starting tiling had it).
SWAP_STARTING_TILINGS: tuple[dict, ...] = tuple(
    {**dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=1, warp_col_tiles=4, warp_specialized=1,
            consumers_along_m=0, multicast_b=0, ping_pong=0, setmaxnreg=0), **changes}
    for changes in (dict(swap_ab=8), dict(swap_ab=16), dict(swap_ab=64), dict(swap_ab=8, split_k=2),
                    dict(swap_ab=8, block_col_warps=2)))


def starting_configs(space) -> list[TcGemmConfig]:
    """``STARTING_TILINGS`` (fp8: and ``FP8_STARTING_TILINGS``; then ``SWAP_STARTING_TILINGS``) made of
    the space's default config,
    those valid in ``space`` (none off Hopper), each with fewer stages where the K loop is shorter
    than 4 steps, and with C stored from registers where the workload cannot take TMA stores
    (spatial boxes of A).  Narrow groups (``packing``): first the prior's best config of each
    other valid group_pack value, so a tune measures every packing (the prior's guess of what
    the block-diagonal zeros cost is unmeasured)."""
    base = space.default_config().as_dict()
    found = _packings(space, base["group_pack"])
    for changes in STARTING_TILINGS + FP8_STARTING_TILINGS * space.view.fp8 + SWAP_STARTING_TILINGS:
        for store in sorted({changes.get("tma_store", 0), 0}, reverse=True):
            config = _first_valid(space, [TcGemmConfig(**{**base, **changes, "stages": stages, "tma_store": store})
                                          for stages in range(changes["stages"], 1, -1)])
            if config is not None:
                found += [config] if config not in found else []
                break
    return found


def _first_valid(space, configs: list[TcGemmConfig]) -> TcGemmConfig | None:
    return next((config for config in configs if space.why_invalid(config) is None), None)


def _packings(space, chosen: int) -> list[TcGemmConfig]:
    """The prior's best config of each valid group_pack value but ``chosen`` (the default's)."""
    found = []
    for pack in space.knobs["group_pack"]:
        if pack != chosen and why_not_packed(space.view, pack) is None:
            config = space.template.default_config(space, group_pack=pack)  # ``validity.default_config``
            found += [config] if config.group_pack == pack and config not in found else []
    return found
