"""Training the zero-shot model: the tuning side, the only place xgboost is imported for it.

``zero_shot`` ranks with trees it only reads; they are made here from the shipped histories and
stored beside them (``tuning_logs/zero_shot_model.json``, package data):

* a ranking model is trained on every successful record measured on a GPU (provenance name), or
  on its arch for any other GPU of it: ``XGBCostModel``'s rank:pairwise trees and parameters on
  the transferable ``cost_model.features_from_positions``, one query group per (workload, GPU,
  stale or not, compile path), so pairs only compare configs one GPU timed on kernels of one
  generator version built by one toolchain (stale records are training data, as for the tuner,
  but a workload's best configs come from current ones where it has any).  The trees start from
  log(analytic prior) (``zero_shot.PRIOR_MARGIN``): they learn corrections to the prior, and
  where the logs say nothing (a regime no tuned workload covers) the prior still ranks -- left
  out, the pick for rfc-3x3-b1 was 5.5x off its best in ``zero_shot_eval.leave_one_out``;
* the stored file holds one model per GPU name of the logs and one per arch (records featurised
  with ``gpu.gpu_for_arch``'s nominal limits), and says what it was made from: the sha256 of the
  logs (each file's, and all together in any order), the excluded workloads, the template
  version, the features, the knob table and the training settings;
* ``refresh_stored_model`` retrains it where any of those moved: ``tc-nightly`` at its end (after
  merging the best logs), ``tc-tune`` before its first batch, and ``tc-records
  --train-zero-shot`` (the maintainer, after adding a history).  One thread, a fixed seed,
  sorted inputs: the same logs give the same file, byte for byte.

The held-out and validation shapes (``excluded_workloads``) are never trained on.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..database import journal
from ..database.logs import load
from ..database.paths import log_files, shipped_log_files, shipped_logs_dir
from ..database.selection import unique
from ..search import zero_shot
from ..search.cost_model import XGBCostModel, features_from_positions, normalise_per_group, positions_from_indices
from ..backends.cuda.gpu import GpuInfo, gpu_for_arch
from ..search.tree_ranker import TreeEnsemble
from ..search.tuner import _entity_matches
from .jobs import load_job
from ..workloads.conv2d import Conv2dWorkload
from ..workloads.names import get as get_workload

log = logging.getLogger(__name__)

# The maintainers' held-out and validation shapes (a checkout's lab/): the shipped logs never hold
# them (a test checks), and training skips them even if a record of one reaches a log, so the
# picks on them stay a measurement of shapes nobody tuned.  An installed package has no lab/.
_LAB = Path(__file__).resolve().parents[2] / "lab"
HELDOUT_JOB = _LAB / "heldout.toml"
VALIDATION_JOB = _LAB / "validation.toml"

# Kernels timed before this instant were compiled by NVRTC, later ones by nvcc (docs/maintainers.md,
# "Shipped logs in detail"): records of one workload on one GPU from the two toolchains form
# separate query groups, as their ptxas made different code.
NVCC_SINCE = datetime.datetime(2026, 11, 22, 8, 10, tzinfo=datetime.timezone.utc).timestamp()
_MEMORY: dict[str, zero_shot.ZeroShotModel | None] = {}  # load_model's: key -> model (None: no data)
_MEMORY_MAX = 16
_REFRESHED: dict[str, tuple] = {}  # logs folder -> the files' states when last found current


# ---- the shapes never trained on ----------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def heldout_workloads(job=None) -> frozenset[Conv2dWorkload]:
    """The workloads of ``lab/heldout.toml`` (or ``job``): never trained on, so the
    zero-shot picks can be measured on them as shapes nobody tuned."""
    path = Path(job) if job is not None else HELDOUT_JOB
    if not path.exists():
        log.debug("no held-out job file at %s", path)
        return frozenset()
    return frozenset(entry.workload for entry in load_job(path).entries)


def excluded_workloads() -> frozenset[Conv2dWorkload]:
    """What no stored model is trained on: the held-out and the validation shapes."""
    return heldout_workloads() | heldout_workloads(VALIDATION_JOB)


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
    ok = [r for r in unique(recs) if r.ok and r.arch == gpu.arch and r.workload not in exclude
          and isinstance(r.workload, Conv2dWorkload)]  # the reader has rejected impossible times
    named = [r for r in ok if r.gpu == gpu.name]
    return (named, "gpu") if named else (ok, "arch")


def training_set(recs, gpu: GpuInfo, exclude=()) -> TrainingSet | None:
    """The training set of ``gpu`` (see ``select_records``), or None without data.

    Records are featurised on their own workload's space with ``gpu``'s limits, as the
    candidates will be.  A record whose index does not decode to the config its entity names
    (logged with another knob table) is skipped, as ``Tuner.load_history`` does.
    """
    chosen, scope = select_records(recs, gpu, exclude)
    by_group: dict[tuple, list[tuple[int, float]]] = {}
    skipped = 0
    for record in chosen:
        space = zero_shot.TASK.space(record.workload, gpu)
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
        space = zero_shot.TASK.space(workload, gpu)
        indices = np.array([i for i, _ in by_group[key]], dtype=np.int64)
        tput = np.array([t for _, t in by_group[key]], dtype=np.float64)
        xs.append(features_from_positions(space, positions_from_indices(space, indices)))
        ys.append(tput)
        gs.append(np.full(len(indices), gid, dtype=np.int64))
        # A workload's best configs: those of today's generator first (then nvcc before NVRTC
        # times), by throughput relative to their group's best.
        for i, t in zip(indices.tolist(), (tput / tput.max()).tolist()):
            ranked.setdefault(workload, []).append((stale, era != "nvcc", -t, i))
    best = {w: list(dict.fromkeys(i for *_, i in sorted(rows)))[:zero_shot.BEST_PER_WORKLOAD]
            for w, rows in sorted(ranked.items(), key=lambda item: str(item[0]))}
    sources = sorted({r.gpu or r.arch for r in chosen})
    return TrainingSet(np.concatenate(xs), np.concatenate(ys), np.concatenate(gs), scope, sources, best)


# ---- training ----------------------------------------------------------------------------------
def _params() -> XGBCostModel:
    return XGBCostModel(seed=zero_shot.SEED, nthread=1)


def train_booster(data: TrainingSet):
    """An xgboost Booster ranking configs within a workload: ``XGBCostModel``'s objective and
    parameters (one thread, fixed seed: deterministic), fitted on top of the prior margin;
    labels are throughput over the group's best.  None when fewer than two rows succeeded."""
    import xgboost as xgb

    params = _params()
    _, g = np.unique(data.groups, return_inverse=True)
    y = normalise_per_group(data.y, g)
    if int((y > 0).sum()) < 2:
        return None
    order = np.argsort(g, kind="stable")  # ranking objectives need rows grouped by query
    dtrain = xgb.DMatrix(data.x[order], label=y[order], nthread=1)
    dtrain.set_group(np.bincount(g[order]))
    dtrain.set_base_margin(zero_shot.margin(data.x[order]))
    return xgb.train(params.params, dtrain, num_boost_round=params.num_rounds)


