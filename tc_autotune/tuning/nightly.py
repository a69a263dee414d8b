"""Scheduled tuning: a job file, an exclusive lock, a wall-clock budget, a report, a verdict.

A nightly run resumes every workload of the job from the shared log (configs
already measured on this GPU are never re-measured; records of the other
workloads and the shipped histories pre-train the cost model), stops after the
batch that spends the budget, merges the best records into
``tuning_logs/<gpu>.jsonl`` (never dropping one it holds; the stored zero-shot model of the
shipped logs is retrained where they changed), re-times each
workload's best beside the default config and the task's baseline (cuDNN, cuBLAS) and
writes a markdown + JSON report.  Everything is timed by the one timer (``results.TIMER``);
a best measured by an older timer is re-timed by it too, so that a new tune is compared with
it like with like (``_retime_old_best``).  Its exit status says whether a workload regressed against the previous
report or lost to the untuned default.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..database import records
from ..database.compare import config_key
from ..core import tasks
from . import zero_shot_train
from .autotune import retime_against_default, tune_workload
from .benchmark import baseline_label, renamed
from ..backends.cuda.gpu import gpu_log_name
from ..backends.cuda.timer import TimerError
from ..measure.measurer import LocalMeasurer, MeasureOptions
from ..core.results import TIME_EVALUATOR, TIMER, TIMERS, MeasureResult
from .jobs import Job, JobEntry, JobError, LockedError, job_lock, load_job  # noqa: F401 (nightly's API)

log = logging.getLogger(__name__)

EXIT_OK, EXIT_BAD_JOB, EXIT_NO_GPU, EXIT_LOCKED, EXIT_REGRESSION, EXIT_DEVICES_LOST = 0, 2, 3, 5, 6, 8


# ---- the report -------------------------------------------------------------------
@dataclass
class ReportRow:
    name: str
    workload: str
    flops: int
    gpu: str | None = None  # the GPU these figures are of
    trials_run: int = 0
    records: int = 0
    stale: int = 0  # records whose code changed or cannot be checked (not applied)
    best_s: float | None = None  # best current-version time in the logs for this GPU
    retimed_s: float | None = None  # the best config re-timed in this run
    default_s: float | None = None  # the default config, same run
    baseline_s: float | None = None  # the task's baseline, same run (``baseline`` names it)
    previous_s: float | None = None
    timer: str | None = None  # what timed current_s (results.TIMERS): the re-time's, else the record's
    previous_timer: str | None = None  # what timed previous_s
    devices: list[str] = field(default_factory=list)  # the devices that measured its records
    baseline: str = "cuDNN"  # what baseline_s timed (tasks.Task.baseline_of: cuBLAS for dense, torch._scaled_mm for fp8)
    # ok, no valid record, regression, slower than default, re-time failed (the timer's error:
    # the log), not reached; no record (report-only
    # without a nightly log: the job never ran here, so nothing failed)
    status: str = "ok"

    @property
    def current_s(self) -> float | None:
        return self.retimed_s or self.best_s

    @property
    def tflops(self) -> float | None:
        return self.flops / self.current_s / 1e12 if self.current_s else None

    @property
    def change(self) -> float | None:
        """Relative time change since the previous report (negative = faster); None where the
        two figures came from different timers (a CUDA graph saves microseconds a call)."""
        if self.current_s and self.previous_s and self.timer == self.previous_timer:
            return self.current_s / self.previous_s - 1
        return None

    # The ratios take the re-time only: the default and the baseline were timed beside it,
    # alike; the record's time may come from another timer.
    @property
    def baseline_ratio(self) -> float | None:
        return self.baseline_s / self.retimed_s if (self.baseline_s and self.retimed_s) else None

    @property
    def default_ratio(self) -> float | None:
        """default time / tuned time: below 1 means the tuned config lost to the default."""
        return self.default_s / self.retimed_s if (self.default_s and self.retimed_s) else None


FAILING = ("regression", "slower than default", "no valid record", "re-time failed")


@dataclass
class Report:
    gpu: str | None
    started: str
    elapsed_s: float
    budget_s: float
    rows: list[ReportRow] = field(default_factory=list)
    mode: str = "tune"  # or report-only
    sources: list[str] = field(default_factory=list)  # logs the figures come from
    best_log_changes: list[str] = field(default_factory=list)  # what the merge did

    @property
    def failed(self) -> list[ReportRow]:
        return [r for r in self.rows if r.status in FAILING]

    def to_json(self) -> str:
        data = asdict(self)
        for row, raw in zip(self.rows, data["rows"]):
            raw.update(tflops=row.tflops, change=row.change, baseline_ratio=row.baseline_ratio,
                       default_ratio=row.default_ratio)
        return json.dumps(data, indent=1)

    def to_markdown(self) -> str:
        def ms(s):
            return f"{s * 1e3:.4f}" if s else "-"

        def ratio(x):
            return f"{x:.2f}" if x else "-"

        base = baseline_label(self.rows)
        lines = [f"# Nightly tuning report: {self.gpu or 'no GPU'} ({self.started})", "",
                 f"Mode {self.mode}; {self.elapsed_s / 60:.1f} of {self.budget_s / 60:.0f} budget minutes; "
                 f"from {', '.join(self.sources) or 'no log'}.", "",
                 "| workload | GPU | trials run | records | stale | best ms | TFLOP/s | change | default ms "
                 f"| default / ours | {base} ms | {base} / ours | status | measured on |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            change = f"{r.change:+.1%}" if r.change is not None else "-"
            tflops = f"{r.tflops:.1f}" if r.tflops else "-"
            lines.append(f"| {r.name} | {r.gpu or '-'} | {r.trials_run} | {r.records} | {r.stale} | "
                         f"{ms(r.current_s)} | {tflops} | {change} | {ms(r.default_s)} | "
                         f"{ratio(r.default_ratio)} | {ms(r.baseline_s)} | {ratio(r.baseline_ratio)} | {r.status} | "
                         f"{', '.join(r.devices) or '-'} |")
        stale = [r for r in self.rows if r.stale]
        if stale:
            lines += ["", f"Stale records (their kernel's code changed or cannot be checked; not applied, kept as training "
                          f"data): {', '.join(f'{r.name} ({r.stale})' for r in stale)}."]
        if self.best_log_changes:
            lines += ["", "Best log:"] + [f"- {change}" for change in self.best_log_changes]
        return "\n".join(lines) + "\n"


def previous_report(report_dir: Path) -> dict[tuple[str, str | None], tuple[float, str]]:
    """(workload spec, GPU) -> (time, its timer) in the newest earlier report (empty when there
    is none).  A report that cannot be read, or has a field of the wrong type, is treated as
    absent with one warning: a hand-edited or truncated report must not break every later run."""
    reports = sorted(report_dir.glob("report-*.json")) if report_dir.exists() else []
    for path in reversed(reports):
        try:
            return _report_times(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
            log.warning("skipping unreadable report %s: %s", path, err)
    return {}


def _report_times(data) -> dict[tuple[str, str | None], tuple[float, str]]:
    """``previous_report``'s map of one report's JSON; ValueError names a wrong field.  Rows of
    reports written before the baseline's fields were renamed (``cudnn_s``) read alike."""
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError("expected an object with a list of rows")
    times = {}
    for row in data["rows"]:
        if not isinstance(row, dict) or not isinstance(row.get("workload"), str):
            raise ValueError(f"a row without a workload string: {str(row)[:80]}")
        row = renamed(row)
        gpu = row.get("gpu") or data.get("gpu")
        if gpu is not None and not isinstance(gpu, str):
            raise ValueError(f"gpu must be a string, got {gpu!r}")
        for key in ("retimed_s", "best_s"):
            value = row.get(key)
            if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                          and math.isfinite(value) and value > 0):
                raise ValueError(f"{key} of {row['workload']} must be positive seconds, got {value!r}")
        timer = row.get("timer") or TIME_EVALUATOR  # reports before timers were named: time_evaluator
        if timer not in TIMERS:
            raise ValueError(f"unknown timer {timer!r} of {row['workload']}")
        seconds = row.get("retimed_s") or row.get("best_s")
        if seconds:
            times[(row["workload"], gpu)] = (float(seconds), timer)
    return times


