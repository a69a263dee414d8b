"""Building a partitioned module: ``tvm.compile`` (relax.build) with what the kernels need.

``build(mod)`` is relax.build with the CUDA target the kernels were chosen for (sm_90a when one
uses wgmma: that arch also runs every other kernel of the module), the template's TIR pass
options (cp.async copies in the pipelined loops, merged shared memory: without them the
kernels compile, but not to the code that was tuned), the package's nvcc callback and the
TMA im2col host function registered.  TVM's default GPU pipeline (legalization, fusion, dlight
schedules) compiles the ops the kernels did not take.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import time

import tvm

from . import kernels
from .partition_report import ATTR, report


def target_of(mod, target=None) -> tvm.target.Target:
    """The CUDA target to build ``mod`` for: ``target`` (an arch string or a TVM target) or the
    arch ``partition`` chose (without one, or with ``mod`` None: the local GPU's, else sm_90),
    upgraded to the arch-specific one (sm_90a) where a kernel needs it."""
    needed = report(mod).arch if mod is not None and mod.attrs is not None and ATTR in mod.attrs else None
    if target is None:
        target = needed or kernels.gpu_of(None).arch
    if isinstance(target, str) and target.startswith("sm_"):
        target = {"kind": "cuda", "arch": target}
    target = tvm.target.Target(target)
    if target.kind.name != "cuda":
        raise ValueError(f"target {target.kind.name!r} is not a CUDA target: give an arch such as 'sm_90'")
    arch = str(target.attrs.get("arch", ""))
    if needed and needed.endswith("a") and arch == needed[:-1]:
        config = dict(target.export())
        config["arch"] = needed
        target = tvm.target.Target(config)
    if target.host is None:
        target = tvm.target.Target(target, host="llvm")
    return target


PHASES: dict[str, float] = {}  # seconds of the last build's phases (precompile, compile), for reports


def build(mod, target=None, workers: int | None = None, **kwargs):
    """``mod`` (from ``partition``, or any Relax module) built for the GPU: a
    ``tvm.runtime.Executable`` for ``tvm.relax.VirtualMachine``.  ``target``: see ``target_of``;
    ``workers``: parallel nvcc processes for the kernels (default: one per core); ``kwargs`` go to
    ``tvm.compile`` (``relax_pipeline``, ``tir_pipeline``, ...)."""
    target = target_of(mod, target)
    kernels.prepare_process()
    with target, tvm.transform.PassContext(opt_level=3, config=kernels.PASS_CONFIG):
        start = time.time()
        precompile(mod, str(target.attrs["arch"]), workers)
        PHASES["precompile"] = time.time() - start
        start = time.time()
        executable = tvm.compile(mod, target, **kwargs)
        PHASES["compile"] = time.time() - start
    return executable


def precompile(mod, arch: str, workers: int | None = None) -> int:
    """nvcc the package's kernels of ``mod`` into the cubin cache, ``workers`` at a time.

    TVM compiles a module's CUDA modules one after the other, each with one nvcc (through the
    package's callback, which serves cached cubins).  Each kernel is a CUDA module of its own
    (``kernels.prim_func``), whose source is what lowering the kernel alone gives: so they are
    lowered here, nvcc'd in parallel, and the build finds every cubin in the cache.  Returns how
    many kernels were compiled.  Call inside the build's target and pass context."""
    if not kernels.have_nvcc():  # TVM's NVRTC compiles them in the build
        return 0
    sources = []
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc) and kernels.KERNEL_ATTR in (func.attrs or {}):
            executable = tvm.compile(tvm.IRModule({gv: func}))
            sources += [m.inspect_source() for m in cuda_modules(executable)]
    with cf.ThreadPoolExecutor(max(1, min(len(sources), workers or os.cpu_count() or 1))) as pool:
        list(pool.map(lambda source: kernels.compile_cuda(source, arch), sources))
    return len(sources)


def cuda_modules(executable) -> list:
    """The CUDA modules an executable imports (one per arch it was compiled for)."""
    found, todo = [], [getattr(executable, "mod", executable)]
    while todo:
        module = todo.pop()
        if module.kind == "cuda":
            found.append(module)
        todo.extend(module.imports)
    return found


def compile_check(executable, arch: str) -> int:
    """nvcc-compile every CUDA module of ``executable`` for ``arch``, as loading it on a GPU
    would (without one); returns the cubins' total size.  CudaCompileError where nvcc refuses."""
    return sum(len(kernels.compile_cuda(m.inspect_source(), arch)) for m in cuda_modules(executable))
