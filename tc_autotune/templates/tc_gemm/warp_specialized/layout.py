"""What one warp-specialized config makes of a thread block, worked out once for every emitter:
the block's tile, how its consumer warpgroups share it, how the operands are loaded (the TMA
boxes or a gather) and how C is stored; plus the fixed CUDA the emitters include (``.cuh`` files
beside this module)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources

from ..gemm import GemmView, RowMajor, RowTile, SpatialTile, box_tile
from ..operand_layout import COL_MAJOR
from ..wgmma_source import WGMMA_ATOM, WGMMA_K, WGMMA_M
from ..knobs import CONVERT_REFUSED, WS_MAX_CLUSTER, WS_MAX_WGMMA_N, WS_ROW_BYTES, TcGemmConfig, ring_stages
from ..swap import swapped
from .boxes import Im2colBox, TmaBox, c_store_box, tma_boxes

ROW_BYTES = WS_ROW_BYTES  # a 64-element fp16 (bf16) row, a 128-element fp8 one: the swizzle span
ATOM_BYTES = WGMMA_K * ROW_BYTES  # a (64 k, 64 n) atom of a (K, N) B
# C's element type, the type of two adjacent elements (a store), and the pair made of v0, v1
C_TYPES = {"float32": ("float", "float2", "make_float2(v0, v1)"),
           "float16": ("half", "__half2", "__floats2half2_rn(v0, v1)"),
           "bfloat16": ("__nv_bfloat16", "__nv_bfloat162", "__floats2bfloat162_rn(v0, v1)")}
# A's and B's element type, by the GEMM's operand dtypes (``GemmView.operand_dtype``, ``b_operand_dtype``)
IN_TYPES = {"float16": "half", "bfloat16": "__nv_bfloat16", "float8_e4m3fn": "__nv_fp8_e4m3",
            "float8_e5m2": "__nv_fp8_e5m2"}


@functools.cache
def fixed_cuda(name: str) -> str:
    """The text of one of the package's ``.cuh`` files (CUDA that no config changes)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class BlockLayout:
    """A thread block of the kernel: a producer warpgroup (threads 0-127) and ``warpgroups``
    consumer warpgroups.  Each of the ``consumers`` warpgroups that read a stage holds ``slabs``
    64-row slabs x ``n_wg`` columns of accumulators: all the block's rows and a slice of its
    columns, or (``along_m``) a slice of its rows and all its columns, so one wgmma spans
    block_n; with ``ping_pong`` two warpgroups each compute whole tiles, in turn."""

    view: GemmView
    config: TcGemmConfig
    consumers: int  # the warpgroups that read a stage
    warpgroups: int  # the consumer warpgroups of the block
    slabs: int
    n_wg: int
    a_box: TmaBox | Im2colBox | None  # A's tensor map box, or None: gathered with cp.async
    b_boxes: tuple[TmaBox, ...]  # B's boxes of a k-step
    tile: SpatialTile | RowTile | None  # a conv's block of whole output rows (``gemm.box_tile``)
    c_box: TmaBox | None  # tma_store: C's tensor map box

    @property
    def bm(self) -> int:
        return self.config.block_m

    @property
    def bn(self) -> int:
        return self.config.block_n

    @property
    def frags(self) -> int:
        """16-column accumulator fragments of a slab (swap_ab's 8-column wgmma: half of one)."""
        return -(-self.n_wg // 16)

    @property
    def stages(self) -> int:
        """The ring's depth (``knobs.ring_stages``: swap_ab's is deeper than the stages knob)."""
        return ring_stages(self.config.stages, self.config.swap_ab, self.config.deep_ring)

    @property
    def swapped(self) -> bool:
        """swap_ab: the view is the task's C^T = B^T A^T (``swap``), stored into C transposed."""
        return self.view.swapped

    @property
    def k_step(self) -> int:
        """K elements of a k-step: a 128-byte swizzled row, ``WGMMA_K`` 16-bit elements or twice as
        many of fp8."""
        return ROW_BYTES // self.view.element_bytes

    @property
    def kt(self) -> int:
        """The GEMM's k-steps (``k_step`` each)."""
        return math.ceil(self.view.k / self.k_step)

    @property
    def split(self) -> int:
        """> 1: a cluster of ``split`` blocks along K, summed in shared memory."""
        return self.config.split_k

    @property
    def along_m(self) -> bool:
        return bool(self.config.consumers_along_m)

    @property
    def ping_pong(self) -> bool:
        return bool(self.config.ping_pong)

    @property
    def persistent(self) -> bool:
        return self.config.warp_specialized == 2

    @property
    def multicast(self) -> bool:
        """multicast_b: a cluster of 2 blocks along M shares B, each loading half of it into both."""
        return bool(self.config.multicast_b)

    @property
    def along_k(self) -> bool:
        """swap_ab with 2 consumer warpgroups not along M: they take the k-steps in turn (even ones
        warpgroup 0, odd ones 1), each into its own accumulators, summed before the store.  A tile of
        64 weight rows x 8-64 tokens has nothing else to split; two chains of dependent wgmmas run
        instead of one (a few % faster on some GEMV-like fp8 GEMMs on an H100, none on others)."""
        return self.swapped and self.consumers == 2 and not self.along_m

    @property
    def readers(self) -> int:
        """The consumer warpgroups that read each stage (along K: one of the two)."""
        return 1 if self.along_k else self.consumers

    @property
    def in_flight(self) -> bool:
        return bool(self.config.wgmma_in_flight)

    @property
    def b_col_major(self) -> bool:
        return self.view.b.layout == COL_MAJOR

    @property
    def gather(self) -> bool:
        return self.a_box is None

    @property
    def convert(self) -> bool:
        """fp32 input: the producer's threads load A and B as fp32 and store them into the stages
        as fp16 (no TMA box of either, no cp.async, no cast kernel before the GEMM)."""
        return self.view.dtype != self.view.operand_dtype

    @property
    def im2col(self) -> bool:
        return isinstance(self.a_box, Im2colBox)

    @property
    def row_boxes(self) -> bool:
        """A by one box per filter tap and output row of the block."""
        return isinstance(self.tile, RowTile)

    @property
    def in_t(self) -> str:
        return IN_TYPES[self.view.operand_dtype]

    @property
    def b_t(self) -> str:
        return IN_TYPES[self.view.b_operand_dtype]

    @property
    def scaled(self) -> bool:
        """fp8: the kernel takes the per-tensor scales, and multiplies the accumulators by their
        product before the epilogue."""
        return self.view.fp8

    @property
    def bf16(self) -> bool:
        return self.view.operand_dtype == "bfloat16"

    @property
    def out_t(self) -> str:
        return C_TYPES[self.view.out_dtype][0]

    @property
    def pair_t(self) -> str:
        return C_TYPES[self.view.out_dtype][1]

    @property
    def pair(self) -> str:
        return C_TYPES[self.view.out_dtype][2]

    @property
    def a_bytes(self) -> int:
        return self.bm * ROW_BYTES

    @property
    def b_bytes(self) -> int:
        return self.bn * ROW_BYTES


def block_layout(view: GemmView, config: TcGemmConfig) -> BlockLayout:
    """The block of one GEMM view and warp-specialized config (swap_ab: of the view swapped,
    ``swap.swapped``); ValueError where the kernel cannot run it."""
    if config.swap_ab:
        view = swapped(view)
        if (config.ping_pong or config.multicast_b or config.tma_store
                or (config.block_col_warps > 1 and not config.consumers_along_m
                    and (config.split_k > 1 or config.warp_specialized != 1))):
            raise ValueError(f"swap_ab={config.swap_ab} takes no ping_pong, multicast_b or tma_store, and 2 "
                             f"consumer warpgroups along M (consumers_along_m=1) or, unpersistent without "
                             f"split-K, along K: {config}")
    ping_pong, along_m, split = bool(config.ping_pong), bool(config.consumers_along_m), config.split_k
    consumers = 1 if ping_pong else config.block_col_warps
    warpgroups = 2 if ping_pong else consumers
    slabs = config.warp_row_tiles // consumers if along_m else config.warp_row_tiles
    n_wg = config.block_n if along_m or ping_pong or config.swap_ab else config.consumer_n or config.warp_col_tiles * 16
    # swap_ab: a K-major B' of 8-row swizzle groups, wgmma's n % 8; consumer_n: a K-major B's whole
    # 16-column fragments (48 or 96 rows of its tile); else B's 64-column atoms
    atom = 8 if config.swap_ab else 16 if config.consumer_n else WGMMA_ATOM
    if (config.block_m != config.warp_row_tiles * WGMMA_M or n_wg % atom or n_wg > WS_MAX_WGMMA_N
            or (along_m and slabs * consumers != config.warp_row_tiles)
            or (split > 1 and (config.warp_specialized != 1 or split > WS_MAX_CLUSTER))
            or (config.multicast_b and (config.warp_specialized != 1 or split > 1))
            or (ping_pong and (config.warp_specialized != 2 or along_m or split > 1))
            or (config.setmaxnreg and warpgroups != 2)
            or (config.consumer_n and (config.swap_ab or view.b.layout != COL_MAJOR))
            or (view.dtype != view.operand_dtype and not converts(config))):
        raise ValueError(f"not a warp-specialized config for {view.shape}: {config}")
    C_TYPES[view.out_dtype]  # KeyError: a C of another type
    if not (isinstance(view.c.map, RowMajor) or view.swapped):
        raise ValueError("the warp-specialized kernel writes a row-major C")
    a_box, b_boxes = tma_boxes(view, config)
    tile = box_tile(view, config.block_m) if isinstance(a_box, TmaBox) and len(a_box.box) == 4 else None
    c_box = c_store_box(view) if config.tma_store else None
    if c_box is not None and (tile is not None or split > 1):
        raise ValueError(f"tma_store=1 needs blocks of consecutive rows of C and no split-K: {config}")
    return BlockLayout(view, config, consumers, warpgroups, slabs, n_wg, a_box, tuple(b_boxes), tile, c_box)


def converts(config: TcGemmConfig) -> bool:
    """Whether the kernel can take fp32 input: its producer's threads then load both operands (no
    TMA box: neither im2col nor B multicast), with their registers (no setmaxnreg), for an
    unswapped view."""
    return not any(getattr(config, knob) for knob in CONVERT_REFUSED)
