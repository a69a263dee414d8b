"""On a Hopper GPU: the warp-specialized kernel matches the fp32 reference on NaN-poisoned
output element by element, with TMA (matrix, spatial and row boxes) or cp.async operands, matrix-edge tails in M, N and K, padding, stride,
dilation, both weight layouts, a batch, fp16 output, 2-4 stages and 1-2 consumer warpgroups (split by
columns or by rows, or two taking whole tiles in turn; 48- or 96-column consumers; rings of 6 and 8
stages), split-K clusters and B multicast to a pair of blocks, C stored with TMA, fused epilogues, registers moved by setmaxnreg; and keeping wgmma groups in flight changes no bit of it."""

from dataclasses import replace

import numpy as np
import pytest

from tc_autotune.core import tasks
from tc_autotune import workloads

from test_gpu_epilogue import check, run
from test_warp_specialized import FUSED_VIEWS, MAXNREG_VIEWS, WS

pytestmark = pytest.mark.gpu

CASES = [
    ("rfc-3x3-b1", dict()),  # one 14x14 image, a 9-row spatial tile and a 5-row one
    ("rfc-3x3-b1", dict(block_col_warps=1, warp_row_tiles=1)),  # 64-row blocks: 4-row spatial tiles
    ("resnet50-res5-3x3-512-512-b32", dict(block_col_warps=1)),  # 7x7: two images a box
    ("resnet50-res5-3x3-512-512-b32", dict(block_col_warps=1, warp_row_tiles=4, warp_col_tiles=4)),  # 256 rows: 5 images a box
    # row boxes: stride 2 as TMA's traversal stride; 3 images of 17 rows in 7-row tiles across
    # images, the last reading rows past the last image (zeros, never stored); N tail
    ("n=3,h=33,w=33,c=128,k=96,r=3,s=3,stride=2,pad=1", dict(block_col_warps=1, stages=3)),
    ("rfc-1x1-b32", dict(block_col_warps=1, stages=3)),  # both by TMA; 392 tiles: 3 a persistent block
    ("resnet50-res3-1x1-256-512-s2-b1", dict(warp_row_tiles=1, stages=2)),
    ("n=2,h=9,w=11,c=16,k=32,r=3,s=3,stride=1,pad=2,dilation=2", dict(block_col_warps=1, warp_col_tiles=4, stages=3)),
    ("dense:m=100,n=200,k=136,b=nk", dict(stages=3)),  # tails in M, N and K
    ("dense:m=64,n=75,k=128,b=nk", dict(block_col_warps=1, warp_col_tiles=4, stages=2)),  # odd N: scalar stores
    ("dense:m=130,n=192,k=520,b=kn,out_dtype=float16", dict(stages=3)),
    ("dense:batch=2,m=40,n=64,k=96,b=kn", dict(block_col_warps=1, warp_row_tiles=1, warp_col_tiles=4, stages=2)),
]


@pytest.mark.parametrize("persistent", [False, True], ids=["", "persistent"])
@pytest.mark.parametrize("name,knobs", CASES, ids=[c[0][:40] for c in CASES])
def test_warp_specialized_kernels_match_the_reference(name, knobs, persistent):
    """warp_specialized=2, the persistent kernel, walks tiles blockIdx.x, + gridDim.x (this GPU's
    SM count: 132 on an H100 SXM), ... with the stage ring running on across them: most cases
    have fewer tiles than blocks, rfc-3x3-b1's res5 case and the 1x1 many more."""
    _check_in_flight_and_waiting(workloads.get(name), replace(WS, **knobs, warp_specialized=2 if persistent else 1))


def _check_in_flight_and_waiting(wl, config):
    """The kernel matches the reference (relative L2 error, then element by element: a wrong row
    or box would hide in the L2 error of a big output), and waiting for each k-step's wgmma
    groups changes no bit of it."""
    check(wl, config)
    in_flight, inputs, _ = run(wl, config)
    reference = tasks.of(wl).reference(wl, *inputs)
    worst = np.abs(in_flight - reference).max() / np.abs(reference).max()
    assert worst < 4e-3, f"max error {worst:.3g} of the largest output"
    waiting = run(wl, replace(config, wgmma_in_flight=0))[0]
    assert np.array_equal(in_flight, waiting), f"{np.sum(in_flight != waiting)} elements differ"


