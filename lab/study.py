"""How good is the search on shapes nobody tuned: zero-shot, 32/64/256 trials with transfer
from the shipped histories, and 64 trials without, re-timed side by side with cuDNN.

Each held-out workload gets two logs of its own in the study folder (no record of one shape
or arm ever trains another): ``<slug>.transfer.jsonl`` (one run of ``trials``; what n trials
reach is the best of its first n records, which is what an n-trial run would have measured:
the tuner does not look at its budget until the last batch) and ``<slug>.plain.jsonl``
(``--no-transfer``).  Runs resume: an arm whose log already holds its trials is not tuned
again, so the study can be spread over several GPU sessions.  The final table re-times every
arm's config in one process beside cuDNN.
"""

from __future__ import annotations

import hashlib
import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from tc_autotune.database import records
from tc_autotune.search import zero_shot
from tc_autotune.tuning.autotune import time_configs, tune_workload
from tc_autotune.tuning.benchmark import geomean, ms_cell, ratio_cell
from tc_autotune.templates.registry import conv2d_space
from tc_autotune.search.xgb_tuner import XGB_VARIANTS
from tc_autotune.workloads.conv2d import Conv2dWorkload
from tc_autotune.workloads.names import display_name

log = logging.getLogger(__name__)

CHECKPOINTS = (32, 64, 256)  # trials of the transfer run whose best is reported
# Transfer runs the report looks for: today's default and the variants it is compared with
# (the pooled fit, residual transfer without the hedge, a faster fade: XGB_VARIANTS).
TRANSFER_TUNERS = tuple(XGB_VARIANTS)
PLAIN_TRIALS = 64  # trials of the run without transfer


def arm_logs(out_dir, workload: Conv2dWorkload, tuner: str = "xgb") -> tuple[Path, Path]:
    """(transfer log, no-transfer log) of one workload: a readable slug plus a hash; the
    transfer log of a tuner other than the default names it (``.transfer-xgb-joint``)."""
    digest = hashlib.sha1(str(workload).encode()).hexdigest()[:8]
    slug = "".join(ch if ch.isalnum() else "-" for ch in display_name(workload))[:60].strip("-")
    base = Path(out_dir) / f"{slug}-{digest}"
    transfer = ".transfer.jsonl" if tuner == "xgb" else f".transfer-{tuner}.jsonl"
    return base.with_name(base.name + transfer), base.with_name(base.name + ".plain.jsonl")


def arm_name(trials: int, tuner: str = "xgb") -> str:
    """A transfer arm's column: "64 transfer", or "64 transfer (xgb-joint)" for another tuner."""
    return f"{trials} transfer" + ("" if tuner == "xgb" else f" ({tuner})")


def workload_records(path, workload: Conv2dWorkload) -> list:
    """This workload's records of one log, in the order they were measured."""
    return [r for r in records.load(path) if r.workload == workload] if Path(path).exists() else []


def best_after(recs, n: int):
    """The fastest successful record among the first ``n`` (None if none succeeded)."""
    ok = [r for r in recs[:n] if r.ok]
    return min(ok, key=lambda r: r.seconds) if ok else None


def tune_arms(workload: Conv2dWorkload, out_dir, trials: int = CHECKPOINTS[-1],
              plain_trials: int = PLAIN_TRIALS, seed: int = 0, gpu=None, tuner: str = "xgb", **tune_kw) -> float:
    """Bring both logs of ``workload`` up to their trial counts (the transfer arm searched by
    ``tuner``); seconds spent."""
    start = time.time()
    for path, total, shipped in zip(arm_logs(out_dir, workload, tuner), (trials, plain_trials), (True, False)):
        missing = total - len(workload_records(path, workload))
        if missing > 0:
            log.info("%s: %s arm, %d trials to go", display_name(workload),
                     "transfer" if shipped else "no-transfer", missing)
            tune_workload(workload, missing, path, seed=seed, gpu=gpu, shipped_transfer=shipped,
                          compare_baseline=False, tuner=tuner if shipped else "xgb", **tune_kw)
    return time.time() - start


def run_tuning(workloads, out_dir, budget_s: float | None = None, estimate_s: float = 0.0,
               **kw) -> list[Conv2dWorkload]:
    """``tune_arms`` for each workload in turn; stops before one that would not finish inside
    ``budget_s`` by the slowest workload so far (``estimate_s`` before the first).  Returns
    the workloads not complete yet."""
    counts = {k: kw[k] for k in ("trials", "plain_trials", "tuner") if k in kw}
    start, slowest, tuned = time.time(), estimate_s, 0
    for i, workload in enumerate(workloads):
        if complete(workload, out_dir, **counts):
            continue
        spent = time.time() - start if tuned else 0.0  # setup before the first does not count
        if budget_s is not None and spent + slowest > budget_s:
            log.info("budget: stopping before %s (%d workloads left)", display_name(workload), len(workloads) - i)
            break
        slowest = max(slowest, tune_arms(workload, out_dir, **kw))
        tuned += 1
    return [w for w in workloads if not complete(w, out_dir, **counts)]


def complete(workload: Conv2dWorkload, out_dir, trials: int = CHECKPOINTS[-1],
             plain_trials: int = PLAIN_TRIALS, tuner: str = "xgb") -> bool:
    transfer, plain = arm_logs(out_dir, workload, tuner)
    return (len(workload_records(transfer, workload)) >= trials
            and len(workload_records(plain, workload)) >= plain_trials)


