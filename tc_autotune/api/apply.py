"""Applying the best record: which config ``build_conv2d`` (``build_dense``) uses when none is given.

Logs given with ``apply_history_best`` come first, then the shipped logs (the checkout's
tuning_logs/ folder, or its copy inside an installed package: ``records.shipped_logs_dir``).
The first log set that has a successful, current record for the workload on this GPU's
architecture wins (stale records, whose code changed or cannot be checked, only where
``include_stale=True`` was asked for); without one, the space's default config is used and
a warning names the workload.

A record is current when its template's sources are those it was stamped under, or, where
they changed since, when the code its config generates today is the code it timed.  Only a
build generates code, so the build passes ``verify`` (``api.kernel.verify_record``): an
unverified best record is checked there (the lowering is the build's own, reused), and one
whose code changed is skipped for the next best.  Without ``verify`` (the tuner's first batch,
which measures its picks anyway) unverified records count as current.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..core import tasks
from ..backends.cuda.gpu import GpuInfo, gpu_log_name, local_gpu
from ..database.logs import SHIPPED_LOGS, packaged_logs_dir, shipped_log_files, shipped_logs_dir  # noqa: F401 (apply's API)
from ..database.logs import LogIndex, stat_log_files
from ..database.record import Record
from ..database.selection import Verify, load_best
from ..workloads.dense import FP8_DTYPES, DenseWorkload
from ..workloads.conv_weights import canonical_layout, filter_of
from ..workloads.epilogue import NONE as NO_EPILOGUE
from ..workloads.conv2d import Conv2dWorkload
from ..search import held_knobs, zero_shot

log = logging.getLogger(__name__)

# (log path, include stale records) of the enclosing apply_history_best blocks, innermost first
_active_logs: contextvars.ContextVar[tuple[tuple[str, bool], ...]] = contextvars.ContextVar(
    "tc_autotune_logs", default=())


class NoTunedConfigWarning(UserWarning):
    """build_conv2d fell back to the default config: no record for this workload."""


def _as_paths(logs) -> tuple[str, ...]:
    if isinstance(logs, (str, os.PathLike)):
        logs = [logs]
    return tuple(str(Path(p)) for p in logs)


@contextlib.contextmanager
def apply_history_best(logs, include_stale: bool = False):
    """Within the block, ``build_conv2d(workload)`` uses the best record of ``logs``
    (a log file, a directory of logs, or a list of those) before the shipped logs.

    ``include_stale`` also accepts stale records (their config's code changed since they were
    timed, or nothing can check it): their times describe another kernel, so they are skipped
    unless you ask.
    """
    paths = _as_paths(logs)
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"tuning log not found: {missing[0]}")
    token = _active_logs.set(tuple((p, bool(include_stale)) for p in paths) + _active_logs.get())
    try:
        yield paths
    finally:
        _active_logs.reset(token)


def active_logs() -> tuple[tuple[str, bool], ...]:
    """The log sets consulted, in order, with whether each may give stale records: those of
    enclosing apply_history_best blocks, then this GPU's shipped log, then all shipped logs.
    Cheap (every ``tc.conv2d`` call reads it): the shipped part is found once per location."""
    return _active_logs.get() + _shipped_log_sets(os.environ.get("TC_AUTOTUNE_SHIPPED_LOGS"))


def user_logs() -> tuple[tuple[str, bool], ...]:
    """The log sets of the enclosing apply_history_best blocks: what ``active_logs`` adds to
    the shipped ones, which are fixed for the process (a cheap key for cached kernels)."""
    return _active_logs.get()


@functools.lru_cache(maxsize=8)
def _shipped_log_sets(_location: str | None) -> tuple[tuple[str, bool], ...]:
    shipped = shipped_logs_dir()
    if shipped is None:
        return ()
    gpu = local_gpu()  # this GPU's own shipped log first, then any of the same arch
    own = shipped / gpu_log_name(gpu.name) if gpu else None
    return (((str(own), False),) if own and own.exists() else ()) + ((str(shipped), False),)


@functools.lru_cache(maxsize=128)
def _log_index(path: str, mtime_ns: int, size: int) -> LogIndex:
    """The successful records of one log file by (workload, arch); read once per process
    and version of the file (its path, mtime and size key the cache), a record parsed once
    its workload is asked for (``LogIndex``)."""
    return LogIndex(path)


def indexed_records(logs, workload: Conv2dWorkload, arch: str) -> list[Record]:
    """The successful records of ``workload`` on ``arch`` in ``logs`` (files or folders), from
    the per-file index: a log is parsed again only after it changed."""
    return [r for index in _indexes(logs) for r in index.records(workload, arch)]


def _indexes(logs) -> list[LogIndex]:
    """The per-file index of each log file in ``logs``, parsed again only after it changed."""
    return [_log_index(str(file), stat.st_mtime_ns, stat.st_size) for file, stat in stat_log_files(logs)]


def best_config(workload: Conv2dWorkload, gpu: GpuInfo, logs=None,
                verify: Verify | None = None) -> tuple[object, float, str] | None:
    """(config, seconds, log) of the best valid record for the workload, first log set first
    (``logs``: (path, include stale) pairs, default ``active_logs()``); with ``verify``, an
    unverified record whose code changed is skipped (``selection.best_record``)."""
    space = tasks.of(workload).space(workload, gpu)
    for path, include_stale in active_logs() if logs is None else logs:
        found = load_best(indexed_records(path, workload, gpu.arch), workload, target=gpu.arch,
                          include_stale=include_stale, verify=verify)
        if found and space.is_valid(found[0]):
            return found[0], found[1], path
    return None


# Input dtypes whose kernels are one GEMM: fp16 and bf16 operands have the same tiles, instruction
# shapes and Tensor Core rate, so a config tuned for one is a config of the other (not fp32 input,
# whose kernels cast first); so do fp8 ones, whatever B's fp8 (e4m3, e5m2).
_SAME_GEMM_DTYPES = ("float16", "bfloat16")


def _shape(w) -> dict:
    """Every field of a workload but its dtypes, its epilogue and a conv's weight layout."""
    return {f.name: getattr(w, f.name) for f in dataclasses.fields(w)
            if f.name not in ("dtype", "b_dtype", "out_dtype", "epilogue", "weight_layout")}


