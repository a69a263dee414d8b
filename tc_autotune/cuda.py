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


def find_nvcc() -> str | None:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and (Path(cuda_home) / "bin" / "nvcc").exists():
        return str(Path(cuda_home) / "bin" / "nvcc")
    return shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
    )


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
        raise CudaCompileError("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
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
