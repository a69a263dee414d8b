"""The Tensor Core instruction paths (the ``intrinsic`` knob) and what each one needs.

One entry per path says everything the rest of the package needs to know about it: the
knob values it requires (the tuner's moves onto the path set them), the GPUs it runs on,
the arch suffix its kernels are built for (wgmma: ``sm_90a``), its validity rules (checked
only for configs on the path), its weight in the analytic prior and whether its shared
tiles are swizzled.  The template registers each path's schedule function with
``schedules``.  Space, cost model, tuner, template and kernel look paths up here; an
``intrinsic`` value without an entry is an error, never another path's rules.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from .gemm import (MAX_IM2COL_PIXELS, MAX_TMA_STRIDE, OUT_BYTES, ChannelsOuter, a_is_matrix, box_tile,
                   c_rows_aligned, im2col_window)
from .knobs import (CONVERT_REFUSED, KNOBS, PRODUCER_THREADS, WS_CONSUMER_REGS, WS_MAX_CLUSTER, WS_MAX_WGMMA_N,
                    WS_PRODUCER_REGS, WS_ROW_BYTES, storing_warpgroups)
from .operand_layout import COL_MAJOR
from .rules import Rule, per_block_m, requires_rule, round_up


@dataclass(frozen=True)
class IntrinsicPath:
    """One value of the ``intrinsic`` knob."""

    name: str
    requires: dict = field(default_factory=dict)  # knob -> the value configs on the path must have
    rules: tuple[Rule, ...] = ()  # in the order why_invalid reports them (see ``rules``)
    min_arch: int = 70  # sm_70
    arch_suffix: str = ""  # "a": built for the arch-specific target (sm_90a)
    swizzled: bool = False  # A/B shared tiles swizzled (no padding offsets, conflict-free)
    prior_weight: float = 1.0  # the prior's factor for a swizzled path (padded: its offsets')

    def build_arch(self, arch: str) -> str:
        """The arch a kernel of this path is compiled for ("sm_90" -> "sm_90a" for wgmma)."""
        return arch + self.arch_suffix

    def schedule(self, *args, **kwargs):
        """The template's schedule function of this path (registered by ``schedules``)."""
        return _SCHEDULES[self.name](*args, **kwargs)


