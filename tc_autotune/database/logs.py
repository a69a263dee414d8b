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
import re
import threading
from pathlib import Path
from typing import Iterable, Iterator

from . import journal
from .paths import (LOG_SUFFIXES, SHIPPED_LOGS, log_files, packaged_logs_dir, shipped_log_files,  # noqa: F401
                    shipped_logs_dir, stat_log_files)
from ..core import tasks
from .record import Record, target_arch

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
            record = _parsed(file, lineno, raw, complete, bad)
            if record is not None:
                yield record
        _summarise(file, bad)


def _parsed(file, lineno: int, raw: bytes | None, complete: bool, bad: list[int]) -> Record | None:
    """The record of one line, or None for a bad one (warned of: the first few of a file) or an
    unfinished last one."""
    try:
        if raw is None:
            raise ValueError(f"line longer than {journal.MAX_LINE_BYTES} bytes")
        return Record.from_json(raw.decode("utf-8"))
    except ValueError as err:  # UnicodeDecodeError is a ValueError too
        if not complete:
            logger.info("%s:%d: ignoring an unfinished last line", file, lineno)
            return None
        bad.append(lineno)
        if len(bad) <= BAD_LINE_WARNINGS:
            logger.warning("%s:%d: skipping bad record: %s", file, lineno, err)
        return None


def _summarise(file, bad: list[int]) -> None:
    if len(bad) > BAD_LINE_WARNINGS:
        more = bad[BAD_LINE_WARNINGS:]
        shown = ", ".join(map(str, more[:10])) + (", ..." if len(more) > 10 else "")
        logger.warning("%s: skipped %d more bad record(s) (lines %s)", file, len(more), shown)


# ``Record.to_json``'s lines start with the target, the task and the workload spec: the index
# keys a line by them without parsing it (a line that starts otherwise is parsed at once).
_HEAD = re.compile(rb'\{"input":\["([^"\\]*)","([^"\\]*)",\["([^"\\]*)"\],\{\}\]')


class LogIndex:
    """One log file's successful records by (workload, arch), in file order, each line parsed
    (``Record.from_json``, as ``load`` does) only once its key is asked for: a build asks for its
    workload and its GEMM's siblings, not for the hundreds of others a log holds (a fresh
    process's first pick read all ~220 shipped best records: ~10 ms).  A bad line is warned of
    when it is parsed (the first few of a file; only those read at once are summarised)."""

    def __init__(self, path):
        self.path = str(path)
        self._bad: list[int] = []
        self._lines: dict[tuple, list[tuple[int, bytes, bool]]] = {}  # key -> lines not parsed yet
        self._found: dict[tuple, list[tuple[int, Record]]] = {}  # key -> (line number, successful record)
        self._lock = threading.Lock()  # (a key's lines are parsed once, whichever thread asks)
        for file in log_files(self.path):  # (none where the file has gone, as ``load``)
            for lineno, raw, complete in journal.read_lines(file):
                if raw is not None and not raw.strip():
                    continue
                key = _head_key(raw)
                if key is not None:
                    self._lines.setdefault(key, []).append((lineno, raw, complete))
                else:
                    self._add(lineno, _parsed(self.path, lineno, raw, complete, self._bad))
        _summarise(self.path, self._bad)

    def _add(self, lineno: int, record: Record | None) -> None:
        if record is not None and record.ok:
            self._found.setdefault((record.workload, record.arch), []).append((lineno, record))

    def _records(self, key: tuple) -> list[tuple[int, Record]]:
        with self._lock:
            for lineno, raw, complete in self._lines.pop(key, ()):
                self._add(lineno, _parsed(self.path, lineno, raw, complete, self._bad))
            found = self._found.get(key, [])
            found.sort(key=lambda pair: pair[0])  # (lines parsed at once and later, in file order)
            return list(found)

    def records(self, workload, arch: str | None) -> list[Record]:
        """The successful records of ``workload`` on ``arch``, in file order."""
        return [record for _, record in self._records((workload, arch))]

    def items(self, wanted) -> list[tuple[tuple, list[Record]]]:
        """((workload, arch), its successful records) of the keys ``wanted(workload, arch)``
        takes, in the order of their first successful records (as a dict of all would be)."""
        with self._lock:
            keys = [key for key in dict.fromkeys([*self._found, *self._lines]) if wanted(*key)]
        found = [(key, self._records(key)) for key in keys]
        found = sorted(((key, pairs) for key, pairs in found if pairs), key=lambda item: item[1][0][0])
        return [(key, [record for _, record in pairs]) for key, pairs in found]


def _head_key(raw: bytes | None) -> tuple | None:
    """(workload, arch) of a line as its head names them, or None where it does not name them
    plainly (no escapes; a known task; a spec that parses): that line is parsed whole."""
    match = _HEAD.match(raw) if raw is not None else None
    if match is None:
        return None
    try:
        target, task, spec = (group.decode("utf-8") for group in match.groups())
        return tasks.get(task).workload_type.parse(spec), target_arch(target)
    except (ValueError, KeyError, TypeError):
        return None


def records_of(logs) -> Iterable[Record]:
    """Records from log paths, or ``logs`` itself when it already holds Records."""
    if isinstance(logs, (str, os.PathLike)):
        return load(logs)
    if isinstance(logs, (list, tuple)) and logs and not isinstance(logs[0], Record):
        return load(logs)
    return logs


__all__ = ["BAD_LINE_WARNINGS", "LOG_SUFFIXES", "append", "serialise", "log_files", "stat_log_files",
           "packaged_logs_dir", "SHIPPED_LOGS", "shipped_logs_dir", "shipped_log_files", "load", "records_of",
           "LogIndex"]
