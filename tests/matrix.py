"""The workload x WMMA-shape x config matrix shared by the codegen (CPU) and GPU tests."""

from tc_autotune import conv2d_space, workloads
from tc_autotune.gpu import gpu_for_arch
from tc_autotune.space import WMMA_SHAPES

WORKLOADS = {
    "tutorial": "tutorial",
    "b1-7x7-s2-c3": "n=1,h=224,w=224,c=3,k=64,r=7,stride=2,pad=3",
    "1x1": "rfc-1x1-b32",
    "odd-channels": "n=3,h=17,w=15,c=20,k=40,r=3,pad=1x2x0x1",
    "dilation2": "n=2,h=20,c=32,k=64,r=3,dilation=2,pad=2",
}


def sample_configs(spec, shape, n, seed=0, arch="sm_90"):
    """``n`` seeded random valid configs of one WMMA shape."""
    space = conv2d_space(workloads.get(spec), gpu_for_arch(arch))
    picked = [c for c in space.sample(60 * n, seed=seed) if c.wmma == shape]
    assert len(picked) >= n, f"space of {spec} has too few valid {shape} configs"
    return picked[:n]


def cases(configs_per_shape, seed=0):
    """(id, spec, config) for every workload, every WMMA shape, several configs."""
    out = []
    for name, spec in WORKLOADS.items():
        for shape in WMMA_SHAPES:
            for i, config in enumerate(sample_configs(spec, shape, configs_per_shape, seed)):
                out.append((f"{name}-{shape}-{i}", spec, config))
    return out
