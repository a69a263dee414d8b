"""On the GPU: dense kernels of every path and weight layout match numpy's matmul (output
poisoned first); an (N, K) weight (K-major B) on every path, WMMA shape and vector width."""

from dataclasses import replace

import numpy as np
import pytest

from tc_autotune import workloads
from tc_autotune.templates.tc_gemm.generator import DENSE_PROBES, probe_kernels
from tc_autotune.workloads.reference import dense_inputs, dense_reference
from tc_autotune.core.results import relative_l2_error

pytestmark = pytest.mark.gpu


def check(workload, config, seed=0):
    import tvm

    from tc_autotune.backends.cuda.gpu import default_gpu
    from tc_autotune.api.build import build_dense

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
# output, wmma (every shape) / mma / wgmma.
@pytest.mark.parametrize("index", range(len(DENSE_PROBES)), ids=[p[0] for p in DENSE_PROBES])
def test_dense_probes_match_numpy(index):
    check(*probe_kernels(DENSE_PROBES)[index])


@pytest.mark.parametrize("spec", ["dense:m=1,n=1000,k=2048,b=nk", "dense:m=33,n=72,k=200",
                                  "dense:batch=3,m=5,n=64,k=96,b=nk,out_dtype=float16"])
def test_default_and_sampled_configs_match_numpy(spec):
    from tc_autotune.templates.registry import dense_space

    wl = workloads.get(spec)
    space = dense_space(wl)
    for config in [space.default_config(), *space.sample(1, seed=3)]:
        check(wl, config, seed=1)


_MMA = dict(intrinsic="mma", offset_a=0, offset_b=0)
_WGMMA = dict(_MMA, intrinsic="wgmma", block_row_warps=4, chunk=4)
# An (N, K) weight, stored [n][k] in shared memory: (spec, knob changes from the probes'
# config, vec_b 8): every WMMA shape, mma, wgmma, split-K, batched A, fp16 output, N and K
# that no tile divides, and K runs of 98 and 100 (vec_b 2 and 4).
K_MAJOR = (
    ("dense:m=200,n=136,k=264,b=nk", dict(wmma="m8n32k16", warp_row_tiles=4, stages=2)),
    ("dense:m=200,n=136,k=264,b=nk", dict(wmma="m32n8k16", warp_col_tiles=4, stages=3, frag_buffers=2)),
    ("dense:batch=3,m=37,n=200,k=200,b=nk,out_dtype=float16", dict(split_k=4, stages=2)),
    ("dense:m=33,n=72,k=98,b=nk", dict(vec_a=2, vec_b=2, stages=2)),
    ("dense:m=64,n=40,k=100,b=nk", dict(vec_a=4, vec_b=4, stages=2, split_k=2)),
    ("dense:m=16,n=4096,k=4096,b=nk", dict(_MMA, block_row_warps=1, warp_row_tiles=1, split_k=8, stages=3)),
    ("dense:batch=2,m=100,n=200,k=520,b=nk,out_dtype=float16", dict(_MMA, stages=2, frag_buffers=2)),
    ("dense:m=300,n=200,k=520,b=nk", dict(_WGMMA, warp_col_tiles=4, stages=3)),
    ("dense:m=128,n=512,k=4096,b=nk", dict(_WGMMA, warp_col_tiles=8, block_col_warps=1, split_k=4, stages=2)),
)


@pytest.mark.parametrize("case", K_MAJOR, ids=[f"{spec}/{c.get('intrinsic', c.get('wmma', 'wmma'))}"
                                                for spec, c in K_MAJOR])
def test_k_major_weight_configs_match_numpy(case):
    [(workload, config)] = probe_kernels([case])
    check(workload, config, seed=2)


def test_every_weight_vector_width_and_pipeline_matches_numpy():
    """An (N, K) weight copied along K 1, 2, 4 or 8 elements at a time, plain or cp.async."""
    from tc_autotune.templates.registry import dense_space

    [(wl, base)] = probe_kernels([("dense:m=200,n=136,k=264,b=nk", {})])
    space = dense_space(wl)
    for vec_b in (1, 2, 4, 8):
        for stages in (1, 2, 3):
            config = replace(base, vec_b=vec_b, stages=stages)
            assert space.why_invalid(config) is None
            check(wl, config)

# A small dense tune then a build from its best record: tests/test_gpu_tune.py.
