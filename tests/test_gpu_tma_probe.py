"""On a Hopper GPU: TMA (tile mode, 128-byte swizzle, mbarrier transaction counts) fills shared
tiles exactly as the package's wgmma descriptors read them (A, an (N, K) B, the atoms of a (K, N)
B), and the package's wgmma calls on TMA-loaded tiles, alone and in a 3-stage warp-specialised
pipeline, give numpy's C."""

import pytest

from probes import tma_wgmma_probe as probe
from tc_autotune.backends.cuda.toolkit import find_nvcc

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    from tc_autotune.backends.cuda.gpu import default_gpu

    if default_gpu().arch != "sm_90":
        pytest.skip(f"TMA + wgmma need a Hopper GPU, this one is {default_gpu().arch}")
    if find_nvcc() is None:
        pytest.skip("needs nvcc (set CUDA_HOME or put nvcc on PATH)")
    return probe.build(tmp_path_factory.mktemp("tma_probe"), find_nvcc())[0]


@pytest.mark.parametrize("seed", [0, 1])
def test_tma_tiles_are_the_wgmma_layout_and_c_matches_numpy(binary, tmp_path, seed):
    mats = probe.inputs(seed)
    assert probe.mismatches(probe.run(binary, tmp_path, mats), probe.expected(mats)) == []