def write_report(report: Report, report_dir: Path) -> tuple[Path, Path]:
    report_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")  # sorts in time order
    md, js = report_dir / f"report-{stamp}.md", report_dir / f"report-{stamp}.json"
    md.write_text(report.to_markdown())
    js.write_text(report.to_json())
    return md, js


# ---- the run ----------------------------------------------------------------------
def _sources(job: Job, gpu) -> list[Path]:
    """The logs a report reads: the job's log and its best logs (this GPU's, or all of them
    without a GPU), so a fresh clone without a nightly log still reports the shipped bests."""
    if gpu is not None:
        best = [job.best_log_dir / gpu_log_name(gpu.name)]
    else:
        best = sorted(job.best_log_dir.glob("*.jsonl")) if job.best_log_dir.exists() else []
    return [p for p in [job.log, *best] if p.is_file()]


def run_nightly(job: Job, gpu=None, report_only: bool = False, measurer_factory=None,
                retime=None, now=time.time, transfer: bool = True, options: MeasureOptions | None = None) -> Report:
    """Tune (unless ``report_only``), merge the best log, re-time, compare, report.

    ``retime(workload, config) -> autotune.Retimed`` re-measures a best config beside the default
    and the task's baseline (default: ``autotune.retime_against_default``); tests pass synthetic ones.
    ``transfer``: the tuner learns from the shipped histories too (``--no-transfer``: not).
    ``options.devices``: the GPUs every batch is spread over (``--devices``; default GPU 0).
    """
    start = now()
    deadline = start + job.budget_s
    retime = retime or retime_against_default
    previous = previous_report(job.report_dir)
    report = Report(gpu=getattr(gpu, "name", None), started=time.strftime("%Y-%m-%d %H:%M:%S"),
                    elapsed_s=0.0, budget_s=job.budget_s, mode="report-only" if report_only else "tune")
    trials: dict[str, int] = {}
    reached: set[str] = set()
    never_run = report_only and not job.log.is_file()
    if never_run:
        log.warning("no nightly log at %s (the job has not run here): reporting from the best logs in %s",
                    job.log, job.best_log_dir)
    measurer = None
    with contextlib.ExitStack() as stack:  # one build pool and GPU runner for the whole job
        for entry in ([] if report_only else job.entries):
            if now() >= deadline:
                continue
            reached.add(entry.name)
            if measurer is None:
                measurer = stack.enter_context((measurer_factory or LocalMeasurer)(
                    tasks.of(entry.workload).space(entry.workload, gpu), options))
            summary = tune_workload(entry.workload, entry.trials, job.log, batch_size=min(16, entry.trials),
                                    early_stopping=None, seed=0, gpu=gpu, deadline=deadline,
                                    compare_baseline=False, measurer=measurer, shipped_transfer=transfer,
                                    options=options)
            trials[entry.name] = summary.trials

    sources = _sources(job, gpu)
    report.sources = [str(p) for p in sources]
    all_records = records.unique(records.load(sources))  # a best log repeats the nightly log's records
    gpus = [gpu.name] if gpu is not None else sorted({r.gpu for r in all_records if r.gpu}) or [None]
    rows, retimed = [], []
    for entry in job.entries:
        for gpu_name in gpus:
            previous_s, previous_timer = previous.get((str(entry.workload), gpu_name), (None, None))
            row = ReportRow(entry.name, str(entry.workload), entry.workload.flops, gpu=gpu_name,
                            trials_run=trials.get(entry.name, 0),
                            baseline=tasks.of(entry.workload).baseline_of(entry.workload),
                            previous_s=previous_s, previous_timer=previous_timer)
            rows.append(row)
            if not report_only and entry.name not in reached:
                row.status = "not reached"
            mine = [r for r in all_records if r.workload == entry.workload and r.gpu == gpu_name]
            row.records, row.stale = len(mine), sum(r.stale for r in mine)
            row.devices = sorted({r.provenance["device"] for r in mine if r.provenance.get("device")})
            best = records.best_record(mine, entry.workload)
            if best is None:
                if row.status != "not reached":  # a job that never ran here has failed nothing
                    row.status = "no record" if never_run else "no valid record"
                continue
            config, record = best
            row.best_s, row.timer = record.seconds, record.timer
            if report_only or row.status == "not reached":
                continue
            retimed += _retime(row, config, entry.workload, retime, job, gpu)
            retimed += _retime_old_best(mine, config, entry.workload, retime, gpu)
    if not report_only and gpu is not None:
        # The re-timings (50 repeats of >= 10 ms each) are records too: where the default beat
        # the search's best, the merge below gives the best log the default.
        records.append(job.log, retimed)
        best_log = job.best_log_dir / gpu_log_name(gpu.name)
        changes = records.merge_best(best_log, records.load(job.log), gpu.name)
        report.best_log_changes = [c.describe() for c in changes]
        for change in report.best_log_changes:
            log.info("best log %s: %s", best_log, change)
    report.rows = rows
    report.elapsed_s = now() - start
    md, js = write_report(report, job.report_dir)
    log.info("report: %s", md)
    if not report_only and gpu is not None:  # the merge may have changed the shipped logs: the
        zero_shot_train.refresh_stored_model()  # stored zero-shot model follows them (report first)
    return report


