"""Simulated annealing over knob positions: every chain of a batch steps at once, on any score of
rows (a cost model's predictions, the prior, a zero-shot ranking).  Used by ``XGBTuner`` and the
zero-shot picks; no model of its own."""

from __future__ import annotations

import numpy as np

from ..core.config_space import radices, valid_mask
from ..core.template import with_requirements


def anneal_walk(space, score, starts: np.ndarray, rng, steps: int, temperature: float = 1.0,
                min_scale: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Simulated annealing on ``score`` (knob-position rows -> scores, higher is better), all
    chains stepping at once: each step moves one random knob of every chain (onto an
    intrinsic path with the knob values it requires) and accepts by the Metropolis rule at a
    temperature falling linearly from the starts' score spread.  An invalid start scores
    -inf, so its first valid move is taken.  Returns (positions, scores) of every valid
    point visited, starts included, in visiting order."""
    rad = radices(space)
    movable = np.flatnonzero(rad > 1)
    pos = np.array(starts, dtype=np.int64)
    chains = len(pos)
    if chains == 0 or movable.size == 0:
        return pos[:0], np.zeros(0)
    ok = valid_mask(space, pos)
    scores = np.full(chains, -np.inf)
    scores[ok] = score(pos[ok])
    scale = max(float(np.std(scores[ok])) if ok.sum() > 1 else 0.0, min_scale) * temperature
    seen_pos, seen_score = [pos[ok]], [scores[ok]]
    rows = np.arange(chains)
    for step in range(steps):
        temp = scale * (1.0 - step / steps)
        knob = movable[rng.integers(0, movable.size, size=chains)]
        shift = rng.integers(1, rad[knob])
        cand = pos.copy()
        cand[rows, knob] = (pos[rows, knob] + shift) % rad[knob]
        cand = with_requirements(space, cand)  # a move onto a path lands with what it requires
        ok = valid_mask(space, cand)
        cand_scores = np.full(chains, -np.inf)
        cand_scores[ok] = score(cand[ok])
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            gain = np.minimum(cand_scores - scores, 0.0)
            accept = ok & (rng.random(chains) < np.exp(gain / max(temp, 1e-12)))
        pos[accept], scores[accept] = cand[accept], cand_scores[accept]
        seen_pos.append(cand[ok])
        seen_score.append(cand_scores[ok])
    return np.concatenate(seen_pos), np.concatenate(seen_score)
