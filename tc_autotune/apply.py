"""Applying the best record: which config ``build_conv2d`` uses when none is given.

Logs given with ``apply_history_best`` come first, then the logs shipped in the
repository's tuning_logs/ folder.  The first log set that has a successful
record for the workload on this GPU's architecture wins; without one, the
space's default config is used and a warning names the workload.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import warnings
from pathlib import Path

from . import records
from .gpu import GpuInfo
from .space import Conv2dConfig, conv2d_space
from .workloads import Conv2dWorkload

log = logging.getLogger(__name__)

SHIPPED_LOGS = Path(__file__).resolve().parent.parent / "tuning_logs"

_active_logs: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("tc_autotune_logs", default=())


class NoTunedConfigWarning(UserWarning):
    """build_conv2d fell back to the default config: no record for this workload."""


def _as_paths(logs) -> tuple[str, ...]:
    if isinstance(logs, (str, os.PathLike)):
        logs = [logs]
    return tuple(str(Path(p)) for p in logs)


@contextlib.contextmanager
def apply_history_best(logs):
    """Within the block, ``build_conv2d(workload)`` uses the best record of ``logs``
    (a log file, a directory of logs, or a list of those) before the shipped logs."""
    paths = _as_paths(logs)
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"tuning log not found: {missing[0]}")
    token = _active_logs.set(paths + _active_logs.get())
    try:
        yield paths
    finally:
        _active_logs.reset(token)


def active_logs() -> tuple[str, ...]:
    """The log sets consulted, in order: those of enclosing apply_history_best blocks, then
    the shipped logs (TC_AUTOTUNE_SHIPPED_LOGS overrides where those are)."""
    shipped = os.environ.get("TC_AUTOTUNE_SHIPPED_LOGS", str(SHIPPED_LOGS))
    if not shipped or not Path(shipped).exists():
        return _active_logs.get()
    from .gpu import local_gpu
    from .nightly import gpu_log_name

    gpu = local_gpu()  # this GPU's own shipped log first, then any of the same arch
    own = Path(shipped) / gpu_log_name(gpu.name) if gpu else None
    return _active_logs.get() + ((str(own),) if own and own.exists() else ()) + (shipped,)


def best_config(workload: Conv2dWorkload, gpu: GpuInfo) -> tuple[Conv2dConfig, float, str] | None:
    """(config, seconds, log) of the best valid record for the workload, first log set first."""
    space = conv2d_space(workload, gpu)
    for path in active_logs():
        found = records.load_best(path, workload, target=gpu.arch)
        if found and space.is_valid(found[0]):
            return found[0], found[1], path
    return None


def best_or_default_config(workload: Conv2dWorkload, gpu: GpuInfo) -> Conv2dConfig:
    found = best_config(workload, gpu)
    if found:
        log.debug("%s: best record %.4f ms from %s", workload, found[1] * 1e3, found[2])
        return found[0]
    warnings.warn(f"no tuning record for workload {workload} on {gpu.arch}: using the default config",
                  NoTunedConfigWarning, stacklevel=3)
    return conv2d_space(workload, gpu).default_config()


@functools.lru_cache(maxsize=64)
def _cached_kernel(workload: Conv2dWorkload, logs: tuple[str, ...]):
    from .kernel import build_conv2d

    return build_conv2d(workload)


def workload_of(data, weight, stride=1, padding=0, dilation=1, out_dtype="float32") -> Conv2dWorkload:
    """The workload of NHWC ``data`` and HWIO ``weight`` (numpy or TVM tensors)."""
    if len(data.shape) != 4 or len(weight.shape) != 4:
        raise ValueError(f"expected 4-D NHWC data and HWIO weight, got {list(data.shape)} and {list(weight.shape)}")
    n, h, w, c = (int(x) for x in data.shape)
    r, s, c_w, k = (int(x) for x in weight.shape)
    if c_w != c:
        raise ValueError(f"weight has {c_w} input channels, data has {c}")
    if str(weight.dtype) != str(data.dtype):
        raise ValueError(f"data is {data.dtype} but weight is {weight.dtype}")
    return Conv2dWorkload(n, h, w, c, k, r, s, stride=stride, padding=padding, dilation=dilation,
                          dtype=str(data.dtype), out_dtype=out_dtype)


def conv2d(data, weight, stride=1, padding=0, dilation=1, out_dtype="float32"):
    """NHWC conv2d on Tensor Cores: the workload comes from the arrays, the kernel from the
    best record (built once per workload and log set), the result is a TVM tensor."""
    workload = workload_of(data, weight, stride, padding, dilation, out_dtype)
    return _cached_kernel(workload, active_logs())(data, weight)
