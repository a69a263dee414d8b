"""Where a record's timing comes from, and the stamping of a measurement made here into a record.

A record names its provenance: the GPU, the CUDA release and this package's version
(``make_provenance``; the TVM release and the target's arch are fields of the format,
``record``).  ``stamped`` makes the record of one measurement: with that provenance, the source
hash of today's template and the code hash of the kernel it timed (the measurement's own, else
the one this process built: ``backends.cuda.code_hash.recall``), which say whether it is current
(``record.Record.freshness``).  Plain functions of installed metadata; no TVM import.
"""

from __future__ import annotations

import functools
import importlib.metadata

from .._version import __version__ as _package_version
from ..backends.cuda import code_hash as code_keys
from ..core import tasks
from ..core.results import MeasureResult
from .record import Record, target_arch


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


def stamped(target, space, config, result: MeasureResult, provenance: dict | None = None) -> Record:
    """The record of ``config`` of ``space`` (a ConfigSpace) measured as ``result``, built by
    today's template: stamped with its source hash and the code hash of the kernel (the
    measurement's, else the one this process built; none where it was never built), and with
    ``provenance`` (default: ``make_provenance`` of the space's GPU).  ``target`` may be a tvm Target."""
    arch = target_arch(target)
    if not isinstance(target, str):
        target = f"cuda -arch={arch}" if arch else str(target)
    code = result.code_hash or code_keys.recall(space.workload, config, arch)
    return Record(target, space.workload, space.to_entity(config), result,
                  dict(provenance) if provenance is not None else make_provenance(space.gpu),
                  source_hash=tasks.of(space.workload).template.source_hash, code_hash=code)


__all__ = ["tc_autotune_version", "make_provenance", "stamped"]
