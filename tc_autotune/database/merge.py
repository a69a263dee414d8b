"""Folding a run's best records into a best log (``merge_best``) without ever losing one."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from . import journal
from .compare import contenders_of, fastest, like_pair, winner
from .logs import load, serialise
from .record import Record
from .selection import best_records
from ..workloads.conv2d import Conv2dWorkload
from ..workloads.names import display_name

logger = logging.getLogger("tc_autotune.database.records")


@dataclass(frozen=True)
class BestLogChange:
    """What ``merge_best`` did to one (workload, arch) of a best log."""

    workload: Conv2dWorkload
    arch: str | None
    action: str  # added, faster, replaced stale, kept
    before_s: float | None
    after_s: float | None
    timer: str | None = None  # the timer of the figures compared (faster, kept)

    def describe(self) -> str:
        ms = lambda s: "-" if s is None else f"{s * 1e3:.4f} ms"  # noqa: E731
        by = f" ({self.timer})" if self.timer else ""
        return (f"{display_name(self.workload)} ({self.arch}): {self.action}, "
                f"{ms(self.before_s)} -> {ms(self.after_s)}{by}")


def merge_best(best_log, candidates: Iterable[Record], gpu: str) -> list[BestLogChange]:
    """Fold the best current config that ``gpu`` measured of each (workload, arch) among
    ``candidates`` into ``best_log``, never losing what it holds.

    The log's best config of a (workload, arch) on ``gpu`` stays unless a candidate config
    is ``faster`` like with like: by the same timer, by more than the noise, each config by
    its fastest figure among the log's records and the candidates.  Then the winner's
    fastest record under each timer replaces the log's records of that (workload, arch) on
    ``gpu``; so does the best candidate where the log has only stale ones or none.  Current
    means not stale: an unverified record (its template's sources changed since it was
    stamped) still counts, as a build would check it.
    Everything else in the log stays as it is (workloads nobody measured, other GPUs).
    The file is rewritten atomically, the previous one kept as ``<best_log>.bak``, and
    only when something changed.  Returns the changes (``kept``: the candidates lost).
    """
    best_log = Path(best_log)
    held = list(load(best_log)) if best_log.exists() else []
    fresh: dict[tuple, list[Record]] = {}
    for record in candidates:
        if record.gpu == gpu and record.ok and not record.stale:
            fresh.setdefault((record.workload, record.arch), []).append(record)
    changes: list[BestLogChange] = []
    for (workload, arch), new in sorted(fresh.items(), key=lambda kv: str(kv[0][0])):
        mine = [r for r in held if (r.workload, r.arch) == (workload, arch) and r.gpu == gpu and r.ok]
        current = [r for r in mine if not r.stale]
        contenders, holding = contenders_of(current + new), contenders_of(current)
        incumbent = winner(holding) if current else None
        best = winner(contenders, incumbent)
        if incumbent is not None and best == incumbent:
            seconds = fastest(holding[incumbent]).seconds
            changes.append(BestLogChange(workload, arch, "kept", seconds, seconds))
            continue
        if incumbent is not None:  # the figures that decided, where the two were timed alike
            pair = like_pair(contenders[best], contenders[incumbent])
            new_r, old_r = pair or (fastest(contenders[best]), fastest(contenders[incumbent]))
            changes.append(BestLogChange(workload, arch, "faster", old_r.seconds, new_r.seconds,
                                         new_r.timer if pair else None))
        else:
            before = min((r.seconds for r in mine), default=None)
            changes.append(BestLogChange(workload, arch, "replaced stale" if mine else "added", before,
                                         fastest(contenders[best]).seconds))
        held = [r for r in held if not any(r is m for m in mine)] + list(contenders[best].values())
    if any(c.action != "kept" for c in changes):
        journal.replace_atomic(best_log, serialise(held), backup=True)
    return changes


def pick_best(in_log, out_log, top_k: int = 1, gpu: str | None = None,
              include_stale: bool = False) -> int:
    """Distill ``in_log`` (anything ``load`` takes) into ``out_log``: the top_k configs per
    workload/arch (``best_records``: compared like with like; each config's fastest record
    under each timer), only records measured on the GPU named ``gpu``, when given, stale ones
    only with ``include_stale``.

    A missing input is an error (FileNotFoundError), and so is a selection of nothing
    (ValueError): a mistyped path or a history of stale records must not empty ``out_log``.
    What is left out is said in one warning.  ``out_log`` is replaced atomically (temp
    file, fsync, rename), so a crash leaves the old or the new file, never a half one; the
    old one is kept as ``<out_log>.bak``.  Do not point concurrent ``append`` calls at
    ``out_log``: lines appended to the old file are lost.  Returns the number of records written.
    """
    inputs = [in_log] if isinstance(in_log, (str, os.PathLike)) else list(in_log)
    missing = [str(p) for p in inputs if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"pick_best: no such log: {', '.join(missing)} ({out_log} left as it was)")
    read = list(load(inputs))
    mine = [r for r in read if gpu is None or r.gpu == gpu]
    best = best_records(mine, top_k, include_stale)
    chosen = [r for group in best.values() for r in group]
    current = [r for r in mine if r.ok and not r.stale]
    stale = sum(r.ok and r.stale for r in mine)
    left_out = (f"{len(current)} current record(s)" + (f" of {gpu}" if gpu else "")
                + f", {stale} stale (include_stale=True keeps them), {sum(not r.ok for r in mine)} failed"
                + (f", {len(read) - len(mine)} of other GPUs" if gpu else ""))
    if not chosen:
        raise ValueError(f"pick_best: nothing to write from {len(read)} record(s) read ({left_out}); "
                         f"{out_log} left as it was")
    if len(chosen) < len(read):
        logger.warning("pick_best: writing %d of the %d record(s) read into %s (the top %d per workload "
                       "and arch of %s)", len(chosen), len(read), out_log, top_k, left_out)
    saved = journal.replace_atomic(Path(out_log), serialise(chosen), backup=True)
    if saved is not None:
        logger.info("pick_best: the previous %s is kept as %s", out_log, saved)
    return len(chosen)


__all__ = ["BestLogChange", "merge_best", "pick_best"]
