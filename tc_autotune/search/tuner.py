"""Tuners: choose which configs to measure next, measure them, keep the best.

``Tuner.tune`` owns the loop (batches, trial budget, early stopping, callbacks);
subclasses only say which configs come next: ``RandomTuner`` and ``GridTuner`` here,
``XGBTuner`` in ``xgb_tuner`` (with ``make_tuner``: every tuner by name).  With a streaming
measurer (``submit``, ``collect``, ``cancel``) the loop keeps one batch in flight ahead: batch i+1 is proposed
(from the model as of batch i-1) and submitted before batch i is collected, so it builds
while batch i runs; configs in flight are never proposed again.  ``XGBTuner`` (the default) fits a
cost model on everything measured so far -- plus records of other workloads, for
transfer learning -- and picks the next batch by simulated annealing on the
model's predictions.  Nothing here imports TVM: measuring is the caller's
``measure`` callable.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import Any

import numpy as np

from ..core import tasks
from ..core.config_space import ConfigSpace, positions_from_indices, valid_mask
from ..core.results import MeasureResult

_log = logging.getLogger(__name__)
Config = Any  # a config of the space's template (``space.template.config_type``)
_CHUNK = 1 << 16  # configs decoded and pre-filtered at once
_DRAW_ROUNDS = 24  # random draws of up to _CHUNK configs before giving up on more picks
_SCAN_LIMIT = _CHUNK  # spaces up to one draw's size may be listed whole; larger ones (the real
# ones have ~1G configs) are only ever sampled



class Tuner:
    """Base tuner: the measure loop, the history, the best so far.

    Subclasses implement ``next_batch(n)``: up to ``n`` valid configs that are neither
    measured nor in the history (fewer, or none, once the space is exhausted).
    """

    def __init__(self, space: ConfigSpace, seed: int | None = None):
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.history: list[tuple[Config, MeasureResult]] = []
        self.best_config: Config | None = None
        self.best_cost = math.inf
        self.trials = 0
        self.other_records = 0  # records of other workloads or GPUs seen by load_history
        self.started_at: float | None = None  # time.monotonic() when tune() began
        self._measured: set[int] = set()  # indices in the history
        self._invalid: set[int] = set()  # passed the vectorised pre-filter, rejected by the space
        self._trials_at_best = 0
        self._all_valid: np.ndarray | None = None
        self._first: list[Config] = []  # must be measured before anything the search picks
        self._reserved: set[int] = set()  # indices of this batch's queued configs: not to be picked
        self._in_flight: set[int] = set()  # indices submitted and not measured yet: not to be picked

    @property
    def workload(self):
        return self.space.workload

    @property
    def best_flops(self) -> float:
        """FLOP/s of the best config (0 before any successful measurement)."""
        return self.workload.flops / self.best_cost if self.best_cost < math.inf else 0.0

    def best(self) -> tuple[Config, float] | None:
        return None if self.best_config is None else (self.best_config, self.best_cost)

    # ---- the loop ---------------------------------------------------------------
    def measure_first(self, configs) -> list[Config]:
        """Queue configs that the next batches start with, e.g. the default config and
        what apply would pick today, so the tuned best can never lose to them.  None,
        repeats, invalid and already measured configs are dropped; returns the queue."""
        queued = {self.space.index(c) for c in self._first}
        for config in configs:
            if config is None or not self.space.is_valid(config):
                continue
            i = self.space.index(config)
            if i not in self._measured and i not in queued:
                queued.add(i)
                self._first.append(config)
        return list(self._first)

    def tune(self, n_trial: int, measure, batch_size: int = 16, early_stopping: int | None = None,
             callbacks=()) -> tuple[Config, float] | None:
        """Measure up to ``n_trial`` new configs; return the best (config, seconds) or None.

        ``measure(configs) -> results``, or a stream with ``submit(configs) -> handle``,
        ``collect(handle) -> results`` and ``cancel(handle) -> results so far (None where not
        finished)``: then one batch more is kept in flight (see the module doc).  Stops when
        the space has no unmeasured valid config left, after ``early_stopping`` trials that did
        not improve the best, or when a callback ``cb(tuner, configs, results)`` returns True
        (e.g. a wall-clock deadline).  Batches are sized so that the trials measured and in
        flight never pass ``n_trial`` or the early-stopping allowance.  On a stop, an error or
        an interrupt the batches in flight are cancelled; what they finished joins the history.
        """
        self.trials = 0
        self._trials_at_best = 0
        self.started_at = time.monotonic()
        stream = measure if hasattr(measure, "submit") else _OneAtATime(measure)
        depth = getattr(stream, "depth", 2)  # a stream: one batch in flight ahead
        flight: deque = deque()  # (configs, handle), oldest first
        stopped = False
        try:
            while True:
                while len(flight) < depth:
                    configs = self._propose(n_trial, batch_size, early_stopping)
                    if not configs:
                        break
                    flight.append((configs, stream.submit(configs)))
                    self._in_flight.update(self.space.index(c) for c in configs)
                if not flight:
                    self._log_end(n_trial, early_stopping)
                    break
                configs, handle = flight[0]
                results = list(stream.collect(handle))
                flight.popleft()
                self._in_flight.difference_update(self.space.index(c) for c in configs)
                if len(results) != len(configs):
                    raise ValueError(f"measure returned {len(results)} results for {len(configs)} configs")
                self.update(configs, results)
                stop = [callback(self, configs, results) is True for callback in callbacks]
                if any(stop):
                    stopped = True
                    break
        finally:
            self._cancel(stream, flight, log=stopped)
        return self.best()

    def _propose(self, n_trial: int, batch_size: int, early_stopping: int | None) -> list[Config]:
        """The next batch: queued first configs, then the search's picks; as many as the trial
        budget and the early-stopping allowance leave once everything in flight is counted
        (as if none of it improved the best)."""
        n = min(batch_size, n_trial - self.trials - len(self._in_flight))
        if early_stopping is not None:
            n = min(n, early_stopping - (self.trials - self._trials_at_best) - len(self._in_flight))
        if n <= 0:
            return []
        first, self._first = self._first[:n], self._first[n:]
        self._reserved = {self.space.index(c) for c in first}
        picks = self.next_batch(n - len(first)) if len(first) < n else []
        self._reserved = set()
        return self._checked(first + picks)[:n]

    def _log_end(self, n_trial: int, early_stopping: int | None) -> None:
        if self.trials >= n_trial:
            return
        if early_stopping is not None and self.trials - self._trials_at_best >= early_stopping:
            _log.info("%s: early stop, no improvement in %d trials", self.workload, early_stopping)
        else:
            _log.info("%s: no unmeasured valid config left", self.workload)

    def _cancel(self, stream, flight, log: bool) -> None:
        """Cancel the batches still in flight (after a stop, an error or an interrupt); what
        they finished counts (the stream recorded it)."""
        for configs, handle in flight:
            finished = [(c, r) for c, r in zip(configs, stream.cancel(handle)) if r is not None]
            if finished:
                self.update(*map(list, zip(*finished)))
            if log:
                _log.info("%s: stopped with %d configs in flight: %d measured, %d cancelled", self.workload,
                          len(configs), len(finished), len(configs) - len(finished))
        flight.clear()
        self._in_flight.clear()

    def _checked(self, configs: list[Config]) -> list[Config]:
        """Safety net for the next_batch contract: drop repeats and invalid configs."""
        out, seen = [], set()
        for config in configs:
            i = self.space.index(config)
            if i in self._measured or i in self._in_flight or i in seen or not self.space.is_valid(config):
                _log.warning("%s: dropping a repeated or invalid pick (index %d)", type(self).__name__, i)
                continue
            seen.add(i)
            out.append(config)
        return out

    def next_batch(self, n: int) -> list[Config]:
        raise NotImplementedError

    def update(self, configs: list[Config], results: list[MeasureResult]) -> None:
        """Take the results of measured configs into the history (counted as trials)."""
        for config, result in zip(configs, results):
            self.trials += 1
            if self._record(config, result):
                self._trials_at_best = self.trials

    def _record(self, config: Config, result: MeasureResult) -> bool:
        """Add to the history; True when it improves the best."""
        self.history.append((config, result))
        self._measured.add(self.space.index(config))
        if result.ok and result.seconds < self.best_cost:
            self.best_config, self.best_cost = config, result.seconds
            return True
        return False

    # ---- earlier measurements ----------------------------------------------------
    def load_history(self, records) -> int:
        """Take records (``.workload``, ``.config`` entity dict, ``.result``, ``.gpu``,
        ``.stale``) of the log being resumed.

        Current-version records of this workload measured on this GPU join the history:
        never re-measured, and the best counts.  "This GPU" is the GPU's name; a record
        without one (older logs, bare records) is taken by arch.  Everything else (other
        workloads, this workload on other GPUs, stale records made by another template
        version) goes to ``_add_transfer`` (used by model-based tuners) and is counted in
        ``other_records``.  Returns how many joined the history.
        """
        added = 0
        for record in records:
            parsed = self._parse(record)
            if parsed is None:
                continue
            workload, source, index = parsed
            if (workload == self.workload and source in (self.space.gpu.name, self.space.gpu.arch, None)
                    and not getattr(record, "stale", False)):
                config = self.space.get(index)
                if not _entity_matches(record.config, config):
                    continue  # logged with another knob table: the index means another config
                self._record(config, record.result)
                added += 1
            else:
                self._add_transfer(workload, _group_source(record, source), index, record.result)
                self.other_records += 1
        return added

    def load_transfer(self, records) -> int:
        """Take records of other logs (e.g. the shipped histories) as training data only:
        even this workload's on this GPU are measured again if picked, so the best of a
        tuning log is always one of its own records.  Returns how many were taken."""
        taken = 0
        for record in records:
            parsed = self._parse(record)
            if parsed is not None:
                workload, source, index = parsed
                self._add_transfer(workload, _group_source(record, source), index, record.result)
                taken += 1
        self.other_records += taken
        return taken

    def _parse(self, record) -> tuple | None:
        """(workload, source GPU, index) of a record whose task's template is this space's (a
        record of another template indexes another knob table) and whose index fits the space."""
        try:
            workload, index = record.workload, int(record.config["index"])
            template = tasks.of(workload).template
        except (AttributeError, KeyError, TypeError, ValueError):
            return None
        # every workload's space of one template has the same knob table
        if template is not self.space.template or not 0 <= index < len(self.space):
            return None
        return workload, _measured_on(record), index

    def _add_transfer(self, workload, source, index: int, result: MeasureResult) -> None:
        """A record of another workload or GPU; plain tuners have no use for it."""

    # ---- shared pickers ----------------------------------------------------------
    def _free(self, i: int, taken: set[int]) -> bool:
        return (i not in self._measured and i not in taken and i not in self._invalid
                and i not in self._reserved and i not in self._in_flight)

    def _confirm(self, i: int) -> Config | None:
        """The config at index ``i`` if the space says it is valid (the pre-filter is only a hint)."""
        config = self.space.get(i)
        if self.space.is_valid(config):
            return config
        self._invalid.add(i)
        return None

    def _random_configs(self, n: int, taken: set[int] | None = None) -> list[Config]:
        """Up to ``n`` distinct valid unmeasured configs drawn uniformly (not in ``taken``)."""
        taken = set() if taken is None else taken
        picks: list[Config] = []
        size = max(4 * n, 64)
        for _ in range(_DRAW_ROUNDS):  # rejection sampling, in growing draws: workloads whose
            need = n - len(picks)      # valid fraction is tiny (3 input channels: vec_a=1) need many
            if need <= 0:
                return picks
            draw = self.space.drawn(self.rng.integers(0, self.space.draw_bound, size=size))
            draw = draw[valid_mask(self.space, positions_from_indices(self.space, draw))]
            picks += self._take(draw, need, taken)
            size = min(2 * size, _CHUNK)
        if len(picks) < n and len(self.space) <= _SCAN_LIMIT:  # small, nearly exhausted space:
            rest = self._valid_indices()                       # the remaining valid configs
            rest = rest[~np.isin(rest, np.fromiter(self._measured | self._in_flight | taken | self._invalid,
                                                   np.int64))]
            picks += self._take(self.rng.permutation(rest), n - len(picks), taken)
        return picks

    def _take(self, indices, n: int, taken: set[int]) -> list[Config]:
        """The first ``n`` free, confirmed-valid configs of ``indices``; marks them taken."""
        out = []
        for i in map(int, indices):
            if len(out) == n:
                break
            if self._free(i, taken) and (config := self._confirm(i)) is not None:
                taken.add(i)
                out.append(config)
        return out

    def _valid_indices(self) -> np.ndarray:
        """Every index that passes the pre-filter (computed once; only for spaces of at most
        ``_SCAN_LIMIT`` configs: one draw's work)."""
        if self._all_valid is None:
            parts = []
            for start in range(0, len(self.space), _CHUNK):
                idx = np.arange(start, min(start + _CHUNK, len(self.space)), dtype=np.int64)
                parts.append(idx[valid_mask(self.space, positions_from_indices(self.space, idx))])
            self._all_valid = np.concatenate(parts)
        return self._all_valid


class _OneAtATime:
    """A plain ``measure(configs)`` as a stream with nothing in flight ahead: each batch is
    measured when it is collected."""

    depth = 1

    def __init__(self, measure):
        self.measure = measure

    def submit(self, configs):
        return configs

    def collect(self, configs):
        return self.measure(configs)

    def cancel(self, configs):
        return [None] * len(configs)


def _measured_on(record) -> str | None:
    """The GPU a record was measured on: its name, else its arch ("sm_90"), else None."""
    gpu = getattr(record, "gpu", None)
    if isinstance(gpu, str) and gpu:
        return gpu
    arch = getattr(record, "arch", None)
    return arch if isinstance(arch, str) and arch.startswith("sm_") else None


def _group_source(record, source):
    """The ranking group of a transfer record: its GPU, and whether it is stale (times of
    another generator version are only compared with each other)."""
    return (source, bool(getattr(record, "stale", False)))


def _entity_matches(entity: dict, config: Config) -> bool:
    try:
        values = {name: value for name, _kind, value in entity.get("entity", ())}
    except (TypeError, ValueError):
        return False
    return all(getattr(config, k) == v for k, v in values.items() if hasattr(config, k))


class RandomTuner(Tuner):
    """Uniformly random valid unmeasured configs: the baseline every tuner must beat."""

    def next_batch(self, n: int) -> list[Config]:
        return self._random_configs(n)


class GridTuner(Tuner):
    """Valid configs in index order (exhaustive on small spaces, reproducible anywhere)."""

    def __init__(self, space: ConfigSpace, seed: int | None = None):
        super().__init__(space, seed)
        self._cursor = 0

    def next_batch(self, n: int) -> list[Config]:
        picks: list[Config] = []
        taken: set[int] = set()
        while len(picks) < n and self._cursor < len(self.space):
            idx = np.arange(self._cursor, min(self._cursor + _CHUNK, len(self.space)), dtype=np.int64)
            idx = idx[valid_mask(self.space, positions_from_indices(self.space, idx))]
            got = self._take(idx, n - len(picks), taken)
            picks += got
            if len(picks) < n or not got:
                self._cursor = min(self._cursor + _CHUNK, len(self.space))
            else:  # stop right after the last pick; measured ones are skipped next time anyway
                self._cursor = self.space.index(got[-1]) + 1
        return picks
