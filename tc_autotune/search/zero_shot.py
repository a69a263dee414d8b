"""Zero-shot configs: a fast kernel for a shape nobody tuned, with no GPU trial and no training.

The analytic prior's default config alone runs ~0.36x cuDNN; the shipped histories know far more
(thousands of measured configs), and here they answer for an unseen workload:

* a ranking model trained on them by the tuning side (``zero_shot_train``: xgboost's rank:pairwise
  trees on the transferable ``cost_model.features_from_positions``, on top of log(analytic prior))
  is stored beside the shipped logs (``tuning_logs/zero_shot_model.json``, package data): one
  model per GPU that measured records, one per arch (``stored_model`` says which a GPU reads);
* the best configs of the nearest tuned workloads (``workload_distance``: log M, N, K, batch,
  channels, kernel area, stride, output dtype; a dense GEMM's come from ``apply``) and every
  config one or two knobs from them are candidates, valid ones only;
* simulated annealing on the model's score (vectorised), seeded with those configs and random
  valid points, covers the rest of the space, which is never enumerated (~1G configs);
* the model ranks all candidates, ``space.is_valid`` confirms them; the first is the pick.

This module only reads: the trees are evaluated with numpy (``tree_ranker``, equal to xgboost's
predictions), so a build never imports xgboost nor trains; a pick takes ~0.12 s.  A stored model
that is missing, unreadable or made for another template is not used (``apply`` says why); the
tuning side (``tc-nightly``, ``tc-tune``, ``tc-records --train-zero-shot``) trains a new one.
Workloads of ``lab/heldout.toml`` and ``lab/validation.toml`` are never trained on
(``zero_shot_train.excluded_workloads``).  Seeded, stable sorts: the same model gives the same
configs.  No TVM import.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cost_model import features_from_positions, indices_from_positions, positions_from_indices, radices, valid_mask
from ..backends.cuda.gpu import GpuInfo
from ..core import tasks
from ..core.config_space import ConfigSpace, with_requirements
from ..database.paths import shipped_log_files, shipped_logs_dir
from .held_knobs import held_space, to_full, to_held
from .tree_ranker import TreeEnsemble
from .anneal import anneal_walk
from ..workloads.conv2d import Conv2dWorkload

log = logging.getLogger(__name__)

# Bump when the stored file's layout or a stored model's meaning changes unseen by the signature.
MODEL_FORMAT = 2
MODEL_FILE = "zero_shot_model.json"  # beside the shipped logs it was trained from
# Trees are fitted on top of PRIOR_MARGIN x log(prior); 1 is the Bradley-Terry scale of pairwise
# ranking (P(a faster than b) = prior_a / (prior_a + prior_b) before any tree).
PRIOR_MARGIN = 1.0
NEAREST_WORKLOADS = 4  # tuned workloads whose best configs are candidates and annealing seeds
BEST_PER_WORKLOAD = 4  # best configs taken from each of them
ANNEAL_CHAINS, ANNEAL_STEPS, SEED = 64, 80, 0  # the annealing's chains and steps, and its generator's seed

# The stored models are trained on conv2d's records (the face registers it: ``core.builtin_tasks``).
TASK = tasks.of_type(Conv2dWorkload)


# ---- the model -----------------------------------------------------------------------------------
def margin(x: np.ndarray) -> np.ndarray:
    """PRIOR_MARGIN x log(analytic prior) of featurised rows: the score the trees start from."""
    prior = x[:, TASK.template.feature_names.index("prior")]
    return PRIOR_MARGIN * np.log(np.maximum(prior.astype(np.float64), 1e-6))


def _shape_vector(workload: Conv2dWorkload) -> np.ndarray:
    m, n, k = workload.gemm_shape
    return np.array([
        math.log2(m), math.log2(n), math.log2(k), math.log2(workload.batch),
        math.log2(workload.in_channels), math.log2(workload.out_channels),
        math.log2(workload.kernel_h * workload.kernel_w), math.log2(workload.stride[0] * workload.stride[1]),
        float(workload.out_dtype in _TWO_BYTE_OUTPUTS), math.log2(workload.groups),
    ])


# The output dtypes of 2-byte elements: a bf16 output is stored as an fp16 one is (the model's
# features do not see the dtype, and bf16 operands run at fp16's rate), so bf16 workloads find
# fp16 ones as their neighbours and fp16 rows stay what the stored model was trained on.
_TWO_BYTE_OUTPUTS = ("float16", "bfloat16")


# The GEMM shape (a group's) decides tiling and waves; batch, channels, kernel area and stride
# how the im2col is laid out (and the vector widths); the output dtype the epilogue; the groups
# how many GEMMs share the grid (last: ungrouped workloads' distances are what they were).
_SHAPE_WEIGHTS = np.array([1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.5])


def workload_distance(a: Conv2dWorkload, b: Conv2dWorkload) -> float:
    """``workload_distances`` of one pair."""
    return float(workload_distances(a, [b])[0])


def workload_distances(workload: Conv2dWorkload, others) -> np.ndarray:
    """How far ``workload`` is from each of ``others`` for config transfer: weighted Euclidean
    distance of log2 M, N, K, batch, in/out channels, kernel area, stride area, a 2-byte (fp16,
    bf16) output (0/1) and log2 groups."""
    d = np.array([_shape_vector(w) for w in others]).reshape(len(others), -1) - _shape_vector(workload)
    return np.sqrt(np.sum(_SHAPE_WEIGHTS * d * d, axis=1))


@dataclass
class ZeroShotModel:
    """A trained ranking model of one GPU (or arch) plus the best configs of the workloads it knows."""

    ranker: TreeEnsemble
    gpu: GpuInfo  # the limits its training records were featurised with
    scope: str  # "gpu": records of that GPU's name; "arch": of any GPU of its arch
    sources: list[str]  # GPUs the records come from
    best: dict[Conv2dWorkload, list[int]]  # per workload, its best config indices, best first
    rows: int
    key: str

    def score(self, space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
        """Scores of knob-position rows on ``space`` (higher = predicted faster); comparable
        within one workload only."""
        if len(pos) == 0:
            return np.zeros(0)
        x = features_from_positions(space, pos)
        return self.ranker.predict(x).astype(np.float64) + margin(x)

    def nearest(self, workload: Conv2dWorkload, n: int = NEAREST_WORKLOADS) -> list[Conv2dWorkload]:
        """The ``n`` known workloads nearest ``workload`` (itself excluded), nearest first."""
        known = [w for w in self.best if w != workload]
        far = dict(zip(known, workload_distances(workload, known).tolist()))
        return sorted(known, key=lambda w: (far[w], str(w)))[:n]

    def to_dict(self) -> dict:
        return {"scope": self.scope, "gpu": gpu_key(self.gpu), "sources": self.sources, "rows": self.rows,
                "best": [[str(w), idx] for w, idx in self.best.items()], "trees": self.ranker.to_dict()}

    @classmethod
    def from_dict(cls, entry: dict, key: str) -> "ZeroShotModel":
        gpu = GpuInfo(*entry["gpu"])
        best = {Conv2dWorkload.parse(spec): [int(i) for i in idx] for spec, idx in entry["best"]}
        return cls(TreeEnsemble.from_dict(entry["trees"]), gpu, entry["scope"], list(entry["sources"]), best,
                   int(entry["rows"]), f"{key}:{entry['scope']}:{gpu.name}")


def gpu_key(gpu: GpuInfo) -> list:
    return [gpu.name, gpu.arch, gpu.sm_count, gpu.max_threads_per_block, gpu.max_smem_per_block]


# ---- the stored models ------------------------------------------------------------------------
def model_path(folder=None) -> Path | None:
    """The stored model file of the logs in ``folder`` (default: the shipped logs); None without."""
    folder = shipped_logs_dir() if folder is None else Path(folder)
    return None if folder is None else folder / MODEL_FILE


def signature() -> dict:
    """What a stored model must have been made for to rank today's configs: the file layout, the
    features (in order), the knob table (best configs are indices into it), the prior's margin."""
    template = TASK.template
    knobs = hashlib.sha256(json.dumps({k: [str(v) for v in vals] for k, vals in template.knobs.items()}).encode())
    return {"format": MODEL_FORMAT, "feature_names": list(template.feature_names),
            "knob_table": knobs.hexdigest()[:16], "prior_margin": PRIOR_MARGIN}


