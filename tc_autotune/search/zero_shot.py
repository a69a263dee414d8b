"""Zero-shot configs: a fast kernel for a conv shape nobody tuned, with no GPU trial.

Without a record of a workload, ``build_conv2d`` used the analytic prior's default config
(~0.36x cuDNN geomean on an H100 off the presets).  The shipped histories know much more
(~3,500 measured configs of 30 workloads), and here they answer for an unseen workload:

* a ranking model is trained on every successful record measured on this GPU (provenance
  name), or on its arch when the name has none: ``XGBCostModel``'s rank:pairwise trees and
  parameters on the transferable ``cost_model.features_from_positions``, one query group per
  (workload, GPU, stale or not, compile path), so pairs only compare configs one GPU timed on
  kernels of one generator version built by one toolchain (stale records are training data,
  as for the tuner, but a workload's best configs come from current ones where it has any).
  The trees start from log(analytic prior) (``PRIOR_MARGIN``): they learn corrections to the
  prior, and where the logs say nothing (a regime no tuned workload covers) the prior still
  ranks -- left out, the pick for rfc-3x3-b1 was 5.5x off its best in ``leave_one_out``;
* the best configs of the nearest tuned workloads (``workload_distance``: log M, N, K, batch,
  channels, kernel area, stride, output dtype) and every config one or two knobs from them are
  candidates, valid ones only: what won on a similar shape is a strong guess;
* simulated annealing on the model's score (vectorised, as ``XGBTuner._anneal``), seeded with
  those configs and random valid points, covers the rest of the space, which is never
  enumerated (~1G configs for the tutorial);
* the model ranks all candidates, ``space.is_valid`` confirms them; the first is the pick.

The model depends only on the logs' bytes and the GPU: it is trained once (~1 s) and cached on
disk (``<cache>/zero_shot/<sha256>.ubj`` + ``.json``, written atomically) under the sha256 of
the logs' contents, the GPU, the excluded workloads and the settings; a warm call loads it in
milliseconds and a pick takes ~0.3 s.  Workloads of ``lab/heldout.toml`` are never
trained on, so the picks can be measured on them as shapes nobody tuned.  Seeded, one thread,
stable sorts: the same inputs give the same configs.  No TVM import.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..database import journal, records
from ..backends.cuda.nvcc import cache_dir as _cubin_dir
from .cost_model import (FEATURE_NAMES, XGBCostModel, features_from_positions, indices_from_positions,
    normalise_per_group, positions_from_indices, prior_score, radices, valid_mask)
from ..backends.cuda.gpu import GpuInfo, gpu_for_arch
from ..tuning.jobs import load_job
from ..database.records import TEMPLATE_VERSION, shipped_log_files, shipped_logs_dir
from ..core.space import ConfigSpace, Conv2dConfig, conv2d_space
from .tuner import _entity_matches, _with_intrinsic_requirements, anneal_walk
from ..workloads.conv2d import Conv2dWorkload, get as get_workload

log = logging.getLogger(__name__)

# Bump when the meaning of a cached model changes in a way the settings below do not show.
MODEL_FORMAT = 1
# The maintainers' held-out shapes (a checkout's lab/heldout.toml): the shipped logs never hold
# them (a test checks), and training skips them even if a record of one reaches a log, so the
# picks on them stay a measurement of shapes nobody tuned.  An installed package has no lab/.
HELDOUT_JOB = Path(__file__).resolve().parents[2] / "lab" / "heldout.toml"
# Kernels timed before this instant were compiled by NVRTC, later ones by nvcc (docs/maintainers.md,
# "Shipped logs in detail"): records of one workload on one GPU from the two toolchains form
# separate query groups, as their ptxas made different code.
NVCC_SINCE = datetime.datetime(2026, 11, 22, 8, 10, tzinfo=datetime.timezone.utc).timestamp()
# Trees are fitted on top of PRIOR_MARGIN x log(prior); 1 is the Bradley-Terry scale of pairwise
# ranking (P(a faster than b) = prior_a / (prior_a + prior_b) before any tree).
PRIOR_MARGIN = 1.0
NEAREST_WORKLOADS = 4  # tuned workloads whose best configs are candidates and annealing seeds
BEST_PER_WORKLOAD = 4  # best configs taken from each of them
ANNEAL_CHAINS = 64
ANNEAL_STEPS = 80
SEED = 0

_PRIOR_COLUMN = FEATURE_NAMES.index("prior")
_MEMORY: dict[str, "ZeroShotModel | None"] = {}  # cache key -> model (None: no training data)
_MEMORY_MAX = 16


# ---- the held-out shapes, the logs, the cache folder -------------------------------------------
@functools.lru_cache(maxsize=None)
def heldout_workloads(job=None) -> frozenset[Conv2dWorkload]:
    """The workloads of ``lab/heldout.toml`` (or ``job``): never trained on, so the
    zero-shot picks can be measured on them as shapes nobody tuned."""
    path = Path(job) if job is not None else HELDOUT_JOB
    if not path.exists():
        log.debug("no held-out job file at %s", path)
        return frozenset()
    return frozenset(entry.workload for entry in load_job(path).entries)


def _log_files(logs) -> list[Path]:
    return shipped_log_files() if logs is None else records.log_files(logs)


def cache_dir() -> Path:
    """Where trained models are kept: beside the cubin cache (TC_AUTOTUNE_CACHE_DIR moves both)."""
    return _cubin_dir().parent / "zero_shot"


# ---- training data -----------------------------------------------------------------------------
@dataclass
class TrainingSet:
    """Featurised records: rows, throughputs, query groups, and each workload's best configs."""

    x: np.ndarray  # (rows, features) float32, featurised with the target GPU's limits
    y: np.ndarray  # throughput, FLOP/s
    groups: np.ndarray  # query group of each row: (workload, GPU, stale, compile path)
    scope: str  # "gpu": records of the GPU's name; "arch": of any GPU of its arch
    sources: list[str]  # GPUs the records come from
    best: dict[Conv2dWorkload, list[int]]  # per workload, its best config indices, best first

    @property
    def rows(self) -> int:
        return len(self.y)