@dataclass
class StudyRow:
    """One workload: each arm's config and seconds (re-timed here; None where wrong or
    missing), what the search logged for it, and cuDNN from the same process."""

    workload: Conv2dWorkload
    configs: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    logged: dict = field(default_factory=dict)
    cudnn_s: float | None = None


def arm_configs(workload: Conv2dWorkload, out_dir, gpu, checkpoints=CHECKPOINTS,
                plain_trials: int = PLAIN_TRIALS) -> tuple[dict, dict]:
    """({arm: config}, {arm: seconds the search logged}) for the default, the zero-shot pick,
    each checkpoint of every transfer run (one per tuner of ``TRANSFER_TUNERS`` with a log)
    and the end of the plain run."""
    space = conv2d_space(workload, gpu)
    configs, logged = {"default": space.default_config()}, {}
    predicted = zero_shot.zero_shot_config(workload, gpu)
    if predicted is not None:
        configs["zero-shot"] = predicted
    plain = workload_records(arm_logs(out_dir, workload)[1], workload)
    runs = [(tuner, workload_records(arm_logs(out_dir, workload, tuner)[0], workload)) for tuner in TRANSFER_TUNERS]
    for name, recs, n in [*((arm_name(n, tuner), recs, n) for tuner, recs in runs for n in checkpoints),
                          (f"{plain_trials} no transfer", plain, plain_trials)]:
        best = best_after(recs, n) if len(recs) >= n else None
        if best is not None:
            configs[name], logged[name] = space.from_entity(best.config), best.seconds
    return configs, logged


def retime(workloads, out_dir, gpu, repeat: int = 50, timer=time_configs, **kw) -> list[StudyRow]:
    """Every arm's config of every workload timed beside cuDNN (``timer`` as ``time_configs``)."""
    rows = []
    for workload in workloads:
        configs, logged = arm_configs(workload, out_dir, gpu, **kw)
        seconds, cudnn_s = timer(workload, configs, repeat=repeat)
        rows.append(StudyRow(workload, configs, seconds, logged, cudnn_s))
        log.info("%s: %s | cuDNN %s ms", display_name(workload),
                 ", ".join(f"{k} {ms_cell(v)} ms" for k, v in seconds.items()), ms_cell(cudnn_s))
    return rows


@dataclass(frozen=True)
class StudySummary:
    """The issue's goals, computed from the rows."""

    cudnn_ratio: dict  # arm -> geomean cuDNN time / arm time
    short_vs_long: float | None  # median over workloads of speed(32 transfer) / speed(256 transfer)
    transfer_gain: float | None  # geomean over workloads of speed(64 transfer) / speed(64 no transfer)
    transfer_wins: int  # workloads where 64 with transfer is faster than 64 without
    compared: int  # workloads with both 64-trial arms timed


def summarize(rows: list[StudyRow], short: str = "32 transfer", long: str = "256 transfer",
              with_transfer: str = "64 transfer", without: str = "64 no transfer") -> StudySummary:
    arms = list(dict.fromkeys(a for r in rows for a in r.seconds))
    ratio = {a: geomean(r.cudnn_s / r.seconds[a] for r in rows if r.cudnn_s and r.seconds.get(a)) for a in arms}
    short_long = [r.seconds[long] / r.seconds[short] for r in rows if r.seconds.get(short) and r.seconds.get(long)]
    gains = [r.seconds[without] / r.seconds[with_transfer] for r in rows
             if r.seconds.get(with_transfer) and r.seconds.get(without)]
    return StudySummary(ratio, statistics.median(short_long) if short_long else None, geomean(gains),
                        sum(g > 1 for g in gains), len(gains))


def markdown(rows: list[StudyRow]) -> str:
    """A table of cuDNN time / ours per arm, the cuDNN time, and the summary lines."""
    arms = list(dict.fromkeys(a for r in rows for a in r.seconds))
    lines = ["| workload | cuDNN ms | " + " | ".join(arms) + " |", "| --- | --- |" + " --- |" * len(arms)]
    for r in rows:
        cells = [ratio_cell(r.cudnn_s, r.seconds.get(a)) for a in arms]
        lines.append(f"| {display_name(r.workload)} | {ms_cell(r.cudnn_s)} | " + " | ".join(cells) + " |")
    ratio = summarize(rows).cudnn_ratio
    lines.append("| **geomean** | | " + " | ".join(f"**{ratio[a]:.3f}**" if ratio[a] else "-" for a in arms) + " |")
    lines.append("")
    for tuner in TRANSFER_TUNERS:
        if arm_name(64, tuner) not in arms and arm_name(32, tuner) not in arms:
            continue
        s = summarize(rows, arm_name(32, tuner), arm_name(256, tuner), arm_name(64, tuner))
        label = "" if tuner == "xgb" else f" ({tuner})"
        lines += [f"median over workloads of speed(32 trials) / speed(256 trials), with transfer{label}: "
                  f"{s.short_vs_long:.3f}" if s.short_vs_long else f"32 vs 256{label}: not measured",
                  f"64 trials with transfer{label} against 64 without: {s.transfer_wins}/{s.compared} faster, "
                  f"geomean speed-up {s.transfer_gain:.3f}" if s.transfer_gain else f"64 vs 64{label}: not measured"]
    return "\n".join(lines)


def row_dict(row: StudyRow) -> dict:
    """A row as plain JSON data (configs as knob dicts, seconds)."""
    return {"workload": str(row.workload), "cudnn_s": row.cudnn_s, "seconds": row.seconds,
            "logged": row.logged, "configs": {k: c.as_dict() for k, c in row.configs.items()}}
