"""The tuning log: one JSON record per line (JSONL), shaped like AutoTVM's records.

Why JSONL: a tuning run can be killed at any moment (OOM, a hung kernel, Ctrl-C),
so every measurement is appended and fsynced as soon as it is known, and a reader
must survive a half-written last line.  One self-contained line per measurement
makes both easy: appends never rewrite earlier data, and a corrupt line costs
only itself (it is skipped with a warning naming file and line).

A line looks like::

    {"input": ["cuda -arch=sm_90", "conv2d_nhwc_tensorcore.cuda", ["n=256,h=14,..."], {}],
     "config": {"index": 123, "entity": [["block_row_warps", "ot", 2], ...]},
     "result": [[1.2e-4, 1.3e-4], 0, 2.5, 1732240000.0],
     "error_msg": "", "version": 1, "tvm_version": "0.27.0",
     "provenance": {"gpu": "NVIDIA H100", "compute_capability": "9.0", "cuda": "12.4",
                    "tc_autotune": "0.1.0"}}

The config is stored by knob *value* as well as by index, so a log stays
readable when candidate lists change: ``load_best`` rebuilds the config from the
values and skips (with a warning) records that no longer fit the space.

Writers from several processes may share one log: ``append`` holds an exclusive
``flock`` on the file for the single ``write`` of each call.  This module does
not import tvm, so reading logs stays fast.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.metadata
import json
import logging
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from .measure import MeasureErrorNo, MeasureResult
from .workloads import Conv2dWorkload, get as get_workload

logger = logging.getLogger(__name__)

RECORD_VERSION = 1
TASK_NAME = "conv2d_nhwc_tensorcore.cuda"
LOG_SUFFIXES = (".jsonl", ".log")

_ARCH_RE = re.compile(r"sm_\d+")
_TARGET_ARCH_RE = re.compile(r"-arch=(sm_\d+)")


# ---- versions and provenance ----------------------------------------------
@functools.lru_cache(maxsize=None)
def tvm_version() -> str:
    """The installed TVM version without importing tvm (slow); 'unknown' if not found."""
    for dist in ("apache-tvm", "tvm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


@functools.lru_cache(maxsize=None)
def tc_autotune_version() -> str:
    """This package's version (installed metadata, else ``tc_autotune.__version__``)."""
    try:
        return importlib.metadata.version("tc_autotune")
    except importlib.metadata.PackageNotFoundError:
        pass
    import tc_autotune

    return str(getattr(tc_autotune, "__version__", "unknown"))


def make_provenance(gpu=None, cuda: str | None = None) -> dict:
    """The provenance dict of a record: which GPU/toolchain produced the timing.

    ``gpu`` is a ``GpuInfo`` (or None); ``cuda`` the CUDA version string if known.
    Timings are only comparable on the same GPU, so this travels with every line.
    """
    return {
        "gpu": getattr(gpu, "name", None),
        "compute_capability": getattr(gpu, "compute_capability", None),
        "cuda": cuda,
        "tc_autotune": tc_autotune_version(),
    }


def target_arch(target) -> str | None:
    """The CUDA arch ("sm_90") named by an arch string, a target string or a tvm Target.

    A tvm Target's ``str`` is a JSON dict in TVM 0.27 (older: "cuda -arch=sm_90"),
    so the arch is found with a regex on whatever string form we get.
    """
    if target is None:
        return None
    match = _ARCH_RE.search(str(target))
    return match.group(0) if match else None