def _era(record) -> str:
    return "nvcc" if record.result.timestamp >= NVCC_SINCE else "nvrtc"


def select_records(recs, gpu: GpuInfo, exclude=()) -> tuple[list, str]:
    """(records, scope): the successful records measured on ``gpu``'s name ("gpu"), else on
    any GPU of its arch ("arch"), minus the ``exclude``d workloads; a measurement read twice
    (a best log repeats its history's lines) counts once.  Conv2d records only: the shape
    features and the distances are conv2d's."""
    exclude = frozenset(exclude)
    ok, seen = [], set()
    for record in recs:
        if (not record.ok or record.arch != gpu.arch or record.workload in exclude
                or not isinstance(record.workload, Conv2dWorkload)):
            continue
        ident = records.identity(record)  # the reader has rejected impossible times
        if ident not in seen:
            seen.add(ident)
            ok.append(record)
    named = [r for r in ok if r.gpu == gpu.name]
    return (named, "gpu") if named else (ok, "arch")


def training_set(recs, gpu: GpuInfo, exclude=()) -> TrainingSet | None:
    """The training set of ``gpu`` (see ``select_records``), or None without data.

    Records are featurised on their own workload's space with the target GPU's limits, as the
    candidates will be.  A record whose index does not decode to the config its entity names
    (logged with another knob table) is skipped, as ``Tuner.load_history`` does.
    """
    chosen, scope = select_records(recs, gpu, exclude)
    by_group: dict[tuple, list[tuple[int, float]]] = {}
    skipped = 0
    for record in chosen:
        space = conv2d_space(record.workload, gpu)
        try:
            index = int(record.config["index"])
        except (KeyError, TypeError, ValueError):
            index = -1
        if not 0 <= index < len(space) or not _entity_matches(record.config, space.get(index)):
            skipped += 1
            continue
        key = (str(record.workload), record.gpu or record.arch, record.stale, _era(record))
        by_group.setdefault(key, []).append((index, record.workload.flops / record.seconds))
    if skipped:
        log.warning("zero-shot: skipped %d record(s) whose config is outside the current space", skipped)
    if not by_group:
        return None
    xs, ys, gs = [], [], []
    ranked: dict[Conv2dWorkload, list[tuple]] = {}
    for gid, key in enumerate(sorted(by_group)):
        spec, _source, stale, era = key
        workload = get_workload(spec)
        space = conv2d_space(workload, gpu)
        indices = np.array([i for i, _ in by_group[key]], dtype=np.int64)
        tput = np.array([t for _, t in by_group[key]], dtype=np.float64)
        xs.append(features_from_positions(space, positions_from_indices(space, indices)))
        ys.append(tput)
        gs.append(np.full(len(indices), gid, dtype=np.int64))
        # A workload's best configs: those of today's generator first (then nvcc before NVRTC
        # times), by throughput relative to their group's best.
        for i, t in zip(indices.tolist(), (tput / tput.max()).tolist()):
            ranked.setdefault(workload, []).append((stale, era != "nvcc", -t, i))
    best = {w: list(dict.fromkeys(i for *_, i in sorted(rows)))[:BEST_PER_WORKLOAD]
            for w, rows in sorted(ranked.items(), key=lambda item: str(item[0]))}
    sources = sorted({r.gpu or r.arch for r in chosen})
    return TrainingSet(np.concatenate(xs), np.concatenate(ys), np.concatenate(gs), scope, sources, best)