def _retime(row: ReportRow, config, workload, retime, job: Job, gpu) -> list:
    """Re-time the best config beside the default and the baseline; a loss to the previous
    report or to the default is confirmed by a second measurement before it counts.  Returns
    the re-timings as records (stamped with today's template, this GPU).  Where the timer fails,
    the row's status says so and the error is logged; the night's other work goes on."""
    first = _try_retime(retime, workload, config)
    if first is None:
        row.status = "re-time failed"
        return []
    row.retimed_s, row.default_s, row.baseline_s = first.tuned_s, first.default_s, first.baseline_s
    if first.tuned_s:
        row.timer = first.timer
    if _regressed(row, job) or _lost_to_default(row, job):  # confirm before crying wolf
        again = _try_retime(retime, workload, config)
        if again is None:
            row.status = "re-time failed"
        else:
            row.retimed_s = min(row.retimed_s or float("inf"), again.tuned_s or float("inf"))
            if again.default_s and row.default_s:
                row.default_s = min(row.default_s, again.default_s)
            if _regressed(row, job):
                row.status = "regression"
            elif _lost_to_default(row, job):
                row.status = "slower than default"
    space = tasks.of(workload).space(workload, gpu)
    provenance = records.make_provenance(gpu)
    timed = [(config, row.retimed_s), (space.default_config(), row.default_s)]
    return [records.stamped(f"cuda -arch={gpu.arch}", space, cfg,
                            MeasureResult((seconds,), error_msg=records.RETIME_MSG, timer=first.timer), provenance)
            for cfg, seconds in timed if seconds and math.isfinite(seconds)]


