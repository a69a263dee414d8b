"""The workload x Tensor Core variant x config matrix shared by the codegen (CPU) and GPU tests, and
an operand's matrix read through its index map (``operand_matrix``)."""

import math

import numpy as np

from tc_autotune import workloads
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.templates.tc_gemm.validity import INTRINSIC_REQUIRES
from tc_autotune.templates.tc_gemm.knobs import KNOBS, WMMA_SHAPES
from tc_autotune.templates.registry import ConfigSpace

WORKLOADS = {
    "tutorial": "tutorial",
    "b1-7x7-s2-c3": "n=1,h=224,w=224,c=3,k=64,r=7,stride=2,pad=3",
    "1x1": "rfc-1x1-b32",
    "odd-channels": "n=3,h=17,w=15,c=20,k=40,r=3,pad=1x2x0x1",
    "dilation2": "n=2,h=20,c=32,k=64,r=3,dilation=2,pad=2",
}

# variant -> (intrinsic, fragment shape): WMMA at every shape, ldmatrix + mma.sync, and wgmma,
# waiting for each k-step's groups or keeping them in flight (``IN_FLIGHT``; the rest pin 0);
# warp_specialized, consumers_along_m, multicast_b, ping_pong and tma_im2col pinned to 0 (those kernels
# have tests of their own).
VARIANTS = {**{shape: ("wmma", shape) for shape in WMMA_SHAPES}, "mma": ("mma", "m16n16k16"),
            "wgmma": ("wgmma", "m16n16k16"), "wgmma-in-flight": ("wgmma", "m16n16k16")}
IN_FLIGHT = {"wgmma-in-flight": 1}


def variant_space(spec, variant, arch="sm_90") -> ConfigSpace:
    """The space of one workload with the intrinsic and fragment shape pinned to ``variant``."""
    intrinsic, shape = VARIANTS[variant]
    knobs = {**KNOBS, "intrinsic": (intrinsic,), "wmma": (shape,), "wgmma_in_flight": (IN_FLIGHT.get(variant, 0),),
             "warp_specialized": (0,), "consumers_along_m": (0,), "multicast_b": (0,), "ping_pong": (0,),
             "tma_im2col": (0,)}
    # swizzled tiles take no padding; wgmma also pins its warpgroup, chunk and fragment knobs
    knobs.update({knob: (value,) for knob, value in INTRINSIC_REQUIRES.get(intrinsic, {}).items()})
    return ConfigSpace(workloads.get(spec), gpu_for_arch(arch), knobs=knobs)


def sample_configs(spec, variant, n, seed=0, arch="sm_90"):
    """``n`` seeded random valid configs of one variant."""
    picked = variant_space(spec, variant, arch).sample(n, seed=seed)
    assert len(picked) >= n, f"space of {spec} has too few valid {variant} configs"
    return picked


def cases(configs_per_variant, seed=0):
    """(id, spec, config) for every workload, every variant, several configs."""
    out = []
    for name, spec in WORKLOADS.items():
        for variant in VARIANTS:
            for i, config in enumerate(sample_configs(spec, variant, configs_per_variant, seed)):
                out.append((f"{name}-{variant}-{i}", spec, config))
    return out


def operand_matrix(operand, tensor, rows: int, cols: int, group=None):
    """An input's matrix (of one group, for a grouped view) through its index map, evaluated on
    numpy index arrays: the element at the row-major address of the map's tensor index, 0 where
    the map says outside."""
    row, col = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    index, inside = operand.map.element(row, col, group) if group is not None else operand.map.element(row, col)
    ok = np.ones(row.shape, dtype=bool)
    for cond in inside:
        ok &= cond
    strides = [math.prod(tensor.shape[d + 1:]) for d in range(tensor.ndim)]
    address = sum(np.asarray(i) * stride for i, stride in zip(index, strides))
    return np.where(ok, tensor.reshape(-1)[np.where(ok, address, 0)], 0)
