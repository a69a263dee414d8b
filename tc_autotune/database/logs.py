"""The tuning logs as files: where they are, appending records, reading them back.

Why JSONL: a tuning run can be killed at any moment (OOM, a hung kernel, Ctrl-C), so every
measurement is appended and fsynced as soon as it is known, and a reader must survive a
half-written last line.  One self-contained line per measurement makes both easy: appends
never rewrite earlier data, and a corrupt line costs only itself (it is skipped with a warning
naming file and line).  Writers from several processes may share one log; the file handling
(locking, fencing torn lines, size caps, atomic replacement) is ``journal``'s.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable, Iterator

from . import journal
from .record import Record

logger = logging.getLogger("tc_autotune.database.records")  # the name these warnings always had

BAD_LINE_WARNINGS = 3  # per file; the rest are summarised in one line
LOG_SUFFIXES = (".jsonl", ".log")


# ---- writing ----------------------------------------------------------------
def append(path, records: Iterable[Record]) -> int:
    """Append ``records`` to the log at ``path``; returns how many were written.

    Safe with concurrent writers and with writers killed mid-append (see ``journal``):
    lines never interleave, a crash loses at most this call, and a torn line left by
    a dead writer is fenced off before these records are written.
    """
    return journal.append_lines(path, (r.to_json().encode("utf-8") for r in records), is_whole_record)


def is_whole_record(line: bytes) -> bool:
    try:
        Record.from_json(line.decode("utf-8"))
    except ValueError:
        return False
    return True


def serialise(chosen: list[Record]) -> bytes:
    """A compacted log's bytes: the records sorted by workload, arch, GPU and time."""
    chosen = sorted(chosen, key=lambda r: (str(r.workload), r.arch or "", r.gpu or "", r.seconds))
    return "".join(r.to_json() + "\n" for r in chosen).encode("utf-8")


# ---- where the logs are -------------------------------------------------------
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


def stat_log_files(paths) -> list[tuple[Path, os.stat_result]]:
    """(file, its stat) of every log file named by ``paths`` (as ``log_files``), leaving out a
    file removed since it was listed: size and mtime say whether a cached read is still good."""
    found = []
    for file in log_files(paths):
        try:
            found.append((file, file.stat()))
        except OSError:
            continue
    return found


def packaged_logs_dir() -> Path:
    """The tuning_logs/ folder that came with this copy of the package (best logs per GPU, tuning
    histories, job files): ``tc_autotune/tuning_logs/`` when the package was installed from a
    wheel (package data), else the checkout's ``tuning_logs/`` beside the package (a clone, or an
    editable install of one).  The one place that decides where the shipped logs live; it does
    not look at TC_AUTOTUNE_SHIPPED_LOGS (``shipped_logs_dir`` does) and the folder may be absent."""
    package = Path(__file__).resolve().parents[1]  # tc_autotune/ (this module is in database/)
    installed = package / "tuning_logs"
    return installed if installed.is_dir() else package.parent / "tuning_logs"


# packaged_logs_dir() when this module was imported (apply re-exports it; new code calls the function).
SHIPPED_LOGS = packaged_logs_dir()


def shipped_logs_dir() -> Path | None:
    """The shipped logs' folder: TC_AUTOTUNE_SHIPPED_LOGS where set (empty: none), else
    ``packaged_logs_dir()``; None where that folder does not exist."""
    shipped = os.environ.get("TC_AUTOTUNE_SHIPPED_LOGS")
    if shipped is None:
        shipped = str(packaged_logs_dir())
    return Path(shipped) if shipped and Path(shipped).exists() else None


def shipped_log_files() -> list[Path]:
    """The shipped logs: tuning_logs/*.jsonl (best records per GPU) and
    tuning_logs/history/*.jsonl (every measurement of earlier runs)."""
    shipped = shipped_logs_dir()
    return log_files([shipped, shipped / "history"]) if shipped is not None else []


# ---- reading ----------------------------------------------------------------
def load(paths) -> Iterator[Record]:
    """Yield the records of one or more logs (files, directories, or a list of them).

    Missing paths yield nothing.  A corrupt line (garbage, the wrong shape, an
    impossible value, a line over ``journal.MAX_LINE_BYTES``) is skipped with a
    warning naming file, line and reason (the first few per file, then one summary),
    so one bad write never costs the rest of a long tuning log.  An unfinished last
    line (a writer is appending, or died) is not a record and not an error.
    """
    for file in log_files(paths):
        bad: list[int] = []
        for lineno, raw, complete in journal.read_lines(file):
            if raw is not None and not raw.strip():
                continue
            try:
                if raw is None:
                    raise ValueError(f"line longer than {journal.MAX_LINE_BYTES} bytes")
                record = Record.from_json(raw.decode("utf-8"))
            except ValueError as err:  # UnicodeDecodeError is a ValueError too
                if not complete:
                    logger.info("%s:%d: ignoring an unfinished last line", file, lineno)
                    continue
                bad.append(lineno)
                if len(bad) <= BAD_LINE_WARNINGS:
                    logger.warning("%s:%d: skipping bad record: %s", file, lineno, err)
                continue
            yield record
        if len(bad) > BAD_LINE_WARNINGS:
            more = bad[BAD_LINE_WARNINGS:]
            shown = ", ".join(map(str, more[:10])) + (", ..." if len(more) > 10 else "")
            logger.warning("%s: skipped %d more bad record(s) (lines %s)", file, len(more), shown)


def records_of(logs) -> Iterable[Record]:
    """Records from log paths, or ``logs`` itself when it already holds Records."""
    if isinstance(logs, (str, os.PathLike)):
        return load(logs)
    if isinstance(logs, (list, tuple)) and logs and not isinstance(logs[0], Record):
        return load(logs)
    return logs


__all__ = ["BAD_LINE_WARNINGS", "LOG_SUFFIXES", "append", "serialise", "log_files", "stat_log_files",
           "packaged_logs_dir", "SHIPPED_LOGS", "shipped_logs_dir", "shipped_log_files", "load", "records_of"]
