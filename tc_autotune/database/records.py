"""The tuning log: one JSON record per line (JSONL), shaped like AutoTVM's records.

Why JSONL: a tuning run can be killed at any moment (OOM, a hung kernel, Ctrl-C),
so every measurement is appended and fsynced as soon as it is known, and a reader
must survive a half-written last line.  One self-contained line per measurement
makes both easy: appends never rewrite earlier data, and a corrupt line costs
only itself (it is skipped with a warning naming file and line).

A line looks like::

    {"input": ["cuda -arch=sm_90", "conv2d_nhwc_tensorcore.cuda", ["n=256,h=14,..."], {}],
     "config": {"index": 123, "entity": [["block_row_warps", "ot", 2], ...]},
     "result": [[1.2e-4, 1.3e-4], 0, 2.5, 1732240000.0],
     "error_msg": "", "version": 2, "template_version": 1, "tvm_version": "0.27.0",
     "provenance": {"gpu": "NVIDIA H100", "compute_capability": "9.0", "cuda": "12.4",
                    "tc_autotune": "0.1.0"},
     "timer": "time_evaluator"}

The config is stored by knob *value* as well as by index, so a log stays
readable when candidate lists change: ``load_best`` rebuilds the config from the
values and skips (with a warning) records that no longer fit the space.

``template_version`` names the kernel generator that made the timed kernel
(``generator.TEMPLATE_VERSION``); a record of another version, or of none (written
before versions existed), is *stale*: selection skips it unless asked to keep it.

``timer`` names what timed the costs (``results.TIMERS``): the tuner's TVM time_evaluator or
a CUDA graph's replay (nightly's re-times where PyTorch runs), which differ by microseconds a
call.  Selection compares records like with like (``faster``): a best is displaced only by a
figure of the same timer that is faster by more than the noise of the two.  A time faster
than the GPU can physically go (``peaks``) is a corrupt record and is skipped on reading.

Writers from several processes may share one log; the file handling (locking,
fencing torn lines, size caps, atomic replacement) is ``journal``'s.  This module
does not import tvm, so reading logs stays fast.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from .._version import __version__ as _package_version
from . import journal
from ..backends.cuda import peaks
from ..core import tasks
from .compare import contenders_of, fastest, like_pair, ranked, winner
from .compare import faster, noise_margin  # noqa: F401 (records' API)
from ..backends.cuda.gpu import gpu_for_arch
from ..core.results import CUDA_GRAPH, TIME_EVALUATOR, TIMERS, MeasureErrorNo, MeasureResult
from ..workloads.dense import DenseWorkload
from ..workloads.conv2d import Conv2dWorkload, display_name, get as get_workload

logger = logging.getLogger(__name__)

# 2: records carry template_version (1-readers skip them: they cannot tell stale ones)
RECORD_VERSION = 2
BAD_LINE_WARNINGS = 3  # per file; the rest are summarised in one line
TASK_NAME = tasks.CONV2D.name  # conv2d's; a record names its own workload's task
TEMPLATE_VERSION = tasks.CONV2D.template_version
LOG_SUFFIXES = (".jsonl", ".log")

_ARCH_RE = re.compile(r"sm_\d+")
_TARGET_ARCH_RE = re.compile(r"-arch=(sm_\d+)")

# Records written before they named their timer: the tuner's came from time_evaluator, and so
# did nightly's re-times ("nightly re-time") until ae773cb (2026-11-23 23:27:38 UTC) timed our
# kernels by CUDA graph replay where PyTorch runs, as the nightly machines had it (the H200's
# re-times of 23:48 that night were already graph-replayed).
RETIME_MSG = "nightly re-time"
_GRAPH_RETIMES_SINCE = 1795476458.0


# ---- versions and provenance ----------------------------------------------
@functools.lru_cache(maxsize=None)
def tvm_version() -> str:
    """The installed TVM version without importing tvm (slow); 'unknown' if not found."""
    for dist in ("apache-tvm", "tvm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


@functools.lru_cache(maxsize=None)
def tc_autotune_version() -> str:
    """This package's version (installed metadata, else ``tc_autotune.__version__``)."""
    try:
        return importlib.metadata.version("tc_autotune")
    except importlib.metadata.PackageNotFoundError:
        return str(_package_version)


def make_provenance(gpu=None, cuda: str | None = None) -> dict:
    """The provenance dict of a record: which GPU/toolchain produced the timing.

    ``gpu`` is a ``GpuInfo`` (or None); ``cuda`` the CUDA version string if known.
    Timings are only comparable on the same GPU, so this travels with every line.
    """
    return {
        "gpu": getattr(gpu, "name", None),
        "compute_capability": getattr(gpu, "compute_capability", None),
        "cuda": cuda,
        "tc_autotune": tc_autotune_version(),
    }


