"""On the GPU (sm_80+; wgmma and the warp-specialized kernel on Hopper): bf16 kernels (``dtype=bfloat16``,
issue #32) of every path, fp32 and bf16 output, fused epilogues, checked against the fp32
reference; the default, sampled and starting configs of a bf16 conv and dense; a bf16 workload
through the measurer (its stored bf16 inputs, the device check of a bf16 output) and the benchmark;
the bf16 baselines (cuDNN, cuBLAS); the config a bf16 workload gets untuned; and PyTorch's face
with bf16 tensors (``tc.conv2d`` / ``tc.dense``, the ops, ``optimize`` and ``torch.compile``)."""

import dataclasses

import numpy as np
import pytest

from tc_autotune.core import tasks
from tc_autotune.core.results import relative_l2_error
from tc_autotune.templates.tc_gemm.generator import BF16_PROBES, probe_kernels
from tc_autotune import workloads
from tc_autotune.workloads.reference import host_dtype

pytestmark = pytest.mark.gpu

# fp32 output of exact bf16 operands: fp32 accumulation error only; bf16 output: its own rounding
# (8 significant bits, ~1e-3 relative L2), well inside the measurement's tolerance (1e-2)
LIMITS = {"float32": 1e-4, "bfloat16": 5e-3}
CONV = "n=4,h=14,c=64,k=128,r=3,pad=1,dtype=bfloat16"
DENSE = "dense:m=200,n=136,k=264,b=nk,dtype=bfloat16"


def _gpu():
    from tc_autotune.backends.cuda.gpu import default_gpu

    gpu = default_gpu()
    if int(gpu.arch[3:]) < 80:
        pytest.skip(f"bf16 Tensor Cores need sm_80 or newer, this GPU is {gpu.arch}")
    return gpu


def check(workload, config=None, seed=0):
    """Build (config None: the one ``build`` picks), run on NaN-poisoned output, compare with the
    fp32 reference; returns the kernel."""
    gpu = _gpu()
    if config is not None and config.intrinsic == "wgmma" and gpu.arch != "sm_90":
        pytest.skip(f"wgmma needs a Hopper GPU, this one is {gpu.arch}")
    return checked_kernel(workload, config, seed, LIMITS[workload.out_dtype])[0]


def checked_kernel(workload, config, seed: int, limit: float):
    """(kernel, relative L2 error): ``check``'s build, run on NaN-poisoned output and comparison,
    the error under ``limit``.  (``test_gpu_fp8`` checks fp8 kernels with it.)"""
    import tvm

    from tc_autotune.api.build import build

    kernel = build(workload, config)
    task = tasks.of(workload)
    inputs = task.inputs(workload, seed=seed)
    out = tvm.runtime.tensor(np.full(workload.out_shape, np.nan, host_dtype(workload.out_dtype)), device=tvm.cuda(0))
    result = kernel(*inputs, out).numpy()
    assert result.dtype == host_dtype(workload.out_dtype)
    assert np.isfinite(result.astype(np.float32)).all(), "some outputs were never written (NaN poison left)"
    err = relative_l2_error(result, task.reference(workload, *inputs))
    assert err < limit, f"relative L2 error {err:.3g} for {workload} {kernel.config}"
    return kernel, err


@pytest.mark.parametrize("index", range(len(BF16_PROBES)), ids=[p[0] for p in BF16_PROBES])
def test_bf16_probes_of_every_path_match_the_fp32_reference(index):
    """WMMA (3 shapes), mma.sync (split-K too), wgmma (groups in flight too), the warp-specialized
    kernel (A by TMA boxes, gathered, by im2col; C by TMA stores), fp32 and bf16 output, epilogues."""
    check(*probe_kernels(BF16_PROBES)[index], seed=index)


@pytest.mark.parametrize("spec", [CONV, CONV + ",out_dtype=bfloat16,epilogue=bias_residual_relu", DENSE,
                                  "dense:batch=3,m=5,n=64,k=96,dtype=bfloat16,out_dtype=bfloat16,epilogue=bias_gelu"])
