"""The template's knobs: candidate lists (whose order fixes every config index) and the
config dataclass.

A config's index is the mixed-radix number of its knob positions (first knob fastest),
so the candidate lists are part of the log format: new candidates are appended, new
knobs added last with the value that reproduces the kernel from before they existed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

WMMA_SHAPES = {"m16n16k16": (16, 16, 16), "m8n32k16": (8, 32, 16), "m32n8k16": (32, 8, 16)}

# knob -> candidates, in index order.  Offsets are in elements of the tile's dtype
# (fp16 for A and B, fp32 for the C staging tile); vector widths in elements.
KNOBS: dict[str, tuple] = {
    "block_row_warps": (1, 2, 4),
    "block_col_warps": (1, 2, 4),
    "warp_row_tiles": (1, 2, 4, 8),
    "warp_col_tiles": (1, 2, 4, 8),
    "chunk": (1, 2, 4, 8),
    "wmma": tuple(WMMA_SHAPES),
    "offset_a": (0, 8, 16),
    "offset_b": (0, 8, 16),
    "offset_c": (0, 4, 8),
    "vec_a": (1, 2, 4, 8),
    "vec_b": (1, 2, 4, 8),
    "vec_c": (1, 2, 4),
    # Appended knobs start with the value that reproduces the kernel before they existed,
    # so the indices of older records stay valid and their configs read back unchanged.
    "stages": (1, 2, 3, 4),  # shared-memory buffers of the k-loop; >= 2: cp.async pipeline
    "frag_buffers": (1, 2),  # 2: load the next k-slice's fragments during the MMAs
    "split_k": (1, 2, 4, 8, 16),  # K slices in parallel blocks, summed by a second kernel
    # The Tensor Core instruction path (``intrinsic_paths``): WMMA on padded tiles; mma:
    # ldmatrix + mma.sync on XOR-swizzled tiles; wgmma: Hopper warpgroup MMA.
    "intrinsic": ("wmma", "mma", "wgmma"),
    # 1: a wgmma call waits only for the previous call's group (wgmma.wait_group 1), so the
    # Tensor Cores stay busy across k-steps; the accumulators are drained before the store.
    "wgmma_in_flight": (0, 1),
    # 1: a warp-specialized wgmma kernel (``warp_specialized``): one producer warpgroup fills the
    # shared-memory stages (TMA, or cp.async for a gathered A) on mbarriers, block_col_warps
    # consumer warpgroups (1-2) issue the wgmma; threads = 128 x (1 + block_col_warps), no C
    # staging tile.
    # 2: the same kernel, persistent: one block per SM walks the tiles, so a tile's stores
    # overlap the next tile's loads.
    "warp_specialized": (0, 1, 2),
    # 1 (warp_specialized, 2 consumers): the consumer warpgroups split the block's rows instead of
    # its columns, so each one's wgmma spans all block_n columns (m64n256 for a 128 x 256 block,
    # as cuBLAS's cooperative kernels): fewer, wider instructions, each B tile read once.
    "consumers_along_m": (0, 1),
    # 1 (warp_specialized=1): blocks run in clusters of 2 along M that share their B tile (the
    # weights' tile of a conv): each block loads half of it and TMA multicasts that half into both,
    # so B crosses from L2 once per pair (cuBLAS's and cuDNN's 2x1 clusters).
    "multicast_b": (0, 1),
    # 1 (warp_specialized=2): ping-pong: two consumer warpgroups, each computing whole tiles (one
    # wgmma spans block_n), take the block's tiles in turn, so one stores its tile while the other's
    # wgmmas run (CUTLASS's ping-pong kernels); their main loops alternate, ordered by named barriers.
    "ping_pong": (0, 1),
    # 1 (warp_specialized, a conv whose A is not a matrix, 64 | channels): the producer loads A with
    # TMA's im2col mode, one box of block_m output pixels x 64 channels per k-step, whatever the
    # image size and stride (else spatial or row boxes where whole output rows fill the block, or
    # cp.async gathers): no rows wasted at image edges, one instruction per k-step.
    "tma_im2col": (0, 1),
    # 1 (warp_specialized, no split-K, a block's rows consecutive rows of C): the consumers store C
    # through shared memory: each warpgroup writes 64-row x 128-byte chunks of its accumulators into
    # two swizzled staging buffers, and one of its threads stores each chunk with a TMA bulk store,
    # so the global writes run on while the warpgroup writes the next chunk or computes the next tile
    # (CUTLASS's TMA epilogue), instead of 8-byte stores from registers.
    "tma_store": (0, 1),
    # 1 (warp_specialized with two consumer warpgroups: 384 threads): the producer warpgroup hands
    # registers back (setmaxnreg.dec to WS_PRODUCER_REGS) and the consumers take them
    # (setmaxnreg.inc to WS_CONSUMER_REGS), as CUTLASS's warp-specialized kernels do: ptxas may give
    # the consumers' code 232 registers instead of the 168 a 384-thread launch allows each thread.
    "setmaxnreg": (0, 1),
    # P > 1 (a grouped conv of narrow groups, ``packing``): P consecutive groups are one GEMM of
    # P*K/G columns whose B is block diagonal (zeros between the groups' blocks): fuller Tensor
    # Core tiles, wider A loads and fewer, larger GEMMs than one GEMM of 4 or 8 columns per group.
    "group_pack": (1, 2, 4, 8),
    # > 0 (warp_specialized, a dense with an (N, K) weight, M <= SWAP_MAX_M): swap-AB, the kernel
    # computes C^T = B^T A^T: the weight's N rows are the wgmma's M side (64-row slabs, warp_row_tiles
    # of them), the activations' M rows its N side, swap_ab of them a block (the wgmma's n: 8-64), and
    # the tile is stored into C transposed (cuBLAS's nvjet *_64x8_* small-M kernels).  Its ring is
    # SWAP_STAGE_FACTOR x stages deep: a 64 x 8 stage is 9 KB, so a GEMV-like dense keeps 8-16 k-steps
    # in flight (the stages candidates are part of the log format and stay).
    "swap_ab": (0, 8, 16, 32, 64),
    # > 0 (warp_specialized, unswapped, a K-major B: a dense's (N, K) weight): each consumer warpgroup
    # takes this many columns instead of warp_col_tiles x 16 (which stays 4): B's tile is rows of 128
    # bytes swizzled 8 at a time, so 48 or 96 of them are whole wgmma columns; a weight-streaming GEMM
    # of one M tile then puts a third more blocks on the SMs than 128-column tiles (cuBLAS's M = 128
    # kernels run 96-column tiles).
    "consumer_n": (0, 48, 96),
    # 1 (warp_specialized, unswapped): the producer's ring is twice the stages knob deep (6 or 8 stages:
    # small tiles keep more k-steps in flight; cuBLAS's M = 128 kernels keep 7-13).
    "deep_ring": (0, 1),
}

# Knobs a record may lack (written before the knob existed), with the value it implies.
KNOB_DEFAULTS = {"stages": 1, "frag_buffers": 1, "split_k": 1, "intrinsic": "wmma", "wgmma_in_flight": 0,
                 "warp_specialized": 0, "consumers_along_m": 0,
                 "multicast_b": 0, "ping_pong": 0, "tma_im2col": 0,
                 "tma_store": 0, "setmaxnreg": 0, "group_pack": 1, "swap_ab": 0, "consumer_n": 0,
                 "deep_ring": 0}

# warp_specialized=1: the producer warpgroup's threads (the block's warps compute), and the shared
# memory of a stage: the A and B tiles of one 64-deep k-step, a 128-byte swizzled row of fp16 per
# row of M and per column of N, and its full and empty mbarriers (8 bytes each).
PRODUCER_THREADS = 128
WS_ROW_BYTES = 128
WS_BARRIER_BYTES = 16
WS_MAX_WGMMA_N = 256  # columns of the widest wgmma instruction (m64n256k16): a consumer's share of block_n
WS_MAX_CLUSTER = 8  # blocks per cluster that every Hopper GPU launches (split-K's K slices)
WS_ALIGN_BYTES = 1024  # slack to align the stages to the 1024-byte swizzle pattern
# tma_store: a storing warpgroup's staging buffers, two chunks of 64 rows x 128 bytes of C
WS_STAGING_ROWS, WS_STAGING_BUFFERS = 64, 2
WS_STAGING_BYTES = WS_STAGING_BUFFERS * WS_STAGING_ROWS * WS_ROW_BYTES
# setmaxnreg: registers per thread of the producer and of the two consumer warpgroups, which must fit
# the 65536 of an SM: 128 x 40 + 256 x 232 = 64512, the 384 x 168 a launch of three warpgroups holds
WS_PRODUCER_REGS, WS_CONSUMER_REGS = 40, 232
# swap_ab: the ring's stages per step of the stages knob (2, 3, 4 -> 8, 12, 16), and the largest M swapped
SWAP_STAGE_FACTOR, SWAP_MAX_M = 4, 128
DEEP_RING_FACTOR = 2  # deep_ring: the ring's stages per step of the stages knob
# fp32 input on the warp-specialized kernel: its producer's threads load and convert both operands, so
# it takes none of these (an operand by TMA, the producer's registers handed away, swapped operands)
CONVERT_REFUSED = ("tma_im2col", "multicast_b", "setmaxnreg", "swap_ab")


def ring_stages(stages, swap_ab, deep_ring=0):
    """The warp-specialized kernel's ring depth (ints or numpy columns): ``stages``, or with swap_ab
    SWAP_STAGE_FACTOR times as many, with deep_ring DEEP_RING_FACTOR times."""
    factor = 1 + (SWAP_STAGE_FACTOR - 1) * (swap_ab > 0) + (DEEP_RING_FACTOR - 1) * (deep_ring > 0)
    return stages * factor


def warp_specialized_tiles(stages, block_m, block_n):
    """The A and B tiles of every stage of a warp-specialized kernel, in bytes (ints or numpy
    columns): also where split-K parks its partial sums once the k-loop is done."""
    return stages * (block_m + block_n) * WS_ROW_BYTES


def warp_specialized_smem(stages, block_m, block_n, staging_warpgroups=0):
    """Shared memory of a warp-specialized kernel (ints or numpy columns): its stages' tiles and
    mbarriers, the alignment slack and (tma_store) each storing warpgroup's staging buffers."""
    return (warp_specialized_tiles(stages, block_m, block_n) + stages * WS_BARRIER_BYTES + WS_ALIGN_BYTES
            + staging_warpgroups * WS_STAGING_BYTES)