def stale_reason(meta: dict) -> str | None:
    """Why a stored model (its metadata) cannot rank today's configs; None when it can."""
    for key, wanted in signature().items():
        if (have := meta.get(key)) == wanted:
            continue
        if key == "feature_names":
            return f"it was trained on other features ({len(have or [])}, today {len(wanted)})"
        return f"its {key.replace('_', ' ')} is {have!r}, today {wanted!r}"
    return None


def rebuild_hint(path) -> str:
    return (f"the zero-shot model {path}: `tc-records --train-zero-shot` rebuilds it "
            "(tc-tune and tc-nightly do where it is stale)")


@functools.lru_cache(maxsize=4)
def _read(path: str, _mtime_ns: int, _size: int) -> tuple[tuple[ZeroShotModel, ...], str | None]:
    """(models, None), or ((), why not) for an unreadable or stale file; read once per version."""
    start = time.perf_counter()
    try:
        doc = json.loads(Path(path).read_bytes())
        why = stale_reason(doc)
        if why is not None:
            log.info("zero-shot: not using %s: %s", path, why)
            return (), f"{why}; {rebuild_hint(path)}"
        key = str(doc["logs_sha256"])[:12]
        models = tuple(ZeroShotModel.from_dict(entry, key) for entry in doc["models"])
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        log.info("zero-shot: cannot read %s: %s", path, err)
        return (), f"it cannot be read ({type(err).__name__}: {err}); {rebuild_hint(path)}"
    log.debug("zero-shot: %d model(s) read from %s in %.3f s", len(models), path, time.perf_counter() - start)
    return models, None


