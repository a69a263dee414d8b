"""The knob space of a template (``core.template.Template``) for one workload on one GPU.

Generic: it imports no template, and no GPU: a space is given its template (a
``core.template.Template``, whose ``space`` makes one; a task's is its template's) and its GPU (a
``backends.cuda.gpu.GpuInfo``: the facts its rules read), and probes nothing, so it is a leaf of
the package that the template protocol and the search stand on.  Which GPU is this machine's is
asked above it: ``templates.registry.ConfigSpace`` is the same space with the default template
(tc_gemm) and the local GPU (else a nominal sm_90) unless told otherwise.  Knob-position rows
(one column per knob) are what the search computes on: ``valid_mask`` and ``with_requirements``
(a move onto a value lands with the knob values it requires, ``Template.requires``) take them.

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
from typing import Any, Iterator, Mapping

import numpy as np

__all__ = ["ConfigSpace", "valid_mask", "with_requirements", "radices", "positions_from_indices",
           "indices_from_positions", "positions_from_configs"]

Config = Any  # a config of the space's template (``template.config_type``)
_SAMPLE_CHUNK = 1 << 16  # random draws ``sample`` checks at once (bounds its memory, not its result)


# ---- configs <-> knob-position arrays (one column per knob, ``space.knobs`` order) -------
def radices(space) -> np.ndarray:
    return np.array([len(c) for c in space.knobs.values()], dtype=np.int64)


def positions_from_indices(space, indices) -> np.ndarray:
    """Mixed-radix decode (first knob fastest, as ``ConfigSpace.get``): (n, knobs) int64."""
    rest = np.asarray(indices, dtype=np.int64).ravel()
    rad = radices(space)
    pos = np.empty((rest.size, rad.size), dtype=np.int64)
    for j, r in enumerate(rad.tolist()):
        rest, pos[:, j] = np.divmod(rest, r)  # one division for both (floor, as % and //)
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


def valid_mask(space, pos: np.ndarray) -> np.ndarray:
    """Which knob-position rows of ``space`` are valid: ``why_invalid``'s rules, vectorised."""
    return space.template.valid_mask(space, pos)


def with_requirements(space, pos):
    """Rows on a value with requirements (``Template.requires``) get the knob values it
    requires, where the space's table has them (in place; returns ``pos``)."""
    tables = _requirement_tables(space.template, tuple(space.knobs.items())) if len(pos) <= 1024 else None
    if tables is None:
        return _with_requirements_by_value(space, pos)
    # A few rows (an annealing step's): per knob with requirements, one lookup of every row's
    # required positions (-1: free), four numpy calls instead of one per required value.
    for column, table, columns in tables:
        required = np.take(table, pos[:, column], axis=0)
        pos[:, columns] = np.where(required >= 0, required, pos[:, columns])
    return pos


@functools.lru_cache(maxsize=64)
def _requirement_tables(template, knob_items: tuple):
    """Per knob with requirements, in ``Template.requires`` order: (its column, a row per position
    of it of the positions it requires of ``columns``, -1 where it requires none, ``columns``).
    None where a value requires its own knob: that reads the column as it is being set, which
    only value by value does as ``_with_requirements_by_value`` always did."""
    names, knobs = [name for name, _ in knob_items], dict(knob_items)
    tables = []
    for knob, by_value in template.requires.items():
        column, required = names.index(knob), {}
        for value, wants in by_value.items():
            if value not in knobs[knob]:
                continue
            for other, wanted in wants.items():
                if other == knob:
                    return None
                if wanted in knobs[other]:
                    required[(knobs[knob].index(value), names.index(other))] = knobs[other].index(wanted)
        columns = sorted({other for _, other in required})
        table = np.full((len(knobs[knob]), len(columns)), -1, dtype=np.int64)
        for (row, other), position in required.items():
            table[row, columns.index(other)] = position
        tables.append((column, table, np.array(columns, dtype=np.intp)))
    return tables


def _with_requirements_by_value(space, pos):
    """``with_requirements`` value by value: many rows (a few numpy calls per required value)."""
    names = list(space.knobs)
    for knob, by_value in space.template.requires.items():
        column = pos[:, names.index(knob)]
        for value, required in by_value.items():
            if value not in space.knobs[knob]:
                continue
            # the rows' numbers once: each of the value's requirements then assigns by them, not by a mask
            on_value = np.flatnonzero(column == space.knobs[knob].index(value))
            for other, wanted in required.items():
                if wanted in space.knobs[other]:
                    pos[on_value, names.index(other)] = space.knobs[other].index(wanted)
    return pos


