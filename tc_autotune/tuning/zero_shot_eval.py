"""How good is the zero-shot model on tuned workloads: leave one out, rank what was measured.

For a workload of the shipped histories, a model trained without any record of it
(``zero_shot_train.load_model``: this trains, with xgboost) ranks the configs the H100 history
measured for it; the rank correlation with their times and how far its favourite is from the
best say how well the model transfers to a shape it never saw.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

import numpy as np

from ..database.logs import load
from ..database.paths import shipped_logs_dir
from . import zero_shot_train
from ..search import zero_shot
from ..search.cost_model import positions_from_indices, prior_score
from ..backends.cuda.gpu import GpuInfo, gpu_for_arch
from ..workloads.names import get as get_workload

log = logging.getLogger(__name__)

SEED_WORKLOADS = ("tutorial", "rfc-1x1-b32", "rfc-3x3-b32", "rfc-3x3-b256", "rfc-1x1-b256", "rfc-3x3-b1")
H100_NVCC_HISTORY = "history/nvidia-h100-20261122-nvcc.jsonl"


@dataclass
class LeaveOneOut:
    """Zero-shot quality on one tuned workload, the model trained without any record of it."""

    workload: str
    measured: int  # successful current (not stale) records of it in the history, on the GPU
    spearman: float  # model scores vs measured throughput over those records
    prior_spearman: float  # the analytic prior's, for comparison
    top_ratio: float  # best measured time / time of the measured config the model ranks first
    prior_top_ratio: float  # the same for the prior
    pick_ratio: float | None  # best measured / the zero-shot pick's time, when it was measured
    neighbour_ratio: float | None  # the same for the fastest measured neighbour-derived candidate


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(len(x))
    _, inverse = np.unique(x, return_inverse=True)  # ties share their mean rank
    return (np.bincount(inverse, ranks) / np.bincount(inverse))[inverse]


def spearman(a, b) -> float:
    """Spearman rank correlation (ties averaged); nan when either side is constant."""
    ra, rb = _ranks(np.asarray(a, dtype=np.float64)), _ranks(np.asarray(b, dtype=np.float64))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def leave_one_out(workloads=SEED_WORKLOADS, history=None, gpu: GpuInfo | None = None,
                  logs=None) -> list[LeaveOneOut]:
    """For each workload: train on ``logs`` (default: the shipped logs) without it, then compare
    the model's ranking of the configs ``history`` measured for it (default: the H100 nvcc
    history) with their times.  The zero-shot pick itself is rarely among them, so the main
    numbers are the rank correlation and how far the model's favourite measured config is
    from the best.  ``gpu`` defaults to the history's GPU with its arch's nominal limits."""
    if history is None:
        shipped = shipped_logs_dir()
        history = shipped / H100_NVCC_HISTORY if shipped is not None else []
    hist = [r for r in load(history) if r.ok]
    if gpu is None:
        if not hist:
            return []
        base = gpu_for_arch(hist[0].arch or "sm_90")
        name = min((r.gpu for r in hist if r.gpu), default=base.name)
        gpu = replace(base, name=name)
    out = []
    for name in workloads:
        workload = get_workload(name)
        mine = [r for r in hist if r.workload == workload and r.gpu in (gpu.name, None) and not r.stale]
        model = zero_shot_train.load_model(gpu, logs, exclude=[workload]) if mine else None
        if model is None:
            continue
        space = zero_shot.TASK.space(workload, gpu)
        idx = np.array([r.config["index"] for r in mine], dtype=np.int64)
        secs = np.array([r.seconds for r in mine])
        pos = positions_from_indices(space, idx)
        scores, prior = model.score(space, pos), prior_score(space, pos)
        measured: dict[int, float] = {}
        for i, s in zip(idx.tolist(), secs.tolist()):
            measured[i] = min(s, measured.get(i, math.inf))
        found = zero_shot.candidates(model, space)
        pick = next((i for i in found.indices.tolist() if space.is_valid(space.get(i))), None)
        hedged = [measured[i] for i in found.indices[found.from_neighbours].tolist() if i in measured]
        best = secs.min()
        out.append(LeaveOneOut(
            workload=name, measured=len(mine),
            spearman=spearman(scores, -secs), prior_spearman=spearman(prior, -secs),
            top_ratio=float(best / secs[np.lexsort((idx, -scores))[0]]),
            prior_top_ratio=float(best / secs[np.lexsort((idx, -prior))[0]]),
            pick_ratio=float(best / measured[pick]) if pick in measured else None,
            neighbour_ratio=float(best / min(hedged)) if hedged else None,
        ))
        log.info("zero-shot leave-one-out: %s", out[-1])
    return out
