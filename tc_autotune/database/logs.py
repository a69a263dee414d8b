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
from .paths import (LOG_SUFFIXES, SHIPPED_LOGS, log_files, packaged_logs_dir, shipped_log_files,  # noqa: F401
                    shipped_logs_dir, stat_log_files)
from .record import Record

logger = logging.getLogger("tc_autotune.database.records")  # the name these warnings always had

BAD_LINE_WARNINGS = 3  # per file; the rest are summarised in one line


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
