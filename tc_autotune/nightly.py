"""Scheduled tuning: a job file, an exclusive lock, a wall-clock budget, a report, a verdict.

A nightly run resumes every workload of the job from the shared log (configs
already measured on this GPU are never re-measured; records of the other
workloads pre-train the cost model), stops after the batch that spends the
budget, compacts the best records into ``tuning_logs/<gpu>.jsonl``, re-times
each workload's best beside cuDNN and writes a markdown + JSON report.  Its exit
status says whether a workload regressed against the previous report.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import records
from .workloads import Conv2dWorkload, get

log = logging.getLogger(__name__)

EXIT_OK, EXIT_BAD_JOB, EXIT_NO_GPU, EXIT_LOCKED, EXIT_REGRESSION = 0, 2, 3, 5, 6


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
            import tomllib

            raw = tomllib.loads(text)
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
        entries=entries,
        log=(base / raw.get("log", "nightly.jsonl")).resolve(),
        budget_s=number("budget_minutes", 60) * 60,
        best_log_dir=(base / raw.get("best_log_dir", ".")).resolve(),
        report_dir=(base / raw.get("report_dir", "reports")).resolve(),
        regression_threshold=number("regression_threshold", 0.05),
        path=path,
    )


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


def gpu_log_name(gpu_name: str) -> str:
    """File name of a GPU's compacted best log: 'NVIDIA H200' -> 'nvidia-h200.jsonl'."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") + ".jsonl"


# ---- the report -------------------------------------------------------------------
@dataclass
class ReportRow:
    name: str
    workload: str
    flops: int
    trials_run: int = 0
    records: int = 0
    best_s: float | None = None  # best time in the log for this GPU
    retimed_s: float | None = None  # the best config re-timed in this run
    cudnn_s: float | None = None
    previous_s: float | None = None
    status: str = "ok"  # ok, no valid record, regression, not reached

    @property
    def current_s(self) -> float | None:
        return self.retimed_s or self.best_s

    @property
    def tflops(self) -> float | None:
        return self.flops / self.current_s / 1e12 if self.current_s else None

    @property
    def change(self) -> float | None:
        """Relative time change since the previous report (negative = faster)."""
        if self.current_s and self.previous_s:
            return self.current_s / self.previous_s - 1
        return None

    @property
    def cudnn_ratio(self) -> float | None:
        return self.cudnn_s / self.current_s if (self.cudnn_s and self.current_s) else None