def _fp8(w) -> bool:
    return getattr(w, "scaled", False)


def same_gemm(a, b) -> bool:
    """Whether two workloads differ at most in their epilogue and output dtype, in their input
    dtype between fp16 and bf16 (or between fp8 Bs), and (conv2d) in their weight layout: one
    GEMM, so a config tuned for either is valid for both where the space says so (a PyTorch
    layer's OIHW / OHWI weight starts from what was tuned for its HWIO twin)."""
    return (type(a) is type(b) and _shape(a) == _shape(b)
            and (a.dtype == b.dtype or {a.dtype, b.dtype} <= set(_SAME_GEMM_DTYPES) or _fp8(a) and _fp8(b)))


def _borrowed(record_workload, workload) -> bool:
    """An fp8 workload also takes a 16-bit record of its shape (after its own GEMM's): one tiling
    (a k-step is the same 128 bytes), where its config is valid for fp8 (the warp-specialized
    kernel's; ``sibling_config`` skips the rest).  Never the reverse: an fp8 record's time, at
    twice the Tensor Core rate, would outrank every 16-bit sibling."""
    return (_fp8(workload) and record_workload.dtype in _SAME_GEMM_DTYPES and type(record_workload) is type(workload)
            and _shape(record_workload) == _shape(workload))


def sibling_config(workload, gpu: GpuInfo, logs=None) -> tuple[object, float, str] | None:
    """(config, seconds, workload) of the fastest current record of the same GEMM with another
    epilogue, output dtype or weight layout (``same_gemm``) that is valid for ``workload``, first
    log set first: a model's fused fp16-output layers start from what was tuned for the plain GEMM.
    An fp8 workload then takes a valid 16-bit record of its shape (``_borrowed``)."""
    def wanted(w, arch) -> bool:  # (the index parses the records of these keys only)
        return arch == gpu.arch and w != workload and (same_gemm(w, workload) or _borrowed(w, workload))

    return _first_valid_record(workload, gpu, logs, wanted, lambda r: (not same_gemm(r.workload, workload), r.seconds))


def _first_valid_record(workload, gpu: GpuInfo, logs, wanted, order) -> tuple[object, float, str] | None:
    """(config, seconds, workload) of the first current record, in ``order``, of the other
    workloads that ``wanted(workload, arch)`` takes whose config is valid for ``workload``, first
    log set first."""
    space = tasks.of(workload).space(workload, gpu)
    for path, _ in active_logs() if logs is None else logs:
        found = [r for index in _indexes(path) for _, recs in index.items(wanted) for r in recs if not r.stale]
        for record in sorted(found, key=order):
            try:
                config = space.from_entity(record.config)
            except ValueError:
                continue
            if space.is_valid(config):
                return config, record.seconds, str(record.workload)
    return None


