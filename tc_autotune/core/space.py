"""The knob space of the Tensor Core conv2d template.

AutoTVM-style: every knob has an explicit candidate list (``knobs``), a config is one
choice per knob, and its index is the mixed-radix number of those choices (the
first knob varies fastest), so index <-> config is a bijection that is stable as
long as the candidate lists are.  Validity is the rule table (``rules`` and each
intrinsic path's rules), evaluated per config by ``why_invalid`` (which names the
first broken rule) and per array of knob positions by ``valid_mask``.
"""

from __future__ import annotations

import functools
import math
import random
from typing import Iterator

import numpy as np

from ..templates.tc_gemm.gemm import GemmView, im2col_window, view_of
from ..backends.cuda.gpu import GpuInfo, default_gpu
from ..templates.tc_gemm.intrinsic_paths import PATHS
from ..templates.tc_gemm.intrinsic_paths import get as intrinsic_path
from ..templates.tc_gemm.knobs import KNOB_DEFAULTS, KNOB_NAMES, KNOBS, WMMA_SHAPES, Conv2dConfig, code
from ..templates.tc_gemm.prior import prior_score
from ..templates.tc_gemm.rules import (FRAG_BUFFERS, HEAD, MAX_ACCUMULATOR_FRAGMENTS, TAIL, VECTOR_KNOBS,
    VECTOR_RULES, Context, derive, derive_rows, values_of_config)
from ..workloads.dense import DenseWorkload
from ..workloads.conv2d import Conv2dWorkload

__all__ = ["KNOBS", "KNOB_DEFAULTS", "KNOB_NAMES", "WMMA_SHAPES", "MAX_ACCUMULATOR_FRAGMENTS",
           "INTRINSIC_REQUIRES", "Conv2dConfig", "ConfigSpace", "conv2d_space", "dense_space", "valid_mask",
           "radices", "positions_from_indices", "indices_from_positions", "positions_from_configs"]

_SAMPLE_CHUNK = 1 << 16  # random draws ``sample`` checks at once (bounds its memory, not its result)
# What each non-WMMA path requires of other knobs (the tuner's moves onto it set these).
INTRINSIC_REQUIRES = {name: path.requires for name, path in PATHS.items() if path.requires}
# The rules a config of each path must obey, in the order why_invalid reports them.
_RULES_OF_PATH = {name: HEAD + path.rules + TAIL for name, path in PATHS.items()}


# ---- configs <-> knob-position arrays (one column per knob, ``space.knobs`` order) -------
def radices(space) -> np.ndarray:
    return np.array([len(c) for c in space.knobs.values()], dtype=np.int64)


def positions_from_indices(space, indices) -> np.ndarray:
    """Mixed-radix decode (first knob fastest, as ``ConfigSpace.get``): (n, knobs) int64."""
    rest = np.asarray(indices, dtype=np.int64).copy()
    rad = radices(space)
    pos = np.empty((rest.size, rad.size), dtype=np.int64)
    for j, r in enumerate(rad):
        pos[:, j] = rest % r
        rest //= r
    return pos


def indices_from_positions(space, pos: np.ndarray) -> np.ndarray:
    scales = np.cumprod(np.concatenate([[1], radices(space)[:-1]]))
    return pos @ scales


def positions_from_configs(space, configs) -> np.ndarray:
    lookups = [{v: i for i, v in enumerate(cands)} for cands in space.knobs.values()]
    names = list(space.knobs)
    pos = np.empty((len(configs), len(names)), dtype=np.int64)
    for row, config in enumerate(configs):
        for j, (name, lookup) in enumerate(zip(names, lookups)):
            pos[row, j] = lookup[getattr(config, name)]
    return pos


def _rule_mask(v: dict, ctx: Context, rules=HEAD + TAIL) -> np.ndarray:
    """Rows obeying ``rules`` and the rules of their intrinsic path."""
    ok = np.ones(len(v["intrinsic"]), dtype=bool)
    for rule in rules:
        ok &= rule.ok(v, ctx)
    for name, path in PATHS.items():  # a path's rules bind only the configs on it
        off_path = v["intrinsic"] != code("intrinsic", name)
        for rule in path.rules:
            ok &= off_path | rule.ok(v, ctx)
    return ok


