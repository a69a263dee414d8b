"""The tuning log, one JSON record per line (JSONL), shaped like AutoTVM's records: the names
callers use, from the modules that hold them.

* ``record``: one record, its JSON line, whether it is current (its code and source hashes);
* ``origin``: the GPU, toolchain and versions a record names (its provenance), and the record of
  a measurement made here, stamped with them (``stamped``);
* ``logs``: where the logs are, appending, reading (a bad line costs only itself);
* ``selection``: the best record of a workload, the top configs per workload, compaction;
* ``merge``: folding a run's bests into a best log;
* ``summary``: what some logs hold (``tc-records``);
* ``restamp``: checking unverified records against today's code (``tc-records --restamp``).

Code that imports this module keeps working; new code may import the one it needs (a
shallower import chain).  None of them imports tvm, so reading logs stays fast.
"""

from __future__ import annotations

from .compare import faster, noise_margin
from .logs import (BAD_LINE_WARNINGS, LOG_SUFFIXES, SHIPPED_LOGS, append, load, log_files, packaged_logs_dir,
                   records_of, shipped_log_files, shipped_logs_dir, stat_log_files)
from .merge import BestLogChange, merge_best, pick_best
from .origin import make_provenance, stamped, tc_autotune_version
from .record import (FRESH, LEGACY_SOURCE_HASHES, LEGACY_VERSIONS, RECORD_VERSION, RETIME_MSG, STALE,
                     UNVERIFIED, Record, inferred_timer, target_arch, tvm_version)
from .restamp import RestampReport, restamp
from . import selection
from .selection import Verify, best_records, identity, unique
from .summary import LogSummary, summarize, summary_table
from ..workloads.names import get as get_workload


# The selection works on Records and workloads; these take log paths too (anything ``load``
# takes) and a workload's preset or spec, as callers of this module always could.
def best_record(logs, workload, target=None, include_stale: bool = False, verify: Verify | None = None):
    """``selection.best_record`` of ``logs`` (log paths or Records)."""
    return selection.best_record(records_of(logs), get_workload(workload), target, include_stale, verify)


def load_best(logs, workload, target=None, include_stale: bool = False, verify: Verify | None = None):
    """``selection.load_best`` of ``logs`` (log paths or Records)."""
    return selection.load_best(records_of(logs), get_workload(workload), target, include_stale, verify)


def measured_indices(records, workload, gpu=None) -> set[int]:
    """``selection.measured_indices`` of ``records`` (log paths or Records)."""
    return selection.measured_indices(records_of(records), get_workload(workload), gpu)


__all__ = [
    "RECORD_VERSION", "LEGACY_VERSIONS", "LEGACY_SOURCE_HASHES", "FRESH", "UNVERIFIED", "STALE",
    "RETIME_MSG", "Record", "append", "load", "log_files", "stat_log_files", "load_best", "best_record",
    "faster", "noise_margin", "inferred_timer", "identity", "unique", "best_records", "pick_best", "merge_best",
    "BestLogChange", "measured_indices", "summarize", "summary_table", "LogSummary", "restamp", "RestampReport",
    "make_provenance", "stamped", "target_arch", "tvm_version", "tc_autotune_version", "BAD_LINE_WARNINGS", "LOG_SUFFIXES",
    "SHIPPED_LOGS", "packaged_logs_dir", "shipped_logs_dir", "shipped_log_files",
]