# An untuned dense GEMM starts from the nearest tuned dense GEMMs of its kind: a model's layer
# tuned at 16 and 128 tokens runs 64 near what was tuned for 128.  Distance: log2 of the batch,
# M, N and K; the M side weighs most, as it sets the tiling (swap-AB under 128 rows).
_NEIGHBOUR_WEIGHTS = (0.5, 1.0, 0.5, 0.5)
# A 16-bit one: the zero-shot model ranks those GEMMs' best configs, their neighbourhood and what
# annealing finds (``zero_shot.candidates``): it learnt from convs, but its features are the GEMM's
# (tiles, waves, padding, k-loop), and one neighbour's tiling does not fit an M two to four times
# away.  fp8 (twice the elements a k-step, no conv has it) takes the nearest's record as it is.
NEAREST_GEMMS = 4  # tuned GEMMs whose best configs seed the ranking
BEST_PER_GEMM = 4  # best configs taken from each


def _gemm_distance(a: DenseWorkload, b: DenseWorkload) -> tuple[float, bool]:
    """Log2 distance of the shapes; at equal distance, the GEMM of the same dtypes first."""
    return (math.sqrt(sum(w * (math.log2(x) - math.log2(y)) ** 2 for w, x, y in
                          zip(_NEIGHBOUR_WEIGHTS, (a.batch, a.m, a.n, a.k), (b.batch, b.m, b.n, b.k)))),
            (a.dtype, a.out_dtype) != (b.dtype, b.out_dtype))


def _same_kind(a: DenseWorkload, b: DenseWorkload) -> bool:
    """One kind of dense GEMM: the weight's layout, and 16-bit (fp16, bf16) or fp8 inputs alike."""
    sixteen = {a.dtype, b.dtype} <= set(_SAME_GEMM_DTYPES)
    return a.b_layout == b.b_layout and (sixteen or _fp8(a) and _fp8(b))


def neighbour_config(workload, gpu: GpuInfo, logs=None) -> tuple[object, float, str] | None:
    """(config, seconds, workload) of an untuned dense GEMM's nearest tuned dense GEMM of its kind
    (``_gemm_distance``, ``_same_kind``): that workload's fastest current record whose config is
    valid for ``workload``, first log set first; None for a conv or where no such record is."""
    if not isinstance(workload, DenseWorkload):
        return None
    return _first_valid_record(workload, gpu, logs, _kin(workload, gpu),
                               lambda r: (*_gemm_distance(r.workload, workload), r.seconds))


def _kin(workload: DenseWorkload, gpu: GpuInfo):
    """(workload, arch) -> whether its records may stand in for ``workload``'s (its kind, this arch)."""
    return lambda w, arch: (arch == gpu.arch and isinstance(w, DenseWorkload) and w != workload
                            and _same_kind(w, workload))


def neighbour_seeds(workload, gpu: GpuInfo, logs=None) -> tuple[list[int], list[DenseWorkload]]:
    """(config indices, workloads): the best current configs (BEST_PER_GEMM each, fastest first)
    of the NEAREST_GEMMS nearest tuned dense GEMMs of ``workload``'s kind in all log sets, nearest
    first; ([], []) for a conv or where none is tuned."""
    if not isinstance(workload, DenseWorkload):
        return [], []
    found: dict = {}
    for path, _ in active_logs() if logs is None else logs:
        for (w, _), recs in (item for index in _indexes(path) for item in index.items(_kin(workload, gpu))):
            found.setdefault(w, []).extend(r for r in recs if not r.stale)
    nearest = sorted((w for w in found if found[w]), key=lambda w: (_gemm_distance(w, workload), str(w)))
    space, seeds = tasks.of(workload).space(workload, gpu), []
    for w in nearest[:NEAREST_GEMMS]:
        mine: list = []
        for record in sorted(found[w], key=lambda r: r.seconds):
            with contextlib.suppress(ValueError):  # a knob value today's table lacks
                config = space.from_entity(record.config)
                if held_knobs.ranked(space.template, config):  # (a held knob's record: no seed the model ranks)
                    index = space.index(config)
                    mine += [] if index in mine else [index]
        seeds += mine[:BEST_PER_GEMM]
    return seeds, nearest[:NEAREST_GEMMS]


