"""The knob space with the Tensor Core GEMM template (``TC_GEMM``) as its default.

``core.config_space`` holds the space itself, generic over ``core.template.Template``; this
module is what the package's tc_gemm callers (api, measure, tuning, the template's own
schedule and generator) and the tests import: the space with ``template=TC_GEMM`` unless told
otherwise, ``conv2d_space``/``dense_space``, and tc_gemm's knob names.  The search (``search/``)
imports ``config_space`` instead and reaches the template only through ``space.template``.

AutoTVM-style: every knob has an explicit candidate list (``knobs``), a config is one choice per
knob, and its index is the mixed-radix number of those choices (the first knob varies fastest),
so index <-> config is a bijection that is stable as long as the candidate lists are.
"""

from __future__ import annotations

from . import config_space
from ..backends.cuda.gpu import GpuInfo
from .config_space import (_default_config, indices_from_positions, positions_from_configs,  # noqa: F401
    positions_from_indices, radices, valid_mask)
from .template import Template
from ..templates.tc_gemm.template import INTRINSIC_REQUIRES, MAX_ACCUMULATOR_FRAGMENTS, TC_GEMM, WMMA_SHAPES
from ..workloads.conv2d import Conv2dWorkload
from ..workloads.dense import DenseWorkload

__all__ = ["KNOBS", "KNOB_DEFAULTS", "KNOB_NAMES", "WMMA_SHAPES", "MAX_ACCUMULATOR_FRAGMENTS",
           "INTRINSIC_REQUIRES", "TcGemmConfig", "Conv2dConfig", "ConfigSpace", "conv2d_space", "dense_space", "valid_mask",
           "radices", "positions_from_indices", "indices_from_positions", "positions_from_configs"]

KNOBS, KNOB_DEFAULTS, KNOB_NAMES = TC_GEMM.knobs, TC_GEMM.knob_defaults, TC_GEMM.knob_names
TcGemmConfig = Conv2dConfig = TC_GEMM.config_type


class ConfigSpace(config_space.ConfigSpace):
    """``config_space.ConfigSpace`` whose template is ``TC_GEMM`` unless one is given."""

    def __init__(self, workload, gpu: GpuInfo | None = None, knobs: dict | None = None,
                 template: Template | None = None):
        super().__init__(workload, gpu, knobs, template=template or TC_GEMM)


def conv2d_space(workload: Conv2dWorkload, gpu: GpuInfo | None = None) -> ConfigSpace:
    """The knob space of ``build_conv2d`` for one workload (on ``gpu``, default: local or sm_90)."""
    return ConfigSpace(workload, gpu)


def dense_space(workload: DenseWorkload, gpu: GpuInfo | None = None) -> ConfigSpace:
    """The knob space of ``build_dense`` for one workload (on ``gpu``, default: local or sm_90)."""
    return ConfigSpace(workload, gpu)
