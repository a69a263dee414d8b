"""Where a record's timing comes from: the GPU, the toolchain and package versions it names, and
the CUDA arch of a target.  Plain functions of installed metadata; no TVM import (``tvm_version``
reads the distribution's metadata, which is fast where importing tvm is not)."""

from __future__ import annotations

import functools
import importlib.metadata
import re

from .._version import __version__ as _package_version

_ARCH_RE = re.compile(r"sm_\d+")


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


__all__ = ["tvm_version", "tc_autotune_version", "make_provenance", "target_arch"]
