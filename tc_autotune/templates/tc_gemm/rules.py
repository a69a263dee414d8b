"""Validity rules of the template, written once for one config and for arrays of them.

A rule is a named predicate over the *derived values* of configs (knob values, block
tile, threads, shared memory, grid: ``derive``) and the problem (``Context``: the task's
``gemm.GemmView`` and the GPU), plus the
message that says why a config breaks it.  Predicates use only arithmetic, comparisons,
``&`` and ``|``, so the same expression runs on Python ints (``why_invalid``: the first
rule a config breaks) and on numpy columns (``valid_mask``: all rules at once, for
search).  Rules every config obeys are here; an intrinsic path adds its own
(``intrinsic_paths``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .gemm import GemmView, swappable
from .operand_layout import COL_MAJOR
from .packing import PACKED_VALUES, packed_or_view, why_not_packed
from .knobs import (KNOBS, NAMED_KNOBS, PRODUCER_THREADS, SWAP_MAX_M, WMMA_SHAPES, code, ring_stages,
    storing_warpgroups, warp_specialized_smem, warp_specialized_tiles)

MAX_ACCUMULATOR_FRAGMENTS = 16  # per warp: 16 x 8 fp32 registers per thread

_WMMA_MNK = np.array([WMMA_SHAPES[name] for name in KNOBS["wmma"]], dtype=np.int64)  # (3, 3)


def round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


@dataclass(frozen=True)
class Context:
    """What rules know besides the config: the GEMM (its view) and the GPU."""

    m: int
    n: int
    k: int
    view: GemmView
    gpu: object  # gpu.GpuInfo

    @property
    def sm(self) -> int:
        """The arch as a number: sm_90 -> 90."""
        return int(self.gpu.arch[3:])

    @classmethod
    def of(cls, view: GemmView, gpu) -> "Context":
        """The context of a workload's GEMM view (``views.view_of``) on ``gpu``."""
        return cls(view.m, view.n, view.k, view, gpu)


@dataclass(frozen=True)
class Rule:
    """``ok(v, ctx)``: True (or a bool column) where configs obey it; ``message(config, v,
    ctx)``: why one config does not.  ``path``: only configs of that intrinsic path obey it."""

    name: str
    ok: Callable
    message: Callable
    path: str | None = None


def _select(cond, a, b):
    """``np.where``, keeping one config's values (``why_invalid``'s) plain ints."""
    return np.where(cond, a, b) if np.ndim(cond) else (a if cond else b)