# ---- the record -------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """One measured config of one workload on one target: a line of the log."""

    target: str  # e.g. "cuda -arch=sm_90"
    workload: Conv2dWorkload
    config: dict  # entity form: {"index": i, "entity": [[knob, "ot", value], ...]}
    result: MeasureResult
    provenance: dict = field(default_factory=dict)
    # TVM that produced the timing; None means "the installed one" when written.
    # Metadata, not identity: left out of equality.
    tvm_version: str | None = field(default=None, compare=False)

    @classmethod
    def from_measurement(cls, target, space, config, result: MeasureResult,
                         provenance: dict | None = None) -> "Record":
        """A record for ``config`` of ``space`` (a ConfigSpace); ``target`` may be a tvm Target."""
        if not isinstance(target, str):
            arch = target_arch(target)
            target = f"cuda -arch={arch}" if arch else str(target)
        return cls(target, space.workload, space.to_entity(config), result,
                   dict(provenance) if provenance is not None else make_provenance(space.gpu))

    @property
    def seconds(self) -> float:
        return self.result.seconds

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def gpu(self) -> str | None:
        return self.provenance.get("gpu")

    @property
    def arch(self) -> str | None:
        match = _TARGET_ARCH_RE.search(self.target)
        return match.group(1) if match else target_arch(self.target)

    @property
    def tflops(self) -> float:
        seconds = self.seconds
        if not self.ok or not math.isfinite(seconds) or seconds <= 0:
            return 0.0
        return self.workload.flops / seconds / 1e12

    # ---- JSON ---------------------------------------------------------------
    def to_json(self) -> str:
        """One line of JSON (no newline) in the AutoTVM-like log format."""
        r = self.result
        obj = {
            "input": [self.target, TASK_NAME, [str(self.workload)], {}],
            "config": self.config,
            "result": [list(r.costs), int(r.error_no), r.all_cost, r.timestamp],
            "error_msg": r.error_msg,
            "version": RECORD_VERSION,
            "tvm_version": self.tvm_version if self.tvm_version is not None else tvm_version(),
            "provenance": self.provenance,
        }
        return json.dumps(obj, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> "Record":
        """Parse and validate one log line; ValueError says what is wrong with it."""
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, TypeError) as err:
            raise ValueError(f"not valid JSON: {err}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in ("input", "config", "result", "version") if k not in obj]
        if missing:
            raise ValueError(f"missing field(s): {', '.join(missing)}")

        version = obj["version"]
        if not _is_int(version):
            raise ValueError(f"version must be an integer, got {version!r}")
        if version > RECORD_VERSION:
            raise ValueError(f"record version {version} is newer than this reader's {RECORD_VERSION}")

        inp = obj["input"]
        if not (isinstance(inp, list) and len(inp) == 4):
            raise ValueError("input must be [target, task name, [workload spec], {}]")
        target, task, args, kwargs = inp
        if not isinstance(target, str) or not target:
            raise ValueError(f"target must be a non-empty string, got {target!r}")
        if task != TASK_NAME:
            raise ValueError(f"wrong task name {task!r} (expected {TASK_NAME!r})")
        if not (isinstance(args, list) and len(args) == 1 and isinstance(args[0], str)):
            raise ValueError(f"task args must be [workload spec string], got {args!r}")
        if not isinstance(kwargs, dict):
            raise ValueError(f"task kwargs must be an object, got {kwargs!r}")
        try:
            workload = Conv2dWorkload.parse(args[0])
        except ValueError as err:
            raise ValueError(f"bad workload spec {args[0]!r}: {err}") from None

        config = obj["config"]
        if not isinstance(config, dict) or "index" not in config or "entity" not in config:
            raise ValueError("config must be an object with 'index' and 'entity'")
        if not _is_int(config["index"]) or config["index"] < 0:
            raise ValueError(f"config index must be a non-negative integer, got {config['index']!r}")
        entity = config["entity"]
        if not isinstance(entity, list) or not all(
            isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) and isinstance(e[1], str)
            for e in entity
        ):
            raise ValueError("config entity must be a list of [knob, kind, value]")

        res = obj["result"]
        if not (isinstance(res, list) and len(res) == 4):
            raise ValueError("result must be [[costs...], error_no, all_cost, timestamp]")
        costs, error_no, all_cost, timestamp = res
        if not isinstance(costs, list) or not all(_is_number(c) for c in costs):
            raise ValueError(f"result costs must be a list of numbers, got {costs!r}")
        if not _is_int(error_no):
            raise ValueError(f"error_no must be an integer, got {error_no!r}")
        try:
            error_no = MeasureErrorNo(error_no)
        except ValueError:
            raise ValueError(f"unknown error_no {error_no}") from None
        for name, value in (("all_cost", all_cost), ("timestamp", timestamp)):
            if not _is_number(value):
                raise ValueError(f"result {name} must be a number, got {value!r}")
        error_msg = obj.get("error_msg", "")
        if not isinstance(error_msg, str):
            raise ValueError(f"error_msg must be a string, got {type(error_msg).__name__}")
        tvm_ver = obj.get("tvm_version")
        if tvm_ver is not None and not isinstance(tvm_ver, str):
            raise ValueError(f"tvm_version must be a string, got {tvm_ver!r}")
        provenance = obj.get("provenance", {})
        if not isinstance(provenance, dict):
            raise ValueError(f"provenance must be an object, got {type(provenance).__name__}")

        result = MeasureResult(
            costs=tuple(float(c) for c in costs),
            error_no=error_no,
            error_msg=error_msg,
            all_cost=float(all_cost),
            timestamp=float(timestamp),
        )
        return cls(target, workload, config, result, provenance, tvm_ver)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---- writing ----------------------------------------------------------------
def append(path, records: Iterable[Record]) -> int:
    """Append ``records`` to the log at ``path``; returns how many were written.

    Safe with concurrent writers: the whole call is one ``write`` under an
    exclusive ``flock`` of the log, then fsynced, so lines never interleave and a
    crash loses at most this call.  If a previous writer died mid-line, a newline
    is added first so the torn line does not swallow the new one.
    """
    lines = [r.to_json() + "\n" for r in records]
    if not lines:
        return 0
    data = "".join(lines).encode("utf-8")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab+") as f:  # append mode; '+' only to peek at the last byte
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            size = os.fstat(f.fileno()).st_size
            if size and os.pread(f.fileno(), 1, size - 1) != b"\n":
                data = b"\n" + data
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return len(lines)