def train_model(data: TrainingSet) -> TreeEnsemble | None:
    """``train_booster``'s trees in the plain form ``zero_shot`` evaluates; None without data."""
    booster = train_booster(data)
    return None if booster is None else TreeEnsemble.from_booster(booster)


def train(recs, gpu: GpuInfo, exclude=(), key: str = "") -> zero_shot.ZeroShotModel | None:
    """The model of ``gpu`` trained on ``recs`` without the ``exclude``d workloads; None
    without usable records."""
    start = time.perf_counter()
    data = training_set(recs, gpu, exclude)
    ranker = train_model(data) if data is not None else None
    if ranker is None:
        log.info("zero-shot: no usable record of %s (%s)", gpu.name, gpu.arch)
        return None
    log.info("zero-shot: trained on %d records of %d workloads (%s: %s) in %.2f s", data.rows,
             len(data.best), data.scope, ", ".join(data.sources), time.perf_counter() - start)
    return zero_shot.ZeroShotModel(ranker, gpu, data.scope, data.sources, data.best, data.rows, key)


def file_digests(files) -> list[tuple[Path, str]]:
    return [(Path(f), hashlib.sha256(Path(f).read_bytes()).hexdigest()) for f in files]


def logs_digest(digests) -> str:
    """sha256 of the logs' contents, in any order and under any name (``file_digests``' pairs)."""
    h = hashlib.sha256()
    for digest in sorted(d for _, d in digests):
        h.update(bytes.fromhex(digest))
    return h.hexdigest()


