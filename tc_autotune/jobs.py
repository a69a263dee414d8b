"""Job files: the workloads a nightly run tunes, its budget and where logs and reports go,
and the lock that lets one run of a job at a time.  No TVM: scripts check a job file before
anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .duplicates import unique_workloads
from .workloads import Conv2dWorkload, get

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
    """Read a TOML or JSON job file (see tuning_logs/nightly.toml)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise JobError(f"cannot read job file {path}: {err.strerror}") from None
    try:
        if path.suffix == ".toml":
            raw = _toml().loads(text)
        else:
            raw = json.loads(text)
    except Exception as err:  # tomllib/json decode errors
        raise JobError(f"job file {path} is not valid {path.suffix[1:].upper() or 'JSON'}: {err}") from None
    if not isinstance(raw, dict):
        raise JobError(f"job file {path}: expected a table/object at the top")
    base = path.parent

    def number(key, default, kind=float):
        value = raw.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise JobError(f"job file {path}: {key} must be a positive number, got {value!r}")
        return kind(value)

    default_trials = number("trials", 64, int)
    entries = []
    items = raw.get("workloads")
    if not isinstance(items, list) or not items:
        raise JobError(f"job file {path}: 'workloads' must be a non-empty list")
    for item in items:
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or "name" not in item:
            raise JobError(f"job file {path}: each workload needs a name (preset or spec), got {item!r}")
        try:
            workload = get(item["name"])
        except ValueError as err:
            raise JobError(f"job file {path}: workload {item['name']!r}: {err}") from None
        trials = item.get("trials", default_trials)
        if not isinstance(trials, int) or isinstance(trials, bool) or trials <= 0:
            raise JobError(f"job file {path}: trials of {item['name']!r} must be a positive integer")
        entries.append(JobEntry(workload, item["name"], trials))
    unknown = set(raw) - {"workloads", "trials", "log", "budget_minutes", "best_log_dir", "report_dir",
                          "regression_threshold"}
    if unknown:
        raise JobError(f"job file {path}: unknown key(s) {', '.join(sorted(unknown))}")
    return Job(
        entries=unique_workloads(entries, path),  # a shape named twice is tuned once
        log=(base / raw.get("log", "nightly.jsonl")).resolve(),
        budget_s=number("budget_minutes", 60) * 60,
        best_log_dir=(base / raw.get("best_log_dir", ".")).resolve(),
        report_dir=(base / raw.get("report_dir", "reports")).resolve(),
        regression_threshold=number("regression_threshold", 0.05),
        path=path,
    )


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