# Split-K: the K slices run as one cluster's blocks and sum through distributed shared memory.
SPLIT_CASES = [
    ("dense:m=16,n=384,k=1000,b=nk", dict(block_col_warps=1, warp_row_tiles=1, split_k=4)),  # 16 k-steps, K tail
    ("dense:m=100,n=200,k=520,b=kn,out_dtype=float16", dict(stages=3, split_k=2)),  # tails, 2 consumers
    ("rfc-3x3-b1", dict(block_col_warps=1, split_k=8)),  # 36 k-steps: 7 slices of 5 and one of 1
    ("n=2,h=9,w=11,c=64,k=32,r=3,s=3,pad=2,dilation=2", dict(block_col_warps=1, warp_col_tiles=4, stages=3, split_k=2)),
]


@pytest.mark.parametrize("name,knobs", SPLIT_CASES, ids=[c[0][:40] for c in SPLIT_CASES])
def test_warp_specialized_split_k_matches_the_reference(name, knobs):
    _check_in_flight_and_waiting(workloads.get(name), replace(WS, **knobs))


# Consumers along M: each of the 2 consumer warpgroups takes half the block's rows and one wgmma
# of all its columns (m64n256 at 128 x 256, m64n128 at 128 x 128).
ALONG_M_CASES = [
    ("rfc-3x3-b1", dict()),  # spatial tiles, one partial: rows of the second consumer past m_end
    ("dense:m=100,n=200,k=136,b=nk", dict(stages=3)),  # tails in M, N and K; the second consumer's rows 64-99
    ("dense:m=130,n=192,k=520,b=kn,out_dtype=float16", dict(warp_col_tiles=4, stages=3)),  # (K, N) atoms
    ("n=3,h=33,w=33,c=128,k=96,r=3,s=3,stride=2,pad=1", dict(warp_col_tiles=4, stages=3)),  # row boxes
    ("n=2,h=9,w=11,c=16,k=72,r=3,s=3,stride=1,pad=2,dilation=2", dict(warp_col_tiles=4, stages=3)),  # gathered
    ("resnet50-res5-3x3-512-512-b32", dict(warp_row_tiles=4, warp_col_tiles=4)),  # 2 slabs a consumer
]


@pytest.mark.parametrize("persistent", [False, True], ids=["", "persistent"])
@pytest.mark.parametrize("name,knobs", ALONG_M_CASES, ids=[c[0][:40] for c in ALONG_M_CASES])
def test_consumers_along_m_match_the_reference(name, knobs, persistent):
    config = replace(WS, **knobs, consumers_along_m=1, warp_specialized=2 if persistent else 1)
    _check_in_flight_and_waiting(workloads.get(name), config)


def test_consumers_along_m_with_split_k_match_the_reference():
    wl = workloads.get("dense:m=100,n=200,k=520,b=kn,out_dtype=float16")
    _check_in_flight_and_waiting(wl, replace(WS, stages=3, split_k=2, consumers_along_m=1))


# B multicast: clusters of 2 blocks along M, each loading half of every B box into both.
MULTICAST_CASES = [
    ("dense:m=330,n=200,k=520,b=kn,out_dtype=float16", dict(stages=3)),  # 3 M tiles: a partner past M; (K, N) atoms
    ("dense:m=100,n=200,k=136,b=nk", dict(block_col_warps=1, warp_row_tiles=1, stages=3)),  # tails, 64-row tiles
    ("rfc-3x3-b32", dict(consumers_along_m=1)),  # spatial tiles, m64n256
    ("n=3,h=33,w=33,c=128,k=96,r=3,s=3,stride=2,pad=1", dict(warp_col_tiles=4, stages=3)),  # row boxes
    ("n=2,h=9,w=11,c=16,k=72,r=3,s=3,stride=1,pad=2,dilation=2", dict(block_col_warps=1, warp_row_tiles=1,
                                                                       warp_col_tiles=4, stages=3)),  # gathered
]


@pytest.mark.parametrize("name,knobs", MULTICAST_CASES, ids=[c[0][:40] for c in MULTICAST_CASES])
def test_b_multicast_matches_the_reference(name, knobs):
    _check_in_flight_and_waiting(workloads.get(name), replace(WS, **knobs, multicast_b=1))