def _margin(x: np.ndarray) -> np.ndarray:
    """PRIOR_MARGIN x log(analytic prior) of featurised rows: the score the trees start from."""
    return PRIOR_MARGIN * np.log(np.maximum(x[:, _PRIOR_COLUMN].astype(np.float64), 1e-6))


def train_model(data: TrainingSet):
    """An xgboost Booster ranking configs within a workload: ``XGBCostModel``'s objective and
    parameters (one thread, fixed seed: deterministic), fitted on top of the prior margin;
    labels are throughput over the group's best.  None when fewer than two rows succeeded."""
    import xgboost as xgb

    params = XGBCostModel(seed=SEED, nthread=1)
    _, g = np.unique(data.groups, return_inverse=True)
    y = normalise_per_group(data.y, g)
    if int((y > 0).sum()) < 2:
        return None
    order = np.argsort(g, kind="stable")  # ranking objectives need rows grouped by query
    dtrain = xgb.DMatrix(data.x[order], label=y[order], nthread=1)
    dtrain.set_group(np.bincount(g[order]))
    dtrain.set_base_margin(_margin(data.x[order]))
    return xgb.train(params.params, dtrain, num_boost_round=params.num_rounds)


# ---- the model and its cache -------------------------------------------------------------------
def _shape_vector(workload: Conv2dWorkload) -> np.ndarray:
    m, n, k = workload.gemm_shape
    return np.array([
        math.log2(m), math.log2(n), math.log2(k), math.log2(workload.batch),
        math.log2(workload.in_channels), math.log2(workload.out_channels),
        math.log2(workload.kernel_h * workload.kernel_w), math.log2(workload.stride[0] * workload.stride[1]),
        float(workload.out_dtype == "float16"),
    ])


# The GEMM shape decides tiling and waves; batch, channels, kernel area and stride how the
# im2col is laid out (and the vector widths); the output dtype the epilogue.
_SHAPE_WEIGHTS = np.array([1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25])


def workload_distance(a: Conv2dWorkload, b: Conv2dWorkload) -> float:
    """How far apart two workloads are for config transfer: weighted Euclidean distance of
    log2 M, N, K, batch, in/out channels, kernel area, stride area, and fp16 output (0/1)."""
    d = _shape_vector(a) - _shape_vector(b)
    return float(np.sqrt(np.sum(_SHAPE_WEIGHTS * d * d)))