def _write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` all at once: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make shipped logs private
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


# ---- reading ----------------------------------------------------------------
def log_files(paths) -> list[Path]:
    """The log files named by a path, a directory (its *.jsonl and *.log, sorted) or a list."""
    if paths is None:
        return []
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(f for f in p.iterdir() if f.suffix in LOG_SUFFIXES and f.is_file()))
        elif p.is_file():
            files.append(p)
    return files


def load(paths) -> Iterator[Record]:
    """Yield the records of one or more logs (files, directories, or a list of them).

    Missing paths yield nothing.  A corrupt line (garbage, a truncated last line,
    the wrong shape) is skipped with one warning naming file, line and reason, so
    one bad write never costs the rest of a long tuning log.
    """
    for file in log_files(paths):
        with open(file, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    record = Record.from_json(raw.decode("utf-8"))
                except ValueError as err:  # UnicodeDecodeError is a ValueError too
                    logger.warning("%s:%d: skipping bad record: %s", file, lineno, err)
                    continue
                yield record


def _records(logs) -> Iterable[Record]:
    """Records from log paths, or ``logs`` itself when it already holds Records."""
    if isinstance(logs, (str, os.PathLike)):
        return load(logs)
    if isinstance(logs, (list, tuple)) and logs and not isinstance(logs[0], Record):
        return load(logs)
    return logs


def load_best(logs, workload, target=None):
    """``(Conv2dConfig, seconds)`` of the fastest successful record for ``workload``, or None.

    ``logs`` is anything ``load`` takes (or an iterable of Records).  ``target``
    narrows to one arch: None (any), "sm_90", "cuda -arch=sm_90" or a tvm Target.
    Records whose config no longer fits the space are skipped with a warning, so
    a stale log cannot hand the builder an unbuildable config.
    """
    from .gpu import gpu_for_arch
    from .space import conv2d_space

    workload = get_workload(workload)
    want_arch = None
    if target is not None:
        want_arch = target_arch(target)
        if want_arch is None:
            raise ValueError(f"cannot tell the CUDA arch (sm_XX) of target {str(target)!r}")
    best = None
    skipped, first_reason = 0, ""
    for record in _records(logs):
        if record.workload != workload or not record.ok:
            continue
        if want_arch is not None and record.arch != want_arch:
            continue
        seconds = record.seconds
        if best is not None and seconds >= best[1]:
            continue
        try:
            config = conv2d_space(workload, gpu_for_arch(record.arch or "sm_90")).from_entity(record.config)
        except ValueError as err:
            skipped += 1
            first_reason = first_reason or str(err)
            continue
        best = (config, seconds)
    if skipped:
        logger.warning("skipped %d record(s) of %s whose config is outside the current space "
                       "(first: %s)", skipped, workload, first_reason)
    return best


def _identity(record: Record) -> tuple:
    r = record.result
    return (record.target, record.workload, record.config.get("index"), r.costs,
            int(r.error_no), r.timestamp)


def best_records(records: Iterable[Record], top_k: int = 1) -> dict[tuple, list[Record]]:
    """``{(workload, arch): [the top_k fastest successful Records]}``, fastest first.

    Exact duplicates (the same measurement read twice, e.g. a best-log inside the
    log directory) count once so they cannot crowd out the runner-up.
    """
    if not _is_int(top_k) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    groups: dict[tuple, list[Record]] = {}
    seen: set[tuple] = set()
    for record in records:
        if not record.ok:
            continue
        ident = _identity(record)
        if ident in seen:
            continue
        seen.add(ident)
        groups.setdefault((record.workload, record.arch), []).append(record)
    return {key: sorted(group, key=lambda r: r.seconds)[:top_k] for key, group in groups.items()}


def pick_best(in_log, out_log, top_k: int = 1, gpu: str | None = None) -> int:
    """Distill ``in_log`` (anything ``load`` takes) into ``out_log``: the top_k per workload/arch
    (only records measured on the GPU named ``gpu``, when given).

    ``out_log`` is replaced atomically (temp file, fsync, rename), so a crash
    leaves the old or the new file, never a half one.  Do not point concurrent
    ``append`` calls at ``out_log``: lines appended to the old file are lost.
    Returns the number of records written.
    """
    best = best_records((r for r in load(in_log) if gpu is None or r.gpu == gpu), top_k)
    chosen = [r for group in best.values() for r in group]
    chosen.sort(key=lambda r: (str(r.workload), r.seconds, r.arch or ""))
    _write_atomic(Path(out_log), "".join(r.to_json() + "\n" for r in chosen))
    return len(chosen)


def measured_indices(records: Iterable[Record], workload, gpu=None) -> set[int]:
    """Config indices already measured (with any outcome) for ``workload`` on ``gpu``.

    Lets a resumed tuner skip what it has tried, failures included (they would
    fail again).  ``gpu`` is a GPU name or a ``GpuInfo``; None matches any GPU.
    """
    workload = get_workload(workload)
    gpu_name = getattr(gpu, "name", gpu)
    return {
        r.config["index"]
        for r in _records(records)
        if r.workload == workload and (gpu_name is None or r.gpu == gpu_name)
    }


__all__ = [
    "RECORD_VERSION", "TASK_NAME", "Record", "append", "load", "log_files", "load_best",
    "best_records", "pick_best", "measured_indices", "make_provenance", "target_arch",
    "tvm_version", "tc_autotune_version",
]