def dense_zero_shot_config(workload, gpu: GpuInfo, logs=None) -> tuple[object, str] | None:
    """(config, nearest tuned GEMM) of a 16-bit dense GEMM: the stored zero-shot model's pick among its
    nearest tuned GEMMs' best configs and their neighbourhood; else (no model, no such GEMM) None."""
    if not isinstance(workload, DenseWorkload) or workload.dtype not in _SAME_GEMM_DTYPES:
        return None
    seeds, nearest = neighbour_seeds(workload, gpu, logs)
    if not seeds:
        return None
    picked = zero_shot.zero_shot_config(workload, gpu, seeds=seeds, neighbours=nearest)
    return None if picked is None else (picked, str(nearest[0]))


@dataclass(frozen=True)
class ConfigChoice:
    """The config ``build_conv2d`` uses and where it comes from: a tuning record, a zero-shot
    prediction from the shipped histories, or the default config."""

    config: object  # a config of the workload's task's template
    # record; sibling (a record of the same GEMM, another epilogue/output); zero-shot (the stored
    # model's pick); neighbour (an fp8 dense GEMM: the nearest tuned one's record); default
    source: str
    seconds: float | None = None  # the record's time
    log: str | None = None  # the log set the record came from (the nearest GEMM a dense pick started from)


def choose_config(workload: Conv2dWorkload, gpu: GpuInfo, warn: bool = True, logs=None,
                  verify: Verify | None = None) -> ConfigChoice:
    """The best record of the active logs (or of ``logs``, as ``best_config`` takes them, and
    checked by ``verify`` where it is unverified); without one, a record of the same GEMM
    (``sibling_config``); else the stored zero-shot model's pick (``zero_shot``: read, never
    trained here) for a conv, or for a 16-bit dense GEMM near the nearest tuned ones
    (``dense_zero_shot_config``); else (fp8, or no usable model for this GPU's arch) the nearest
    tuned dense GEMM's record (``neighbour_config``), else the default config.  All but the first
    warn (``NoTunedConfigWarning``)."""
    found = best_config(workload, gpu, logs, verify)
    if found:
        log.debug("%s: best record %.4f ms from %s", workload, found[1] * 1e3, found[2])
        return ConfigChoice(found[0], "record", found[1], found[2])
    untuned = f"no tuning record for workload {workload} on {gpu.arch}: using"
    # from other workloads' records: the same GEMM's; a 16-bit dense GEMM's model pick near the
    # nearest tuned GEMMs; else (fp8, no model) the nearest tuned GEMM's record.  Each finder gives
    # the config first and the workload it started from last.
    for source, find, using in (("sibling", sibling_config, "the config tuned for {} (the same GEMM"),
                                ("zero-shot", dense_zero_shot_config,
                                 "a zero-shot config ranked among those tuned for the nearest GEMMs ({} first"),
                                ("neighbour", neighbour_config, "the config tuned for {} (the nearest tuned GEMM")):
        borrowed = find(workload, gpu, logs)
        if borrowed is not None:
            if warn:
                warnings.warn(f"{untuned} {using.format(borrowed[-1])}; tune it for the best kernel)",
                              NoTunedConfigWarning, stacklevel=3)
            return ConfigChoice(borrowed[0], source, None, borrowed[-1])
    predicted = zero_shot.zero_shot_config(workload, gpu)
    if predicted is not None:
        if warn:
            warnings.warn(f"{untuned} a zero-shot config predicted from the shipped tuning histories (tune it for "
                          "the best kernel)", NoTunedConfigWarning, stacklevel=3)
        return ConfigChoice(predicted, "zero-shot")
    if warn:  # one warning, saying why there was no zero-shot pick where the model is at fault
        why = zero_shot.stored_model(gpu)[1] if isinstance(workload, Conv2dWorkload) else None
        warnings.warn(f"no tuning record for workload {workload} on {gpu.arch}: using the default config"
                      + (f" (no zero-shot pick: {why})" if why else ""), NoTunedConfigWarning, stacklevel=3)
    return ConfigChoice(tasks.of(workload).space(workload, gpu).default_config(), "default")


def best_or_default_config(workload: Conv2dWorkload, gpu: GpuInfo, verify: Verify | None = None):
    """The config ``build_conv2d`` uses when given none (``choose_config``'s)."""
    return choose_config(workload, gpu, verify=verify).config