@dataclass
class ZeroShotModel:
    """A trained ranking model of one GPU plus the best configs of the workloads it knows."""

    booster: object  # xgboost.Booster
    gpu: GpuInfo
    scope: str  # "gpu" or "arch", see select_records
    sources: list[str]
    best: dict[Conv2dWorkload, list[int]]
    rows: int
    key: str

    def score(self, space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
        """Scores of knob-position rows on ``space`` (higher = predicted faster); comparable
        within one workload only."""
        if len(pos) == 0:
            return np.zeros(0)
        x = features_from_positions(space, pos)
        # The margin is added here rather than passed as inplace_predict's base_margin (15 ms a
        # call); the base_score it would replace is a constant, which no ranking sees.
        return np.asarray(self.booster.inplace_predict(x), dtype=np.float64) + _margin(x)

    def nearest(self, workload: Conv2dWorkload, n: int = NEAREST_WORKLOADS) -> list[Conv2dWorkload]:
        """The ``n`` known workloads nearest ``workload`` (itself excluded), nearest first."""
        known = sorted((w for w in self.best if w != workload),
                       key=lambda w: (workload_distance(workload, w), str(w)))
        return known[:n]


def _gpu_key(gpu: GpuInfo) -> list:
    return [gpu.name, gpu.arch, gpu.sm_count, gpu.max_threads_per_block, gpu.max_smem_per_block]


def cache_key(files, gpu: GpuInfo, exclude=()) -> str:
    """sha256 of everything a model depends on: the logs' bytes (in any order, under any name),
    the GPU, the excluded workloads, the settings, the template and the xgboost version."""
    import xgboost

    h = hashlib.sha256()
    h.update(json.dumps([
        "tc_autotune.search.zero_shot", MODEL_FORMAT, xgboost.__version__, _gpu_key(gpu),
        sorted(str(w) for w in exclude), PRIOR_MARGIN, NVCC_SINCE, BEST_PER_WORKLOAD, SEED,
        list(FEATURE_NAMES), TEMPLATE_VERSION,
    ]).encode())
    for digest in sorted(hashlib.sha256(Path(f).read_bytes()).digest() for f in files):
        h.update(digest)
    return h.hexdigest()


def _save(model: ZeroShotModel | None, key: str, gpu: GpuInfo, extra: dict) -> None:
    """The booster, then the metadata: the .json is the commit marker readers trust.  A model
    of no data is cached too (an empty marker), so a GPU without records stays cheap."""
    folder = cache_dir()
    meta = {"format": MODEL_FORMAT, "gpu": _gpu_key(gpu), **extra}
    try:
        if model is not None:
            journal.replace_atomic(folder / f"{key}.ubj", bytes(model.booster.save_raw("ubj")))
            meta.update(scope=model.scope, sources=model.sources, rows=model.rows,
                        best=[[str(w), idx] for w, idx in model.best.items()])
        else:
            meta.update(empty=True)
        journal.replace_atomic(folder / f"{key}.json", json.dumps(meta).encode())
    except OSError as err:  # a read-only cache costs the next process a training, nothing more
        log.warning("zero-shot: cannot cache the model in %s: %s", folder, err)


def _load(key: str, gpu: GpuInfo) -> tuple[bool, ZeroShotModel | None]:
    """(found, model) from the disk cache; found is False on a miss or an unreadable entry."""
    import xgboost

    folder = cache_dir()
    try:
        meta = json.loads((folder / f"{key}.json").read_text())
        if meta.get("format") != MODEL_FORMAT:
            return False, None
        if meta.get("empty"):
            return True, None
        booster = xgboost.Booster()
        booster.load_model(str(folder / f"{key}.ubj"))
        booster.set_param({"nthread": 1})
        best = {get_workload(spec): [int(i) for i in idx] for spec, idx in meta["best"]}
        return True, ZeroShotModel(booster, gpu, meta["scope"], list(meta["sources"]), best,
                                   int(meta["rows"]), key)
    except FileNotFoundError:
        return False, None
    except (OSError, ValueError, KeyError, TypeError, xgboost.core.XGBoostError) as err:
        log.warning("zero-shot: ignoring the unreadable cache entry %s: %s", key[:12], err)
        return False, None


def load_model(gpu: GpuInfo, logs=None, exclude=()) -> ZeroShotModel | None:
    """The zero-shot model of ``gpu`` from ``logs`` (default: the shipped logs), trained without
    the held-out workloads and ``exclude``: from memory, else the disk cache, else trained now
    and cached.  None when the logs hold no usable record of this GPU or its arch."""
    files = _log_files(logs)
    if not files:
        return None
    exclude = frozenset(get_workload(w) for w in exclude) | heldout_workloads()
    key = cache_key(files, gpu, exclude)
    if key in _MEMORY:
        return _MEMORY[key]
    start = time.perf_counter()
    found, model = _load(key, gpu)
    if found:
        log.debug("zero-shot: model %s from the cache in %.3f s", key[:12], time.perf_counter() - start)
    else:
        data = training_set(records.load(files), gpu, exclude)
        booster = train_model(data) if data is not None else None
        if booster is not None:
            model = ZeroShotModel(booster, gpu, data.scope, data.sources, data.best, data.rows, key)
            log.info("zero-shot: trained on %d records of %d workloads (%s: %s) in %.2f s",
                     data.rows, len(data.best), data.scope, ", ".join(data.sources),
                     time.perf_counter() - start)
        else:
            log.info("zero-shot: no usable record of %s (%s) in %d log(s)", gpu.name, gpu.arch, len(files))
        _save(model, key, gpu, {"files": [str(f) for f in files], "exclude": sorted(map(str, exclude))})
    while len(_MEMORY) >= _MEMORY_MAX:
        _MEMORY.pop(next(iter(_MEMORY)))
    _MEMORY[key] = model
    return model


def clear_memory_cache() -> None:
    """Forget the models this process holds (the disk cache stays)."""
    _MEMORY.clear()


# ---- candidates --------------------------------------------------------------------------------
def _unique_rows(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """Distinct rows of ``pos`` in index order (unique on indices: faster than on rows)."""
    return positions_from_indices(space, np.unique(indices_from_positions(space, pos)))


def _moves(space: ConfigSpace, pos: np.ndarray, depth: int = 2) -> np.ndarray:
    """``pos`` and every config up to ``depth`` knob changes away (a move onto mma/wgmma takes
    the knob values that path requires, so it lands on a valid twin)."""
    rad = radices(space)
    out, frontier = [pos], pos
    for _ in range(depth):
        rows = []
        for j in np.flatnonzero(rad > 1):
            for v in range(rad[j]):
                moved = frontier[frontier[:, j] != v].copy()
                moved[:, j] = v
                rows.append(moved)
        frontier = _unique_rows(space, _with_intrinsic_requirements(space, np.concatenate(rows)))
        out.append(frontier)
    return _unique_rows(space, np.concatenate(out))


def _random_valid(space: ConfigSpace, rng, n: int) -> np.ndarray:
    """Up to ``n`` random positions that pass the pre-filter (bounded rejection sampling)."""
    found, have = [], 0
    for _ in range(16):
        pos = positions_from_indices(space, space.drawn(rng.integers(0, space.draw_bound, size=4096)))
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
    neighbours: list[Conv2dWorkload]  # the nearest tuned workloads, nearest first


def candidates(model: ZeroShotModel, space: ConfigSpace) -> Candidates:
    """Score the candidates for ``space``'s workload: the nearest tuned workloads' best configs,
    every valid config one or two knobs from them, and what annealing on the model visits."""
    rng = np.random.default_rng(SEED)
    neighbours = model.nearest(space.workload)
    seeds = list(dict.fromkeys(i for w in neighbours for i in model.best[w][:BEST_PER_WORKLOAD]))
    seed_pos = positions_from_indices(space, np.array(seeds, dtype=np.int64))
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
    visited, _ = anneal_walk(space, lambda p: model.score(space, p), starts, rng, ANNEAL_STEPS,
                             min_scale=1e-3)
    pool = np.concatenate([hood, visited])
    if len(pool) == 0:
        return Candidates(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool), neighbours)
    pool = _unique_rows(space, _known_kernels(model, space, pool))
    idx, scores = indices_from_positions(space, pool), model.score(space, pool)
    order = np.lexsort((idx, -scores))  # best score first, ties by index: deterministic
    idx, scores = idx[order], scores[order]
    marked = np.isin(idx, indices_from_positions(space, hood[from_neighbours]))
    return Candidates(idx, scores, marked, neighbours)


def _known_kernels(model: ZeroShotModel, space: ConfigSpace, pool: np.ndarray) -> np.ndarray:
    """``pool`` without warp-specialized configs unless a tuned workload's best config is one:
    else the trees never saw that kernel win, and only the prior would speak for it."""
    column = list(space.knobs).index("warp_specialized")
    best = np.array([i for indices in model.best.values() for i in indices], dtype=np.int64)
    if len(best) and positions_from_indices(space, best)[:, column].any():
        return pool
    return pool[pool[:, column] == space.knobs["warp_specialized"].index(0)]


# ---- the API -----------------------------------------------------------------------------------
def zero_shot_configs(workload, gpu: GpuInfo, logs=None, k: int = 8) -> list[Conv2dConfig]:
    """The ``k`` configs predicted fastest for ``workload`` on ``gpu``, best first (the first is
    the pick), each valid on its space; no GPU needed.

    ``workload``: a ``Conv2dWorkload``, preset or spec.  ``logs``: what ``records.load`` takes;
    default the shipped logs (``shipped_log_files``).  Records of ``workload`` itself are not
    trained on.  Should the top ``k`` (k >= 2) hold none of the nearest tuned workloads' best
    configs, the best-scored of those takes the last place: a config measured fast on a similar
    shape hedges a wrong model for a caller that can afford a few trials.  [] when the logs
    have no record of this GPU or its arch (the caller then uses ``space.default_config()``).
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    workload = get_workload(workload)
    if not isinstance(workload, Conv2dWorkload):  # trained on conv2d shapes only
        return []
    start = time.perf_counter()
    model = load_model(gpu, logs)
    if model is not None and workload in model.best:  # the caller has records of it: not those
        model = load_model(gpu, logs, exclude=[workload])
    if model is None:
        return []
    space = conv2d_space(workload, gpu)
    found = candidates(model, space)
    picks: list[Conv2dConfig] = []
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


def zero_shot_config(workload, gpu: GpuInfo, logs=None) -> Conv2dConfig | None:
    """The zero-shot pick for ``workload`` on ``gpu`` (``zero_shot_configs``' first), or None."""
    picks = zero_shot_configs(workload, gpu, logs, k=1)
    return picks[0] if picks else None


# ---- how good is it: leave one tuned workload out ----------------------------------------------
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
    hist = [r for r in records.load(history) if r.ok]
    if gpu is None:
        if not hist:
            return []
        base = gpu_for_arch(hist[0].arch or "sm_90")
        name = min((r.gpu for r in hist if r.gpu), default=base.name)
        gpu = GpuInfo(name, base.arch, base.sm_count, base.max_threads_per_block, base.max_smem_per_block)
    out = []
    for name in workloads:
        workload = get_workload(name)
        mine = [r for r in hist if r.workload == workload and r.gpu in (gpu.name, None) and not r.stale]
        model = load_model(gpu, logs, exclude=[workload]) if mine else None
        if model is None:
            continue
        space = conv2d_space(workload, gpu)
        idx = np.array([r.config["index"] for r in mine], dtype=np.int64)
        secs = np.array([r.seconds for r in mine])
        pos = positions_from_indices(space, idx)
        scores, prior = model.score(space, pos), prior_score(space, pos)
        measured: dict[int, float] = {}
        for i, s in zip(idx.tolist(), secs.tolist()):
            measured[i] = min(s, measured.get(i, math.inf))
        found = candidates(model, space)
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


__all__ = [
    "MODEL_FORMAT", "HELDOUT_JOB", "Candidates", "LeaveOneOut", "TrainingSet", "ZeroShotModel",
    "zero_shot_configs", "zero_shot_config", "heldout_workloads", "shipped_log_files", "cache_dir",
    "cache_key", "load_model", "clear_memory_cache", "select_records", "training_set", "train_model",
    "candidates", "workload_distance", "leave_one_out", "spearman",
]
