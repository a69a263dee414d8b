"""The templates the package makes kernels with, and the default one: what the top of the package
(its face, api/, tuning/, cli/) consults.  core/, search/ and database/ import no template: a space
is given its template, and a task is bound to one by the package face (``core.tasks.use_template``).

Besides the choice, the default template's conveniences: ``ConfigSpace`` with the default
template unless one is given, and ``conv2d_space`` / ``dense_space``.  Light: no TVM (a
template's lowering, its TVM side, is a module the template names: ``Template.lower`` loads it
where a kernel is first lowered).
"""

from __future__ import annotations

from ..backends.cuda.gpu import GpuInfo, default_gpu
from ..core import config_space
from ..core.template import Template
from .tc_gemm.knobs import TcGemmConfig
from .tc_gemm.template import TC_GEMM
from ..workloads.conv2d import Conv2dWorkload
from ..workloads.dense import DenseWorkload

__all__ = ["TEMPLATES", "DEFAULT", "ConfigSpace", "TcGemmConfig", "Conv2dConfig", "conv2d_space", "dense_space"]

TEMPLATES: dict[str, Template] = {template.name: template for template in (TC_GEMM,)}
DEFAULT = TC_GEMM  # what conv2d and dense kernels are made with
Conv2dConfig = TcGemmConfig  # the default template's config, by its earlier name


class ConfigSpace(config_space.ConfigSpace):
    """``core.config_space.ConfigSpace`` whose template is ``DEFAULT`` and whose GPU is the local one
    (else a nominal sm_90: ``default_gpu``) unless they are given."""

    def __init__(self, workload, gpu: GpuInfo | None = None, knobs: dict | None = None,
                 template: Template | None = None):
        super().__init__(workload, gpu or default_gpu(), knobs, template=template or DEFAULT)


def conv2d_space(workload: Conv2dWorkload, gpu: GpuInfo | None = None) -> ConfigSpace:
    """The knob space of ``build_conv2d`` for one workload (on ``gpu``, default: local or sm_90)."""
    return ConfigSpace(workload, gpu)


def dense_space(workload: DenseWorkload, gpu: GpuInfo | None = None) -> ConfigSpace:
    """The knob space of ``build_dense`` for one workload (on ``gpu``, default: local or sm_90)."""
    return ConfigSpace(workload, gpu)
