"""On a Hopper GPU (sm_90): fp8 dense kernels (``dtype=float8_e4m3fn``, issue #32 item 4), e4m3 and e5m2
B, per-tensor scales != 1, fp32, fp16 and bf16 output, fused epilogues, checked against the fp32
reference of the fp8-rounded operands: every variant of the warp-specialized kernel
(``generator.FP8_PROBES``), the default, sampled and starting configs, a transformer-sized K; an fp8
workload through the measurer (its stored fp8 inputs) and the benchmark; the ``torch._scaled_mm``
baseline; the config an untuned fp8 workload gets; PyTorch's face (``tc.dense`` on fp8 tensors with
their scales, the op, ``torch.compile``) and ``tc.dense`` on numpy fp8 arrays."""

import dataclasses

import numpy as np
import pytest

from tc_autotune.core import tasks
from tc_autotune.core.results import TOLERANCE, relative_l2_error
from tc_autotune.templates.tc_gemm.generator import FP8_PROBES, probe_kernels
from tc_autotune import workloads

pytestmark = pytest.mark.gpu

# fp8 products are exact in fp32; wgmma accumulates them in the Tensor Cores' own accumulators (fewer
# bits than fp32's 24), so an fp32 output differs from the fp32 reference by that accumulation; 2-byte
# outputs add their rounding (bf16: ~1e-3 relative L2).  All inside the measurement's tolerance (1e-2).
LIMITS = {"float32": 5e-3, "float16": 5e-3, "bfloat16": 8e-3}
DENSE = "dense:m=200,n=136,k=272,b=nk,dtype=float8_e4m3,out_dtype=bfloat16"
SCALED_MM_DENSE = "dense:m=192,n=144,k=256,b=nk,dtype=float8_e4m3,out_dtype=bfloat16"


def _gpu():
    from tc_autotune.backends.cuda.gpu import default_gpu

    gpu = default_gpu()
    if gpu.arch != "sm_90":
        pytest.skip(f"fp8 takes Hopper's wgmma (sm_90), this GPU is {gpu.arch}")
    return gpu


def check(workload, config=None, seed=0, limit=None):
    """Build (config None: the one ``build`` picks), run on NaN-poisoned output, compare with the
    fp32 reference; returns (kernel, relative L2 error)."""
    from test_gpu_bf16 import checked_kernel

    _gpu()
    return checked_kernel(workload, config, seed, limit or LIMITS[workload.out_dtype])


@pytest.mark.parametrize("index", range(len(FP8_PROBES)), ids=[p[0] for p in FP8_PROBES])
def test_fp8_probes_of_every_kernel_variant_match_the_fp32_reference(index):
    """e4m3 and e5m2 B, fp32/fp16/bf16 output, epilogues (bias_gelu, bias_residual_relu,
    scale_bias_relu), split-K over a cluster, persistent with TMA stores, ping-pong with setmaxnreg,
    consumers along M with B multicast, a batch, M=1, an odd N."""
    check(*probe_kernels(FP8_PROBES)[index], seed=index)


def test_a_kernel_that_dropped_a_scale_would_be_caught():
    """The scales are != 1 and the check tells them apart: the reference of other scales is far."""
    wl = workloads.get(DENSE)
    task = tasks.of(wl)
    data, weight, scale_a, scale_b = task.inputs(wl, seed=0)
    right = task.reference(wl, data, weight, scale_a, scale_b)
    assert relative_l2_error(task.reference(wl, data, weight, scale_a, np.ones(1, np.float32)), right) > 0.5
    check(wl, tasks.of(wl).space(wl, _gpu()).default_config())


@pytest.mark.parametrize("spec", [
    DENSE, DENSE.replace("bfloat16", "float32") + ",epilogue=bias_gelu",
    "dense:batch=3,m=5,n=64,k=96,b=nk,dtype=float8_e4m3,b_dtype=float8_e5m2,out_dtype=float16,epilogue=bias_residual",
    "dense:m=16,n=1024,k=2048,b=nk,dtype=float8_e4m3,out_dtype=bfloat16",
])
def test_default_sampled_and_starting_configs_of_fp8_workloads_match_the_reference(spec):
    from tc_autotune.templates.tc_gemm.starting_tilings import starting_configs

    wl = workloads.get(spec)
    space = tasks.of(wl).space(wl, _gpu())
    for config in [space.default_config(), *space.sample(2, seed=5), *starting_configs(space)]:
        assert config.intrinsic == "wgmma" and config.warp_specialized
        check(wl, config, seed=1)