def test_default_sampled_and_starting_configs_of_bf16_workloads_match_the_reference(spec):
    from tc_autotune.templates.tc_gemm.starting_tilings import starting_configs

    wl = workloads.get(spec)
    space = tasks.of(wl).space(wl, _gpu())
    for config in [space.default_config(), *space.sample(2, seed=5), *starting_configs(space)[:3]]:
        check(wl, config, seed=1)


def test_an_untuned_bf16_workload_builds_from_its_fp16_siblings_records_or_zero_shot():
    """Without a bf16 record, a shipped fp16 record of the same GEMM (``apply.same_gemm``), else a
    zero-shot pick: valid for bf16, and right."""
    from tc_autotune.api.apply import choose_config

    gpu = _gpu()
    # a nightly workload tuned in fp16 only (the bf16 jobs tune the seeds and LLM shapes)
    wl = workloads.get("resnet50-res4-1x1-512-256-b1").replace(dtype="bfloat16", out_dtype="bfloat16")
    choice = choose_config(wl, gpu, warn=False)
    if gpu.arch == "sm_90":  # the shipped logs have the fp16 workload's records on Hopper
        assert choice.source == "sibling" and "dtype=float16" in choice.log, choice
    check(wl, choice.config)


def test_a_bf16_workload_through_the_measurer_and_the_benchmark():
    """LocalMeasurer stores bf16 inputs (npz keeps no bf16 dtype) and checks a bf16 output on the
    device; checked_kernel_time checks and times as the benchmark does."""
    gpu = _gpu()
    for spec in (CONV + ",out_dtype=bfloat16,epilogue=bias_residual_relu", DENSE):
        measure_and_benchmark(workloads.get(spec), gpu, samples=1, limit=LIMITS)


def measure_and_benchmark(wl, gpu, samples: int, limit: dict) -> None:
    """The default config and ``samples`` sampled ones measured by a LocalMeasurer (checked on the
    device, then timed), and the default one checked and timed as the benchmark does, its error
    under ``limit[out_dtype]``.  (``test_gpu_fp8`` measures fp8 workloads with it.)"""
    from tc_autotune.api.build import build
    from tc_autotune.measure.measurer import LocalMeasurer, MeasureOptions
    from tc_autotune.measure.checked_timing import checked_kernel_time, task_arrays

    space = tasks.of(wl).space(wl, gpu)
    configs = [space.default_config(), *space.sample(samples, seed=2)]
    options = MeasureOptions(build_workers=2, run_timeout=60, repeat=3, min_repeat_ms=5)
    with LocalMeasurer(space, options) as measure:
        for result in measure(configs):
            assert result.ok and all(0 < c < 0.1 for c in result.costs), result.error_msg
    seconds, err = checked_kernel_time(build(wl, configs[0]), wl, *task_arrays(wl), number=5, repeat=3,
                                       min_repeat_ms=1)
    assert seconds is not None and err < limit[wl.out_dtype]


@pytest.mark.parametrize("spec", [CONV + ",out_dtype=bfloat16,epilogue=scale_bias_residual_relu",
                                  "rfc-1x1-b32", DENSE + ",out_dtype=bfloat16,epilogue=bias_gelu",
                                  "llm-4096x4096-m128"])
def test_the_baselines_compute_bf16_workloads_in_bf16(spec, cuda_torch):
    """cuDNN and cuBLAS on bf16 tensors (bf16 output, the epilogue's ops in bf16), checked first."""
    from tc_autotune.measure import baseline
    from tc_autotune.measure.checked_timing import task_arrays

    wl = dataclasses.replace(workloads.get(spec), dtype="bfloat16")  # the presets' fp16 shapes too
    arrays = task_arrays(wl)
    run = baseline.cudnn_conv2d if isinstance(wl, workloads.Conv2dWorkload) else baseline.cublas_dense
    _, out = run(wl, *arrays[:-1])
    assert baseline.torch_dtype(wl) == cuda_torch.bfloat16
    assert relative_l2_error(out, arrays[-1]) < 1e-2  # bf16 output, bf16 epilogue ops
    timed = (baseline.checked_cudnn_time if run is baseline.cudnn_conv2d else baseline.checked_cublas_time)
    seconds, err = timed(wl, *arrays, number=5, repeat=3, min_repeat_ms=1)
    assert seconds is not None and 0 < seconds < 0.1 and err < 1e-2


