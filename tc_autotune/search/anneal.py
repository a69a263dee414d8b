"""Simulated annealing over knob positions: every chain of a batch steps at once, on any score of
rows (a cost model's predictions, the prior, a zero-shot ranking).  Used by ``XGBTuner`` and the
zero-shot picks; no model of its own."""

from __future__ import annotations

import numpy as np

from ..core.config_space import indices_from_positions, radices, valid_mask, with_requirements


def anneal_walk(space, score, starts: np.ndarray, rng, steps: int, temperature: float = 1.0,
                min_scale: float = 1e-9, lookahead: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Simulated annealing on ``score`` (knob-position rows -> scores, higher is better), all
    chains stepping at once: each step moves one random knob of every chain (onto an
    intrinsic path with the knob values it requires) and accepts by the Metropolis rule at a
    temperature falling linearly from the starts' score spread.  An invalid start scores
    -inf, so its first valid move is taken.  Returns (positions, scores) of every valid
    point visited, starts included, in visiting order.

    ``lookahead``: the same walk, two steps per batch of rows checked and scored: a step's moves
    and both moves the next step may make (from where a chain is, or from where it moves to),
    each distinct row once.  Half the batches, three times the rows: faster where a batch costs
    mostly its numpy calls (the zero-shot pick's 64 chains).  Only for a ``score`` that scores a
    row alike in any batch and draws nothing from ``rng`` (the walk's draws are all made first,
    in the same order)."""
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

    def moved(base, knob, shift):
        cand = base.copy()
        at = np.arange(len(base))
        cand[at, knob] = (base[at, knob] + shift) % rad[knob]
        return with_requirements(space, cand)  # a move onto a path lands with what it requires

    def checked(cand):
        ok = valid_mask(space, cand)
        cand_scores = np.full(len(cand), -np.inf)
        cand_scores[ok] = score(cand[ok])
        return ok, cand_scores

    def checked_once(cand):  # a quarter of a lookahead batch's rows are another's (a move undone)
        _, first, inverse = np.unique(indices_from_positions(space, cand), return_index=True, return_inverse=True)
        ok, cand_scores = checked(cand[first])
        return ok[inverse], cand_scores[inverse]

    def metropolis(step, cand, ok, cand_scores, uniform):
        temp = scale * (1.0 - step / steps)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            gain = np.minimum(cand_scores - scores, 0.0)
            accept = ok & (uniform < np.exp(gain / max(temp, 1e-12)))
        pos[accept], scores[accept] = cand[accept], cand_scores[accept]
        seen_pos.append(cand[ok])
        seen_score.append(cand_scores[ok])
        return accept

    if not lookahead:
        for step in range(steps):
            knob = movable[rng.integers(0, movable.size, size=chains)]
            cand = moved(pos, knob, rng.integers(1, rad[knob]))
            ok, cand_scores = checked(cand)
            metropolis(step, cand, ok, cand_scores, rng.random(chains))
        return np.concatenate(seen_pos), np.concatenate(seen_score)

    draws = []
    for _ in range(steps):  # the draws do not depend on the walk: made first, as the loop above makes them
        knob = movable[rng.integers(0, movable.size, size=chains)]
        draws.append((knob, rng.integers(1, rad[knob]), rng.random(chains)))
    for step in range(0, steps, 2):
        knob, shift, uniform = draws[step]
        cand = moved(pos, knob, shift)
        if step + 1 == steps:
            metropolis(step, cand, *checked(cand), uniform)
            break
        knob, shift, next_uniform = draws[step + 1]
        # the next step's candidates from where each chain is and from where it may move to
        batch = np.concatenate([cand, moved(np.concatenate([pos, cand]), np.tile(knob, 2), np.tile(shift, 2))])
        ok, cand_scores = checked_once(batch)
        accept = metropolis(step, cand, ok[:chains], cand_scores[:chains], uniform)
        pick = np.where(accept, 2 * chains, chains) + rows
        metropolis(step + 1, batch[pick], ok[pick], cand_scores[pick], next_uniform)
    return np.concatenate(seen_pos), np.concatenate(seen_score)
