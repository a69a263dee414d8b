"""``build_conv2d``, ``build_dense`` and ``build``: the kernel of a workload, its config given or
chosen (``apply``: the best record of the active logs, a zero-shot pick or the default), then
checked against the task's space and compiled (``kernel.compile_kernel``)."""

from __future__ import annotations

import tvm

from ..core import tasks
from .apply import best_or_default_config
from ..backends.cuda.gpu import GpuInfo, default_gpu, gpu_for_arch
from .kernel import Kernel, compile_kernel, verify_record
from ..workloads.dense import DenseWorkload
from ..workloads.conv2d import Conv2dWorkload
from ..workloads.names import get


def resolve_config(workload, config, gpu: GpuInfo):
    """A config of the task's template from a config, a knob dict or a space index; ValueError
    if invalid."""
    space = tasks.of(workload).space(workload, gpu)
    if isinstance(config, int):
        config = space.get(config)
    elif isinstance(config, dict):
        config = space.from_entity(config) if "entity" in config else space.from_dict(config)
    elif not isinstance(config, space.template.config_type):
        raise ValueError(f"config must be a {space.template.config_type.__name__}, a dict or an index, "
                         f"got {type(config).__name__}")
    space.index(config)  # raises for values outside the space
    reason = space.why_invalid(config)
    if reason:
        raise ValueError(f"config is invalid for {workload}: {reason}")
    return config


def build_conv2d(workload, config=None, target=None, pdl: bool = False) -> Kernel:
    """Build the Tensor Core conv2d for ``workload`` (a Conv2dWorkload, preset name or spec).

    ``config=None`` takes the best record of the active tuning logs, else the
    space's default config.  ``target`` defaults to CUDA for the local GPU
    (sm_90 without one); a TVM target or an arch string ("sm_80") is accepted.
    ``pdl=True``: launched with Programmatic Dependent Launch (sm_90+, ignored before), for a
    chain of kernels in one stream; off by default, so that a kernel timed alone is the one
    its records timed.
    """
    return build(_of_type(workload, Conv2dWorkload), config, target, pdl)


def build_dense(workload, config=None, target=None, pdl: bool = False) -> Kernel:
    """Build the Tensor Core dense for ``workload`` (a DenseWorkload, dense preset or
    "dense:..." spec); ``config``, ``target`` and ``pdl`` as ``build_conv2d`` takes them."""
    return build(_of_type(workload, DenseWorkload), config, target, pdl)


def _of_type(workload, workload_type: type):
    workload = get(workload)
    if not isinstance(workload, workload_type):
        raise ValueError(f"expected a {workload_type.__name__}, got {type(workload).__name__} {workload}")
    return workload


def build(workload, config=None, target=None, pdl: bool = False) -> Kernel:
    """Build the kernel of any task's ``workload`` (see ``build_conv2d``)."""
    workload = get(workload)
    if target is None:
        gpu = default_gpu()
    else:
        if isinstance(target, str) and target.startswith("sm_"):
            target = {"kind": "cuda", "arch": target}
        target = tvm.target.Target(target)
        if target.kind.name != "cuda":  # an llvm target would silently have built for sm_90
            raise ValueError(f"target {target.kind.name!r} is not a CUDA target: the kernels are Tensor Core "
                             "CUDA kernels (give an arch such as 'sm_90', or a cuda target)")
        arch = str(target.attrs.get("arch", "sm_90"))
        local = default_gpu()
        gpu = local if local.arch == arch else gpu_for_arch(arch)
    if config is None:
        config = best_or_default_config(workload, gpu, verify=verify_record)
    return compile_kernel(workload, resolve_config(workload, config, gpu), gpu, pdl=pdl)