@pytest.mark.parametrize("spec", ["dense:m=128,n=512,k=11008,b=nk,dtype=float8_e4m3,out_dtype=float32",
                                  "dense:m=16,n=256,k=4096,b=nk,dtype=float8_e4m3,b_dtype=float8_e5m2,out_dtype=float32"])
def test_a_transformer_sized_k_stays_inside_the_measurements_tolerance(spec):
    """wgmma's fp8 accumulation is never promoted to CUDA-core fp32 partway (fast accumulation, as
    torch._scaled_mm's use_fast_accum=True): over the llm shapes' K (4096, 11008) its error must stay
    inside the tolerance every measurement checks, whatever the split."""
    wl = workloads.get(spec)
    space = tasks.of(wl).space(wl, _gpu())
    errors = [check(wl, config, limit=TOLERANCE)[1] for config in [space.default_config(), *space.sample(2, seed=3)]]
    print(f"{spec}: relative L2 errors {', '.join(f'{e:.2e}' for e in errors)}")


def test_an_fp8_workload_through_the_measurer_and_the_benchmark():
    """LocalMeasurer stores fp8 inputs (as bytes: npz cannot read fp8 descriptors back) and the
    scales, and checks the output on the device; checked_kernel_time checks and times as the
    benchmark does."""
    from test_gpu_bf16 import measure_and_benchmark

    gpu = _gpu()
    for spec in (DENSE, "dense:m=64,n=256,k=512,b=nk,dtype=float8_e4m3,b_dtype=float8_e5m2,out_dtype=float16,"
                        "epilogue=bias_gelu"):
        measure_and_benchmark(workloads.get(spec), gpu, samples=2, limit=LIMITS)


@pytest.mark.parametrize("spec", [
    # torch._scaled_mm takes dimensions that are multiples of 16 only (DENSE's N = 136 is refused)
    SCALED_MM_DENSE + ",epilogue=bias_gelu",  # the bias fused in _scaled_mm, gelu after
    SCALED_MM_DENSE.replace("bfloat16", "float32") + ",epilogue=bias_relu",  # fp32 output: the ops in fp32
    "dense:batch=2,m=64,n=256,k=512,b=nk,dtype=float8_e4m3,b_dtype=float8_e5m2,out_dtype=float16,"
    "epilogue=scale_bias_residual_relu",
    "dense:m=1,n=4096,k=4096,b=nk,dtype=float8_e4m3,out_dtype=bfloat16",  # a single token
    "dense:m=2048,n=4096,k=4096,b=nk,dtype=float8_e4m3,out_dtype=bfloat16",
])
def test_the_scaled_mm_baseline_matches_the_reference_and_is_timed(spec, cuda_torch):
    from tc_autotune.measure import baseline
    from tc_autotune.measure.checked_timing import task_arrays

    _gpu()
    wl = workloads.get(spec)
    arrays = task_arrays(wl)
    _, out = baseline.cublas_dense(wl, *arrays[:-1])  # dispatches fp8 to scaled_mm_dense
    assert out.shape == wl.out_shape and relative_l2_error(out, arrays[-1]) < 1e-2
    seconds, err = tasks.of(wl).baseline(wl, *arrays, number=5, repeat=3, min_repeat_ms=1)
    assert seconds is not None and 0 < seconds < 0.1 and err < 1e-2
    assert tasks.of(wl).baseline_of(wl) == "torch._scaled_mm"


def test_an_untuned_fp8_workload_gets_a_valid_config_that_is_right():
    """Without an fp8 record: a 16-bit record of its shape whose config fp8 takes (the
    warp-specialized kernel's), else the default config (dense has no zero-shot pick)."""
    from tc_autotune.api.apply import choose_config

    gpu = _gpu()
    for spec in ("dense:m=2048,n=4096,k=4096,b=nk,dtype=float8_e4m3,out_dtype=bfloat16",
                 "dense:m=16,n=4096,k=4096,b=nk,dtype=float8_e4m3,out_dtype=bfloat16"):
        wl = workloads.get(spec)
        choice = choose_config(wl, gpu, warn=False)
        assert choice.source in ("record", "sibling", "default") and choice.config.warp_specialized, choice
        check(wl, choice.config)


