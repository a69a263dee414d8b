"""One job entry per workload: names that resolve to the same shape are tuned once.

Presets overlap: ``rfc-1x1-b1`` is ``resnet50-res4-1x1-1024-256-b1`` and ``rfc-3x3-b1`` is
``resnet50-res4-3x3-256-256-b1`` (same workload, same records), so a job listing both names
tuned, re-timed and reported that shape twice a night.  ``unique_workloads`` keeps the first
name of each workload, with the most trials any of its names asked for (nothing is tuned less
than a line asked), and warns once per dropped name.  No TVM here (``jobs`` is read before
anything heavy is imported).
"""

from __future__ import annotations

import dataclasses
import warnings


class DuplicateWorkloadWarning(UserWarning):
    """A job file names one workload twice (under the same or another name)."""


def unique_workloads(entries: list, where) -> list:
    """``entries`` (``jobs.JobEntry``: ``workload``, ``name``, ``trials``) without repeated
    workloads, in first-seen order; ``where`` (the job file) names the source in the warning."""
    kept: dict = {}  # workload -> index in out
    out = []
    for entry in entries:
        first = kept.get(entry.workload)
        if first is None:
            kept[entry.workload] = len(out)
            out.append(entry)
            continue
        held = out[first]
        warnings.warn(DuplicateWorkloadWarning(
            f"job file {where}: {entry.name!r} is the same workload as {held.name!r} "
            f"({entry.workload}): tuned once, as {held.name!r}"), stacklevel=2)
        if entry.trials > held.trials:
            out[first] = dataclasses.replace(held, trials=entry.trials)
    return out
