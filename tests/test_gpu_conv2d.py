"""On the GPU: every kernel of the matrix matches an fp32 reference; output poisoned first."""

import numpy as np
import pytest

from tc_autotune import build_conv2d
from tc_autotune import workloads
from tc_autotune.workloads.reference import conv2d_reference, random_inputs
from tc_autotune.core.results import relative_l2_error

from matrix import WORKLOADS, cases, variant_space

pytestmark = pytest.mark.gpu

CASES = cases(configs_per_variant=3, seed=5)
DTYPE_VARIANTS = [("float16", "float16"), ("float32", "float32"), ("float32", "float16")]


def check(workload, config, seed=0):
    import tvm

    from tc_autotune.backends.cuda.gpu import default_gpu

    if config.intrinsic == "wgmma" and default_gpu().arch != "sm_90":
        pytest.skip(f"wgmma needs a Hopper GPU, this one is {default_gpu().arch}")
    dev = tvm.cuda(0)
    kernel = build_conv2d(workload, config)
    data, weight = random_inputs(workload, seed)
    out = tvm.runtime.tensor(np.full(workload.out_shape, np.nan, workload.out_dtype), device=dev)
    kernel(data, weight, out)
    result = out.numpy()
    assert np.isfinite(result).all(), "some outputs were never written (NaN poison left)"
    err = relative_l2_error(result, conv2d_reference(workload, data, weight))
    assert err < 1e-2, f"relative L2 error {err:.3g} for {config}"
    return err


@pytest.mark.parametrize("spec,config", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matrix_matches_reference(spec, config):
    check(workloads.get(spec), config)


@pytest.mark.parametrize("dtypes", DTYPE_VARIANTS, ids=["-".join(d) for d in DTYPE_VARIANTS])
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_dtype_variants_match_reference(name, dtypes):
    wl = workloads.get(WORKLOADS[name]).replace(dtype=dtypes[0], out_dtype=dtypes[1])
    from tc_autotune import conv2d_space

    space = conv2d_space(wl)
    for config in [space.default_config(), *space.sample(2, seed=7)]:
        check(wl, config, seed=1)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_pipelined_variants_match_reference(name):
    """Every stage count and fragment double-buffering, on the default tiling."""
    from dataclasses import replace

    from tc_autotune import conv2d_space

    wl = workloads.get(WORKLOADS[name])
    space = conv2d_space(wl)
    base = replace(space.default_config(), split_k=1)
    checked = 0
    for stages in (1, 2, 3, 4):
        for frag_buffers in (1, 2):
            config = replace(base, stages=stages, frag_buffers=frag_buffers)
            if space.is_valid(config):
                check(wl, config)
                checked += 1
    assert checked >= 4


@pytest.mark.parametrize("name", ["b1-7x7-s2-c3", "odd-channels", "dilation2"])
def test_split_k_variants_match_reference(name):
    """Small grids: every valid split of K, fp32 and fp16 output."""
    from dataclasses import replace

    from tc_autotune import conv2d_space

    checked = 0
    for out_dtype in ("float32", "float16"):
        wl = workloads.get(WORKLOADS[name]).replace(out_dtype=out_dtype)
        space = conv2d_space(wl)
        base = replace(space.default_config(), split_k=1)
        for split_k in (2, 4, 8, 16):
            config = replace(base, split_k=split_k)
            if space.is_valid(config):
                check(wl, config)
                checked += 1
    assert checked >= 2


@pytest.mark.parametrize("variant", ["mma", "wgmma", "wgmma-in-flight"])
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_swizzled_paths_pipelined_and_split_match_reference(name, variant):
    """ldmatrix + mma.sync and wgmma (each k-step's groups waited for, or kept in flight) on
    swizzled tiles: one config per stage count and split/unsplit K, the first two also with
    fp16 output."""
    from tc_autotune.backends.cuda.gpu import default_gpu

    arch = default_gpu().arch
    if variant.startswith("wgmma") and arch != "sm_90":
        pytest.skip(f"wgmma needs a Hopper GPU, this one is {arch}")
    wl = workloads.get(WORKLOADS[name])
    picked = {}
    for config in variant_space(WORKLOADS[name], variant, arch).sample(400, seed=3):
        picked.setdefault((config.stages, config.split_k > 1), config)
    assert len(picked) >= (3 if variant == "wgmma-in-flight" else 4)  # in flight: 2 stages or more
    for i, config in enumerate(picked.values()):
        check(wl, config)
        if i < 2:
            check(wl.replace(out_dtype="float16"), config)