def valid_mask(space, pos: np.ndarray) -> np.ndarray:
    """Which knob-position rows of ``space`` are valid: ``why_invalid``'s rules, vectorised."""
    return _rule_mask(derive_rows(space, pos), space.context)


class ConfigSpace:
    """All configs of the template for one workload on one GPU.

    ``workload`` is what records key on (a Conv2dWorkload, or any workload with a GEMM view,
    a GemmView included); validity, the default config, the prior and the features read
    only its ``view`` (``gemm.view_of``): M, N, K and the operands' layout."""

    def __init__(self, workload: Conv2dWorkload | GemmView, gpu: GpuInfo | None = None,
                 knobs: dict | None = None):
        self.workload = workload
        self.view = view_of(workload)
        self.gpu = gpu or default_gpu()
        # A narrower table pins knobs; a knob it lacks is pinned to its KNOB_DEFAULTS value.
        self.knobs = {name: (knobs or KNOBS).get(name, (KNOB_DEFAULTS.get(name),)) for name in KNOBS}
        self._radices = [len(c) for c in self.knobs.values()]
        self.context = Context.of(self.view, self.gpu)
        # Random draws (``drawn``) keep three knobs of the warp-specialized kernel at their first
        # value, 0, so they are no rarer in valid configs than before the knobs: tma_im2col where
        # TMA's im2col mode cannot load A (dense, 1x1 stride-1 convs, channels not a multiple of 64)
        # or the table has no warp-specialized kernel; tma_store and setmaxnreg always (their 1 is
        # valid only on that kernel, a sliver of a uniform draw: free, tma_store halved a conv's
        # valid draws again).  The tuner reaches their 1 through the starting tilings (tma_store)
        # and its annealing moves, which change any knob.
        applies = {"tma_im2col": any(self.knobs["warp_specialized"]) and im2col_window(self.view) is not None,
                   "tma_store": False, "setmaxnreg": False}
        self._draw_radices = [1 if not applies.get(name, True) and candidates[0] == 0 else radix
                              for (name, candidates), radix in zip(self.knobs.items(), self._radices)]
        self.draw_bound = math.prod(self._draw_radices)

    def __len__(self) -> int:
        return math.prod(self._radices)

    def drawn(self, draws) -> np.ndarray:
        """The space's indices of random draws below ``draw_bound`` (int64 array): the same knob
        positions, with the knobs that draws keep at 0 put back in."""
        draws = np.asarray(draws, dtype=np.int64)
        if self.draw_bound == len(self):
            return draws
        index, place = np.zeros_like(draws), 1
        for draw_radix, radix in zip(self._draw_radices, self._radices):
            draws, position = np.divmod(draws, draw_radix)
            index += position * place
            place *= radix
        return index

    def __iter__(self) -> Iterator[Conv2dConfig]:
        return (self.get(i) for i in range(len(self)))

    def __repr__(self) -> str:
        return f"ConfigSpace({self.workload}, {self.gpu.arch}, {len(self)} configs)"

    # ---- index <-> config ------------------------------------------------
    def get(self, index: int) -> Conv2dConfig:
        if not 0 <= index < len(self):
            raise ValueError(f"config index {index} is outside the space (0..{len(self) - 1})")
        values = {}
        for (name, candidates), radix in zip(self.knobs.items(), self._radices):
            index, pos = divmod(index, radix)
            values[name] = candidates[pos]
        return Conv2dConfig(**values)

    def index(self, config: Conv2dConfig) -> int:
        index, scale = 0, 1
        for (name, candidates), radix in zip(self.knobs.items(), self._radices):
            value = getattr(config, name)
            # by type too: True == 1 and 2.0 == 2 in Python, but neither is a knob value
            if not any(type(value) is type(c) and value == c for c in candidates):
                raise ValueError(f"{name}={value!r} is not in the space (candidates: {list(candidates)})")
            index += candidates.index(value) * scale
            scale *= radix
        return index

    def sample(self, n: int, seed: int | None = None, valid_only: bool = True) -> list[Conv2dConfig]:
        """``n`` distinct configs drawn uniformly (valid ones only, by default): the first
        ``n`` distinct (valid) ones of a seeded stream of at most ``4000 n + 20000`` draws (4M at
        most), checked in batches sized by the valid fraction seen so far (0.05-0.1% of a conv's
        space is valid: most values of the warp-specialized kernel's knobs need the others)."""
        rng = random.Random(seed)
        chosen: dict[int, Conv2dConfig] = {}
        budget, drawn, valid, batch = min(4000 * n + 20000, 4_000_000), 0, 0, min(max(2 * n, 64), _SAMPLE_CHUNK)
        while len(chosen) < n and drawn < budget:
            draws = self.drawn([rng.randrange(self.draw_bound) for _ in range(min(batch, budget - drawn))]).tolist()
            ok = valid_mask(self, positions_from_indices(self, draws)) if valid_only else [True] * len(draws)
            drawn, valid = drawn + len(draws), valid + int(np.sum(ok))
            for i, good in zip(draws, ok):
                if len(chosen) == n:
                    break
                if good and i not in chosen:
                    chosen[i] = self.get(i)
            # At most _SAMPLE_CHUNK draws at once: the picks are the first valid ones of one seeded
            # stream whatever the batches, and a batch sized for a 0.05% valid fraction (millions of
            # draws, ~400 bytes of derived columns each) peaked at 2.7 GB for sample(2000).
            batch = min(math.ceil(2 * (n - len(chosen)) * drawn / max(valid, 1)), _SAMPLE_CHUNK)
        return list(chosen.values())

    # ---- log form -----------------------------------------------------------
    def to_entity(self, config: Conv2dConfig) -> dict:
        """AutoTVM-like plain dict: {"index": i, "entity": [[knob, "ot", value], ...]}."""
        return {"index": self.index(config), "entity": [[k, "ot", getattr(config, k)] for k in KNOB_NAMES]}

    def from_entity(self, entity: dict) -> Conv2dConfig:
        try:
            values = {name: value for name, _kind, value in entity["entity"]}
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"malformed config entity: {entity!r}") from None
        return self.from_dict(values)

    def from_dict(self, values: dict) -> Conv2dConfig:
        values = {**KNOB_DEFAULTS, **values}
        unknown = set(values) - set(KNOB_NAMES)
        missing = set(KNOB_NAMES) - set(values)
        if unknown or missing:
            raise ValueError(f"config does not match the space: unknown {sorted(unknown)}, missing {sorted(missing)}")
        config = Conv2dConfig(**values)
        self.index(config)  # raises for values outside the candidate lists
        return config

    # ---- validity -----------------------------------------------------------
    def why_invalid(self, config: Conv2dConfig) -> str | None:
        """None for a config that builds and runs on this workload and GPU, else the reason:
        the message of the first rule it breaks (``rules``, then its intrinsic path's)."""
        rules = _RULES_OF_PATH[intrinsic_path(config.intrinsic).name]
        v = derive(values_of_config(config), self.context)
        for rule in rules:
            if not rule.ok(v, self.context):
                return rule.message(config, v, self.context)
        return None

    def is_valid(self, config: Conv2dConfig) -> bool:
        return self.why_invalid(config) is None

    # ---- a config that needs no tuning -------------------------------------
    def default_config(self) -> Conv2dConfig:
        """The valid config the analytic prior (``cost_model.prior_score``) rates highest,
        among those with the usual shared-memory offsets: good enough to run untuned.
        Ties go to the lowest index.  Memoised per (workload, GPU, knob table)."""
        return _default_config(self.workload, self.gpu, tuple(self.knobs.items()))