# ---- PyTorch ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch(cuda_torch):
    import tc_autotune.pytorch  # noqa: F401 (registers the ops)

    _gpu()
    return cuda_torch


def rel_err(out, ref):
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())


def test_bf16_tensors_take_bf16_kernels_through_tc_conv2d_tc_dense_and_the_ops(torch):
    import tc_autotune as tc
    from tc_autotune.pytorch import ops

    ops.reset_fallbacks()
    # fp32 references, not TF32's (cuDNN's fp32 conv takes TF32 by default)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(0)
    data = torch.randn(2, 14, 14, 64, device="cuda", generator=gen).bfloat16()
    weight = (torch.randn(3, 3, 64, 128, device="cuda", generator=gen) * 0.05).bfloat16()
    bias, residual = torch.randn(128, device="cuda", generator=gen), torch.randn(2, 14, 14, 128, device="cuda").bfloat16()
    ref = ops.conv2d_reference(data.float(), weight.float(), None, bias, residual.float(), [1, 1], [1, 1, 1, 1],
                               [1, 1], "relu", torch.float32)
    y32 = tc.conv2d(data, weight, padding=1, bias=bias, residual=residual.float(), activation="relu")
    assert y32.dtype == torch.float32 and rel_err(y32, ref) < 1e-3  # fp32 output: tc.conv2d's default
    y16 = ops.conv2d_nhwc(data, weight, None, bias, residual, 1, 1, 1, "relu")  # the ops' default: bf16
    assert y16.dtype == torch.bfloat16 and rel_err(y16, ref) < 1e-2
    a, w = torch.randn(3, 128, 256, device="cuda").bfloat16(), (torch.randn(512, 256, device="cuda") * 0.05).bfloat16()
    z = tc.dense(a.view(-1, 256), w, out_dtype="bfloat16", bias=bias.repeat(4), activation="gelu")
    zref = torch.nn.functional.gelu(a.view(-1, 256).float() @ w.float().t() + bias.repeat(4), approximate="tanh")
    assert z.dtype == torch.bfloat16 and rel_err(z, zref) < 1e-2
    torch.library.opcheck(torch.ops.tc_autotune.dense.default,
                          (a, w, None, bias.repeat(4), None, "gelu", torch.bfloat16))
    assert not ops.fallbacks(), ops.fallbacks()


def test_optimize_runs_a_bf16_model_on_bf16_kernels_and_compiles(torch):
    import sys
    from pathlib import Path

    import tc_autotune as tc
    from tc_autotune.pytorch import FusedConv2d, FusedLinear, fallbacks, reset_fallbacks

    sys.path.insert(0, str(Path(__file__).parent))
    from pytorch_models import SmallNet

    torch.manual_seed(0)
    model = SmallNet().eval().cuda()
    x = torch.randn(4, 3, 32, 32, device="cuda")
    with torch.no_grad():
        expected = model(x)
    model = model.bfloat16().to(memory_format=torch.channels_last)
    xb = x.bfloat16().to(memory_format=torch.channels_last)
    reset_fallbacks()
    with torch.no_grad():
        fast = tc.optimize(model, (xb,), measure=False)
        kinds = [type(m) for m in fast.modules()]
        assert kinds.count(FusedConv2d) == 6 and kinds.count(FusedLinear) == 2
        eager = fast(xb)
        assert eager.dtype == torch.bfloat16 and rel_err(eager, expected) < 5e-2
        assert not fallbacks(), fallbacks()
        compiled = torch.compile(fast, fullgraph=True)
        assert rel_err(compiled(xb), eager) < 1e-2
        torch._dynamo.reset()