def load_model(gpu: GpuInfo, logs=None, exclude=()) -> zero_shot.ZeroShotModel | None:
    """The model of ``gpu`` trained now on ``logs`` (default: the shipped logs) without the
    held-out and validation shapes and ``exclude``; kept in memory by the logs' content, the GPU
    and the exclusions.  For leave-one-out and experiments: a build reads the stored model."""
    files = shipped_log_files() if logs is None else log_files(logs)
    if not files:
        return None
    exclude = frozenset(get_workload(w) for w in exclude) | excluded_workloads()
    key = hashlib.sha256(json.dumps([logs_digest(file_digests(files)), zero_shot.gpu_key(gpu),
                                     sorted(map(str, exclude))]).encode()).hexdigest()
    if key not in _MEMORY:
        while len(_MEMORY) >= _MEMORY_MAX:
            _MEMORY.pop(next(iter(_MEMORY)))
        _MEMORY[key] = train(load(files), gpu, exclude, key[:12])
    return _MEMORY[key]


def clear_memory_cache() -> None:
    """Forget the models ``load_model`` trained in this process."""
    _MEMORY.clear()
    _REFRESHED.clear()


# ---- the stored file ---------------------------------------------------------------------------
def training_gpus(recs, exclude=()) -> list[GpuInfo]:
    """The GPUs stored models are trained for: per arch of the usable records, its nominal GPU
    (the arch model, for any GPU of it), then each GPU name that measured records of it."""
    names: dict[str, set[str]] = {}
    for r in recs:
        if r.ok and r.arch and isinstance(r.workload, Conv2dWorkload) and r.workload not in exclude:
            names.setdefault(r.arch, set()).update([r.gpu] if r.gpu else [])
    out = []
    for arch in sorted(names):
        nominal = gpu_for_arch(arch)
        out.append(nominal)
        out += [replace(nominal, name=name) for name in sorted(names[arch]) if name != nominal.name]
    return out


def provenance(folder: Path, files) -> dict:
    """What a stored model of the logs ``files`` (in ``folder``) is made from and for: the
    build side's ``zero_shot.signature``, the logs' sha256, the excluded shapes, the settings."""
    digests = file_digests(files)
    params = _params()
    return {**zero_shot.signature(),
            "logs_sha256": logs_digest(digests),
            "logs": [[_relative(f, folder), d] for f, d in sorted(digests, key=lambda p: _relative(p[0], folder))],
            "excluded": sorted(str(w) for w in excluded_workloads()),
            "training": {"params": params.params, "num_rounds": params.num_rounds, "nvcc_since": NVCC_SINCE,
                         "best_per_workload": zero_shot.BEST_PER_WORKLOAD}}


# What makes a stored model current: the logs' names, the xgboost version and the excluded shapes
# are for the reader (the excluded shapes are the lab's, which an installed copy lacks; no shipped
# log holds one, so they never change the trees).
_CURRENT_KEYS = (*zero_shot.signature(), "logs_sha256", "training")


def _relative(path: Path, folder: Path) -> str:
    try:
        return Path(path).resolve().relative_to(Path(folder).resolve()).as_posix()
    except ValueError:
        return str(path)