def target_arch(target) -> str | None:
    """The CUDA arch ("sm_90") named by an arch string, a target string or a tvm Target.

    A tvm Target's ``str`` is a JSON dict in TVM 0.27 (older: "cuda -arch=sm_90"),
    so the arch is found with a regex on whatever string form we get.
    """
    if target is None:
        return None
    match = _ARCH_RE.search(str(target))
    return match.group(0) if match else None


# ---- the record -------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """One measured config of one workload on one target: a line of the log."""

    target: str  # e.g. "cuda -arch=sm_90"
    workload: Conv2dWorkload | DenseWorkload  # its type names the task (``tasks.of``)
    config: dict  # entity form: {"index": i, "entity": [[knob, "ot", value], ...]}
    result: MeasureResult
    provenance: dict = field(default_factory=dict)
    # TVM that produced the timing; None means "the installed one" when written.
    # Metadata, not identity: left out of equality.
    tvm_version: str | None = field(default=None, compare=False)
    # The kernel generator's version (generator.TEMPLATE_VERSION); None: written before
    # versions existed.  Anything but the current version is stale.
    template_version: int | None = field(default=None, compare=False)

    @classmethod
    def from_measurement(cls, target, space, config, result: MeasureResult,
                         provenance: dict | None = None) -> "Record":
        """A record for ``config`` of ``space`` (a ConfigSpace), made by today's generator;
        ``target`` may be a tvm Target."""
        if not isinstance(target, str):
            arch = target_arch(target)
            target = f"cuda -arch={arch}" if arch else str(target)
        return cls(target, space.workload, space.to_entity(config), result,
                   dict(provenance) if provenance is not None else make_provenance(space.gpu),
                   template_version=tasks.of(space.workload).template_version)

    @property
    def task(self) -> tasks.Task:
        return tasks.of(self.workload)

    @property
    def stale(self) -> bool:
        """Measured on a kernel another generator version made: its time may not hold today."""
        return self.template_version != self.task.template_version

    @property
    def seconds(self) -> float:
        return self.result.seconds

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def timer(self) -> str:
        """What timed the costs: ``results.TIME_EVALUATOR`` or ``results.CUDA_GRAPH``."""
        return self.result.timer

    @property
    def gpu(self) -> str | None:
        return self.provenance.get("gpu")

    @property
    def arch(self) -> str | None:
        match = _TARGET_ARCH_RE.search(self.target)
        return match.group(1) if match else target_arch(self.target)

    @property
    def tflops(self) -> float:
        seconds = self.seconds
        if not self.ok or not math.isfinite(seconds) or seconds <= 0:
            return 0.0
        return self.workload.flops / seconds / 1e12

    # ---- JSON ---------------------------------------------------------------
    def to_json(self) -> str:
        """One line of JSON (no newline) in the AutoTVM-like log format."""
        r = self.result
        obj = {
            "input": [self.target, self.task.name, [str(self.workload)], {}],
            "config": self.config,
            "result": [list(r.costs), int(r.error_no), r.all_cost, r.timestamp],
            "error_msg": r.error_msg,
            "version": RECORD_VERSION,
            "tvm_version": self.tvm_version if self.tvm_version is not None else tvm_version(),
            "provenance": self.provenance,
            "timer": r.timer,
        }
        if self.template_version is not None:
            obj["template_version"] = self.template_version
        return json.dumps(obj, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, line: str) -> "Record":
        """Parse and validate one log line; ValueError says what is wrong with it.

        Nothing else escapes: a line nested too deep for the parser or holding a number too
        big for a float is as bad as garbage, and must cost only itself."""
        try:
            return cls._from_json(line)
        except (RecursionError, OverflowError) as err:
            raise ValueError(f"unreadable record ({type(err).__name__}: {err})") from None

    @classmethod
    def _from_json(cls, line: str) -> "Record":
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, TypeError) as err:
            raise ValueError(f"not valid JSON: {err}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in ("input", "config", "result", "version") if k not in obj]
        if missing:
            raise ValueError(f"missing field(s): {', '.join(missing)}")

        version = obj["version"]
        if not _is_int(version) or version < 1:
            raise ValueError(f"version must be a positive integer, got {version!r}")
        if version > RECORD_VERSION:
            raise ValueError(f"record version {version} is newer than this reader's {RECORD_VERSION}")
        template = obj.get("template_version")
        if template is not None and (not _is_int(template) or template < 1):
            raise ValueError(f"template_version must be a positive integer, got {template!r}")

        inp = obj["input"]
        if not (isinstance(inp, list) and len(inp) == 4):
            raise ValueError("input must be [target, task name, [workload spec], {}]")
        target, task, args, kwargs = inp
        if not isinstance(target, str) or not target:
            raise ValueError(f"target must be a non-empty string, got {target!r}")
        try:
            task = tasks.get(task)
        except (KeyError, TypeError):
            raise ValueError(f"wrong task name {task!r} (expected one of {', '.join(tasks.names())})") from None
        if not (isinstance(args, list) and len(args) == 1 and isinstance(args[0], str)):
            raise ValueError(f"task args must be [workload spec string], got {args!r}")
        if not isinstance(kwargs, dict):
            raise ValueError(f"task kwargs must be an object, got {kwargs!r}")
        try:
            workload = task.workload_type.parse(args[0])
        except ValueError as err:
            raise ValueError(f"bad workload spec {args[0]!r}: {err}") from None

        config = obj["config"]
        if not isinstance(config, dict) or "index" not in config or "entity" not in config:
            raise ValueError("config must be an object with 'index' and 'entity'")
        if not _is_int(config["index"]) or config["index"] < 0:
            raise ValueError(f"config index must be a non-negative integer, got {config['index']!r}")
        entity = config["entity"]
        if not isinstance(entity, list) or not all(
            isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) and isinstance(e[1], str)
            and (_is_int(e[2]) or isinstance(e[2], str))
            for e in entity
        ):
            raise ValueError("config entity must be a list of [knob, kind, integer or string value]")

        res = obj["result"]
        if not (isinstance(res, list) and len(res) == 4):
            raise ValueError("result must be [[costs...], error_no, all_cost, timestamp]")
        costs, error_no, all_cost, timestamp = res
        if not isinstance(costs, list) or not all(_is_number(c) for c in costs):
            raise ValueError(f"result costs must be a list of numbers, got {costs!r}")
        # A time of 0, below 0, NaN or inf is no measurement: as the best it would take over apply.
        if not all(math.isfinite(c) and c > 0 for c in costs):
            raise ValueError(f"result costs must be finite and positive seconds, got {costs!r}")
        if not _is_int(error_no):
            raise ValueError(f"error_no must be an integer, got {error_no!r}")
        try:
            error_no = MeasureErrorNo(error_no)
        except ValueError:
            raise ValueError(f"unknown error_no {error_no}") from None
        if error_no == MeasureErrorNo.NO_ERROR and not costs:
            raise ValueError("a successful result needs at least one cost")
        for name, value in (("all_cost", all_cost), ("timestamp", timestamp)):
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"result {name} must be a finite non-negative number, got {value!r}")
        error_msg = obj.get("error_msg", "")
        if not isinstance(error_msg, str):
            raise ValueError(f"error_msg must be a string, got {type(error_msg).__name__}")
        tvm_ver = obj.get("tvm_version")
        if tvm_ver is not None and not isinstance(tvm_ver, str):
            raise ValueError(f"tvm_version must be a string, got {tvm_ver!r}")
        provenance = obj.get("provenance", {})
        if not isinstance(provenance, dict):
            raise ValueError(f"provenance must be an object, got {type(provenance).__name__}")
        timer = obj.get("timer")
        if timer is None:
            timer = inferred_timer(error_msg, timestamp)
        elif timer not in TIMERS:
            raise ValueError(f"unknown timer {timer!r} (expected one of {', '.join(TIMERS)})")
        if error_no == MeasureErrorNo.NO_ERROR:  # a failed measurement's costs are never applied
            _check_physical(min(costs), workload, provenance.get("gpu"), target)

        result = MeasureResult(
            costs=tuple(float(c) for c in costs),
            error_no=error_no,
            error_msg=error_msg,
            all_cost=float(all_cost),
            timestamp=float(timestamp),
            timer=timer,
        )
        return cls(target, workload, config, result, provenance, tvm_ver, template)


