"""What made a timed kernel, as hashes: the code a config generates, and the sources and
toolchain that generate and compile it.  Records carry both (``database.record``), so whether a
record still describes today's kernel is derived, never remembered (issue #30):

* ``code_hash(source, arch, ...)``: sha256 of the CUDA source TVM generated for one (workload,
  config), the arch and nvcc flags it is compiled with, the nvcc release, and the host-side
  sources the kernel calls at run time (the TMA im2col encoder).  Equal hashes: the same cubin
  (as far as the toolchain is deterministic), so the same kernel and the same time.
* ``toolchain()``: what, besides a template's sources, turns them into a cubin: TVM, its FFI,
  nvcc's release and flags.  ``core.template.Template.source_hash`` hashes the template's
  sources with it; a record stamped with today's is current without generating anything.

The compiler release is in both keys, as in Triton's cache keys: another nvcc's ptxas makes
another cubin of the same source.  It is read once per process (``compiler_release``).

``remember``/``recall``: the code hashes this process computed while building, by (workload,
config, arch), so a measurement made here (nightly's re-times) can stamp its record without
lowering the config again.  No TVM here: the records and the commands import it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from pathlib import Path
from typing import Iterable

from . import toolkit


@functools.lru_cache(maxsize=None)
def compiler_release() -> str | None:
    """The nvcc release that compiles kernels here ("13.0"), None without nvcc; read once."""
    return toolkit.nvcc_version()


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def toolchain() -> dict:
    """What turns a template's Python into a cubin besides its sources: TVM (its lowering and
    CUDA codegen), its FFI, and nvcc with its flags."""
    return {"tvm": _dist_version("apache-tvm") or _dist_version("tvm"),
            "tvm_ffi": _dist_version("apache-tvm-ffi") or _dist_version("tvm-ffi"),
            "nvcc": compiler_release(), "nvcc_flags": list(toolkit.NVCC_FLAGS)}


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def code_hash(source: str, arch: str, host_files: Iterable[tuple[str, Path]] = ()) -> str:
    """The key of one generated kernel: its CUDA ``source``, the ``arch`` it is compiled for
    (sm_90a for wgmma), nvcc's flags and release, and the ``host_files`` ((name, path)) whose
    code the kernel's host side calls when it runs."""
    return _digest({"source": source, "arch": arch, "nvcc": compiler_release(), "nvcc_flags": list(toolkit.NVCC_FLAGS),
                    "host": {name: file_sha256(path) for name, path in sorted(host_files)}})


# (str(workload), config, arch) -> the code hash of the kernel this process generated for it.
_BUILT: dict[tuple, str] = {}
_BUILT_MAX = 4096


def remember(workload, config, arch: str, digest: str) -> None:
    """Note the code hash of a kernel built here (``api.kernel.compile_kernel``)."""
    if len(_BUILT) >= _BUILT_MAX:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[(str(workload), config, arch)] = digest


def recall(workload, config, arch: str | None) -> str | None:
    """The code hash of (workload, config) for ``arch`` if this process built it, else None."""
    try:
        return _BUILT.get((str(workload), config, arch))
    except TypeError:  # an unhashable config (a dict): never built here
        return None


__all__ = ["compiler_release", "toolchain", "code_hash", "file_sha256", "remember", "recall"]