class ConfigSpace:
    """All configs of ``template`` for one workload on one GPU.

    ``workload`` is what records key on (a Conv2dWorkload, or any workload with a GEMM view,
    a GemmView included); validity, the default config, the prior and the features read
    only what the template's ``problem`` gives: ``view`` (tc_gemm: ``views.view_of``: M, N, K
    and the operands' layout) and ``context``.  Everything template-specific is a call on
    ``self.template``, so the same space serves any template.  ``gpu`` (a ``GpuInfo``) is the
    GPU whose limits the rules read; ``template`` a ``Template``."""

    def __init__(self, workload, gpu, knobs: dict | None = None, *, template):
        if gpu is None:
            raise TypeError("a space is of one GPU: give its GpuInfo (backends.cuda.gpu.default_gpu() for this "
                            "machine's, gpu_for_arch('sm_90') for an arch)")
        self.template = template
        self.workload = workload
        self.gpu = gpu
        self.view, self.context = self.template.problem(workload, self.gpu)
        table, defaults = self.template.knobs, self.template.knob_defaults
        # A narrower table pins knobs; a knob it lacks is pinned to its knob_defaults value.
        self.knobs = {name: (knobs or table).get(name, (defaults.get(name),)) for name in table}
        self._radices = [len(c) for c in self.knobs.values()]
        # Random draws (``drawn``) keep the template's pinned knobs at their first value, 0, or at
        # the value a mapping names (``Template.draw_pinned`` says which and why).
        pinned = self.template.draw_pinned(self)
        pins = dict(pinned) if isinstance(pinned, Mapping) else dict.fromkeys(pinned, 0)
        held = {name: candidates.index(pins[name]) for name, candidates in self.knobs.items()
                if name in pins and (pins[name] in candidates if isinstance(pinned, Mapping) else candidates[0] == 0)}
        self._draw_radices = [1 if name in held else radix for name, radix in zip(self.knobs, self._radices)]
        self._draw_offsets = [held.get(name, 0) for name in self.knobs]  # the pinned value's position
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
        for draw_radix, radix, offset in zip(self._draw_radices, self._radices, self._draw_offsets):
            draws, position = np.divmod(draws, draw_radix)
            index += (position + offset) * place
            place *= radix
        return index

    def drawn_positions(self, draws) -> np.ndarray:
        """``positions_from_indices(self, self.drawn(draws))`` without the round trip through
        indices: the draws' mixed-radix digits are the positions (a pinned knob's: its value's)."""
        draws = np.asarray(draws, dtype=np.int64).ravel()
        pos = np.empty((len(self._radices), draws.size), dtype=np.int64)  # a knob's column per row, filled at once
        for j, (draw_radix, offset) in enumerate(zip(self._draw_radices, self._draw_offsets)):
            if draw_radix == 1:
                pos[j] = offset
            else:  # (an undrawn knob is pinned: its offset is 0 here)
                draws, pos[j] = np.divmod(draws, draw_radix)
        return pos.T

    def __iter__(self) -> Iterator[Config]:
        return (self.get(i) for i in range(len(self)))

    def __repr__(self) -> str:
        return f"ConfigSpace({self.workload}, {self.gpu.arch}, {len(self)} configs)"

    # ---- index <-> config ------------------------------------------------
    def get(self, index: int) -> Config:
        if not 0 <= index < len(self):
            raise ValueError(f"config index {index} is outside the space (0..{len(self) - 1})")
        values = {}
        for (name, candidates), radix in zip(self.knobs.items(), self._radices):
            index, pos = divmod(index, radix)
            values[name] = candidates[pos]
        return self.template.config_type(**values)

    def index(self, config: Config) -> int:
        index, scale = 0, 1
        for (name, candidates), radix in zip(self.knobs.items(), self._radices):
            value = getattr(config, name)
            # by type too: True == 1 and 2.0 == 2 in Python, but neither is a knob value
            if not any(type(value) is type(c) and value == c for c in candidates):
                raise ValueError(f"{name}={value!r} is not in the space (candidates: {list(candidates)})")
            index += candidates.index(value) * scale
            scale *= radix
        return index

    def sample(self, n: int, seed: int | None = None, valid_only: bool = True) -> list[Config]:
        """``n`` distinct configs drawn uniformly (valid ones only, by default): the first
        ``n`` distinct (valid) ones of a seeded stream of at most ``4000 n + 20000`` draws (4M at
        most), checked in batches sized by the valid fraction seen so far (0.05-0.1% of a conv's
        space is valid: most values of the warp-specialized kernel's knobs need the others)."""
        rng = random.Random(seed)
        chosen: dict[int, Config] = {}
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
    def to_entity(self, config: Config) -> dict:
        """AutoTVM-like plain dict: {"index": i, "entity": [[knob, "ot", value], ...]}."""
        return {"index": self.index(config), "entity": [[k, "ot", getattr(config, k)] for k in self.knobs]}

    def from_entity(self, entity: dict) -> Config:
        try:
            values = {name: value for name, _kind, value in entity["entity"]}
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"malformed config entity: {entity!r}") from None
        return self.from_dict(values)

    def from_dict(self, values: dict) -> Config:
        values = {**self.template.knob_defaults, **values}
        unknown = set(values) - set(self.knobs)
        missing = set(self.knobs) - set(values)
        if unknown or missing:
            raise ValueError(f"config does not match the space: unknown {sorted(unknown)}, missing {sorted(missing)}")
        config = self.template.config_type(**values)
        self.index(config)  # raises for values outside the candidate lists
        return config

    # ---- validity -----------------------------------------------------------
    def why_invalid(self, config: Config) -> str | None:
        """None for a config that builds and runs on this workload and GPU, else the reason
        (tc_gemm: the message of the first rule it breaks)."""
        return self.template.why_invalid(self, config)

    def is_valid(self, config: Config) -> bool:
        return self.why_invalid(config) is None

    # ---- a config that needs no tuning -------------------------------------
    def default_config(self) -> Config:
        """A valid config good enough to run untuned (tc_gemm: the one the analytic prior rates
        highest among those with the usual shared-memory offsets, ties to the lowest index).
        Memoised per (template, workload, GPU, knob table)."""
        return _default_config(self.template, self.workload, self.gpu, tuple(self.knobs.items()))


@functools.lru_cache(maxsize=256)
def _default_config(template, workload, gpu, knobs: tuple):
    return template.default_config(ConfigSpace(workload, gpu, dict(knobs), template=template))