def inferred_timer(error_msg: str, timestamp: float) -> str:
    """The timer of a record written before records named theirs (see _GRAPH_RETIMES_SINCE)."""
    if error_msg == RETIME_MSG and timestamp >= _GRAPH_RETIMES_SINCE:
        return CUDA_GRAPH
    return TIME_EVALUATOR


def _check_physical(seconds: float, workload, gpu, target: str) -> None:
    """ValueError when ``seconds`` is faster than the GPU can run ``workload`` (``peaks``)."""
    gpu = gpu if isinstance(gpu, str) else None
    match = _TARGET_ARCH_RE.search(target)
    arch = match.group(1) if match else target_arch(target)
    floor = peaks.floor_seconds(workload, gpu, arch)
    if seconds < floor:
        peak = peaks.peak_of(gpu, arch)
        raise ValueError(
            f"cost {seconds:.3g} s is physically impossible on {gpu or arch or 'an unknown GPU'}: "
            f"{workload.flops / seconds / 1e12:.3g} TFLOP/s, where even {peaks.MARGIN}x its peaks "
            f"({peak.tflops:g} TFLOP/s, {peak.tb_per_s:g} TB/s) need {floor:.3g} s")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---- writing ----------------------------------------------------------------
def append(path, records: Iterable[Record]) -> int:
    """Append ``records`` to the log at ``path``; returns how many were written.

    Safe with concurrent writers and with writers killed mid-append (see ``journal``):
    lines never interleave, a crash loses at most this call, and a torn line left by
    a dead writer is fenced off before these records are written.
    """
    return journal.append_lines(path, (r.to_json().encode("utf-8") for r in records), _is_whole_record)


