"""Restamping logs: check each record whose template's sources changed since it was stamped
against the code its config generates today, and write what was found into the log.

For each record (``record.freshness``; today = its template's ``source_hash``):

* current, with a code hash: left alone;
* current without one (a format-2 record of the retired versions while the sources are still
  theirs; a record nothing built in its process): its config's code is generated and its hash
  stamped, with today's source hash (``stamped``);
* unverified: its config's code is generated; where the hash is the record's, the record gets
  today's source hash (``verified``: current again, with nothing more to check); where it differs,
  or the config cannot be generated any more, ``stale_at`` = today's source hash (``changed``:
  stale from now on, for every reader, without generating anything again);
* stale: left alone (nothing to check it by, or already found changed).

Generating code needs TVM: the caller passes ``hash_codes``, which maps the ``CodeKey``s asked
for to code hashes (None where the config cannot be generated); ``tc-records --restamp`` lowers
them in parallel (``api.kernel.code_hashes``).  A log is rewritten through ``journal.rewrite``:
atomically, under its append lock (a concurrent append goes to the new file), every line not
restamped kept byte for byte (bad lines, an unfinished last line, lines appended meanwhile),
the previous file kept as ``<log>.bak``.  A restamped line is the same JSON object with
``version``, ``source_hash``, ``code_hash`` and ``stale_at`` set: nothing else in it changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

from . import journal
from .logs import log_files
from .record import FRESH, RECORD_VERSION, UNVERIFIED, Record
from ..backends.cuda.gpu import gpu_for_arch


class CodeKey(NamedTuple):
    """What a code hash is of: a workload spec, its config's knob values, the GPU arch."""

    workload: str
    knobs: tuple  # ((knob, value), ...) in the knob table's order
    arch: str


@dataclass
class RestampReport:
    """What restamping one log found (and did, unless it was a dry run)."""

    path: Path
    records: int = 0
    current: int = 0  # current, with a code hash: left alone
    stamped: int = 0  # current, without a code hash before: stamped
    verified: int = 0  # unverified, same code: today's source hash
    changed: list = field(default_factory=list)  # unverified, other code (or none): the Records, now stale
    stale: int = 0  # stale before: left alone
    written: bool = False

    @property
    def rewritten(self) -> int:
        return self.stamped + self.verified + len(self.changed)


def code_key(record: Record) -> CodeKey | None:
    """The key of the code ``record``'s config generates for its workload and arch; None where
    its config no longer fits the space (no code can be generated for it)."""
    arch = record.arch or "sm_90"
    try:
        config = record.task.space(record.workload, gpu_for_arch(arch)).from_entity(record.config)
    except ValueError:
        return None
    return CodeKey(str(record.workload), tuple(config.as_dict().items()), arch)


def _wanted(record: Record) -> bool:
    """Whether restamping ``record`` needs its config's code hash."""
    freshness = record.freshness
    if freshness == FRESH:
        return record.code_hash is None or record.source_hash is None
    return freshness == UNVERIFIED


def _decide(record: Record, hashes: dict) -> tuple[str, dict | None]:
    """(what restamping does to ``record``, the fields to set or None to leave it alone)."""
    freshness = record.freshness
    today = record.task.template.source_hash
    if freshness == FRESH:
        if record.code_hash is not None and record.source_hash is not None:
            return "current", None
        key = code_key(record)
        if key is not None and key not in hashes:  # appended after the plan: next time
            return "current", None
        found = hashes.get(key) if key is not None else None
        if found is None and record.source_hash is not None:  # no code to hash (a failed build)
            return "current", None
        # a format-2 record gets today's source hash even without a code hash: it no longer
        # depends on LEGACY_SOURCE_HASHES
        return "stamped", {"source_hash": today, "code_hash": found or record.code_hash}
    if freshness == UNVERIFIED:
        key = code_key(record)
        if key is not None and key not in hashes:
            return "current", None
        found = hashes.get(key) if key is not None else None
        if found is not None and found == record.code_hash:
            return "verified", {"source_hash": today, "stale_at": None}
        return "changed", {"stale_at": today}
    return "stale", None


def _restamped(raw: bytes, fields: dict) -> bytes:
    """The line ``raw`` (no newline) with ``fields`` set (None: removed) and today's format."""
    obj = json.loads(raw)
    obj["version"] = RECORD_VERSION
    for key, value in fields.items():
        if value is None:
            obj.pop(key, None)
        else:
            obj[key] = value
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _parse(raw: bytes) -> Record | None:
    if len(raw) > journal.MAX_LINE_BYTES or not raw.strip():
        return None
    try:
        return Record.from_json(raw.decode("utf-8"))
    except ValueError:
        return None


def _transform(data: bytes, hashes: dict, report: RestampReport | None) -> bytes:
    """``data`` (a log's bytes) with each record restamped; every other byte kept.  The last
    part has no newline: an unfinished line, left as it is."""
    parts = data.split(b"\n")
    for i, raw in enumerate(parts[:-1]):
        record = _parse(raw)
        if record is None:
            continue
        action, fields = _decide(record, hashes)
        if report is not None:
            report.records += 1
            if action == "changed":
                report.changed.append(record)
            else:
                setattr(report, action, getattr(report, action) + 1)
        if fields is not None:
            parts[i] = _restamped(raw, fields)
    return b"\n".join(parts)


def needed_keys(paths) -> set[CodeKey]:
    """The code keys restamping ``paths`` needs (``log_files`` names the logs)."""
    keys = set()
    for file in log_files(paths):
        for raw in file.read_bytes().split(b"\n")[:-1]:
            record = _parse(raw)
            if record is not None and _wanted(record):
                key = code_key(record)
                if key is not None:
                    keys.add(key)
    return keys


def restamp(paths, hash_codes: Callable[[list[CodeKey]], dict], dry_run: bool = False,
            backup: bool = True) -> list[RestampReport]:
    """Restamp every log ``paths`` names (files or folders of logs; see the module docstring).

    ``hash_codes(keys)`` gives the code hash of each key (None where the config cannot be
    generated).  With ``dry_run`` nothing is written: the reports say what would change.
    OSError where a log cannot be read or written (the logs before it are done)."""
    files = log_files(paths)
    keys = needed_keys(files)
    hashes = dict(hash_codes(sorted(keys))) if keys else {}
    reports = []
    for file in files:
        report = RestampReport(Path(file))
        if dry_run:
            _transform(file.read_bytes(), hashes, report)
        else:
            def transform(data: bytes, report=report) -> bytes:
                fresh = RestampReport(report.path)  # counted on what is there under the lock
                out = _transform(data, hashes, fresh)
                report.__dict__.update(fresh.__dict__)
                return out

            report.written = journal.rewrite(file, transform, backup=backup)
        reports.append(report)
    return reports


__all__ = ["CodeKey", "RestampReport", "code_key", "needed_keys", "restamp"]