def stored_models(folder=None) -> tuple[tuple[ZeroShotModel, ...], str | None]:
    """The models stored beside the logs in ``folder`` (default: the shipped logs), or ((), why
    there are none usable): missing, unreadable or stale.  Read once per version of the file."""
    path = model_path(folder)
    if path is None:
        return (), "there are no shipped logs"
    try:
        stat = path.stat()
    except OSError:
        return (), f"there is no zero-shot model at {path} (`tc-records --train-zero-shot` makes it)"
    return _read(str(path), stat.st_mtime_ns, stat.st_size)


# A GPU's own model only where it knows most of the arch model's workloads: on an H200 its own (51 of
# 128) picked 0.67x cuDNN on the validation convs, the arch's (every Hopper's records) 0.82x.
NAMED_MODEL_COVERAGE = 0.9


def stored_model(gpu: GpuInfo, folder=None) -> tuple[ZeroShotModel | None, str | None]:
    """(the stored model for ``gpu``, None), or (None, why there is none): the model of its GPU
    name where it knows NAMED_MODEL_COVERAGE of the arch model's workloads, else the arch's."""
    models, why = stored_models(folder)
    if why is not None:
        return None, why
    same_arch = [m for m in models if m.gpu.arch == gpu.arch]
    arch = next((m for m in same_arch if m.scope == "arch"), None)
    named = [m for m in same_arch if m.scope == "gpu" and m.gpu.name == gpu.name
             and (arch is None or len(m.best) >= NAMED_MODEL_COVERAGE * len(arch.best))]
    chosen = next(iter(named), arch)
    return chosen, None if chosen is not None else f"the shipped histories have no record of {gpu.arch}"