def _path(name: str, rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    return tuple(Rule(r.name, r.ok, r.message, path=name) for r in rules)


# Knobs of the wgmma path, with what their value 1 does: the other paths require their default.
_WGMMA_KNOBS = {
    "wgmma_in_flight": "keeps wgmma groups in flight",
    "warp_specialized": "feeds wgmma consumer warpgroups from a producer warpgroup",
    "consumers_along_m": "splits the block's rows between wgmma consumer warpgroups",
    "multicast_b": "multicasts B to a cluster of warp-specialized blocks",
    "ping_pong": "alternates two wgmma consumer warpgroups over whole tiles",
    "tma_im2col": "loads a warp-specialized kernel's A with TMA's im2col mode",
    "tma_store": "stores a warp-specialized kernel's C with TMA",
    "setmaxnreg": "moves registers from a warp-specialized kernel's producer to its consumers",
    "swap_ab": "swaps a warp-specialized kernel's operands (C^T = B^T A^T)",
    "consumer_n": "sets a warp-specialized kernel's consumer columns",
    "deep_ring": "deepens a warp-specialized kernel's stage ring",
}
_NO_WGMMA = {knob: 0 for knob in _WGMMA_KNOBS}


def _no_wgmma_rules(name: str) -> tuple[Rule, ...]:
    return tuple(requires_rule(name, knob, 0,
                               lambda cfg, v, c, knob=knob, what=what: f"{knob}={getattr(cfg, knob)} {what}: "
                                                                       f"it needs intrinsic=wgmma, not {name}")
                 for knob, what in _WGMMA_KNOBS.items())


def _no_fp8_rule(name: str, why: str) -> Rule:
    """fp8 operands take only the warp-specialized wgmma kernel (wgmma's e4m3 / e5m2 from K-major
    shared tiles, sm_90a): every config of another path breaks this rule for them."""
    return Rule(f"{name}_fp8", lambda v, c: not c.view.fp8,
                lambda cfg, v, c: f"{c.view.operand_dtype} operands need intrinsic=wgmma with warp_specialized=1 "
                                  f"or 2, not intrinsic={name}: {why}")


# mma: 16x16x16 tiles, sm_80's m16n8k16, and shared tiles whose rows the XOR swizzle can
# permute (multiples of 32 fp16; it replaces the padding offsets).
_MMA_REQUIRES = {"wmma": "m16n16k16", "offset_a": 0, "offset_b": 0}
MMA = IntrinsicPath(
    "mma", requires={**_MMA_REQUIRES, **_NO_WGMMA}, min_arch=80, swizzled=True,
    # H100: ~1.1x over WMMA on padded tiles
    prior_weight=1.1,
    rules=_path("mma", (
        _no_fp8_rule("mma", "its ldmatrix and mma.sync are written for 16-bit operands"),
        requires_rule("mma", "wmma", "m16n16k16",
                      lambda cfg, v, c: f"intrinsic=mma computes 16x16x16 tiles, not wmma={cfg.wmma}"),
        Rule("mma_arch", lambda v, c: c.sm >= 80,
             lambda cfg, v, c: f"intrinsic=mma needs mma.sync.m16n8k16 (sm_80 or newer), not {c.gpu.arch}"),
        Rule("mma_offsets", lambda v, c: (v["offset_a"] == 0) & (v["offset_b"] == 0),
             lambda cfg, v, c: "intrinsic=mma swizzles the A and B tiles: offset_a and offset_b must be 0"),
        Rule("mma_swizzled_rows", lambda v, c: (v["bk"] % 32 == 0) & (v["bn"] % 32 == 0),
             lambda cfg, v, c: f"intrinsic=mma: block_k={v['bk']} and block_n={v['bn']} "
                               "must be multiples of 32 (swizzled rows)"),
        *_no_wgmma_rules("mma"),
    )))

# warp_specialized=1 (2: persistent), a kernel of the wgmma path (module ``warp_specialized``):
# a producer warpgroup fills 2+ stages of fp16 A and B (TMA boxes, or 16-byte cp.async chunks of
# a gathered A) on mbarriers, and 1-2 consumer warpgroups (block_col_warps; each takes a slice of
# the block's columns, or with consumers_along_m of its rows; with ping_pong two of them take
# whole tiles in turn) issue the wgmma and store C from their registers (tma_store: through shared
# memory and TMA bulk stores), after the fused epilogue; at most 128 accumulator floats per consumer
# thread.  Split-K runs the K slices as the blocks of a cluster, which sum their accumulators
# through distributed shared memory (parked in their stages) before storing.
_WS_CONSUMERS = 2  # warpgroups (block_col_warps): 128 x (1 + block_col_warps) threads share the registers
# fp32 accumulators per consumer thread: its warpgroup's (4 x warp_row_tiles x 16) x
# (warp_col_tiles x 16) tile over 128 threads, warp_row_tiles x warp_col_tiles x 8
_WS_ACCUMULATORS = 128
# setmaxnreg: the producer warpgroup's registers and the two consumer warpgroups' (knobs.WS_*_REGS)
_SETMAXNREG_REGISTERS = PRODUCER_THREADS * (WS_PRODUCER_REGS + 2 * WS_CONSUMER_REGS)


def _ws_rule(name: str, ok, why) -> Rule:
    """A rule of warp-specialized configs: ``ok(v, c)`` where warp_specialized=1 may run, and
    ``why(cfg, v, c)`` completes the message "warp_specialized=1 ..." where not."""
    return Rule(f"warp_specialized_{name}", lambda v, c: (v["warp_specialized"] == 0) | ok(v, c),
                lambda cfg, v, c: f"warp_specialized={cfg.warp_specialized} {why(cfg, v, c)}")


def _block_rows_consecutive(view, block_m: np.ndarray, tma_im2col: np.ndarray) -> np.ndarray:
    """Per row: the warp-specialized block's block_m rows are consecutive rows of C (a matrix or
    im2col A, or a gathered one); not where TMA boxes load whole output rows (``gemm.box_tile``),
    whose blocks use only the rows that fill them, so a full-height store would cross into the next."""
    if a_is_matrix(view) or view.dtype != view.operand_dtype:  # (fp32 input: A is gathered)
        return np.ones(np.shape(block_m), dtype=bool)
    return (np.asarray(tma_im2col) > 0) | per_block_m(block_m, lambda bm: box_tile(view, bm) is None, bool)


_WARP_SPECIALIZED_RULES = (
    # Its tile scheduler, TMA boxes and stores know one GEMM; a grouped conv's group widths are
    # also below TMA's 64-channel A box in the layers that have groups (ResNeXt: 4-32 channels).
    _ws_rule("groups", lambda v, c: c.view.groups == 1,
             lambda cfg, v, c: f"takes one GEMM, not the {c.view.groups} of a grouped conv: "
                               "the wmma, mma and wgmma kernels without warp specialization take it"),
    # B is TMA-loaded along N (row-major) or K (column-major): an OIHW 3x3 weight is neither.
    _ws_rule("weight", lambda v, c: not isinstance(c.view.b.map, ChannelsOuter),
             lambda cfg, v, c: "loads B with TMA boxes, which an OIHW weight of an R x S > 1 conv cannot give "
                               "(its channels are R x S elements apart): pass it channels_last (OHWI) or HWIO"),
    _ws_rule("split_k", lambda v, c: (v["split_k"] == 1) | ((v["warp_specialized"] == 1) & (v["split_k"] <= WS_MAX_CLUSTER)),
             lambda cfg, v, c: f"takes split_k <= {WS_MAX_CLUSTER} (a cluster of blocks, one per K slice), and only "
                               f"unpersistent (warp_specialized=1), not split_k={cfg.split_k}"),
    _ws_rule("split_k_partials", lambda v, c: (v["split_k"] == 1) | (v["split_partial_bytes"] <= v["stage_bytes"]),
             lambda cfg, v, c: f"with split_k={cfg.split_k} keeps {v['split_partial_bytes']} bytes of partial sums "
                               f"in its {v['stage_bytes']} bytes of stages: more stages or fewer accumulators"),
    _ws_rule("stages", lambda v, c: v["stages"] >= 2,
             lambda cfg, v, c: f"needs stages >= 2, not {cfg.stages}: the producer fills one stage while "
                               "the consumers read another"),
    _ws_rule("vectors", lambda v, c: (v["vec_a"] == 8) & (v["vec_b"] == 8),
             lambda cfg, v, c: f"needs vec_a=8 and vec_b=8, not {cfg.vec_a} and {cfg.vec_b}: the producer "
                               "copies A and B in 16-byte cp.async chunks"),
    _ws_rule("c_tile", lambda v, c: (v["vec_c"] == 1) & (v["offset_c"] == 0),
             lambda cfg, v, c: f"needs vec_c=1 and offset_c=0, not {cfg.vec_c} and {cfg.offset_c}: its "
                               "consumers store C from their registers, so no other value makes another kernel"),
    # fp32 input: the producer's threads load both operands and store them as fp16 (the cast folded
    # into the load), so nothing that TMA-loads an operand, nor a producer short of registers.
    _ws_rule("dtype", lambda v, c: (c.view.dtype == c.view.operand_dtype)
             | ~np.any([v[knob] > 0 for knob in CONVERT_REFUSED], axis=0),
             lambda cfg, v, c: f"with {c.view.dtype} input converts A and B in its producer's loads: it takes "
                               f"no {', '.join(CONVERT_REFUSED[:-1])} or {CONVERT_REFUSED[-1]}, not "
                               + ", ".join(f"{knob}={getattr(cfg, knob)}" for knob in CONVERT_REFUSED)),
    _ws_rule("consumers", lambda v, c: v["block_col_warps"] <= _WS_CONSUMERS,
             lambda cfg, v, c: f"needs block_col_warps <= {_WS_CONSUMERS} (consumer warpgroups), not "
                               f"{cfg.block_col_warps}: {cfg.threads} threads leave too few registers for the "
                               "accumulators"),
    _ws_rule("accumulators", lambda v, c: v["frags"] * 8 <= _WS_ACCUMULATORS,
             lambda cfg, v, c: f"holds {v['frags'] * 8} accumulator floats per consumer thread "
                               f"(warp_row_tiles x warp_col_tiles x 8), more than {_WS_ACCUMULATORS}"),
    # Along M, each of the 2 consumers takes half the 64-row slabs and all block_n columns in
    # one wgmma (at most m64n256); with 1 consumer the knob would only name the same kernel twice.
    Rule("consumers_along_m",
         lambda v, c: (v["consumers_along_m"] == 0) | ((v["warp_specialized"] > 0) & (v["block_col_warps"] == 2)
                                                        & (v["warp_row_tiles"] % 2 == 0) & (v["bn"] <= WS_MAX_WGMMA_N)),
         lambda cfg, v, c: "consumers_along_m=1 needs the warp-specialized kernel (warp_specialized > 0) with 2 "
                           f"consumer warpgroups (block_col_warps=2), an even warp_row_tiles and block_n <= "
                           f"{WS_MAX_WGMMA_N}, not warp_specialized={cfg.warp_specialized}, block_col_warps="
                           f"{cfg.block_col_warps}, warp_row_tiles={cfg.warp_row_tiles}, block_n={v['bn']}"),
    Rule("multicast_b",
         lambda v, c: (v["multicast_b"] == 0) | ((v["warp_specialized"] == 1) & (v["split_k"] == 1) & (v["gm"] >= 2)),
         lambda cfg, v, c: "multicast_b=1 needs the unpersistent warp-specialized kernel (warp_specialized=1) "
                           f"without split-K and 2+ M tiles to pair, not warp_specialized={cfg.warp_specialized}, "
                           f"split_k={cfg.split_k}, {v['gm']} M tile(s)"),
    # 48- or 96-column consumers: a K-major B (rows of 128 bytes, swizzled 8 at a time) gives whole
    # wgmma columns at any multiple of 16; warp_col_tiles stays 4 (no second name for a kernel).
    Rule("consumer_n",
         lambda v, c: (v["consumer_n"] == 0) | ((v["warp_specialized"] > 0) & (v["swap_ab"] == 0)
                                               & (v["warp_col_tiles"] == 4) & (c.view.b.layout == COL_MAJOR)),
         lambda cfg, v, c: f"consumer_n={cfg.consumer_n} needs the warp-specialized kernel (warp_specialized > 0) "
                           "without swap_ab, warp_col_tiles=4 (which it replaces) and a K-major B (a dense's (N, K) "
                           f"weight), not warp_specialized={cfg.warp_specialized}, swap_ab={cfg.swap_ab}, "
                           f"warp_col_tiles={cfg.warp_col_tiles}, B {c.view.b.layout}"),
    # The ring twice the stages knob: 6 or 8 stages (from 2 it would name stages=4's kernel again).
    Rule("deep_ring",
         lambda v, c: (v["deep_ring"] == 0) | ((v["warp_specialized"] > 0) & (v["swap_ab"] == 0) & (v["stages"] >= 3)),
         lambda cfg, v, c: "deep_ring=1 needs the warp-specialized kernel (warp_specialized > 0) without swap_ab and "
                           f"stages 3 or 4, not warp_specialized={cfg.warp_specialized}, swap_ab={cfg.swap_ab}, "
                           f"stages={cfg.stages}"),
    # Ping-pong: each of 2 consumer warpgroups computes whole tiles, one wgmma over all block_n
    # columns (block_col_warps=2 only names the 256-column tile: 128 would repeat block_col_warps=1).
    Rule("ping_pong",
         lambda v, c: (v["ping_pong"] == 0) | ((v["warp_specialized"] == 2) & (v["consumers_along_m"] == 0)
                                              & ((v["block_col_warps"] == 1) | (v["bn"] == WS_MAX_WGMMA_N))
                                              & (v["frags"] * v["block_col_warps"] * 8 <= _WS_ACCUMULATORS)),
         lambda cfg, v, c: "ping_pong=1 needs the persistent warp-specialized kernel (warp_specialized=2), "
                           f"consumers_along_m=0, block_col_warps=1 or a {WS_MAX_WGMMA_N}-column block, and at "
                           f"most {_WS_ACCUMULATORS} accumulator floats per thread for the whole tile, not "
                           f"warp_specialized={cfg.warp_specialized}, consumers_along_m={cfg.consumers_along_m}, "
                           f"block_col_warps={cfg.block_col_warps}, block_n={v['bn']}, "
                           f"{v['frags'] * cfg.block_col_warps * 8} floats"),
    # TMA im2col: a conv's A as boxes of block_m consecutive output pixels (at most 256 a box).
    Rule("tma_im2col",
         lambda v, c: (v["tma_im2col"] == 0) | ((v["warp_specialized"] > 0) & (im2col_window(c.view) is not None)
                                               & (v["bm"] <= MAX_IM2COL_PIXELS)),
         lambda cfg, v, c: "tma_im2col=1 needs the warp-specialized kernel, a conv whose A is not a plain matrix "
                           f"with 64 | channels and strides <= {MAX_TMA_STRIDE}, and block_m <= "
                           f"{MAX_IM2COL_PIXELS}, not warp_specialized={cfg.warp_specialized}, block_m={v['bm']}"
                           + ("" if im2col_window(c.view) else ", and this workload's A is none")),
    # TMA stores of C: 64-row boxes from m0, so a block's rows must be consecutive rows of C.
    Rule("tma_store",
         lambda v, c: (v["tma_store"] == 0) | ((v["warp_specialized"] > 0) & (v["split_k"] == 1) & c_rows_aligned(c.view)
                                              & _block_rows_consecutive(c.view, v["bm"], v["tma_im2col"])),
         lambda cfg, v, c: "tma_store=1 needs the warp-specialized kernel without split-K, rows of C a multiple of "
                           "16 bytes, and blocks of consecutive rows of C (A a matrix, im2col or gathered: not "
                           f"whole output rows in TMA boxes), not warp_specialized={cfg.warp_specialized}, "
                           f"split_k={cfg.split_k}, N={c.view.n} x {c.view.out_dtype}, tma_im2col={cfg.tma_im2col}"),
    # TMA stores of a 48- or 96-column consumer: its columns in whole 128-byte chunks of C (96 fp32
    # columns are 3; 96 fp16 ones one and a half, which the staging loop does not store)
    Rule("tma_store_chunks",
         lambda v, c: (v["tma_store"] == 0)
         | (v["consumer_n"] * OUT_BYTES.get(c.view.out_dtype, 4) % WS_ROW_BYTES == 0),
         lambda cfg, v, c: f"tma_store=1 stores 128-byte chunks of C: consumer_n={cfg.consumer_n} columns of "
                           f"{c.view.out_dtype} are not whole chunks"),
    # setmaxnreg: only a block of three warpgroups has registers to move (with one consumer, 256
    # threads, every thread may already hold 255).
    Rule("setmaxnreg",
         lambda v, c: (v["setmaxnreg"] == 0) | ((v["warp_specialized"] > 0)
                                                & (storing_warpgroups(v["block_col_warps"], v["ping_pong"]) == 2)),
         lambda cfg, v, c: "setmaxnreg=1 needs the warp-specialized kernel with two consumer warpgroups "
                           "(block_col_warps=2 or ping_pong=1), not warp_specialized="
                           f"{cfg.warp_specialized}, block_col_warps={cfg.block_col_warps}, ping_pong={cfg.ping_pong}"),
    # ... and the registers it moves must fit the GPU's register file of a block (the driver's
    # figure: 65536 on every Tensor Core GPU so far, which the budget is sized to)
    Rule("setmaxnreg_registers", lambda v, c: (v["setmaxnreg"] == 0) | (_SETMAXNREG_REGISTERS <= c.gpu.max_registers_per_block),
         lambda cfg, v, c: f"setmaxnreg=1 gives the block {_SETMAXNREG_REGISTERS} registers, more than the GPU's "
                           f"{c.gpu.max_registers_per_block} per block"),
)

# swap_ab (``swap``; which kernels and GEMMs take it: the first rule of all, ``rules.HEAD``):
# the warp-specialized kernel of a small-M dense with an (N, K) weight computes C^T; swap_ab is the block's rows of M (the wgmma's n), so warp_col_tiles stays at 4 (no second name for
# one kernel) and a second consumer warpgroup splits the weight rows (consumers_along_m) or, in an
# unpersistent block without split-K, the k-steps (consumers_along_m=0: they take them in turn).
_SWAP_RULES = (
    Rule("swap_ab_rows", lambda v, c: (v["swap_ab"] == 0) | (v["swap_ab"] < 2 * round_up(c.m, 8)),
         lambda cfg, v, c: f"swap_ab={cfg.swap_ab} rows of M a block are more than twice M={c.m} rounded up to "
                           "8: a smaller swap_ab tiles it"),
    Rule("swap_ab_tiling", lambda v, c: (v["swap_ab"] == 0) | (
             (v["warp_col_tiles"] == 4) & ((v["block_col_warps"] == 1) | (v["consumers_along_m"] == 1)
                                           | ((v["split_k"] == 1) & (v["warp_specialized"] == 1)))),
         lambda cfg, v, c: f"swap_ab={cfg.swap_ab} sets the block's rows of M (the wgmma's n) itself: it needs "
                           "warp_col_tiles=4 and one consumer warpgroup, two along M (consumers_along_m=1), or two "
                           "along K (unpersistent, split_k=1), not "
                           f"warp_col_tiles={cfg.warp_col_tiles}, block_col_warps={cfg.block_col_warps}, "
                           f"consumers_along_m={cfg.consumers_along_m}, warp_specialized={cfg.warp_specialized}, "
                           f"split_k={cfg.split_k}"),
    Rule("swap_ab_variants", lambda v, c: (v["swap_ab"] == 0) | ((v["ping_pong"] == 0) & (v["multicast_b"] == 0)
                                                                 & (v["tma_store"] == 0)),
         lambda cfg, v, c: f"swap_ab={cfg.swap_ab} stores C transposed from registers and pairs no blocks: it takes "
                           f"no ping_pong, multicast_b or tma_store, not ping_pong={cfg.ping_pong}, "
                           f"multicast_b={cfg.multicast_b}, tma_store={cfg.tma_store}"),
)

# wgmma: Hopper only; the four warps along M are one warpgroup; a k-step is one 128-byte
# swizzled row of 64 fp16 (chunk 4); the operands stay in shared memory (no fragments to
# double-buffer); warpgroup tiles are whole 64-column swizzle atoms (warp_col_tiles 4 or 8).
# wgmma_in_flight=1 overlaps a k-step's wgmma with the next one's wait for its data, so the
# copies that follow must fill another shared buffer: two stages at least.
_WGMMA_REQUIRES = {**_MMA_REQUIRES, "block_row_warps": 4, "chunk": 4, "frag_buffers": 1}
WGMMA = IntrinsicPath(
    "wgmma", requires=_WGMMA_REQUIRES, min_arch=90, arch_suffix="a", swizzled=True,
    # H200, tuned configs of the seed workloads: 1.1-1.4x faster than mma
    prior_weight=1.3,
    rules=_path("wgmma", (
        Rule("wgmma_arch", lambda v, c: c.gpu.arch == "sm_90",
             lambda cfg, v, c: f"intrinsic=wgmma is a Hopper instruction (sm_90), not {c.gpu.arch}"),
        # fp8: the TensorIR wgmma schedule's shared tiles, copies (vec_a, vec_b) and swizzle are
        # written in 16-bit elements; the warp-specialized kernel's TMA boxes are in bytes
        Rule("wgmma_fp8", lambda v, c: (not c.view.fp8) | (v["warp_specialized"] > 0),
             lambda cfg, v, c: f"{c.view.operand_dtype} operands need the warp-specialized kernel "
                               "(warp_specialized=1 or 2), not warp_specialized=0: the TensorIR wgmma path's "
                               "tiles are written in 16-bit elements"),
        *(requires_rule("wgmma", knob, value) for knob, value in _WGMMA_REQUIRES.items()),
        Rule("wgmma_atoms", lambda v, c: v["warp_col_tiles"] * 16 % 64 == 0,
             lambda cfg, v, c: f"intrinsic=wgmma: warp_col_tiles={cfg.warp_col_tiles} gives a warpgroup "
                               f"{cfg.warp_col_tiles * 16} columns, not a multiple of the 64-column "
                               "swizzle atom"),
        Rule("wgmma_in_flight_stages", lambda v, c: (v["wgmma_in_flight"] == 0) | (v["stages"] >= 2),
             lambda cfg, v, c: f"wgmma_in_flight=1 needs stages >= 2, not {cfg.stages}: the next k-step's "
                               "copy must fill another buffer than the one the wgmma in flight reads"),
        *_WARP_SPECIALIZED_RULES,
        *_SWAP_RULES,
    )))

# WMMA fragments on padded shared tiles: any shape, sm_70+
WMMA = IntrinsicPath("wmma", requires=_NO_WGMMA, rules=_path("wmma", (
    _no_fp8_rule("wmma", "WMMA has no fp8 fragments"), *_no_wgmma_rules("wmma"))))

PATHS: dict[str, IntrinsicPath] = {p.name: p for p in (WMMA, MMA, WGMMA)}
assert tuple(PATHS) == KNOBS["intrinsic"], "every intrinsic knob value needs exactly one entry"


def get(name: str) -> IntrinsicPath:
    """The entry of an ``intrinsic`` knob value; KeyError names the known ones."""
    try:
        return PATHS[name]
    except KeyError:
        raise KeyError(f"unknown intrinsic path {name!r} (known: {', '.join(PATHS)})") from None


def build_arch(config, arch: str) -> str:
    """The arch a config's kernel is compiled for on a GPU of ``arch``: its path's (wgmma: sm_90a)."""
    return get(config.intrinsic).build_arch(arch)


# path name -> the template's schedule function, filled by ``schedules`` as template.py loads
_SCHEDULES: dict = {}


def schedules(name: str):
    """Decorator: the template's function that schedules the GEMM block on path ``name``."""
    return functools.partial(_set_schedule, get(name).name)


def _set_schedule(name: str, func):
    _SCHEDULES[name] = func
    return func
