"""The space a zero-shot search runs on: its workload's, with the knobs its template holds for
zero-shot (``Template.zero_shot_held``: candidates no tuned record holds yet, whose values the
model cannot rank) narrowed to the candidates it keeps, a prefix of each one's table, so the
search neither draws nor moves onto the others and ranks exactly what it ranked before they
existed.  Indices cross between the two tables here: models and records hold the full table's
(a kept candidate has the same position in both)."""

from __future__ import annotations

import numpy as np

from ..core.config_space import ConfigSpace, indices_from_positions, positions_from_indices


def held_space(space: ConfigSpace) -> ConfigSpace:
    """``space`` with its template's held knobs narrowed (``space`` itself where none is held)."""
    held = space.template.zero_shot_held
    if not held:
        return space
    knobs = dict(space.knobs)
    for name, kept in held.items():
        if tuple(kept) != space.knobs[name][:len(kept)]:
            raise ValueError(f"{name}: a held knob keeps a prefix of its candidates, not {kept}")
        knobs[name] = tuple(kept)
    return ConfigSpace(space.workload, space.gpu, knobs=knobs, template=space.template)


def ranked(template, config) -> bool:
    """Whether the zero-shot search ranks ``config``: none of its knobs holds a candidate the
    template keeps out of the search (a record of a new knob seeds nothing the model knows)."""
    return all(getattr(config, name) in kept for name, kept in template.zero_shot_held.items())


def to_held(full: ConfigSpace, held: ConfigSpace, indices) -> np.ndarray:
    """Indices of ``full`` as indices of ``held``: a candidate the held table lacks (a record's,
    once there are some) becomes its first."""
    pos = positions_from_indices(full, np.asarray(indices, dtype=np.int64).reshape(-1))
    radix = np.array([len(values) for values in held.knobs.values()], dtype=np.int64)
    return indices_from_positions(held, np.where(pos < radix, pos, 0))


def to_full(full: ConfigSpace, held: ConfigSpace, indices) -> np.ndarray:
    """Indices of ``held`` as indices of ``full``."""
    return indices_from_positions(full, positions_from_indices(held, np.asarray(indices, dtype=np.int64).reshape(-1)))
