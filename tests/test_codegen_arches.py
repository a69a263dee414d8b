"""Every workload class's kernels are generated and compiled by nvcc for each arch the package
builds for, on a machine without a GPU (issue #32 item 5): the nominal GPU of the arch
(``gpu.gpu_for_arch``), a few configs a class: the default, and the starting tilings a tune
measures first (Hopper's warp-specialized ones, the persistent kernel among them) or, where an
arch has none (Ampere), a seeded config of each of its Tensor Core paths.

A new workload class (bf16, grouped convolution, ...) is one more line of ``WORKLOAD_CLASSES``
(and of ``CLASS_ARCHES`` where it is not built for every arch); a new arch one more entry of
``ARCHES``.  Each kernel is one nvcc run (about a second): keep
the configs few, the rest of the matrix is test_codegen.py's (sm_90) and the GPU tests'."""

import struct

import pytest

from tc_autotune import workloads
from tc_autotune.api.build import build
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.core import tasks
from tc_autotune.templates.tc_gemm.knobs import KNOBS
from tc_autotune.templates.tc_gemm.validity import INTRINSIC_REQUIRES
from tc_autotune.templates.registry import ConfigSpace

pytestmark = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

# workload class -> a small workload of it (small: nvcc's time grows with the unrolled tile, not the shape)
WORKLOAD_CLASSES = {
    "conv2d-fp16": "n=2,h=14,w=14,c=64,k=128,r=3,s=3,pad=1",
    "dense-fp16": "dense:m=256,n=512,k=256,b=nk",
    "conv2d-grouped": "n=2,h=14,w=14,c=64,k=128,r=3,s=3,pad=1,groups=2",
    "conv2d-ohwi": "n=2,h=14,w=14,c=64,k=128,r=3,s=3,pad=1,weight_layout=OHWI",  # nn.Conv2d channels_last
    "dense-fp8": "dense:m=256,n=512,k=512,b=nk,dtype=float8_e4m3,out_dtype=bfloat16",
}
# Classes the warp-specialized kernel does not take (one GEMM only): on Hopper, a seeded config of
# each of these paths instead of the starting tilings.
NOT_WARP_SPECIALIZED = {"conv2d-grouped": ("wgmma", "mma")}
# classes built for some arches only: fp8 takes only Hopper's wgmma (every sm_80 config is invalid)
CLASS_ARCHES = {"dense-fp8": ("sm_90",)}
# arch -> (how many starting tilings after the default, the paths of an arch that has none)
ARCHES = {
    "sm_80": (0, ("mma", "wmma")),  # Ampere: ldmatrix + mma.sync, WMMA; cp.async pipelines
    "sm_90": (2, ()),  # Hopper: the first two starting tilings, warp-specialized and persistent
}
# the Tensor Core instruction each path's kernel must contain
INSTRUCTION = {"wmma": "wmma::mma_sync", "mma": "mma.sync.aligned.m16n8k16", "wgmma": "wgmma.mma_async"}


def configs(spec: str, arch: str) -> list:
    """(label, config): the default config of the class's workload on ``arch``'s nominal GPU, then
    its first starting tilings, or a seeded config of each listed path."""
    workload, gpu = workloads.get(spec), gpu_for_arch(arch)
    space = tasks.of(workload).space(workload, gpu)
    starting, paths = ARCHES[arch]
    name = next(name for name, class_spec in WORKLOAD_CLASSES.items() if class_spec == spec)
    if starting and name in NOT_WARP_SPECIALIZED:
        starting, paths = 0, NOT_WARP_SPECIALIZED[name]
    out = [("default", space.default_config())]
    out += [(f"starting{i}", config) for i, config in enumerate(space.template.starting_configs(space)[:starting])]
    for path in paths:
        # wgmma's valid configs are a sliver of a draw: the knob values it requires are pinned too
        required = {knob: (value,) for knob, value in INTRINSIC_REQUIRES[path].items()} if path == "wgmma" else {}
        pinned = ConfigSpace(workload, gpu, {**KNOBS, "intrinsic": (path,), **required})
        out += [(path, config) for config in pinned.sample(1, seed=0)]
    assert len(out) == 1 + starting + len(paths), f"{spec} on {arch}: too few valid configs"
    return out


CASES = [(f"{name}-{arch}-{label}", spec, arch, config) for name, spec in WORKLOAD_CLASSES.items()
         for arch in CLASS_ARCHES.get(name, ARCHES) for label, config in configs(spec, arch)]


@pytest.mark.parametrize("spec,arch,config", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_each_workload_class_compiles_for_each_arch(spec, arch, config):
    kernel = build(spec, config, target=arch)
    assert kernel.config == config and kernel.arch == (arch + "a" if config.intrinsic == "wgmma" else arch)
    assert INSTRUCTION[config.intrinsic] in kernel.cuda_source
    if arch != "sm_90":
        assert "wgmma" not in kernel.cuda_source and "setmaxnreg" not in kernel.cuda_source
    assert kernel.cubin[:4] == b"\x7fELF" and len(kernel.cubin) > 1000  # nvcc made a cubin
    assert int(arch[3:]) in _cubin_sms(kernel.cubin)  # ... for this arch


def _cubin_sms(cubin: bytes) -> set[int]:
    """The SM a cubin is for, from its ELF e_flags: bits 8-15 in CUDA 13's ELF, 0-7 before."""
    flags = struct.unpack_from("<I", cubin, 48)[0]
    return {flags & 0xFF, flags >> 8 & 0xFF}


def test_hopper_covers_the_persistent_kernel_and_ampere_both_paths():
    """The configs above reach what each arch adds: the persistent warp-specialized kernel on
    sm_90, mma.sync and WMMA on sm_80."""
    for name, spec in WORKLOAD_CLASSES.items():
        hopper = [config for _, config in configs(spec, "sm_90")]
        if name in NOT_WARP_SPECIALIZED:
            assert {config.intrinsic for config in hopper} >= set(NOT_WARP_SPECIALIZED[name]), spec
            continue
        assert any(config.warp_specialized == 2 for config in hopper), spec
        if "sm_80" in CLASS_ARCHES.get(name, ARCHES):
            assert {config.intrinsic for _, config in configs(spec, "sm_80")} >= {"mma", "wmma"}, spec
