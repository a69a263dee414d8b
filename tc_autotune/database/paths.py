"""Where the tuning logs are: the log files a path names, and the shipped logs (the best records
per GPU and the tuning histories that came with this copy of the package).  Paths only, no
records: the modules that only need to find logs (the zero-shot model's, the build cache's
keys) stay below the record format in the import graph."""

from __future__ import annotations

import os
from pathlib import Path

LOG_SUFFIXES = (".jsonl", ".log")


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


__all__ = ["LOG_SUFFIXES", "SHIPPED_LOGS", "log_files", "stat_log_files", "packaged_logs_dir",
           "shipped_logs_dir", "shipped_log_files"]