def dtype_name(array) -> str:
    """An array's dtype as workloads name it: numpy's and TVM's already do, torch's reads
    "torch.float16"."""
    return str(array.dtype).removeprefix("torch.")


def _operands_dtype(data, weight) -> str:
    dtype = dtype_name(data)
    if dtype_name(weight) != dtype:
        raise ValueError(f"data is {dtype} but weight is {dtype_name(weight)}")
    return dtype


def workload_of(data, weight, stride=1, padding=0, dilation=1, out_dtype="float32",
                epilogue=NO_EPILOGUE, groups=1, weight_layout="HWIO") -> Conv2dWorkload:
    """The workload of NHWC ``data`` and a ``weight`` of ``weight_layout`` (HWIO [R, S, C/G, K],
    OIHW [K, C/G, R, S] or OHWI [K, R, S, C/G]; numpy, TVM or torch tensors)."""
    layout = canonical_layout(weight_layout)
    if len(data.shape) != 4 or len(weight.shape) != 4:
        raise ValueError(f"expected 4-D NHWC data and {layout} weight, got {list(data.shape)} and "
                         f"{list(weight.shape)}")
    n, h, w, c = (int(x) for x in data.shape)
    r, s, c_w, k = filter_of(layout, weight.shape)
    if c_w * groups != c:
        grouped = f" per group, {c_w * groups} in {groups} groups" if groups != 1 else ""
        raise ValueError(f"weight has {c_w} input channels{grouped}, data has {c}"
                         + (f" (an {layout} weight {list(weight.shape)})" if layout != "HWIO" else ""))
    return Conv2dWorkload(n, h, w, c, k, r, s, stride=stride, padding=padding, dilation=dilation,
                          dtype=_operands_dtype(data, weight), out_dtype=out_dtype, epilogue=epilogue,
                          groups=groups, weight_layout=layout)


def dense_workload_of(a, weight, weight_layout="nk", out_dtype="float32", epilogue=NO_EPILOGUE) -> DenseWorkload:
    """The workload of an (M, K) or (batch, M, K) ``a`` and an (N, K) (``weight_layout="nk"``,
    as nn.Linear holds it) or (K, N) ("kn") ``weight`` (numpy, TVM or torch tensors)."""
    if len(a.shape) not in (2, 3) or len(weight.shape) != 2:
        raise ValueError(f"expected an (M, K) or (batch, M, K) A and a 2-D weight, "
                         f"got {list(a.shape)} and {list(weight.shape)}")
    *lead, m, k = (int(x) for x in a.shape)
    if lead == [1]:  # a DenseWorkload of batch 1 has a 2-D A
        raise ValueError(f"A is {list(a.shape)}: pass a[0], its (M, K) view")
    n, k_w = (int(x) for x in (weight.shape if weight_layout == "nk" else weight.shape[::-1]))
    if k_w != k:
        raise ValueError(f"weight {list(weight.shape)} (weight_layout={weight_layout!r}) has K={k_w}, A has K={k}")
    dtype, b_dtype = dtype_name(a), dtype_name(weight)
    if dtype not in FP8_DTYPES:  # only fp8 A takes a B of another dtype (an e5m2 B)
        b_dtype = _operands_dtype(a, weight)
    return DenseWorkload(m=m, n=n, k=k, batch=lead[0] if lead else 1, b_layout=weight_layout,
                         dtype=dtype, out_dtype=out_dtype, epilogue=epilogue, b_dtype=b_dtype)


def is_fp8(array) -> bool:
    """Whether an array (numpy, TVM, torch) holds fp8 values."""
    return dtype_name(array).startswith("float8_")


def check_scales(a, scale_a, scale_b) -> None:
    """ValueError (one line) unless fp8 ``a`` (any array) comes with both per-tensor scales and other
    operands with none: an fp8 product without its scales would be silently wrong."""
    given = (scale_a is not None) + (scale_b is not None)
    if is_fp8(a) and given < 2:
        raise ValueError("fp8 operands need both per-tensor scales, scale_a and scale_b (fp32 tensors of one "
                         "element, as torch._scaled_mm takes them)")
    if given and not is_fp8(a):
        raise ValueError(f"scale_a and scale_b are the per-tensor scales of fp8 operands, not of {dtype_name(a)} ones")
