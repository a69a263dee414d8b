"""What some logs hold, per (workload, GPU): counts of records, failures, unverified and stale
ones, and the best times (``tc-records`` prints it)."""

from __future__ import annotations

from dataclasses import dataclass

from .logs import records_of
from .record import STALE, UNVERIFIED
from ..core import tasks
from ..workloads.conv2d import Conv2dWorkload
from ..workloads.names import display_name


@dataclass
class LogSummary:
    """One (workload, GPU) of some logs: how many records, how many unverified (their template's
    sources changed since they were stamped: a build or ``tc-records --restamp`` checks them),
    how many stale, and the best current and stale times."""

    workload: Conv2dWorkload
    gpu: str | None
    arch: str | None
    records: int = 0
    ok: int = 0
    unverified: int = 0
    stale: int = 0
    best_s: float | None = None  # best current time (unverified records included)
    best_stale_s: float | None = None


def summarize(logs) -> list[LogSummary]:
    """Per (workload, GPU) counts of ``logs``: what ``scripts/records.py`` prints."""
    rows: dict[tuple, LogSummary] = {}
    for record in records_of(logs):
        key = (str(record.workload), record.gpu or "", record.arch or "")
        row = rows.setdefault(key, LogSummary(record.workload, record.gpu, record.arch))
        freshness = record.freshness
        row.records += 1
        row.stale += freshness == STALE
        row.unverified += freshness == UNVERIFIED
        if not record.ok:
            continue
        row.ok += 1
        attr = "best_stale_s" if freshness == STALE else "best_s"
        if getattr(row, attr) is None or record.seconds < getattr(row, attr):
            setattr(row, attr, record.seconds)
    return [rows[key] for key in sorted(rows)]


def summary_table(rows: list[LogSummary]) -> str:
    """Markdown table of ``summarize``'s rows (times in ms), under today's template key."""
    ms = lambda s: "-" if s is None else f"{s * 1e3:.4f}"  # noqa: E731
    keys = {t.template.name: t.template.source_hash for t in map(tasks.get, tasks.names())}
    lines = ["template source hash today: " + ", ".join(f"{name} {key[:16]}" for name, key in keys.items()), "",
             "| workload | GPU | arch | records | ok | unverified | stale | best ms | best stale ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {display_name(r.workload)} | {r.gpu or '-'} | {r.arch or '-'} | {r.records} | {r.ok} "
                     f"| {r.unverified} | {r.stale} | {ms(r.best_s)} | {ms(r.best_stale_s)} |")
    return "\n".join(lines)


__all__ = ["LogSummary", "summarize", "summary_table"]