def _is_whole_record(line: bytes) -> bool:
    try:
        Record.from_json(line.decode("utf-8"))
    except ValueError:
        return False
    return True


# ---- reading ----------------------------------------------------------------
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
            try:
                if raw is None:
                    raise ValueError(f"line longer than {journal.MAX_LINE_BYTES} bytes")
                record = Record.from_json(raw.decode("utf-8"))
            except ValueError as err:  # UnicodeDecodeError is a ValueError too
                if not complete:
                    logger.info("%s:%d: ignoring an unfinished last line", file, lineno)
                    continue
                bad.append(lineno)
                if len(bad) <= BAD_LINE_WARNINGS:
                    logger.warning("%s:%d: skipping bad record: %s", file, lineno, err)
                continue
            yield record
        if len(bad) > BAD_LINE_WARNINGS:
            more = bad[BAD_LINE_WARNINGS:]
            shown = ", ".join(map(str, more[:10])) + (", ..." if len(more) > 10 else "")
            logger.warning("%s: skipped %d more bad record(s) (lines %s)", file, len(more), shown)


def _records(logs) -> Iterable[Record]:
    """Records from log paths, or ``logs`` itself when it already holds Records."""
    if isinstance(logs, (str, os.PathLike)):
        return load(logs)
    if isinstance(logs, (list, tuple)) and logs and not isinstance(logs[0], Record):
        return load(logs)
    return logs


# ---- selection ----------------------------------------------------------------------
def best_record(logs, workload, target=None, include_stale: bool = False) -> tuple[object, Record] | None:
    """``(config, Record)`` of the best successful record for ``workload``, or None; see
    ``load_best``.  The Record is the chosen config's fastest (its ``timer`` says by what)."""
    workload = get_workload(workload)
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

    contenders = contenders_of(r for r in _records(logs) if wanted(r))
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
        best = (config, record)
    if skipped:
        logger.warning("skipped %d record(s) of %s whose config is outside the current space "
                       "(first: %s)", skipped, workload, first_reason)
    if stale:
        logger.info("skipped %d stale record(s) of %s (made by another template version than %d)",
                    stale, workload, tasks.of(workload).template_version)
    return best


def load_best(logs, workload, target=None, include_stale: bool = False):
    """``(Conv2dConfig, seconds)`` of the best successful record for ``workload``, or None.

    ``logs`` is anything ``load`` takes (or an iterable of Records).  ``target``
    narrows to one arch: None (any), "sm_90", "cuda -arch=sm_90" or a tvm Target.
    Stale records (another generator version) are skipped unless ``include_stale``.
    Configs are compared like with like (``winner``: the same timer, beyond the noise).
    Records whose config no longer fits the space are skipped with a warning, so
    a stale log cannot hand the builder an unbuildable config.
    """
    found = best_record(logs, workload, target, include_stale)
    return None if found is None else (found[0], found[1].seconds)


def identity(record: Record) -> tuple:
    """What makes two records the same measurement (read twice from two logs)."""
    r = record.result
    return (record.target, record.workload, record.config.get("index"), r.costs,
            int(r.error_no), r.timestamp)


