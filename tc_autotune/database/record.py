"""One record, one line of a tuning log: its fields, its JSON form, and whether it is current.

A line looks like::

    {"input": ["cuda -arch=sm_90", "conv2d_nhwc_tensorcore.cuda", ["n=256,h=14,..."], {}],
     "config": {"index": 123, "entity": [["block_row_warps", "ot", 2], ...]},
     "result": [[1.2e-4, 1.3e-4], 0, 2.5, 1732240000.0],
     "error_msg": "", "version": 3, "tvm_version": "0.27.0.post1",
     "provenance": {"gpu": "NVIDIA H100", "compute_capability": "9.0", "cuda": "13.0",
                    "tc_autotune": "0.1.0"},
     "timer": "time_evaluator", "source_hash": "9f2c...", "code_hash": "41ab..."}

The config is stored by knob *value* as well as by index, so a log stays readable when
candidate lists change.  A corrupt or impossible line raises ValueError in ``from_json`` (and
costs only itself in ``logs.load``); a time faster than the GPU can go (``peaks``) is one.

**Whether a record is current** is derived from two hashes, never from a number kept by hand:

* ``code_hash``: the kernel it timed (``backends.cuda.code_hash``: the CUDA source its config
  generated, the build arch, nvcc's flags and release);
* ``source_hash``: the template's ``source_hash`` when that code hash was made or last checked.

``freshness`` is ``FRESH`` when ``source_hash`` is today's (nothing generated to know it),
``UNVERIFIED`` when it is not but the record has a code hash to check (a build that chooses it
generates its config's code anyway and uses it only if the hashes match; ``tc-records
--restamp`` checks them all), and ``STALE`` otherwise: its code changed (``stale_at`` names the
source hash under which a check found that), or nothing can tell (no code hash).  ``stale`` is
``freshness == STALE``: selection skips those records unless asked, the tuner learns from them.

Records of format 2 carry a hand-bumped ``template_version`` instead.  Those of the last version
of their task (``LEGACY_VERSIONS``) were made by the code of ``LEGACY_SOURCE_HASHES`` (the
byte-identical fingerprint guard held until the versions retired); the shipped logs were
restamped then.  Any other format-2 record is stale, as it always was.

``timer`` names what timed the costs (``results.TIMERS``); a record without it is inferred
(``inferred_timer``).  No TVM import: reading logs stays fast.

This module is the format: it reads no code hash and no provenance.  A record of a measurement
made here is stamped with them (and with today's source hash) by ``origin.stamped``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import math
import re
from dataclasses import dataclass, field

from ..backends.cuda import peaks
from ..core import tasks
from ..core.results import CUDA_GRAPH, TIME_EVALUATOR, TIMERS, MeasureErrorNo, MeasureResult

# 3: records carry source_hash and code_hash (2-readers skip them); 2: template_version
RECORD_VERSION = 3

# The retired hand-bumped versions: the last one of each task, and the source hash (by template)
# of the code it named, which is the code of the commit that retired them.  A format-2 record of
# the last version is current only where the template's sources still hash to that; elsewhere it
# is stale (it has no code hash to check).
LEGACY_VERSIONS = {"conv2d_nhwc_tensorcore.cuda": 1, "dense_tensorcore.cuda": 2}
LEGACY_SOURCE_HASHES = {"tc_gemm": "1e5a003ec33f72809a04cd0e484b90a03c56542e2325dc70a108cbeaade190fb"}

FRESH, UNVERIFIED, STALE = "fresh", "unverified", "stale"

_TARGET_ARCH_RE = re.compile(r"-arch=(sm_\d+)")
_ARCH_RE = re.compile(r"sm_\d+")
_HASH_RE = re.compile(r"[0-9a-f]{64}")

# Records written before they named their timer: the tuner's came from time_evaluator, and so
# did nightly's re-times ("nightly re-time") until ae773cb (2026-11-23 23:27:38 UTC) timed our
# kernels by CUDA graph replay where PyTorch runs, as the nightly machines had it (the H200's
# re-times of 23:48 that night were already graph-replayed).
RETIME_MSG = "nightly re-time"
_GRAPH_RETIMES_SINCE = 1795476458.0


@dataclass(frozen=True)
class Record:
    """One measured config of one workload on one target: a line of the log."""

    target: str  # e.g. "cuda -arch=sm_90"
    # a task's workload (Conv2dWorkload, DenseWorkload): its type names the task (``tasks.of``), and
    # the task's type parsed it, so a record names the workload kinds through the task registry only
    workload: object
    config: dict  # entity form: {"index": i, "entity": [[knob, "ot", value], ...]}
    result: MeasureResult
    provenance: dict = field(default_factory=dict)
    # TVM that produced the timing; None means "the installed one" when written.
    # Metadata, not identity: the fields below are left out of equality.
    tvm_version: str | None = field(default=None, compare=False)
    # Format 2's hand-bumped version of the generator (None: unversioned); see LEGACY_VERSIONS.
    template_version: int | None = field(default=None, compare=False)
    # The template's source hash when code_hash was made or last checked (module docstring).
    source_hash: str | None = field(default=None, compare=False)
    code_hash: str | None = field(default=None, compare=False)  # the kernel it timed
    stale_at: str | None = field(default=None, compare=False)  # the source hash that found it changed

    @property
    def task(self) -> tasks.Task:
        return tasks.of(self.workload)

    @property
    def keyed_source_hash(self) -> str | None:
        """The source hash this record's code is judged by: its own, or for a format-2 record
        of its task's last version the retired versions' (``LEGACY_SOURCE_HASHES``)."""
        if self.source_hash is not None:
            return self.source_hash
        task = self.task
        if self.template_version is not None and self.template_version == LEGACY_VERSIONS.get(task.name):
            return LEGACY_SOURCE_HASHES.get(task.template.name)
        return None

    @property
    def freshness(self) -> str:
        """FRESH, UNVERIFIED or STALE (module docstring)."""
        today = self.task.template.source_hash
        if self.keyed_source_hash == today:
            return FRESH
        if self.code_hash is None or self.stale_at == today:
            return STALE
        return UNVERIFIED

    @property
    def stale(self) -> bool:
        """Its time may describe a kernel today's template no longer makes: its code changed,
        or nothing can check it.  An unverified record is not stale (a build checks it)."""
        return self.freshness == STALE

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
        return target_arch(self.target)

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
        for key in ("template_version", "source_hash", "code_hash", "stale_at"):
            if getattr(self, key) is not None:
                obj[key] = getattr(self, key)
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
        hashes = {key: obj.get(key) for key in ("source_hash", "code_hash", "stale_at")}
        for key, value in hashes.items():
            if value is not None and not (isinstance(value, str) and _HASH_RE.fullmatch(value)):
                raise ValueError(f"{key} must be 64 lowercase hex digits, got {value!r}")

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
        return cls(target, workload, config, result, provenance, tvm_ver, template, **hashes)


@functools.lru_cache(maxsize=None)
def tvm_version() -> str:
    """The installed TVM version without importing tvm (slow); 'unknown' if not found: what a
    record without its own ``tvm_version`` is written with."""
    for dist in ("apache-tvm", "tvm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def target_arch(target) -> str | None:
    """The CUDA arch ("sm_90") named by an arch string, a target string or a tvm Target; None for
    None.  A record's "cuda -arch=sm_90" is read by its ``-arch=``; a tvm Target's ``str`` is a JSON
    dict in TVM 0.27 (older: "cuda -arch=sm_90"), so otherwise the first ``sm_NN`` in it."""
    if target is None:
        return None
    text = str(target)
    flag = _TARGET_ARCH_RE.search(text)
    if flag:
        return flag.group(1)
    anywhere = _ARCH_RE.search(text)
    return anywhere.group(0) if anywhere else None


def inferred_timer(error_msg: str, timestamp: float) -> str:
    """The timer of a record written before records named theirs (see _GRAPH_RETIMES_SINCE)."""
    if error_msg == RETIME_MSG and timestamp >= _GRAPH_RETIMES_SINCE:
        return CUDA_GRAPH
    return TIME_EVALUATOR


def _check_physical(seconds: float, workload, gpu, target: str) -> None:
    """ValueError when ``seconds`` is faster than the GPU can run ``workload`` (``peaks``)."""
    gpu = gpu if isinstance(gpu, str) else None
    arch = target_arch(target)
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


__all__ = ["RECORD_VERSION", "LEGACY_VERSIONS", "LEGACY_SOURCE_HASHES", "FRESH", "UNVERIFIED",
           "STALE", "RETIME_MSG", "Record", "inferred_timer", "target_arch", "tvm_version"]
