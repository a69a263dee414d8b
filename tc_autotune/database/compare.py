"""Comparing timings like with like: which of two configs is faster, and by what figures.

Records of one config may come from several timers (``results.TIMERS``): today's one timer
(``cuda_timer``, ``backends.cuda.timer``) and the two before it, the tuner's TVM time_evaluator
and nightly's PyTorch CUDA-graph re-times, 1.1-2.6 us a call apart.  Two configs are compared
only by a timer that measured both, and a figure displaces a best only when it is faster by
more than the noise of the two records (their repeats' spread, else a fixed 2%): a figure is
never "faster" than another for coming from a timer without launch costs, and a best is not
replaced by a figure within its own noise.  (A best only older timers measured is re-timed by
today's in nightly's re-time pass, so that new tunes can displace it.)

Works on anything with ``timer``, ``seconds``, ``arch``, ``config`` and ``result.costs``
(``records.Record``); selection itself is ``records``'.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..core.results import CUDA_GRAPH, CUDA_TIMER, TIME_EVALUATOR

# Noise margins of ``faster``: the spread of a record's own repeats where both records have
# several (``_spread``), at least MIN_MARGIN (repeats of one process miss run-to-run drift:
# clocks, temperature) and at most MAX_MARGIN (one wild repeat must not make a best
# unbeatable); FIXED_MARGIN where a record has too few repeats to tell (nightly's re-times
# store one median).
FIXED_MARGIN = 0.02
MIN_MARGIN = 0.005
MAX_MARGIN = 0.2

# The timer whose figures decide when two configs have both: today's (the one timer, graph
# replays without per-launch host cost, which is no part of the kernel), then nightly's graph
# re-times of before (a best beside the default in one process on the same inputs), then
# time_evaluator's.
_TIMER_PREFERENCE = (CUDA_TIMER, CUDA_GRAPH, TIME_EVALUATOR)

Contenders = dict  # {config key: {timer: the config's fastest record under that timer}}


def _spread(record) -> float | None:
    """Relative spread of a record's repeats (the fastest and slowest dropped from 5 or more),
    or None with fewer than 3 repeats."""
    costs = sorted(record.result.costs)
    if len(costs) < 3:
        return None
    if len(costs) >= 5:
        costs = costs[1:-1]
    return (costs[-1] - costs[0]) / costs[len(costs) // 2]


def noise_margin(a, b) -> float:
    """By how much (relative) one of ``a`` and ``b`` must beat the other to count as faster."""
    spreads = [_spread(a), _spread(b)]
    if None in spreads:
        return FIXED_MARGIN
    return min(MAX_MARGIN, max(MIN_MARGIN, *spreads))


def faster(new, old) -> bool:
    """Whether ``new`` beats ``old`` like with like: the same timer, by more than the noise."""
    return new.timer == old.timer and new.seconds < old.seconds * (1 - noise_margin(new, old))


def config_key(record) -> tuple:
    """A config's identity in selection: its arch and knob values (indices change meaning
    when candidate lists do; values do not).  A knob the record predates counts as the value
    its template says it implies (``knob_defaults``): a best log's holder written before a knob
    existed is the same config as today's measurement of it, so that measurement (a tuner's
    first batch, nightly's re-time) compares it like with like with tonight's configs."""
    values = dict(_implied_knobs(record))
    values.update((name, value) for name, _kind, value in record.config["entity"])
    return record.arch, tuple(sorted(values.items()))


def _implied_knobs(record) -> Mapping:
    """The values of knobs a record may lack, from its task's template; none for an object
    without a task (compare works on anything record-shaped)."""
    task = getattr(record, "task", None)
    return {} if task is None else task.template.knob_defaults


def contenders_of(records: Iterable) -> Contenders:
    """Each config of ``records`` (``config_key``) with its fastest record under each timer."""
    out: Contenders = {}
    for record in records:
        timers = out.setdefault(config_key(record), {})
        held = timers.get(record.timer)
        if held is None or record.seconds < held.seconds:
            timers[record.timer] = record
    return out


def like_pair(challenger: dict, incumbent: dict) -> tuple | None:
    """(challenger's, incumbent's record) under the timer that compares them, None if none does."""
    for timer in _TIMER_PREFERENCE:
        if timer in challenger and timer in incumbent:
            return challenger[timer], incumbent[timer]
    return None


def fastest(timers: dict):
    """The fastest of a config's records, whatever timed it."""
    return min(timers.values(), key=lambda r: r.seconds)


def winner(contenders: Contenders, incumbent=None):
    """The key of the best config: from ``incumbent`` (the fastest by any figure without one),
    each other config, fastest first, takes over only when it is ``faster`` like with like;
    two configs no timer measured both are not compared and the holder stays."""
    order = sorted(contenders, key=lambda key: fastest(contenders[key]).seconds)
    best = order[0] if incumbent is None else incumbent
    for key in order:
        pair = like_pair(contenders[key], contenders[best]) if key != best else None
        if pair and faster(*pair):
            best = key
    return best


def ranked(contenders: Contenders, top_k: int) -> list[list]:
    """The ``top_k`` best configs (``winner`` again over those left), each its fastest record
    under each timer, fastest first."""
    contenders, chosen = dict(contenders), []
    while contenders and len(chosen) < top_k:
        key = winner(contenders)
        chosen.append(sorted(contenders.pop(key).values(), key=lambda r: r.seconds))
    return chosen


__all__ = ["FIXED_MARGIN", "MIN_MARGIN", "MAX_MARGIN", "noise_margin", "faster", "config_key", "contenders_of",
           "like_pair", "fastest", "winner", "ranked"]
