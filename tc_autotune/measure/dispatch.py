"""Keeping every device busy: built kernels go to whichever runner is free, one at a time each.

One thread per runner pulls jobs from a shared queue and calls the runner's ``run``; results
come back through each job's ``done`` callback, tagged with the runner's ``label`` (the device
it measured on).  Jobs run in order of their ``priority`` (lowest first: the measurer gives an
earlier batch's candidates precedence over those of the batch built ahead of it), then of
submission; a cancelled job still queued is not run (its ``done`` gets "cancelled").  Faults are
the runner's, not the candidate's:

- ``run`` raising ``RunnerFault`` (it could not start, lost its GPU or its RPC connection): the
  job goes back to the queue and the runner is stopped (it restarts on its next job); after
  ``max_faults`` faults in a row it is dropped with a warning.
- ``run`` not returning within ``hang_timeout`` (``check_hung``, called by the measurer's loop):
  the job goes back to the queue and the runner is dropped (its thread is abandoned).
- A job requeued more than ``max_requeues`` times is reported as a run error (a candidate that
  takes every device down must not take the whole run with it).

When no runner is left, ``alive`` is 0 and the measurer raises ``AllDevicesLost``.  No TVM here.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger(__name__)


class RunnerFault(RuntimeError):
    """The runner itself failed (not the candidate): the candidate goes back to the queue."""


class AllDevicesLost(RuntimeError):
    """Every runner died, hung or was dropped.  ``results`` holds what finished (None elsewhere),
    so the caller can still record it."""

    def __init__(self, message: str, results: list | None = None):
        super().__init__(message)
        self.results = results or []


@dataclass
class _Job:
    args: tuple
    done: Callable[[str, object, str], None]  # (status, payload, device label)
    priority: int = 0
    requeues: int = 0
    cancelled: bool = False

    def cancel(self) -> None:
        """Do not run it if it is still queued (a run already started finishes)."""
        self.cancelled = True


@dataclass
class _Slot:
    runner: object
    label: str
    faults: int = 0  # in a row
    job: _Job | None = None
    started: float = 0.0
    dropped: bool = False
    thread: threading.Thread | None = field(default=None, repr=False)


def runner_label(runner) -> str:
    """What a record says it was measured on: the runner's ``label``, else its GPU's name."""
    label = getattr(runner, "label", None)
    if label:
        return str(label)
    device = getattr(runner, "device", None)
    return getattr(device, "name", None) or type(runner).__name__


class Dispatcher:
    """Runs ``runner.run(*args)`` jobs on a set of runners, each runner one job at a time."""

    def __init__(self, runners, hang_timeout: float, max_faults: int = 2, max_requeues: int = 2):
        if not runners:
            raise ValueError("no runner to measure on")
        self.hang_timeout, self.max_faults, self.max_requeues = hang_timeout, max_faults, max_requeues
        self._jobs: queue.PriorityQueue = queue.PriorityQueue()  # (priority, submission, job)
        self._submitted = itertools.count()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.slots = [_Slot(r, runner_label(r)) for r in runners]
        for slot in self.slots:
            slot.thread = threading.Thread(target=self._serve, args=(slot,), daemon=True,
                                           name=f"runner {slot.label}")
            slot.thread.start()

    @property
    def alive(self) -> int:
        return sum(not s.dropped for s in self.slots)

    @property
    def runners(self) -> list:
        return [s.runner for s in self.slots if not s.dropped]

    def submit(self, args: tuple, done: Callable[[str, object, str], None], priority: int = 0) -> _Job:
        """Queue ``runner.run(*args)``; ``done(status, payload, label)`` is called once, from a
        runner thread, with its result.  Returns the job (``cancel()`` it to skip it)."""
        job = _Job(tuple(args), done, priority)
        self._put(job)
        return job

    def _put(self, job: _Job) -> None:
        self._jobs.put((job.priority, next(self._submitted), job))

    def _serve(self, slot: _Slot) -> None:
        while not self._closed.is_set() and not slot.dropped:
            try:
                _, _, job = self._jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            if job.cancelled:
                job.done("cancelled", None, slot.label)
                continue
            with self._lock:
                if slot.dropped:
                    self._put(job)
                    return
                slot.job, slot.started = job, time.monotonic()
            try:
                status, payload = slot.runner.run(*job.args)
            except RunnerFault as err:
                with self._lock:
                    if slot.job is not job:  # declared hung meanwhile: the job was requeued
                        return
                    slot.job = None
                    slot.faults += 1
                    drop = slot.faults >= self.max_faults
                    if drop:
                        slot.dropped = True
                log.warning("runner %s failed (%s); its candidate goes back to the queue%s", slot.label, err,
                            f"; dropped after {slot.faults} faults in a row" if drop else "; restarting it")
                _stop_quietly(slot.runner)
                self._requeue(job, slot.label)
                if drop:
                    self._warn_if_none_left()
                    return
                continue
            except Exception as err:  # a bug in a runner: the candidate's result, the runner goes on
                status, payload = "error", f"{type(err).__name__}: {err}"
            with self._lock:
                if slot.job is not job:  # declared hung: its result no longer counts
                    return
                slot.job, slot.faults = None, 0
            job.done(status, payload, slot.label)

    def _requeue(self, job: _Job, label: str) -> None:
        job.requeues += 1
        if job.requeues > self.max_requeues:
            job.done("error", f"the runner failed while measuring it {job.requeues} times (last: {label})",
                     label)
        else:
            self._put(job)

    def check_hung(self) -> None:
        """Drop every runner whose current job has run past ``hang_timeout``; requeue the job."""
        now = time.monotonic()
        for slot in self.slots:
            with self._lock:
                job = slot.job
                if slot.dropped or job is None or now - slot.started <= self.hang_timeout:
                    continue
                slot.job, slot.dropped = None, True
            log.warning("runner %s hung (no result in %.0f s): dropped; its candidate goes back to the queue",
                        slot.label, now - slot.started)
            threading.Thread(target=_stop_quietly, args=(slot.runner,), daemon=True).start()
            self._requeue(job, slot.label)
            self._warn_if_none_left()

    def _warn_if_none_left(self) -> None:
        if not self.alive:
            log.error("every runner is lost: %s", ", ".join(s.label for s in self.slots))

    def close(self) -> None:
        self._closed.set()
        for slot in self.slots:
            if slot.thread is not None and slot.job is None:
                slot.thread.join(1)
            _stop_quietly(slot.runner)


def _stop_quietly(runner) -> None:
    try:
        runner.stop()
    except Exception as err:  # stopping a broken runner must not take the dispatcher down
        log.debug("stopping runner %s: %s", runner_label(runner), err)
