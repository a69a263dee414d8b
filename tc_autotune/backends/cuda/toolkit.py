"""The CUDA toolkit that compiles the kernels: which nvcc (a toolkit on the machine, else the one of
NVIDIA's pip wheels), its release, and the flags every kernel is compiled with.

A record's keys name these (``code_hash``: a kernel's code hash and a template's toolchain), so
they are facts apart from the compiling (``nvcc``: the cubin cache, and TVM's compile callback,
which asks for the default GPU): what reads logs needs only this.  No TVM, nothing of the
package.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

NVCC_FLAGS = ("-O3", "-w", "-cubin")  # every kernel's, and so part of its code hash

SYSTEM_NVCC = Path("/usr/local/cuda/bin/nvcc")
# Where NVIDIA's CUDA 13 wheels on PyPI (nvidia-cuda-nvcc, -runtime, -crt, -cccl, nvidia-nvvm: the
# "test" extra) put nvcc: one tree under the ``nvidia`` namespace package, bin/ beside the include/
# and nvvm/ that its nvcc.profile finds relative to itself, so it compiles with no CUDA_HOME.
WHEEL_NVCC = Path("cu13") / "bin" / "nvcc"


def find_nvcc() -> str | None:
    """nvcc: CUDA_HOME's (or CUDA_PATH's), else the PATH's, else /usr/local/cuda's, else the one of
    NVIDIA's pip wheels (a machine without a CUDA toolkit, after ``pip install -e ".[test]"``)."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and (Path(cuda_home) / "bin" / "nvcc").exists():
        return str(Path(cuda_home) / "bin" / "nvcc")
    found = shutil.which("nvcc") or (str(SYSTEM_NVCC) if SYSTEM_NVCC.exists() else None)
    return found or _wheel_nvcc()


def _wheel_nvcc() -> str | None:
    """The nvcc of the ``nvidia-cuda-nvcc`` wheel, wherever ``nvidia`` (a namespace package that
    several NVIDIA wheels share) is importable from; None without it."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        nvcc = Path(root) / WHEEL_NVCC
        if nvcc.is_file() and os.access(nvcc, os.X_OK):
            return str(nvcc)
    return None


def nvcc_version() -> str | None:
    """The CUDA release of the nvcc that compiles kernels ("13.0"), for record provenance."""
    nvcc = find_nvcc()
    if nvcc is None:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else None
