"""On the GPU: dense kernels of every path and weight layout match numpy's matmul (output
poisoned first)."""

from dataclasses import replace

import numpy as np
import pytest

from tc_autotune import workloads
from tc_autotune.generator import DENSE_PROBES, probe_kernels
from tc_autotune.reference import dense_inputs, dense_reference, relative_l2_error

pytestmark = pytest.mark.gpu


def check(workload, config, seed=0):
    import tvm

    from tc_autotune.gpu import default_gpu
    from tc_autotune.kernel import build_dense

    if config is not None and config.intrinsic == "wgmma" and default_gpu().arch != "sm_90":
        pytest.skip(f"wgmma needs a Hopper GPU, this one is {default_gpu().arch}")
    kernel = build_dense(workload, config)
    data, weight = dense_inputs(workload, seed)
    out = tvm.runtime.tensor(np.full(workload.out_shape, np.nan, workload.out_dtype), device=tvm.cuda(0))
    result = kernel(data, weight, out).numpy()
    assert np.isfinite(result).all(), "some outputs were never written (NaN poison left)"
    err = relative_l2_error(result, dense_reference(workload, data, weight))
    assert err < 1e-2, f"relative L2 error {err:.3g} for {workload} {kernel.config}"


# The generator's dense probes: both weight layouts, batched A, M=16 with split-K, fp16
# output, wmma / mma / wgmma.
@pytest.mark.parametrize("index", range(len(DENSE_PROBES)), ids=[p[0] for p in DENSE_PROBES])
def test_dense_probes_match_numpy(index):
    check(*probe_kernels(DENSE_PROBES)[index])


@pytest.mark.parametrize("spec", ["dense:m=1,n=1000,k=2048,b=nk", "dense:m=33,n=72,k=200",
                                  "dense:batch=3,m=5,n=64,k=96,b=nk,out_dtype=float16"])
def test_default_and_sampled_configs_match_numpy(spec):
    from tc_autotune.space import dense_space

    wl = workloads.get(spec)
    space = dense_space(wl)
    for config in [space.default_config(), *space.sample(1, seed=3)]:
        check(wl, config, seed=1)


def test_pipelined_scalar_weight_loads_match_numpy():
    """An (N, K) weight is copied element by element while A's copies are cp.async."""
    from tc_autotune.space import dense_space

    wl = workloads.get("dense:m=200,n=136,k=264,b=nk")
    space = dense_space(wl)
    base = space.default_config()
    for stages in (1, 2, 3):
        config = replace(base, stages=stages, split_k=1)
        if space.is_valid(config):
            check(wl, config)

# A small dense tune then a build from its best record: tests/test_gpu_tune.py.