def storing_warpgroups(block_col_warps, ping_pong):
    """The consumer warpgroups (ints or numpy columns): block_col_warps, or ping-pong's two."""
    return block_col_warps + (2 - block_col_warps) * (ping_pong > 0)


# Knobs whose values are names: vectorised code sees them as positions in KNOBS.
NAMED_KNOBS = ("wmma", "intrinsic")


def code(knob: str, value):
    """A knob value as vectorised code sees it: a named value's position in ``KNOBS``."""
    return KNOBS[knob].index(value) if knob in NAMED_KNOBS else value


@dataclass(frozen=True)
class TcGemmConfig:
    """One point of the space: a value for every knob (of a conv2d's kernel or a dense's: the
    template serves both, hence not ``Conv2dConfig``, its earlier name, kept below for users)."""

    block_row_warps: int
    block_col_warps: int
    warp_row_tiles: int
    warp_col_tiles: int
    chunk: int
    wmma: str
    offset_a: int
    offset_b: int
    offset_c: int
    vec_a: int
    vec_b: int
    vec_c: int
    stages: int = 1
    frag_buffers: int = 1
    split_k: int = 1
    intrinsic: str = "wmma"
    wgmma_in_flight: int = 0
    warp_specialized: int = 0
    consumers_along_m: int = 0
    multicast_b: int = 0
    ping_pong: int = 0
    tma_im2col: int = 0
    tma_store: int = 0
    setmaxnreg: int = 0
    group_pack: int = 1
    swap_ab: int = 0
    consumer_n: int = 0
    deep_ring: int = 0

    @property
    def wmma_mnk(self) -> tuple[int, int, int]:
        return WMMA_SHAPES[self.wmma]

    @property
    def block_m(self) -> int:
        return self.block_row_warps * self.warp_row_tiles * self.wmma_mnk[0]

    @property
    def block_n(self) -> int:
        """The kernel's block columns; with swap_ab the swapped GEMM's (rows of the task's M)."""
        if self.swap_ab:
            return self.swap_ab
        if self.consumer_n:  # along M, both consumers span the block's columns
            return self.consumer_n * (1 if self.consumers_along_m else self.block_col_warps)
        return self.block_col_warps * self.warp_col_tiles * self.wmma_mnk[1]

    @property
    def block_k(self) -> int:
        return self.chunk * self.wmma_mnk[2]

    @property
    def threads(self) -> int:
        """The block's threads: its warps (ping-pong: two warpgroups, each computing whole tiles),
        and a warp-specialized kernel's producer warpgroup."""
        return (self.block_row_warps * (2 if self.ping_pong else self.block_col_warps) * 32
                + PRODUCER_THREADS * (self.warp_specialized > 0))

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: the A/B tiles and the C staging tile share one pool (a
        warp-specialized kernel: ``warp_specialized_smem``)."""
        if self.warp_specialized:
            staging = self.tma_store * storing_warpgroups(self.block_col_warps, self.ping_pong)
            ring = ring_stages(self.stages, self.swap_ab, self.deep_ring)
            return warp_specialized_smem(ring, self.block_m, self.block_n, staging)
        a = self.block_m * (self.block_k + self.offset_a) * 2
        b = self.block_k * (self.block_n + self.offset_b) * 2
        c = self.block_m * (self.block_n + self.offset_c) * 4
        return max(self.stages * (a + b), c)

    def as_dict(self) -> dict:
        return asdict(self)


# The earlier name, from when conv2d was the only task: users' code and pickles still say it.
Conv2dConfig = TcGemmConfig

KNOB_NAMES = tuple(f.name for f in fields(TcGemmConfig))
assert KNOB_NAMES == tuple(KNOBS), "knob table and TcGemmConfig fields must agree"