@dataclass
class Report:
    gpu: str | None
    started: str
    elapsed_s: float
    budget_s: float
    rows: list[ReportRow] = field(default_factory=list)
    mode: str = "tune"  # or report-only

    @property
    def failed(self) -> list[ReportRow]:
        return [r for r in self.rows if r.status in ("regression", "no valid record")]

    def to_json(self) -> str:
        data = asdict(self)
        for row, raw in zip(self.rows, data["rows"]):
            raw.update(tflops=row.tflops, change=row.change, cudnn_ratio=row.cudnn_ratio)
        return json.dumps(data, indent=1)

    def to_markdown(self) -> str:
        def ms(s):
            return f"{s * 1e3:.4f}" if s else "-"

        lines = [f"# Nightly tuning report: {self.gpu or 'no GPU'} ({self.started})", "",
                 f"Mode {self.mode}; {self.elapsed_s / 60:.1f} of {self.budget_s / 60:.0f} budget minutes.", "",
                 "| workload | trials run | records | best ms | TFLOP/s | change | cuDNN ms | cuDNN / ours | status |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            change = f"{r.change:+.1%}" if r.change is not None else "-"
            ratio = f"{r.cudnn_ratio:.2f}" if r.cudnn_ratio else "-"
            tflops = f"{r.tflops:.1f}" if r.tflops else "-"
            lines.append(f"| {r.name} | {r.trials_run} | {r.records} | {ms(r.current_s)} | {tflops} | "
                         f"{change} | {ms(r.cudnn_s)} | {ratio} | {r.status} |")
        return "\n".join(lines) + "\n"


def previous_report(report_dir: Path) -> dict[str, float]:
    """workload spec -> time of the newest earlier report (empty when there is none)."""
    reports = sorted(report_dir.glob("report-*.json")) if report_dir.exists() else []
    for path in reversed(reports):
        try:
            data = json.loads(path.read_text())
            return {row["workload"]: (row.get("retimed_s") or row.get("best_s"))
                    for row in data["rows"] if row.get("retimed_s") or row.get("best_s")}
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("skipping unreadable report %s", path)
    return {}


def write_report(report: Report, report_dir: Path) -> tuple[Path, Path]:
    report_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")  # sorts in time order
    md, js = report_dir / f"report-{stamp}.md", report_dir / f"report-{stamp}.json"
    md.write_text(report.to_markdown())
    js.write_text(report.to_json())
    return md, js


# ---- the run ----------------------------------------------------------------------
def run_nightly(job: Job, gpu=None, report_only: bool = False, measurer_factory=None,
                retime=None, now=time.time) -> Report:
    """Tune (unless ``report_only``), compact, re-time, compare, report.

    ``retime(workload, config) -> (seconds, cudnn_seconds)`` re-measures a best config
    (default: ``autotune.compare_with_cudnn``); tests pass synthetic ones.
    """
    from .autotune import compare_with_cudnn, tune_workload
    from .measure import LocalMeasurer

    start = now()
    deadline = start + job.budget_s
    previous = previous_report(job.report_dir)
    report = Report(gpu=getattr(gpu, "name", None), started=time.strftime("%Y-%m-%d %H:%M:%S"),
                    elapsed_s=0.0, budget_s=job.budget_s, mode="report-only" if report_only else "tune")
    rows = {}
    measurer = None
    with contextlib.ExitStack() as stack:  # one build pool and GPU runner for the whole job
        for entry in job.entries:
            row = ReportRow(entry.name, str(entry.workload), entry.workload.flops,
                            previous_s=previous.get(str(entry.workload)))
            rows[entry.name] = row
            if report_only:
                continue
            if now() >= deadline:
                row.status = "not reached"
                continue
            if measurer is None:
                from .space import conv2d_space

                measurer = stack.enter_context((measurer_factory or LocalMeasurer)(
                    conv2d_space(entry.workload, gpu), None))
            summary = tune_workload(entry.workload, entry.trials, job.log, batch_size=min(16, entry.trials),
                                    early_stopping=None, seed=0, gpu=gpu, deadline=deadline,
                                    compare_cudnn=False, measurer=measurer)
            row.trials_run = summary.trials

    if not report_only and gpu is not None:
        job.best_log_dir.mkdir(parents=True, exist_ok=True)
        written = records.pick_best(job.log, job.best_log_dir / gpu_log_name(gpu.name), gpu=gpu.name)
        log.info("compacted %d best records into %s", written, job.best_log_dir / gpu_log_name(gpu.name))

    all_records = list(records.load(job.log))
    for entry in job.entries:
        row = rows[entry.name]
        mine = [r for r in all_records if r.workload == entry.workload
                and (gpu is None or r.gpu == gpu.name)]
        row.records = len(mine)
        best = records.load_best(mine, entry.workload)
        if best is None:
            if row.status != "not reached":
                row.status = "no valid record"
            continue
        config, row.best_s = best
        if report_only or row.status == "not reached":
            continue
        retime_fn = retime or compare_with_cudnn
        row.retimed_s, row.cudnn_s = retime_fn(entry.workload, config)
        if _regressed(row, job):  # confirm with a second measurement before crying wolf
            row.retimed_s = min(row.retimed_s, retime_fn(entry.workload, config)[0] or float("inf"))
            if _regressed(row, job):
                row.status = "regression"
    report.rows = list(rows.values())
    report.elapsed_s = now() - start
    md, js = write_report(report, job.report_dir)
    log.info("report: %s", md)
    return report


def _regressed(row: ReportRow, job: Job) -> bool:
    return bool(row.retimed_s and row.previous_s
                and row.retimed_s > row.previous_s * (1 + job.regression_threshold))
