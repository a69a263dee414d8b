"""CUDA source -> cubin with nvcc, cached on disk by content hash.

TVM 0.27 compiles CUDA kernels through the global ``tvm_callback_cuda_compile``:
at build time where it has a CUDA runtime (its default callback uses NVRTC, whose
ptxas makes different code), else when the module is loaded.  We compile eagerly
with nvcc (so errors surface at build time, in parallel build workers, and on
machines without a GPU) and register, before any build, a callback that serves
the cached cubin: every kernel is nvcc's, whatever ran before it in the process.
The disk cache is the only hand-off between the two.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .gpu import default_gpu

log = logging.getLogger(__name__)

NVCC_FLAGS = ("-O3", "-w", "-cubin")


class CudaCompileError(RuntimeError):
    """nvcc rejected a kernel (the message holds its diagnostics)."""


def cache_dir() -> Path:
    root = os.environ.get("TC_AUTOTUNE_CACHE_DIR") or Path.home() / ".cache" / "tc-autotune"
    path = Path(root) / "cubin"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _key(source: str, arch: str) -> str:
    return hashlib.sha256(f"{arch}\0{' '.join(NVCC_FLAGS)}\0{source}".encode()).hexdigest()


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


def compile_cubin(source: str, arch: str, timeout: float | None = None) -> bytes:
    """The cubin of ``source`` for ``arch`` (e.g. "sm_90"), from the cache or from nvcc."""
    cached = cache_dir() / f"{_key(source, arch)}.cubin"
    if cached.exists():
        return cached.read_bytes()
    nvcc = find_nvcc()
    if nvcc is None:
        raise CudaCompileError("nvcc not found (pip install -e \".[test]\" brings NVIDIA's nvcc wheels; or set "
                                "CUDA_HOME or put nvcc on PATH)")
    with tempfile.TemporaryDirectory(prefix="tc_autotune_") as tmp:
        src, out = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        src.write_text(source)
        cmd = [nvcc, *NVCC_FLAGS, f"-arch={arch}", "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise CudaCompileError(f"nvcc failed for {arch}: {proc.stderr.strip()[-2000:]}")
        binary = out.read_bytes()
    # Atomic publish: concurrent builders of the same kernel never see a partial file.
    fd, tmp_path = tempfile.mkstemp(dir=cached.parent, suffix=".part")
    with os.fdopen(fd, "wb") as f:
        f.write(binary)
    os.replace(tmp_path, cached)
    return binary


def _callback_arch() -> str:
    import tvm

    target = tvm.target.Target.current(allow_none=True)
    if target is not None and target.attrs.get("arch"):
        return str(target.attrs["arch"])
    return default_gpu().arch


def install_compile_callback() -> None:
    """Make TVM compile (at build or load time) through ``compile_cubin``: cache first, then nvcc."""
    import tvm_ffi

    if find_nvcc() is None:  # keep TVM's own NVRTC path
        return

    def tvm_callback_cuda_compile(code, *_):
        return compile_cubin(code, _callback_arch())

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", tvm_callback_cuda_compile, override=True)
