"""Job files: the workloads a nightly run tunes, its budget and where logs and reports go,
and the lock that lets one run of a job at a time.  No TVM: scripts check a job file before
anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .duplicates import unique_workloads
from ..workloads.conv2d import Conv2dWorkload
from ..workloads.names import get

# The most trials of one workload in one run: a typo's bound (10**12 for 10**2), far above any
# real job (at ~500 configs a minute a million trials is a day and a half of one GPU).
MAX_TRIALS = 1_000_000
DEFAULTS = {"trials": 64, "log": "nightly.jsonl", "budget_minutes": 60, "best_log_dir": ".",
            "report_dir": "reports", "regression_threshold": 0.05}
TOP_KEYS = ("workloads", *DEFAULTS)
ENTRY_KEYS = ("name", "trials")
PATH_KEYS = ("log", "best_log_dir", "report_dir")


class JobError(ValueError):
    """The job file is missing, unreadable or malformed."""


class LockedError(RuntimeError):
    """Another nightly run holds the job's lock."""


@dataclass
class JobEntry:
    workload: Conv2dWorkload
    name: str
    trials: int


@dataclass
class Job:
    """A nightly job: what to tune, how long, where logs and reports go (paths resolved
    against the job file's folder)."""

    entries: list[JobEntry]
    log: Path
    budget_s: float
    best_log_dir: Path
    report_dir: Path
    regression_threshold: float = 0.05  # relative slowdown counted as a regression
    path: Path | None = None

    @property
    def lock_path(self) -> Path:
        return self.log.with_name(self.log.name + ".lock")


def load_job(path) -> Job:
    """Read a TOML or JSON job file (see tuning_logs/nightly.toml), checked whole against its
    schema first (``check_schema``): JobError names the file, the key and what is wrong."""
    path = Path(path)
    raw = _read(path)
    try:
        check_schema(raw)
    except ValueError as err:
        raise JobError(f"job file {path}: {err}") from None
    base = path.parent
    entries = []
    for item in raw["workloads"]:
        item = {"name": item} if isinstance(item, str) else item
        trials = item.get("trials", raw.get("trials", DEFAULTS["trials"]))
        entries.append(JobEntry(get(item["name"]), item["name"], trials))
    value = {key: raw.get(key, default) for key, default in DEFAULTS.items()}
    log_path = (base / value["log"]).resolve()
    if _is_dir(log_path):  # its lock would be "<dir>.lock" beside it: "/tmp" gave "/tmp.lock"
        raise JobError(f"job file {path}: log: {value['log']!r} is a directory ({log_path}), not a log file")
    return Job(
        entries=unique_workloads(entries, path),  # a shape named twice is tuned once
        log=log_path,
        budget_s=float(value["budget_minutes"]) * 60,
        best_log_dir=(base / value["best_log_dir"]).resolve(),
        report_dir=(base / value["report_dir"]).resolve(),
        regression_threshold=float(value["regression_threshold"]),
        path=path,
    )


def write_job(path, workloads, trials: int = 64, what: str = "a model",
              source: str = "tc_autotune.extract_workloads") -> Path:
    """A nightly job file tuning ``workloads``, its log, reports and best log beside it: what the
    model extractions (``source``: PyTorch's, Relax's) write."""
    path = Path(path)
    stem = path.stem
    lines = [f"# The workloads of {what} ({source}).",
             f"# Tune: tc-nightly {path.name}   (python scripts/nightly.py {path.name})",
             f'log = "{stem}.jsonl"', f'report_dir = "{stem}-reports"', 'best_log_dir = "."',
             f"trials = {int(trials)}", "", "workloads = ["]
    lines += [f'  {{ name = "{w}" }},' for w in workloads] + ["]", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def _is_dir(path: Path) -> bool:
    """``path.is_dir()``, False where it cannot be looked at (a folder the user may not enter:
    the commands' path checks say so, naming the job file and the key)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _read(path: Path) -> dict:
    """The job file's top-level table; JobError when it cannot be read or parsed.  A file
    the user may not read raises PermissionError (the commands' I/O error, not a bad job)."""
    try:
        data = path.read_bytes()
    except PermissionError:
        raise
    except OSError as err:
        raise JobError(f"cannot read job file {path}: {err.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JobError(f"job file {path} is not UTF-8 text (byte {err.start}: {data[err.start]:#04x})") from None
    try:
        raw = _toml().loads(text) if path.suffix == ".toml" else json.loads(text)
    except Exception as err:  # tomllib/json decode errors
        message = " ".join(str(err).splitlines())
        raise JobError(f"job file {path} is not valid {path.suffix[1:].upper() or 'JSON'}: {message}") from None
    if not isinstance(raw, dict):
        raise JobError(f"job file {path}: expected a table/object at the top")
    return raw


def check_schema(raw: dict) -> None:
    """ValueError naming the key and what is wrong with it, for the first problem of a job
    file's table: unknown keys (top level and entries), numbers that are not finite and
    positive (a NaN threshold would turn regression detection off), trials that are not
    integers up to MAX_TRIALS, paths that are not strings, workloads that do not parse."""
    unknown = set(raw) - set(TOP_KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(sorted(map(str, unknown)))} (known: {', '.join(TOP_KEYS)})")
    for key in ("budget_minutes", "regression_threshold"):
        if key in raw:
            _positive_number(key, raw[key])
    if "trials" in raw:
        _trials("trials", raw["trials"])
    for key in PATH_KEYS:
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip() or "\0" in raw[key]):
            raise ValueError(f"{key} must be a path (a non-empty string, relative to the job file), "
                             f"got {raw[key]!r}")
    items = raw.get("workloads")
    if not isinstance(items, list) or not items:
        raise ValueError("'workloads' must be a non-empty list")
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or "name" not in item:
            raise ValueError(f"workloads[{i}]: each workload needs a name (preset or spec), got {item!r}")
        unknown = set(item) - set(ENTRY_KEYS)
        if unknown:
            raise ValueError(f"workloads[{i}] ({item['name']!r}): unknown key(s) "
                             f"{', '.join(sorted(map(str, unknown)))} (known: {', '.join(ENTRY_KEYS)})")
        try:
            get(item["name"])
        except ValueError as err:
            raise ValueError(f"workload {item['name']!r}: {err}") from None
        if "trials" in item:
            _trials(f"trials of {item['name']!r}", item["trials"])


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_number(key: str, value) -> None:
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        finite = " (finite)" if _is_number(value) and not math.isfinite(value) else ""
        raise ValueError(f"{key} must be a positive number{finite}, got {value!r}")


def _trials(what: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    if value > MAX_TRIALS:
        raise ValueError(f"{what} must be at most {MAX_TRIALS}, got {value!r}")


def _toml():
    """The TOML reader: tomllib (Python 3.11+), else tomli (a dependency on 3.10)."""
    try:
        import tomllib
    except ModuleNotFoundError:
        import tomli as tomllib
    return tomllib


@contextlib.contextmanager
def job_lock(job: Job):
    """Exclusive, non-blocking: a second run of the same job fails at once."""
    job.lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(job.lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            raise LockedError(f"another nightly run holds {job.lock_path} ({owner})") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
