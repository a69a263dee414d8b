"""The space a zero-shot search runs on: its workload's, with the knobs its template holds for
zero-shot (``Template.zero_shot_held``: knobs no tuned record has moved, whose values the model
cannot rank) pinned to one value, so the search neither draws nor moves them and ranks exactly
what it ranked before such a knob existed.  Indices cross between the two tables here: models
and records hold the full table's."""

from __future__ import annotations

import numpy as np

from ..core.config_space import ConfigSpace
from .cost_model import indices_from_positions, positions_from_indices


def held_space(space: ConfigSpace) -> ConfigSpace:
    """``space`` with its template's held knobs pinned (``space`` itself where none is held)."""
    held = space.template.zero_shot_held
    if not held:
        return space
    knobs = {name: (held[name],) if name in held else values for name, values in space.knobs.items()}
    return ConfigSpace(space.workload, space.gpu, knobs=knobs, template=space.template)


def to_held(full: ConfigSpace, held: ConfigSpace, indices) -> np.ndarray:
    """Indices of ``full`` as indices of ``held`` (a held knob takes its one value)."""
    pos = positions_from_indices(full, np.asarray(indices, dtype=np.int64).reshape(-1))
    return indices_from_positions(held, np.where(_held_columns(held), 0, pos))


def to_full(full: ConfigSpace, held: ConfigSpace, indices) -> np.ndarray:
    """Indices of ``held`` as indices of ``full``."""
    pos = positions_from_indices(held, np.asarray(indices, dtype=np.int64).reshape(-1))
    at = np.array([full.knobs[name].index(values[0]) if len(values) == 1 and len(full.knobs[name]) > 1 else 0
                   for name, values in held.knobs.items()], dtype=np.int64)
    return indices_from_positions(full, np.where(_held_columns(held), at, pos))


def _held_columns(held: ConfigSpace) -> np.ndarray:
    return np.array([len(values) == 1 for values in held.knobs.values()])
