"""On a Hopper GPU (sm_90): swap_ab kernels (a small-M dense computed as C^T = B^T A^T by the
warp-specialized kernel, stored into C transposed) against the fp32 reference: M in {1, 16, 40} at every
swap_ab that M takes (8-64 tokens a block: a partial last block, a half-fragment wgmma at 8), fp8 (e4m3,
per-tensor scales != 1) and fp16, with and without a bias; the probe kernels of every variant (split-K,
persistent, two consumers along the weight rows, an e5m2 B, a batch, an odd N, fused epilogues); the
starting configs of the small-M fp8 and fp16 LLM shapes.  NaN-poisoned outputs: every element written."""

import pytest

from tc_autotune.core import tasks
from tc_autotune.templates.tc_gemm.generator import SWAP_PROBES, probe_kernels
from tc_autotune.templates.tc_gemm.knobs import KNOBS, TcGemmConfig
from tc_autotune import workloads

pytestmark = pytest.mark.gpu

# as test_gpu_fp8's (fp8: the Tensor Cores' accumulation and the 2-byte output's rounding) and fp16's
LIMITS = {"float32": 5e-3, "float16": 5e-3, "bfloat16": 8e-3}
DTYPES = {"fp8": ",dtype=float8_e4m3,out_dtype=bfloat16", "fp16": ",out_dtype=float16"}
SWAP = probe_kernels(SWAP_PROBES)[0][1]
# (M, swap_ab): every swap_ab the rules let each M take
CASES = [(m, s) for m in (1, 16, 40) for s in KNOBS["swap_ab"] if 0 < s < 2 * (-(-m // 8) * 8)]


def check(workload, config, seed=0):
    from test_gpu_bf16 import checked_kernel
    from test_gpu_fp8 import _gpu

    space = tasks.of(workload).space(workload, _gpu())
    assert space.why_invalid(config) is None, space.why_invalid(config)
    return checked_kernel(workload, config, seed, LIMITS[workload.out_dtype])


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("epilogue", ["none", "bias"])
@pytest.mark.parametrize("m,swap_ab", CASES, ids=[f"m{m}-swap{s}" for m, s in CASES])
def test_swapped_kernels_match_the_fp32_reference(m, swap_ab, epilogue, dtype):
    """N = 1088 (17 blocks of 64 weight rows), K = 1024: 16 (fp8) or 8 k-steps (fp16) on an 8-16 stage ring."""
    spec = f"dense:m={m},n=1088,k=1024,b=nk{DTYPES[dtype]},epilogue={epilogue}"
    config = TcGemmConfig(**{**SWAP.as_dict(), "swap_ab": swap_ab, "stages": 4 if swap_ab < 64 else 3})
    check(workloads.get(spec), config, seed=m + swap_ab)


@pytest.mark.parametrize("index", range(len(SWAP_PROBES)), ids=[p[0] for p in SWAP_PROBES])
def test_swap_probes_of_every_variant_match_the_fp32_reference(index):
    check(*probe_kernels(SWAP_PROBES)[index], seed=index)


@pytest.mark.parametrize("spec", ["dense:m=16,n=4096,k=4096,b=nk,dtype=float8_e4m3,out_dtype=bfloat16",
                                  "llm-4096x4096-m16", "dense:m=40,n=1024,k=4096,b=nk,epilogue=bias_gelu"])
def test_the_swapped_starting_configs_match_the_reference(spec):
    from test_gpu_fp8 import _gpu

    from tc_autotune.templates.tc_gemm.starting_tilings import starting_configs

    wl = workloads.get(spec)
    space = tasks.of(wl).space(wl, _gpu())
    swapped = [c for c in starting_configs(space) if c.swap_ab]
    assert swapped
    for config in swapped:
        check(wl, config)
