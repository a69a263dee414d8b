"""CUDA source -> cubin with nvcc, cached on disk by content hash.

Which nvcc, its release and its flags are the toolkit's (``toolkit``), which records' keys read
without this module's compiling and the default GPU it asks TVM's callback for.

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
import subprocess
import tempfile
from pathlib import Path

from . import toolkit
from .gpu import default_gpu

log = logging.getLogger(__name__)

class CudaCompileError(RuntimeError):
    """nvcc rejected a kernel (the message holds its diagnostics)."""


def cache_dir() -> Path:
    root = os.environ.get("TC_AUTOTUNE_CACHE_DIR") or Path.home() / ".cache" / "tc-autotune"
    path = Path(root) / "cubin"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _key(source: str, arch: str) -> str:
    return hashlib.sha256(f"{arch}\0{' '.join(toolkit.NVCC_FLAGS)}\0{source}".encode()).hexdigest()


def compile_cubin(source: str, arch: str, timeout: float | None = None) -> bytes:
    """The cubin of ``source`` for ``arch`` (e.g. "sm_90"), from the cache or from nvcc."""
    cached = cache_dir() / f"{_key(source, arch)}.cubin"
    if cached.exists():
        return cached.read_bytes()
    nvcc = toolkit.find_nvcc()
    if nvcc is None:
        raise CudaCompileError("nvcc not found (pip install -e \".[test]\" brings NVIDIA's nvcc wheels; or set "
                                "CUDA_HOME or put nvcc on PATH)")
    with tempfile.TemporaryDirectory(prefix="tc_autotune_") as tmp:
        src, out = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        src.write_text(source)
        cmd = [nvcc, *toolkit.NVCC_FLAGS, f"-arch={arch}", "-o", str(out), str(src)]
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

    if toolkit.find_nvcc() is None:  # keep TVM's own NVRTC path
        return

    def tvm_callback_cuda_compile(code, *_):
        return compile_cubin(code, _callback_arch())

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", tvm_callback_cuda_compile, override=True)