def stored_document(folder, files=None) -> dict:
    """The stored file's content for the logs in ``folder`` (its *.jsonl and history/*.jsonl)."""
    import xgboost

    folder = Path(folder)
    files = log_files([folder, folder / "history"]) if files is None else files
    doc = provenance(folder, files)
    recs = list(load(files))
    exclude = excluded_workloads()
    models = [train(recs, gpu, exclude) for gpu in training_gpus(recs, exclude)]
    return {**doc, "xgboost": xgboost.__version__, "models": [m.to_dict() for m in models if m is not None]}


def dumps(doc) -> bytes:
    """JSON with every flat list on one line (a tree's node arrays: one line each)."""
    def dump(value, indent: int) -> str:
        pad = " " * (indent + 1)
        if isinstance(value, dict) and value:
            items = [f"{pad}{json.dumps(k)}: {dump(v, indent + 1)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
        if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
            return "[\n" + ",\n".join(pad + dump(v, indent + 1) for v in value) + "\n" + " " * indent + "]"
        return json.dumps(value, separators=(",", ":"))
    return (dump(doc, 0) + "\n").encode()


def _states(paths) -> tuple:
    out = []
    for path in paths:
        try:
            stat = Path(path).stat()
            out.append((str(path), stat.st_size, stat.st_mtime_ns))
        except OSError:
            out.append((str(path), None, None))
    return tuple(out)


def stored_is_current(folder=None) -> tuple[bool, str]:
    """(whether the stored model of the logs in ``folder`` is current, why not / its path)."""
    folder = shipped_logs_dir() if folder is None else Path(folder)
    if folder is None:
        return False, "there are no shipped logs"
    path = zero_shot.model_path(folder)
    try:
        stored = json.loads(path.read_bytes())
    except FileNotFoundError:
        return False, f"there is no zero-shot model at {path}"
    except (OSError, ValueError) as err:
        return False, f"{path} cannot be read: {err}"
    wanted = provenance(folder, log_files([folder, folder / "history"]))
    moved = [key for key in _CURRENT_KEYS if stored.get(key) != wanted[key]]
    return (False, f"{path}: its {', '.join(moved)} moved") if moved else (True, str(path))


def store(folder=None, files=None) -> Path:
    """Train the stored model of the logs in ``folder`` (default: the shipped logs) and write it
    beside them, atomically; OSError where it cannot be written, ValueError without a folder."""
    folder = shipped_logs_dir() if folder is None else Path(folder)
    if folder is None:
        raise ValueError("there are no shipped logs to train the zero-shot model on")
    files = log_files([folder, folder / "history"]) if files is None else files
    path = zero_shot.model_path(folder)
    start = time.perf_counter()
    data = dumps(stored_document(folder, files))
    journal.replace_atomic(path, data)
    log.info("zero-shot: stored %s (%d bytes) in %.1f s", path, len(data), time.perf_counter() - start)
    return path


def refresh_stored_model(folder=None, force: bool = False) -> Path | None:
    """Train and store the zero-shot model of the logs in ``folder`` (default: the shipped logs)
    where the stored one is missing, unreadable, stale or made from other logs or settings
    (``force``: always).  Returns the model file, None without a logs folder or where it cannot
    be written (a warning says so; builds then use what is there, or the default config)."""
    folder = shipped_logs_dir() if folder is None else Path(folder)
    if folder is None:
        return None
    path = zero_shot.model_path(folder)
    files = log_files([folder, folder / "history"])
    state = _states([*files, path])
    if not force and _REFRESHED.get(str(folder)) == state:
        return path
    current, why = stored_is_current(folder)
    if force or not current:
        log.info("zero-shot: training the stored model (%s)", "forced" if force else why)
        try:
            store(folder, files)
        except OSError as err:
            log.warning("zero-shot: cannot store the model in %s: %s", path, err)
            return None
        state = _states([*files, path])
    _REFRESHED[str(folder)] = state
    return path