# ---- candidates --------------------------------------------------------------------------------
def _unique_rows(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """Distinct rows of ``pos`` in index order (unique on indices: faster than on rows)."""
    # the first row of each index, in index order (np.unique's plain form imports numpy.ma: ~7 ms)
    blocks = [indices_from_positions(space, pos[i:i + 4096]) for i in range(0, len(pos), 4096)]
    indices = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
    order = np.argsort(indices)
    indices = indices[order]
    return pos[order[np.concatenate(([True], indices[1:] != indices[:-1]))]]


def _moves(space: ConfigSpace, pos: np.ndarray, depth: int = 2) -> np.ndarray:
    """``pos`` and every config up to ``depth`` knob changes away (a move onto mma/wgmma takes
    the knob values that path requires, so it lands on a valid twin)."""
    rad = radices(space)
    knobs = np.flatnonzero(rad > 1)
    # int8 positions while ~30,000 rows are moved and deduplicated (indices cast a block at a time):
    # an eighth of the memory, whose first touch was most of the time in a fresh process
    dtype = np.int8 if rad.max(initial=0) <= np.iinfo(np.int8).max else np.int64
    move_knob = np.repeat(knobs, rad[knobs])  # every move (knob j to value v), all rows at once
    move_value = (np.concatenate([np.arange(rad[j]) for j in knobs]) if len(knobs) else move_knob).astype(dtype)
    out = [frontier := pos.astype(dtype)]
    for _ in range(depth):
        # (move, row) pairs, move by move, that change the row (a row already there stays out)
        move, row = np.nonzero(frontier[:, move_knob].T != move_value[:, None])
        moved = frontier[row]
        moved[np.arange(len(row)), move_knob[move]] = move_value[move]
        frontier = _unique_rows(space, with_requirements(space, moved))
        out.append(frontier)
    return _unique_rows(space, np.concatenate(out)).astype(np.int64)


def _random_valid(space: ConfigSpace, rng, n: int) -> np.ndarray:
    """Up to ``n`` random positions that pass the pre-filter (bounded rejection sampling)."""
    found, have = [], 0
    for _ in range(16):
        pos = space.drawn_positions(rng.integers(0, space.draw_bound, size=4096))
        pos = pos[valid_mask(space, pos)]
        found.append(pos)
        have += len(pos)
        if have >= n:
            break
    return np.concatenate(found)[:n]


@dataclass
class Candidates:
    """The scored candidates of one workload, best first (ties by index)."""

    indices: np.ndarray  # config indices (pre-filtered valid; confirm with space.is_valid)
    scores: np.ndarray
    from_neighbours: np.ndarray  # bool: a nearest workload's best config (or its nearest valid fix)
    neighbours: list  # the nearest tuned workloads, nearest first


def candidates(model: ZeroShotModel, space: ConfigSpace, seeds=None, neighbours=()) -> Candidates:
    """Score the candidates for ``space``'s workload (searched with its held knobs pinned: ``held_knobs``):
    the nearest tuned workloads' best configs (or ``seeds``, config indices the caller found near it, from
    ``neighbours``), every valid config one or two knobs from them, and what annealing on the model visits."""
    rng, full, space = np.random.default_rng(SEED), space, held_space(space)
    if seeds is None:
        neighbours = model.nearest(space.workload)
        seeds = [i for w in neighbours for i in model.best[w][:BEST_PER_WORKLOAD]]
    seeds, neighbours = list(dict.fromkeys(int(i) for i in seeds)), list(neighbours)
    seed_pos = positions_from_indices(space, to_held(full, space, seeds))
    hood = _moves(space, seed_pos) if len(seed_pos) else seed_pos
    hood = hood[valid_mask(space, hood)]
    hood_scores = model.score(space, hood)
    # Each seed stands for itself where it is valid; where not (odd channels, a tiny M), for its
    # nearest valid configs in knob space, the model's favourite among them.
    from_neighbours = np.zeros(len(hood), dtype=bool)
    if len(hood):
        for seed in seed_pos:
            dist = (hood != seed).sum(axis=1)
            nearest = np.flatnonzero(dist == dist.min())
            from_neighbours[nearest[np.argmax(hood_scores[nearest])]] = True
    seeded = hood[from_neighbours]
    seeded = seeded[np.argsort(-hood_scores[from_neighbours], kind="stable")][:ANNEAL_CHAINS // 2]
    starts = np.concatenate([seeded, _random_valid(space, rng, ANNEAL_CHAINS - len(seeded))])
    if len(starts) == 0:  # a narrow space (3 input channels): nothing valid near the neighbours'
        # bests, none drawn at random; the walk starts from the default config, always valid
        starts = positions_from_indices(space, np.array([space.index(space.default_config())], dtype=np.int64))
    visited, visited_scores = anneal_walk(space, lambda p: model.score(space, p), starts, rng,
                                          ANNEAL_STEPS, min_scale=1e-3, lookahead=True)
    # A row's score does not depend on the batch it was scored in: the hood's and the walk's
    # scores stand, rather than scoring the ~5,000 rows of the pool a second time.
    pool = np.concatenate([hood, visited])
    pool_scores = np.concatenate([hood_scores, visited_scores])
    known = _known_kernels(model, space, pool)
    pool, pool_scores = pool[known], pool_scores[known]
    if len(pool) == 0:
        return Candidates(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool), neighbours)
    idx, first = np.unique(indices_from_positions(space, pool), return_index=True)
    scores = pool_scores[first]
    order = np.lexsort((idx, -scores))  # best score first, ties by index: deterministic
    idx, scores = idx[order], scores[order]
    marked = np.isin(idx, indices_from_positions(space, hood[from_neighbours]))
    return Candidates(to_full(full, space, idx), scores, marked, neighbours)


def _known_kernels(model: ZeroShotModel, space: ConfigSpace, pool: np.ndarray) -> np.ndarray:
    """Which rows of ``pool`` to keep (bool): warp-specialized configs only where a tuned workload's
    best config is one; else the trees never saw that kernel win, and only the prior would speak."""
    column = list(space.knobs).index("warp_specialized")
    best = np.array([i for indices in model.best.values() for i in indices], dtype=np.int64)
    if len(best) and positions_from_indices(space, best)[:, column].any():
        return np.ones(len(pool), dtype=bool)
    return pool[:, column] == space.knobs["warp_specialized"].index(0)


# ---- the API -----------------------------------------------------------------------------------
def zero_shot_configs(workload, gpu: GpuInfo, k: int = 8, model: ZeroShotModel | None = None,
                      seeds=None, neighbours=()) -> list:
    """The ``k`` configs predicted fastest for ``workload`` on ``gpu``, best first (the first is
    the pick), each valid on its space; no GPU needed, no training.

    ``workload``: a ``Conv2dWorkload`` (``workloads.get`` reads a preset or a spec); another
    task's workload (a dense GEMM) with ``seeds``, the config indices of its nearest tuned
    workloads (``neighbours``), which the model's own best configs cannot give.  ``model``: default the stored model for
    ``gpu`` (``stored_model``; the tuning side passes others, ``zero_shot_train.load_model``).
    A workload the model was trained on is ranked by it all the same, but its own best configs
    are no candidates (``ZeroShotModel.nearest`` skips it).  Should the top ``k`` (k >= 2) hold
    none of the nearest tuned workloads' best configs, the best-scored of those takes the last
    place: a config measured fast on a similar shape hedges a wrong model for a caller that can
    afford a few trials.  [] without a usable model for this GPU's arch (the caller then uses
    ``space.default_config()``; ``stored_model`` says why).
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if not isinstance(workload, Conv2dWorkload) and seeds is None:  # its nearest are convs
        return []
    start = time.perf_counter()
    if model is None:
        model, _ = stored_model(gpu)
    if model is None:
        return []
    space = tasks.of(workload).space(workload, gpu)
    found = candidates(model, space, seeds, neighbours)
    picks: list = []
    for i in found.indices.tolist():
        config = space.get(i)
        if space.is_valid(config):
            picks.append(config)
            if len(picks) == k:
                break
    hedges = found.indices[found.from_neighbours].tolist()
    if k > 1 and len(picks) == k and not set(hedges) & {space.index(c) for c in picks}:
        hedge = next((c for c in map(space.get, hedges) if space.is_valid(c)), None)
        if hedge is not None:
            picks[-1] = hedge
    log.info("zero-shot %s on %s (%s model, %d candidates, nearest %s): %s in %.2f s",
             workload, gpu.name, model.scope, len(found.indices),
             found.neighbours[0] if found.neighbours else None, picks[0] if picks else None,
             time.perf_counter() - start)
    return picks


def zero_shot_config(workload, gpu: GpuInfo, model: ZeroShotModel | None = None, seeds=None, neighbours=()):
    """The zero-shot pick for ``workload`` on ``gpu`` (``zero_shot_configs``' first), or None."""
    picks = zero_shot_configs(workload, gpu, k=1, model=model, seeds=seeds, neighbours=neighbours)
    return picks[0] if picks else None


__all__ = ["MODEL_FORMAT", "MODEL_FILE", "Candidates", "ZeroShotModel", "zero_shot_configs", "zero_shot_config",
           "shipped_log_files", "model_path", "signature", "stale_reason", "stored_models", "stored_model",
           "candidates", "workload_distance", "workload_distances", "margin"]