@functools.lru_cache(maxsize=256)
def _default_config(workload: Conv2dWorkload, gpu: GpuInfo, knobs: tuple) -> Conv2dConfig:
    """``ConfigSpace.default_config`` without enumerating the ~10M offset-fixed configs.

    Only the vector rules involve the vector widths (besides a warp-specialized kernel's rule,
    which asks for the widest), each width's rules only itself and the tile, and the prior
    grows with each width; so the best config of every other-knob combination uses, per vec
    knob, its widest width that the vector rules allow: the grid screens the other rules with
    every width at its widest, then finds that width per row.  One grid per intrinsic path,
    with the knob values it requires (any other row breaks one of its rules); the usual
    offsets leave only WMMA's, ~35k rows to check and score (~0.05 s, ~40 MB).
    """
    space = ConfigSpace(workload, gpu, dict(knobs))
    names = list(space.knobs)
    fixed = {"offset_a": 8, "offset_b": 8, "offset_c": 4}
    vecs = [name for name in VECTOR_KNOBS if len(space.knobs[name]) > 1]
    grid = {name: [c.index(fixed[name])] if fixed.get(name) in c else
            [int(np.argmax(c))] if name in vecs else list(range(len(c))) for name, c in space.knobs.items()}
    # Never the warp-specialized kernel: a default must be a kernel measured across many shapes.
    for knob in ("warp_specialized", "consumers_along_m", "multicast_b", "ping_pong", "tma_im2col", "tma_store",
                 "setmaxnreg"):
        if knob in grid and 0 in space.knobs[knob]:
            grid[knob] = [space.knobs[knob].index(0)]
    blocks = [np.zeros((0, len(names)), dtype=np.int64)]
    for i, intrinsic in enumerate(space.knobs["intrinsic"]):
        on_path = {**grid, "intrinsic": [i]}
        for knob, value in intrinsic_path(intrinsic).requires.items():
            on_path[knob] = [j for j in on_path[knob] if space.knobs[knob][j] == value]
        if all(on_path.values()):  # else the table has no value the path requires
            blocks.append(np.stack(np.meshgrid(*on_path.values(), indexing="ij"), axis=-1).reshape(-1, len(names)))
    pos = np.concatenate(blocks)
    ctx = space.context
    pos = pos[_rule_mask(derive_rows(space, pos), ctx, HEAD + (FRAG_BUFFERS,))]  # no vector rule
    v = derive_rows(space, pos)
    widest = {}
    for name in vecs:  # widest width passing its vector rules (they read no other width)
        best = np.full(len(pos), -1, dtype=np.int64)
        for p, width in enumerate(space.knobs[name]):
            v[name] = np.full(len(pos), width, dtype=np.int64)
            ok = np.ones(len(pos), dtype=bool)
            for rule in VECTOR_RULES[name]:
                ok &= rule.ok(v, ctx)
            best[ok & ((best < 0) | (width > np.asarray(space.knobs[name])[best]))] = p
        widest[name] = best
    keep = np.ones(len(pos), dtype=bool)
    for best in widest.values():
        keep &= best >= 0
    pos = pos[keep]
    for name, best in widest.items():
        pos[:, names.index(name)] = best[keep]
    pos = pos[valid_mask(space, pos)]
    if len(pos) == 0:  # tiny or odd shapes: the prior's best of a large valid sample
        return _best_sampled(space)
    scales = np.cumprod([1] + space._radices[:-1])
    order = np.lexsort((pos @ scales, -prior_score(space, pos)))
    for i in pos[order][:64] @ scales:
        config = space.get(int(i))
        if space.is_valid(config):
            return config
    return _best_sampled(space)


def _best_sampled(space: ConfigSpace) -> Conv2dConfig:
    """The prior's favourite of up to 4096 valid configs drawn with a fixed seed."""
    configs = space.sample(4096, seed=0)
    if not configs:
        raise ValueError(f"no valid config found for {space.workload} on {space.gpu.arch}")
    pos = positions_from_configs(space, configs)
    order = np.lexsort((indices_from_positions(space, pos), -prior_score(space, pos)))
    return configs[int(order[0])]


def conv2d_space(workload: Conv2dWorkload, gpu: GpuInfo | None = None) -> ConfigSpace:
    """The knob space of ``build_conv2d`` for one workload (on ``gpu``, default: local or sm_90)."""
    return ConfigSpace(workload, gpu)


def dense_space(workload: DenseWorkload, gpu: GpuInfo | None = None) -> ConfigSpace:
    """The knob space of ``build_dense`` for one workload (on ``gpu``, default: local or sm_90)."""
    return ConfigSpace(workload, gpu)