# 48- and 96-column consumers over a K-major B (consumer_n), and the ring twice the stages (deep_ring).
NARROW_CASES = [
    ("dense:m=100,n=200,k=520,b=nk", dict(block_col_warps=1, consumer_n=96, stages=3, deep_ring=1)),  # N tail: 96+96+8
    # two consumers along M of 96 columns each, C through TMA stores (96 fp32 columns: 3 chunks), a 6-stage
    # ring; fp16 output from registers (96 fp16 columns are no whole TMA store chunks: a rule refuses them)
    ("dense:m=130,n=192,k=520,b=nk", dict(consumers_along_m=1, consumer_n=96, stages=3, deep_ring=1, tma_store=1)),
    ("dense:m=130,n=192,k=520,b=nk,out_dtype=float16", dict(consumers_along_m=1, consumer_n=96, stages=4,
                                                             deep_ring=1)),
    ("dense:m=100,n=200,k=520,b=nk", dict(consumer_n=48, stages=3)),  # two consumers of 48 columns by columns
    # persistent, 64-row blocks, a batch, an 8-stage ring
    ("dense:batch=2,m=40,n=136,k=264,b=nk", dict(block_col_warps=1, warp_row_tiles=1, consumer_n=48,
                                                  warp_specialized=2, stages=4, deep_ring=1)),
    ("rfc-3x3-b32", dict(block_col_warps=1, stages=3, deep_ring=1)),  # a conv's spatial tiles on a 6-stage ring
]


@pytest.mark.parametrize("name,knobs", NARROW_CASES, ids=[c[0][:40] for c in NARROW_CASES])
def test_narrow_consumers_and_deep_rings_match_the_reference(name, knobs):
    _check_in_flight_and_waiting(workloads.get(name), replace(WS, **{"warp_col_tiles": 4, **knobs}))



# Ping-pong: two consumer warpgroups of a persistent block take its tiles in turn (tiles blockIdx.x,
# + gridDim.x, ... alternately; a block per SM, 132 on an H100 SXM), so most cases have more than
# 2 x 132 tiles; one has fewer than 132.
PING_PONG_CASES = [
    ("rfc-1x1-b256", dict()),  # 784 tiles of 128 x 128: 5-6 a block, 2-3 a warpgroup; both by TMA
    ("dense:m=1000,n=1032,k=520,b=kn,out_dtype=float16", dict(warp_row_tiles=1, warp_col_tiles=4, stages=3)),
    ("dense:m=2000,n=1000,k=200,b=nk", dict(warp_row_tiles=1, warp_col_tiles=4)),  # tails in M, N and K; 4 k-steps
    ("n=32,h=28,w=28,c=72,k=128,r=3,s=3,pad=1", dict(warp_row_tiles=1)),  # gathered A, 392 tiles
    ("n=32,h=65,w=65,c=128,k=128,r=3,s=3,stride=2,pad=1", dict(stages=3)),  # row boxes across images
    ("rfc-3x3-b1", dict()),  # 4 tiles: one per block, the second warpgroup idle
    # 64 x 256 (one m64n256 a warpgroup): both weight layouts, spatial tiles of 4 rows
    ("dense:m=2000,n=1000,k=520,b=kn,out_dtype=float16", dict(block_col_warps=2, warp_row_tiles=1, stages=3)),
    ("dense:m=4100,n=2048,k=256,b=nk", dict(block_col_warps=2, warp_row_tiles=1)),
    ("rfc-3x3-b32", dict(block_col_warps=2, warp_row_tiles=1)),
]


@pytest.mark.parametrize("name,knobs", PING_PONG_CASES, ids=[c[0][:40] for c in PING_PONG_CASES])
def test_ping_pong_consumers_match_the_reference(name, knobs):
    config = replace(WS, **{"block_col_warps": 1, **knobs}, warp_specialized=2, ping_pong=1)
    _check_in_flight_and_waiting(workloads.get(name), config)


