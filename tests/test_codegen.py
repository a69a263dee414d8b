"""CUDA code generation for the test matrix: WMMA calls of the right shape, nvcc accepts it."""

import re

import pytest

from tc_autotune import build_conv2d, workloads
from tc_autotune.cuda import find_nvcc

from matrix import cases

pytestmark = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

CASES = cases(configs_per_shape=2, seed=11)


@pytest.mark.parametrize("spec,config", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kernel_source_uses_wmma_and_compiles_for_sm90(spec, config):
    kernel = build_conv2d(spec, config, target="sm_90")
    m, n, k = config.wmma_mnk
    src = kernel.cuda_source
    assert "wmma::mma_sync" in src
    frags = set(re.findall(r"fragment<nvcuda::wmma::(\w+), (\d+), (\d+), (\d+)", src))
    assert frags == {(kind, str(m), str(n), str(k)) for kind in ("matrix_a", "matrix_b", "accumulator")}
    threads = re.search(r"__launch_bounds__\((\d+)\)", src)
    assert int(threads.group(1)) == config.threads
    # nvcc produced a real sm_90 cubin (ELF), not an empty file
    assert kernel.cubin[:4] == b"\x7fELF" and len(kernel.cubin) > 1000
    assert kernel.config == config and kernel.workload == workloads.get(spec)


def test_default_config_builds_for_every_preset_kind():
    for name in ("tutorial", "rfc-1x1-b1", "rfc-3x3-b512", "resnet50-res5-3x3-512-512-s2-b1"):
        kernel = build_conv2d(name, target="sm_90")
        assert "wmma::mma_sync" in kernel.cuda_source


def test_fp16_output_and_fp32_input_are_cast_in_the_kernel():
    wl = workloads.get("n=2,h=8,c=16,k=32,r=3,pad=1,dtype=float32,out_dtype=float16")
    src = build_conv2d(wl, target="sm_90").cuda_source
    assert "float* __restrict__ data" in src and "half* __restrict__ out" in src
    assert "__float2half" in src


def test_invalid_config_is_refused_with_its_reason():
    from dataclasses import replace

    wl = workloads.get("n=1,h=8,c=3,k=16,r=1")
    config = replace(build_conv2d(wl, target="sm_90").config, vec_a=8)
    with pytest.raises(ValueError, match="vec_a=8 does not divide the 3 input channels"):
        build_conv2d(wl, config, target="sm_90")
    with pytest.raises(ValueError, match="not in the space"):
        build_conv2d(wl, replace(config, chunk=3), target="sm_90")
