"""Choosing among records: the best config of a workload, the top configs of each workload and
arch (what compacted logs keep), and the configs already measured.

Records are compared like with like (``compare``: the same timer, beyond the noise of the two),
and only current ones count unless stale ones are asked for.  A record that is current but
unverified (its template's sources changed since it was stamped) counts too; a caller that is
about to generate the config's code anyway (a build) passes ``verify`` and a record whose code
changed is skipped there, with one log line, for the next best.  A workload is one already
made (a ``Conv2dWorkload``, a ``DenseWorkload``): names are read above (``records.load_best``
takes a preset or a spec too).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Iterable

from . import journal
from .compare import contenders_of, fastest, ranked, winner
from .record import UNVERIFIED, Record, target_arch
from ..backends.cuda.gpu import gpu_for_arch

logger = logging.getLogger("tc_autotune.database.records")

# (record, config) -> whether the code its config generates today is the code it timed
Verify = Callable[[Record, object], bool]
_CHANGED_SAID: set[tuple] = set()  # records whose changed code this process has logged


def best_record(logs, workload, target=None, include_stale: bool = False,
                verify: Verify | None = None) -> tuple[object, Record] | None:
    """``(config, Record)`` of the best successful record for ``workload``, or None; see
    ``load_best``.  The Record is the chosen config's fastest (its ``timer`` says by what)."""
    want_arch = None
    if target is not None:
        want_arch = target_arch(target)
        if want_arch is None:
            raise ValueError(f"cannot tell the CUDA arch (sm_XX) of target {str(target)!r}")
    stale = 0

    def wanted(record: Record) -> bool:
        nonlocal stale
        if record.workload != workload or not record.ok:
            return False
        if want_arch is not None and record.arch != want_arch:
            return False
        if record.stale and not include_stale:
            stale += 1
            return False
        return True

    contenders = contenders_of(r for r in unique(logs) if wanted(r))  # a copy found changed: all are
    best = None
    skipped, first_reason = 0, ""
    while contenders and best is None:
        record = fastest(contenders.pop(winner(contenders)))
        try:
            config = record.task.space(workload, gpu_for_arch(record.arch or "sm_90")).from_entity(record.config)
        except ValueError as err:
            skipped += 1
            first_reason = first_reason or str(err)
            continue
        if verify is not None and record.freshness == UNVERIFIED and not verify(record, config):
            _say_changed(record)
            continue
        best = (config, record)
    if skipped:
        logger.warning("skipped %d record(s) of %s whose config is outside the current space "
                       "(first: %s)", skipped, workload, first_reason)
    if stale:
        logger.info("skipped %d stale record(s) of %s (their code changed, or nothing can check it)",
                    stale, workload)
    return best


def _say_changed(record: Record) -> None:
    """One warning per record and process: the code of its config changed since it was timed."""
    key = identity(record)
    if key not in _CHANGED_SAID:
        _CHANGED_SAID.add(key)
        logger.warning("skipped the %.4f ms record of %s (config %s, %s): the code its config generates "
                       "changed since it was timed, so it is stale (`tc-records --restamp` marks it); "
                       "trying the next best", record.seconds * 1e3, record.workload,
                       record.config.get("index"), record.gpu or record.arch)


def load_best(logs, workload, target=None, include_stale: bool = False, verify: Verify | None = None):
    """``(Conv2dConfig, seconds)`` of the best successful record for ``workload``, or None.

    ``logs`` is an iterable of Records (``records.load_best`` also takes log paths).  ``target``
    narrows to one arch: None (any), "sm_90", "cuda -arch=sm_90" or a tvm Target.
    Stale records (code changed, or uncheckable) are skipped unless ``include_stale``; with
    ``verify``, so are unverified records whose code it finds changed.
    Configs are compared like with like (``winner``: the same timer, beyond the noise).
    Records whose config no longer fits the space are skipped with a warning, so
    a stale log cannot hand the builder an unbuildable config.
    """
    found = best_record(logs, workload, target, include_stale, verify)
    return None if found is None else (found[0], found[1].seconds)


def identity(record: Record) -> tuple:
    """What makes two records the same measurement (read twice from two logs)."""
    r = record.result
    return (record.target, record.workload, record.config.get("index"), r.costs,
            int(r.error_no), r.timestamp, r.timer)


def unique(records: Iterable[Record]) -> list[Record]:
    """One record per measurement (the same one read from two logs: a best log repeats its
    history's lines), in first-read order.  Where the copies disagree, a stale copy wins: the
    check that found its code changed holds for every copy, though a restamp rewrote only one log."""
    kept: dict[tuple, Record] = {}
    for record in records:
        ident = identity(record)
        if ident not in kept or (record.stale and not kept[ident].stale):
            kept[ident] = record
    return list(kept.values())


def best_records(records: Iterable[Record], top_k: int = 1,
                 include_stale: bool = False) -> dict[tuple, list[Record]]:
    """``{(workload, arch): records of the top_k best configs}``, best config first, each
    config's fastest record under each timer it was measured by (``ranked``).

    Stale records count only with ``include_stale``.  Exact duplicates (the same
    measurement read twice, e.g. a best-log inside the log directory) count once so
    they cannot crowd out the runner-up.
    """
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    groups: dict[tuple, list[Record]] = {}
    for record in unique(records):
        if record.ok and (include_stale or not record.stale):
            groups.setdefault((record.workload, record.arch), []).append(record)
    return {key: [r for config in ranked(contenders_of(group), top_k) for r in config]
            for key, group in groups.items()}


def measured_indices(records: Iterable[Record], workload, gpu=None) -> set[int]:
    """Config indices already measured (with any outcome) for ``workload`` on ``gpu``.

    Lets a resumed tuner skip what it has tried, failures included (they would
    fail again).  ``gpu`` is a GPU name or a ``GpuInfo``; None matches any GPU.
    """
    gpu_name = getattr(gpu, "name", gpu)
    return {
        r.config["index"]
        for r in records
        if r.workload == workload and (gpu_name is None or r.gpu == gpu_name)
    }


__all__ = ["best_record", "load_best", "identity", "best_records", "measured_indices"]