def _retime_old_best(mine, best_config, workload, retime, gpu) -> list:
    """A re-time, by today's timer, of the best config that only older timers measured (the
    best of ``mine``'s records of other timers), unless it is the best re-timed anyway or has a
    figure of today's timer already.  Returns it as a record (none where it came out wrong).

    Why: configs are compared only by a timer that measured both (``compare``).  A best log's
    holder measured by time_evaluator shares no figure with tonight's tunes, so ``merge_best``
    would keep it whatever they found; with this record it is compared with them like with
    like, once (the record stays in the nightly log)."""
    found = records.best_record([r for r in mine if r.timer != TIMER], workload)
    if found is None or found[0] == best_config:
        return []
    config, record = found
    key = config_key(record)
    if any(r.ok and not r.stale and r.timer == TIMER and config_key(r) == key for r in mine):
        return []
    timed = _try_retime(retime, workload, config)
    if timed is None:
        return []
    log.info("%s: re-timed the best of older timers (%s, %.4f ms) by %s: %s", workload, record.timer,
             record.seconds * 1e3, timed.timer, f"{timed.tuned_s * 1e3:.4f} ms" if timed.tuned_s else "wrong")
    if not (timed.tuned_s and math.isfinite(timed.tuned_s)):
        return []
    space = tasks.of(workload).space(workload, gpu)
    result = MeasureResult((timed.tuned_s,), error_msg=records.RETIME_MSG, timer=timed.timer)
    return [records.stamped(f"cuda -arch={gpu.arch}", space, config, result, records.make_provenance(gpu))]


def _try_retime(retime, workload, config):
    """``retime(workload, config)``, or None (logged) where the timer failed."""
    try:
        return retime(workload, config)
    except TimerError as err:
        log.error("%s: re-timing %s failed: %s", workload, config, err)
        return None


def _regressed(row: ReportRow, job: Job) -> bool:
    """Slower than the previous report's time, timed alike (``ReportRow.change``)."""
    return bool(row.retimed_s and row.change is not None and row.change > job.regression_threshold)


def _lost_to_default(row: ReportRow, job: Job) -> bool:
    return bool(row.retimed_s and row.default_s
                and row.retimed_s > row.default_s * (1 + job.regression_threshold))