def best_records(records: Iterable[Record], top_k: int = 1,
                 include_stale: bool = False) -> dict[tuple, list[Record]]:
    """``{(workload, arch): records of the top_k best configs}``, best config first, each
    config's fastest record under each timer it was measured by (``ranked``).

    Stale records count only with ``include_stale``.  Exact duplicates (the same
    measurement read twice, e.g. a best-log inside the log directory) count once so
    they cannot crowd out the runner-up.
    """
    if not _is_int(top_k) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    groups: dict[tuple, list[Record]] = {}
    seen: set[tuple] = set()
    for record in records:
        if not record.ok or (record.stale and not include_stale):
            continue
        ident = identity(record)
        if ident in seen:
            continue
        seen.add(ident)
        groups.setdefault((record.workload, record.arch), []).append(record)
    return {key: [r for config in ranked(contenders_of(group), top_k) for r in config]
            for key, group in groups.items()}


def _serialise(chosen: list[Record]) -> bytes:
    chosen = sorted(chosen, key=lambda r: (str(r.workload), r.arch or "", r.gpu or "", r.seconds))
    return "".join(r.to_json() + "\n" for r in chosen).encode("utf-8")


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
    saved = journal.replace_atomic(Path(out_log), _serialise(chosen), backup=True)
    if saved is not None:
        logger.info("pick_best: the previous %s is kept as %s", out_log, saved)
    return len(chosen)


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
    """Fold the best current-version config that ``gpu`` measured of each (workload, arch)
    among ``candidates`` into ``best_log``, never losing what it holds.

    The log's best config of a (workload, arch) on ``gpu`` stays unless a candidate config
    is ``faster`` like with like: by the same timer, by more than the noise, each config by
    its fastest figure among the log's records and the candidates.  Then the winner's
    fastest record under each timer replaces the log's records of that (workload, arch) on
    ``gpu``; so does the best candidate where the log has only stale ones or none.
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
        journal.replace_atomic(best_log, _serialise(held), backup=True)
    return changes


@dataclass
class LogSummary:
    """One (workload, GPU) of some logs: how many records, of which template versions,
    how many stale, and the best current and stale times."""

    workload: Conv2dWorkload
    gpu: str | None
    arch: str | None
    records: int = 0
    ok: int = 0
    stale: int = 0
    versions: set = field(default_factory=set)  # template versions seen (None: unversioned)
    best_s: float | None = None  # best current-version time
    best_stale_s: float | None = None


def summarize(logs) -> list[LogSummary]:
    """Per (workload, GPU) counts of ``logs``: what ``scripts/records.py`` prints."""
    rows: dict[tuple, LogSummary] = {}
    for record in _records(logs):
        key = (str(record.workload), record.gpu or "", record.arch or "")
        row = rows.setdefault(key, LogSummary(record.workload, record.gpu, record.arch))
        row.records += 1
        row.stale += record.stale
        row.versions.add(record.template_version)
        if not record.ok:
            continue
        row.ok += 1
        attr = "best_stale_s" if record.stale else "best_s"
        if getattr(row, attr) is None or record.seconds < getattr(row, attr):
            setattr(row, attr, record.seconds)
    return [rows[key] for key in sorted(rows)]


def summary_table(rows: list[LogSummary]) -> str:
    """Markdown table of ``summarize``'s rows (times in ms)."""
    ms = lambda s: "-" if s is None else f"{s * 1e3:.4f}"  # noqa: E731
    lines = [f"template version today: {TEMPLATE_VERSION}", "",
             "| workload | GPU | arch | records | ok | stale | versions | best ms | best stale ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        versions = ",".join(sorted("none" if v is None else str(v) for v in r.versions))
        lines.append(f"| {display_name(r.workload)} | {r.gpu or '-'} | {r.arch or '-'} | {r.records} | {r.ok} | {r.stale} "
                     f"| {versions} | {ms(r.best_s)} | {ms(r.best_stale_s)} |")
    return "\n".join(lines)


def measured_indices(records: Iterable[Record], workload, gpu=None) -> set[int]:
    """Config indices already measured (with any outcome) for ``workload`` on ``gpu``.

    Lets a resumed tuner skip what it has tried, failures included (they would
    fail again).  ``gpu`` is a GPU name or a ``GpuInfo``; None matches any GPU.
    """
    workload = get_workload(workload)
    gpu_name = getattr(gpu, "name", gpu)
    return {
        r.config["index"]
        for r in _records(records)
        if r.workload == workload and (gpu_name is None or r.gpu == gpu_name)
    }


__all__ = [
    "RECORD_VERSION", "TASK_NAME", "Record", "append", "load", "log_files", "load_best", "best_record",
    "faster", "noise_margin", "inferred_timer", "best_records", "pick_best", "merge_best", "BestLogChange", "measured_indices", "summarize",
    "summary_table", "LogSummary",
    "make_provenance", "target_arch",
    "tvm_version", "tc_autotune_version",
]