# A by TMA im2col: one box of block_m consecutive output pixels per tap, across output rows and
# images (the last tile's pixels past the batch read zeros); padding, asymmetric padding and
# filters, strides (2x1), dilation, a 1x1 stride-2 conv, fp16 output, every schedule of the kernel.
IM2COL_CASES = [
    ("tutorial", dict(warp_specialized=2, consumers_along_m=1)),  # 14x14: blocks straddle images
    ("rfc-3x3-b1", dict(block_col_warps=1)),  # 196 pixels: the second block half past the batch
    ("n=3,h=17,w=23,c=64,k=128,r=3,s=5,pad=1x2,stride=2x1,out_dtype=float16", dict(block_col_warps=1, stages=3)),
    ("n=5,h=20,w=13,c=128,k=64,r=3,s=3,pad=2,dilation=2", dict(block_col_warps=1, warp_col_tiles=4,
                                                               warp_row_tiles=1, split_k=4)),
    ("n=3,h=15,w=9,c=192,k=72,r=5,s=3,pad=2x1x1x0", dict(block_col_warps=1, warp_col_tiles=4, stages=3)),
    ("resnet50-res3-1x1-256-512-s2-b1", dict(warp_specialized=2, block_col_warps=1, ping_pong=1)),
    ("n=4,h=30,w=30,c=64,k=128,r=3,s=3,pad=1,stride=2", dict(block_col_warps=1, warp_row_tiles=4,
                                                             warp_col_tiles=4, stages=3)),  # 256 pixels a box
    ("rfc-3x3-b32", dict(warp_col_tiles=4, multicast_b=1, stages=3)),
]


@pytest.mark.parametrize("name,knobs", IM2COL_CASES, ids=[c[0][:40] for c in IM2COL_CASES])
def test_tma_im2col_matches_the_reference(name, knobs):
    _check_in_flight_and_waiting(workloads.get(name), replace(WS, **knobs, tma_im2col=1))


# C by TMA stores (tma_store): chunks of 64 rows x 128 bytes through two staging buffers a
# warpgroup, clipped by TMA at C's edges; every schedule of the kernel that takes it.
TMA_STORE_CASES = [
    ("rfc-1x1-b32", dict(warp_specialized=2)),  # 128 x 256, 2 consumers by columns, 3 tiles a block
    ("dense:m=100,n=200,k=136,b=nk", dict(stages=3)),  # tails in M and N (200 columns: a clipped chunk)
    ("dense:m=130,n=192,k=520,b=kn,out_dtype=float16", dict(warp_col_tiles=4, stages=3, consumers_along_m=1,
                                                            warp_specialized=2)),  # fp16: 64-column chunks
    ("dense:m=1000,n=1032,k=520,b=kn,out_dtype=float16", dict(block_col_warps=1, warp_row_tiles=1, warp_col_tiles=4,
                                                              stages=3, warp_specialized=2, ping_pong=1)),
    ("rfc-1x1-b256", dict(block_col_warps=1, warp_specialized=2, ping_pong=1)),  # 784 tiles: the chunk count runs on
    ("tutorial", dict(warp_specialized=2, consumers_along_m=1, tma_im2col=1)),  # im2col: blocks straddle images
    ("resnet50-res5-3x3-512-512-b32", dict(warp_row_tiles=4, warp_col_tiles=4, consumers_along_m=1,
                                           tma_im2col=1)),  # 2 slabs a consumer
    ("n=2,h=9,w=11,c=16,k=32,r=3,s=3,stride=1,pad=2,dilation=2", dict(block_col_warps=1, warp_col_tiles=4,
                                                                     stages=3)),  # gathered A; N = 32 of 64
    ("dense:m=330,n=200,k=520,b=kn,out_dtype=float16", dict(stages=3, multicast_b=1)),  # a partner past M
]


@pytest.mark.parametrize("name,knobs", TMA_STORE_CASES, ids=[c[0][:40] for c in TMA_STORE_CASES])
def test_tma_store_matches_the_reference(name, knobs):
    _check_in_flight_and_waiting(workloads.get(name), replace(WS, **knobs, tma_store=1))


@pytest.mark.parametrize("name,knobs", FUSED_VIEWS, ids=[c[0][:48] for c in FUSED_VIEWS])
def test_fused_epilogues_match_the_reference(name, knobs):
    """Every epilogue part on the registers' store and the TMA store's staging, an odd N, split-K,
    ping-pong; the reference applies the epilogue to the fp32 accumulators."""
    _check_in_flight_and_waiting(workloads.get(name), replace(WS, **knobs))


@pytest.mark.parametrize("name,knobs", MAXNREG_VIEWS, ids=[c[0][:40] for c in MAXNREG_VIEWS])
def test_setmaxnreg_kernels_match_the_reference(name, knobs):
    """Registers moved from the producer to the consumers: persistent im2col with TMA stores,
    ping-pong, split-K over a cluster."""
    _check_in_flight_and_waiting(workloads.get(name), replace(WS, **knobs, setmaxnreg=1))