# ---- PyTorch ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch(cuda_torch):
    import tc_autotune.pytorch  # noqa: F401 (registers the ops)

    _gpu()
    return cuda_torch


def _fp8(torch, shape, low, high, dtype, gen):
    return (torch.rand(*shape, device="cuda", generator=gen) * (high - low) + low).to(dtype)


def test_fp8_tensors_take_fp8_kernels_through_tc_dense_and_the_op(torch):
    import tc_autotune as tc
    from tc_autotune.pytorch import ops

    ops.reset_fallbacks()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 references, not TF32's
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = _fp8(torch, (3 * 128, 256), -4, 4, torch.float8_e4m3fn, gen)
    w = _fp8(torch, (512, 256), -1, 1, torch.float8_e4m3fn, gen)
    w5 = _fp8(torch, (512, 256), -1, 1, torch.float8_e5m2, gen)
    scale_a, scale_b = torch.tensor([0.25], device="cuda"), torch.tensor(1 / 16, device="cuda")  # 0-d: as _scaled_mm
    bias = torch.randn(512, device="cuda", generator=gen)
    for weight in (w, w5):
        acc = a.float() @ weight.float().t() * (0.25 / 16)
        ref = torch.nn.functional.gelu(acc + bias, approximate="tanh")
        y = tc.dense(a, weight, bias=bias, activation="gelu", scale_a=scale_a, scale_b=scale_b)  # fp32 by default
        assert y.dtype == torch.float32 and relative_l2_error(y.cpu().numpy(), ref.cpu().numpy()) < 5e-3
        z = ops.dense_nk(a, weight, None, bias, None, "gelu", scale_a=scale_a, scale_b=scale_b)  # the op's: bf16
        assert z.dtype == torch.bfloat16 and relative_l2_error(z.float().cpu().numpy(), ref.cpu().numpy()) < 1e-2
        h = tc.dense(a, weight, out_dtype="float16", scale_a=scale_a, scale_b=scale_b)
        assert h.dtype == torch.float16 and relative_l2_error(h.float().cpu().numpy(), acc.cpu().numpy()) < 5e-3
    # against torch._scaled_mm itself
    expected = torch._scaled_mm(a, w.t(), scale_a=scale_a, scale_b=scale_b.reshape(1), bias=bias.bfloat16(),
                                out_dtype=torch.bfloat16)
    got = tc.dense(a, w, out_dtype="bfloat16", bias=bias, scale_a=scale_a, scale_b=scale_b)
    assert relative_l2_error(got.float().cpu().numpy(), expected.float().cpu().numpy()) < 1e-2
    # (not opcheck's test_schema: it compares fp8 tensors with ops PyTorch has no fp8 kernel of, "mul")
    torch.library.opcheck(torch.ops.tc_autotune.dense.default,
                          (a, w, None, bias, None, "gelu", torch.bfloat16, scale_a, scale_b.reshape(1)),
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
    compiled = torch.compile(lambda x: ops.dense_nk(x, w, None, bias, None, "relu", scale_a=scale_a,
                                                    scale_b=scale_b), fullgraph=True)
    assert relative_l2_error(compiled(a).float().cpu().numpy(),
                             ops.dense_nk(a, w, None, bias, None, "relu", scale_a=scale_a,
                                          scale_b=scale_b).float().cpu().numpy()) < 1e-3
    torch._dynamo.reset()
    assert not ops.fallbacks(), ops.fallbacks()


def test_tc_dense_takes_numpy_fp8_arrays_with_their_scales():
    import tc_autotune as tc

    _gpu()
    wl = workloads.get("dense:m=64,n=128,k=256,b=nk,dtype=float8_e4m3,b_dtype=float8_e5m2,out_dtype=float32")
    data, weight, scale_a, scale_b = tasks.of(wl).inputs(wl, seed=4)
    out = tc.dense(data, weight, scale_a=scale_a, scale_b=scale_b).numpy()
    assert relative_l2_error(out, tasks.of(wl).reference(wl, data, weight, scale_a, scale_b)) < LIMITS["float32"]
    with pytest.raises(ValueError, match="fp8 operands need both per-tensor scales"):
        tc.dense(data, weight)
    assert dataclasses.replace(wl, b_dtype=None).weight_dtype == "float8_e4m3fn"
