"""The package's side of the Relax dispatch: which config a workload gets, and its kernel as a
TIR PrimFunc that ``relax.build`` compiles with the rest of the model.

Every kernel is its template's scheduled PrimFunc "main" (``Task.schedule``, through the template
protocol: tc_gemm's is a TensorIR schedule, or for a warp-specialized config one launch of
generated CUDA whose host code encodes the TMA tensor maps).  It goes into the model's IRModule
scheduled but not lowered: relax.build runs the same TIR pipeline on it that ``tvm.compile`` runs
for a standalone kernel (the generated CUDA is the same, byte for byte, but for the kernel's
name), provided the templates' pass options (``PASS_CONFIG``) are set around the build
(``build.build`` does).  As api, it names no template's module: a template's TVM side is loaded
where a kernel is first scheduled (``Template.schedule``).  This module is the one place that
reaches into the package's internals for that; the rest of ``tc_autotune.relax`` sees ``choose``,
``prim_func`` and ``workspaces``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict

import tvm

from ..api import apply, build_cache
from ..api.kernel import build_arch
from ..backends.cuda import nvcc, tensormap_bf16, toolkit
from ..backends.cuda.gpu import GpuInfo, default_gpu, gpu_for_arch
from ..core import tasks
from ..workloads.conv2d import Conv2dWorkload
from ..workloads.dense import DenseWorkload

OPAQUE = 8  # relax's kOpaque op pattern: FuseOps must never fuse other ops into a tuned kernel
KERNEL_ATTR = "tc_autotune.workload"  # marks the package's PrimFuncs in a module (their workload)
CONFIG_ATTR = "tc_autotune.config"  # and their config (JSON of the knobs)


def _pass_config() -> dict:
    """The TIR pass options of the templates that make the kernels Relax takes (conv2d's and
    dense's ``Template.pass_config``): one PassContext around the model's build serves them all."""
    config: dict = {}
    for workload_type in (Conv2dWorkload, DenseWorkload):
        config.update(tasks.of_type(workload_type).template.pass_config)
    return config


PASS_CONFIG = _pass_config()


def gpu_of(target) -> GpuInfo:
    """The GPU the kernels are chosen for: ``target`` None (the local GPU, else sm_90), an arch
    string ("sm_90") or a CUDA target, as ``tc.build`` takes it."""
    if target is None:
        return default_gpu()
    if isinstance(target, str) and target.startswith("sm_"):
        arch = target
    else:
        target = tvm.target.Target(target)
        if target.kind.name != "cuda":
            raise ValueError(f"target {target.kind.name!r} is not a CUDA target: the kernels are Tensor Core CUDA "
                             "kernels (give an arch such as 'sm_90', or a cuda target)")
        arch = str(target.attrs.get("arch", "sm_90"))
    local = default_gpu()
    return local if local.arch == arch else gpu_for_arch(arch)


def choose(workloads, gpu: GpuInfo, im2col: bool = False) -> dict:
    """{workload: apply.ConfigChoice} with the active logs: the best record, else a sibling's,
    a zero-shot pick or the default (``build_cache.choose``: cached on disk by the logs' state).

    A TMA im2col kernel's host code calls back into Python to encode its tensor map on every
    call (TVM has no im2col encoder), which would put Python between the VM's kernels; so unless
    ``im2col``, such a choice runs the same tiling with A loaded without im2col
    (``without_im2col``), where the template takes it."""
    logs = apply.active_logs()
    chosen = {w: build_cache.choose(w, gpu, logs) for w in dict.fromkeys(workloads)}
    if not im2col:
        chosen = {w: without_im2col(w, choice, gpu) for w, choice in chosen.items()}
    return chosen


def without_im2col(workload, choice, gpu: GpuInfo):
    """``choice`` without TMA im2col: the fastest record of the workload on this GPU (active and
    shipped logs: a timed config) whose config loads A without it, else its own config with
    ``tma_im2col`` off where the space takes that, else ``choice`` as it is."""
    if not getattr(choice.config, "tma_im2col", 0):
        return choice
    space = tasks.of(workload).space(workload, gpu)
    best = {}  # this GPU's records first, else any GPU's of the arch (a build for an arch, not a GPU)
    logs = [path for path, _ in apply.active_logs()] + apply.shipped_log_files()
    for record in apply.indexed_records(logs, workload, gpu.arch):  # each log parsed once per process
        if record.stale:
            continue
        mine = record.gpu == gpu.name
        if mine in best and record.seconds >= best[mine][1].seconds:
            continue
        try:
            config = space.from_entity(record.config)
        except ValueError:  # a config outside today's space
            continue
        if not config.tma_im2col and space.is_valid(config):
            best[mine] = (config, record)
    best = best.get(True) or best.get(False)
    if best is None:
        config = dataclasses.replace(choice.config, tma_im2col=0)
        if space.is_valid(config):
            return dataclasses.replace(choice, config=config, source=f"{choice.source}, im2col off", seconds=None)
        return choice
    return dataclasses.replace(choice, config=best[0], source="record without im2col", seconds=best[1].seconds)


def arch_of(workload, config, gpu: GpuInfo) -> str:
    """The arch a config's kernel must be compiled for (sm_90a for wgmma)."""
    return build_arch(workload, config, gpu)


def prim_func(workload, config, name: str, arch: str) -> tvm.tirx.PrimFunc:
    """The scheduled kernel of (workload, config) as a PrimFunc named ``name``: opaque to
    relax's fusion, marked scheduled (dlight leaves it alone) and bound to a target of its own
    for ``arch``.  A target of its own (its tag is the kernel's name) makes the build put the
    kernel in a CUDA module of its own: one translation unit, as when it was tuned, so the
    device functions that warp-specialized kernels define in their source (the same names in
    each) never meet, and nvcc compiles each kernel apart (``build.precompile``: in parallel)."""
    task = tasks.of(workload)
    func = task.schedule(workload, config)["main"]
    expected = len(task.signature(workload)) + len(workspaces(workload, config))
    if len(func.params) != expected:  # the call_tir below passes exactly these
        raise RuntimeError(f"the kernel of {workload} takes {len(func.params)} arguments, expected {expected}")
    target = tvm.target.Target({"kind": "cuda", "arch": arch, "tag": name}, host="llvm")
    return func.with_attrs({"global_symbol": name, "op_pattern": OPAQUE, "tirx.is_scheduled": True,
                            "target": target, KERNEL_ATTR: str(workload), CONFIG_ATTR: json.dumps(asdict(config))})


def workspaces(workload, config) -> list:
    """[(shape, dtype)] of the buffers the kernel takes after its output (``Template.workspaces``),
    which the caller allocates."""
    return tasks.of(workload).template.workspaces(workload, config)


def prepare_process() -> None:
    """What a process that builds or runs the kernels needs registered: the nvcc compile
    callback (cached cubins; the kernels are nvcc's, as the tuner measured them) and the host
    function that encodes TMA im2col tensor maps."""
    nvcc.install_compile_callback()
    tensormap_bf16.register()  # fp16's encoder and bf16's


def compile_cuda(source: str, arch: str) -> bytes:
    """``source`` compiled by nvcc for ``arch`` (the package's cubin cache first)."""
    return nvcc.compile_cubin(source, arch)


def have_nvcc() -> bool:
    """Whether nvcc is here (without it TVM compiles through its own NVRTC callback)."""
    return toolkit.find_nvcc() is not None