def derive(v: dict, ctx: Context) -> dict:
    """Add what a config implies to its knob values ``v`` (ints or int64 columns; named knobs
    as positions in KNOBS, with ``wm``, ``wn``, ``wk`` the fragment shape): the block tile,
    threads, accumulator fragments, shared memory and the grid.  ``b_row``: the B tile's
    row in shared memory, which ``offset_b`` pads: N, or K for a column-major B (stored
    [n][k], contiguous along K as its tensor).  ``warps`` compute and store C; a
    warp-specialized kernel adds a producer warpgroup, which alone copies A and B
    (``copy_threads``; else every thread copies).  swap_ab: ``bm`` and ``bn`` stay the task's (M
    rows, N columns of a block: swap_ab rows, the kernel's 64-row slabs of weight rows as columns),
    ``frags`` and the ring (``ring``) are the swapped kernel's."""
    # The GEMM a row computes (N, K, groups, the operands' runs): the view's, or with group_pack > 1
    # that of its packed groups (``packing``).
    v.update(_packed_values(ctx.view, v["group_pack"]))
    # (swap_ab elsewhere: a rule refuses it, by the knobs' tile)
    v["swapped"] = swap = (v["swap_ab"] > 0) & (v["warp_specialized"] > 0)
    slab_rows = v["block_row_warps"] * v["warp_row_tiles"] * v["wm"]
    # consumer_n: each consumer's columns (both consumers' along M), else warp_col_tiles fragments
    narrow = v["consumer_n"] * _select(v["consumers_along_m"] > 0, 1, v["block_col_warps"])
    cols = _select(v["consumer_n"] > 0, narrow, v["block_col_warps"] * v["warp_col_tiles"] * v["wn"])
    v["bm"], v["bn"] = _select(swap, v["swap_ab"], slab_rows), _select(swap, slab_rows, cols)
    # K elements of a k-step: chunk x 16 16-bit elements, or as many bytes of fp8 (twice the
    # elements: a k-step is the same 128-byte swizzled row, ``warp_specialized``)
    v["bk"] = v["chunk"] * v["wk"] * (2 // ctx.view.element_bytes)
    # ping-pong: 2 warpgroups, whatever block_col_warps (ints or columns alike)
    v["warps"] = v["block_row_warps"] * storing_warpgroups(v["block_col_warps"], v["ping_pong"])
    v["compute_threads"] = v["warps"] * 32
    specialized = v["warp_specialized"] > 0
    v["threads"] = v["compute_threads"] + PRODUCER_THREADS * specialized
    v["copy_threads"] = v["threads"] - v["compute_threads"] * specialized
    # swap_ab: a consumer's slabs (all, or half along M; along K all) x the swap_ab columns' 16-column fragments
    narrow_frags = v["warp_row_tiles"] * (v["consumer_n"] // 16) // _select(v["consumers_along_m"] > 0, 2, 1)
    swap_slab_share = _select(v["consumers_along_m"] > 0, v["block_col_warps"], 1)
    v["frags"] = _select(swap, v["warp_row_tiles"] * (-(-v["swap_ab"] // 16)) // swap_slab_share,
                         _select(v["consumer_n"] > 0, narrow_frags, v["warp_row_tiles"] * v["warp_col_tiles"]))
    v["ring"] = ring_stages(v["stages"], swap, v["deep_ring"])
    # warp-specialized split-K parks every consumer thread's fp32 accumulators in the stages
    v["stage_bytes"] = warp_specialized_tiles(v["ring"], v["bm"], v["bn"])
    v["split_partial_bytes"] = v["compute_threads"] * v["frags"] * 8 * 4
    b_rows, v["b_row"] = (v["bn"], v["bk"]) if ctx.view.b.layout == COL_MAJOR else (v["bk"], v["bn"])
    a = v["bm"] * (v["bk"] + v["offset_a"]) * 2
    b = b_rows * (v["b_row"] + v["offset_b"]) * 2
    c = v["bm"] * (v["bn"] + v["offset_c"]) * 4
    staging = v["tma_store"] * storing_warpgroups(v["block_col_warps"], v["ping_pong"])  # tma_store's buffers
    v["smem"] = np.where(v["warp_specialized"] > 0, warp_specialized_smem(v["ring"], v["bm"], v["bn"], staging),
                         np.maximum(v["stages"] * (a + b), c))
    # The grid: blocks along M and N, k-steps per K slice, and every block of every slice (of
    # every group's GEMM: M, N and K are a group's).
    v["gm"], v["gn"] = -(-ctx.m // v["bm"]), -(-v["gemm_n"] // v["bn"])
    v["gk"] = -(-v["gemm_k"] // (v["bk"] * v["split_k"]))
    v["blocks"] = v["gm"] * v["gn"] * v["split_k"] * v["gemm_groups"]
    return v


def per_value(values, value_of: Callable[[int], object], dtype) -> np.ndarray:
    """``value_of(x)`` for each row's value x of a small non-negative int knob or derived value (an
    int or an int column), called once per distinct value.  Zero rows give an empty array of
    ``dtype``."""
    values = np.asarray(values, dtype=np.int64)
    present = np.flatnonzero(np.bincount(values.ravel(), minlength=1))
    table = np.zeros(present[-1] + 1 if present.size else 1, dtype=dtype)
    table[present] = [value_of(int(x)) for x in present]
    return table[values]


def per_block_m(block_m, value_of: Callable[[int], object], dtype) -> np.ndarray:
    """``per_value`` of each row's block_m: what a rule or the prior asks of the block's rows alone
    (its TMA tiling of A)."""
    return per_value(block_m, value_of, dtype)


def _packed_values(view: GemmView, packs) -> dict:
    """``packing.PACKED_VALUES`` of the GEMM of each row's group_pack (an int or an int column):
    the view's own where group_pack is 1 or invalid for it (the group_pack rule rejects that row)."""
    if np.ndim(packs) == 0:
        return dict(zip(_PACKED_NAMES, _packed_row(view, int(packs))))
    # ``per_value`` of all six at once: a table column per group_pack value present
    packs = np.asarray(packs, dtype=np.int64)
    present = np.flatnonzero(np.bincount(packs.ravel(), minlength=1))
    table = np.zeros((len(_PACKED_NAMES), present[-1] + 1 if present.size else 1), dtype=np.int64)
    rows = [_packed_row(view, p) for p in present.tolist()]
    table[:, present] = np.array(rows, dtype=np.int64).reshape(-1, len(_PACKED_NAMES)).T
    return dict(zip(_PACKED_NAMES, np.take(table, packs, axis=1)))


_PACKED_NAMES = tuple(name for name, _ in PACKED_VALUES)


@functools.lru_cache(maxsize=1024)
def _packed_row(view: GemmView, pack: int) -> tuple:
    """``PACKED_VALUES`` of one group_pack (every derive of a space asks the same few)."""
    packed = packed_or_view(view, pack)
    return tuple(value(packed) for _, value in PACKED_VALUES)


@functools.lru_cache(maxsize=1024)
def _pack_ok(view: GemmView, pack: int) -> bool:
    return why_not_packed(view, pack) is None


def _packs_ok(v: dict, c: "Context"):
    packs = v["group_pack"]
    if np.ndim(packs) == 0:
        return _pack_ok(c.view, int(packs))
    return per_value(packs, lambda p: _pack_ok(c.view, p), bool)


def values_of_config(config) -> dict:
    """One config's knob values as ``derive`` takes them (plain ints)."""
    v = {name: code(name, getattr(config, name)) for name in KNOBS}
    v["wm"], v["wn"], v["wk"] = WMMA_SHAPES[config.wmma]
    return v


def values_of_positions(knobs: dict, pos: np.ndarray) -> dict:
    """Knob-position rows of a space with candidate table ``knobs`` as ``derive`` takes them."""
    codes, starts = _code_table(tuple(knobs.items()))
    # one gather for all knobs (the annealing derives 64-row batches hundreds of times): row j of
    # the result is knob j's column, contiguous
    columns = np.take(codes, np.ascontiguousarray(pos.T) + starts)
    v = dict(zip(knobs, columns))
    mnk = _WMMA_MNK[v["wmma"]]
    v["wm"], v["wn"], v["wk"] = mnk[:, 0], mnk[:, 1], mnk[:, 2]
    return v


@functools.lru_cache(maxsize=64)
def _code_table(knob_items: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Every knob's candidates as ``code`` gives them, end to end, and where each knob's start
    (a column vector: added to the transposed positions, it indexes the table)."""
    codes = [code(name, c) for name, cands in knob_items for c in cands]
    starts = np.cumsum([0] + [len(cands) for _, cands in knob_items[:-1]])
    return np.array(codes, dtype=np.int64), starts.astype(np.intp)[:, None]


# wgmma's smallest tile is one 64-row slab: an M of 1-32 rows can only pad it (a GEMV-like
# dense streams its weights either way); fp8's only k-step is one 128-byte row, 128 elements: a K of
# 16-48 can only pad it.
_WGMMA_SLAB = 64
_FP8_K_STEP = 128


def _smallest_tile(dim: str, v: dict, c):
    if dim == "k":
        return _FP8_K_STEP * c.view.fp8
    return np.where(v["intrinsic"] == code("intrinsic", "wgmma"), _WGMMA_SLAB, 0) if dim == "m" else 0


def _size(dim: str, v: dict, c):
    """M of the GEMM, or each row's N or K (``derive``: group_pack's GEMM)."""
    return c.m if dim == "m" else v[f"gemm_{dim}"]


def _tile_rule(dim: str, tile: str, what: str) -> Rule:
    # Tiles far larger than the problem are pure padding: the kernel computes zeros.
    return Rule(f"{dim}_tile_size",
                lambda v, c: v[tile] <= np.maximum(2 * round_up(_size(dim, v, c), 16), _smallest_tile(dim, v, c)),
                lambda cfg, v, c: f"block_{dim}={v[tile]} is more than twice the padded "
                                  f"{what}={round_up(_size(dim, v, c), 16)}")


def requires_rule(path: str, knob: str, value, message=None) -> Rule:
    """Configs of ``path`` must have ``knob=value``."""
    return Rule(f"{path}_needs_{knob}", lambda v, c: v[knob] == code(knob, value),
                message or (lambda cfg, v, c: f"intrinsic={path} needs {knob}={value!r}, "
                                              f"not {getattr(cfg, knob)!r}"))


# Rules every config obeys, before those of its intrinsic path (HEAD) and after (TAIL);
# the order decides which reason ``why_invalid`` gives for a config that breaks several.
HEAD = (
    Rule("group_pack", _packs_ok, lambda cfg, v, c: why_not_packed(c.view, cfg.group_pack)),
    # swap_ab early: elsewhere derive keeps the knobs' unswapped tile, which other rules would name instead
    Rule("swap_ab", lambda v, c: (v["swap_ab"] == 0) | (v["swapped"] & (v["intrinsic"] == code("intrinsic", "wgmma"))
                                                        & swappable(c.view) & (c.m <= SWAP_MAX_M)),
         lambda cfg, v, c: f"swap_ab={cfg.swap_ab} needs the warp-specialized wgmma kernel (intrinsic=wgmma, "
                           f"warp_specialized > 0) and a dense with an (N, K) weight (b=nk) of M <= {SWAP_MAX_M} "
                           f"rows, not intrinsic={cfg.intrinsic}, warp_specialized={cfg.warp_specialized}, M={c.m}"
                           + ("" if swappable(c.view) else ", and this GEMM is not such a dense")),
    Rule("threads", lambda v, c: v["threads"] <= c.gpu.max_threads_per_block,
         lambda cfg, v, c: f"{v['threads']} threads per block exceed the GPU's {c.gpu.max_threads_per_block}"),
    Rule("shared_memory", lambda v, c: v["smem"] <= c.gpu.max_smem_per_block,
         lambda cfg, v, c: f"{v['smem']} bytes of shared memory exceed the GPU's "
                           f"{c.gpu.max_smem_per_block} per block"),
    Rule("accumulators", lambda v, c: v["frags"] <= MAX_ACCUMULATOR_FRAGMENTS,
         lambda cfg, v, c: f"{v['frags']} accumulator fragments per warp exceed "
                           f"{MAX_ACCUMULATOR_FRAGMENTS} (register spills)"),
    _tile_rule("m", "bm", "M"),
    _tile_rule("n", "bn", "N"),
    _tile_rule("k", "bk", "reduction K"),
    # bf16 Tensor Core instructions (WMMA's __nv_bfloat16 fragments, mma.sync's .bf16) came with
    # sm_80: every config of a bf16 GEMM breaks this rule on older GPUs.
    Rule("bf16_arch", lambda v, c: (c.view.operand_dtype != "bfloat16") | (c.sm >= 80),
         lambda cfg, v, c: f"bfloat16 operands need sm_80 or newer (bf16 Tensor Cores), not {c.gpu.arch}"),
    Rule("cp_async", lambda v, c: (v["stages"] == 1) | (c.sm >= 80),
         lambda cfg, v, c: f"stages={cfg.stages} needs cp.async (sm_80 or newer), not {c.gpu.arch}"),
    # (fp8's warp-specialized kernel may have fewer k-steps than stages, its ring then never wraps:
    # else fp8, which has no other kernel, would take no K of one k-step, 128)
    Rule("stages", lambda v, c: (v["stages"] <= v["gk"]) | (c.view.fp8 & (v["warp_specialized"] > 0)),
         lambda cfg, v, c: f"stages={cfg.stages} exceed the {v['gk']} k-steps of block_k={v['bk']}"),
    Rule("split_k_slices", lambda v, c: (v["split_k"] == 1) | ((v["split_k"] - 1) * v["gk"] * v["bk"] < v["gemm_k"]),
         lambda cfg, v, c: f"split_k={cfg.split_k} leaves a K slice empty (K={v['gemm_k']}, block_k={v['bk']})"),
    Rule("split_k_grid",
         lambda v, c: (v["split_k"] == 1) | (v["gm"] * v["gn"] * v["gemm_groups"] < 2 * c.gpu.sm_count),
         lambda cfg, v, c: f"split_k={cfg.split_k}: {v['gm'] * v['gn'] * v['gemm_groups']} blocks already fill the "
                           "GPU twice over"),
)


def _vector_rules(knob: str, operand: str, tile: Callable, threads: str) -> tuple[Rule, Rule]:
    """Vector loads/stores of GEMM operand ``operand`` ("a", "b", "c"): aligned in global
    memory (the width divides the operand's contiguous runs) and evenly shared by the
    ``threads`` (a ``derive`` value) that copy it."""

    def held(cfg, c: Context):  # the operand as the task's tensor holds it (in the config's GEMM)
        return getattr(packed_or_view(c.view, cfg.group_pack), operand)

    return (
        Rule(f"{knob}_alignment", lambda v, c: v[f"run_{operand}"] % v[knob] == 0,
             lambda cfg, v, c: f"{knob}={v[knob]} does not divide the {held(cfg, c).run} {held(cfg, c).run_name} "
                               "(misaligned vector access)"),
        # (swap_ab's kernel loads both tiles with TMA, none of it split over threads)
        Rule(f"{knob}_threads", lambda v, c: (tile(v) % (v[threads] * v[knob]) == 0) | v["swapped"],
             lambda cfg, v, c: f"{knob}={v[knob]}: the {tile(v)}-element tile does not split evenly "
                               f"over {v[threads]} threads"),
    )


def _offset_rule(offset: str, vec: str) -> Rule:
    return Rule(f"{offset}_vector", lambda v, c: v[offset] % v[vec] == 0,
                lambda cfg, v, c: f"{offset}={v[offset]} is not a multiple of its vector width {v[vec]}")


_VECTORS = {
    "vec_a": _vector_rules("vec_a", "a", lambda v: v["bm"] * v["bk"], "copy_threads"),
    "vec_b": _vector_rules("vec_b", "b", lambda v: v["bk"] * v["bn"], "copy_threads"),
    "vec_c": _vector_rules("vec_c", "c", lambda v: v["bm"] * v["bn"], "compute_threads"),
}
_OFFSETS = {"vec_a": _offset_rule("offset_a", "vec_a"), "vec_b": _offset_rule("offset_b", "vec_b"),
            "vec_c": _offset_rule("offset_c", "vec_c")}
FRAG_BUFFERS = Rule("frag_buffers", lambda v, c: v["frag_buffers"] <= v["chunk"],
                    lambda cfg, v, c: f"frag_buffers={cfg.frag_buffers} exceed chunk={cfg.chunk} "
                                      "(nothing to overlap)")
TAIL = (FRAG_BUFFERS, *(r for rules in _VECTORS.values() for r in rules), *_OFFSETS.values())
VECTOR_KNOBS = tuple(_VECTORS)
# The only rules that read each vector width, besides a warp-specialized kernel's, which asks for
# the widest candidate (default_config relies on that: it screens the other rules at the widest
# widths, then takes per row the widest these rules allow).
VECTOR_RULES = {knob: (*_VECTORS[knob], _OFFSETS[knob]) for knob in VECTOR_KNOBS}
assert not set(NAMED_KNOBS) & set(VECTOR_KNOBS)


def derive_rows(space, pos: np.ndarray) -> dict:
    """``derive`` for knob-position rows of ``space`` (int64 columns)."""
    return derive(values_of_positions(space.knobs, pos), space.context)
