"""On the GPU: every fused epilogue on conv2d and dense matches the numpy reference (output
poisoned with NaN first) on every path, with split-K and fp16 output; the runner, the
benchmark's timing and the PyTorch baseline take the epilogue's inputs and check them too."""

import numpy as np
import pytest

from tc_autotune.backends.cuda.gpu import default_gpu
from tc_autotune.core import tasks
from tc_autotune import workloads
from tc_autotune.core.results import relative_l2_error

from test_epilogue import CONV, DENSE, NAMED, SPLIT_PATHS, VARIANTS, _config, _workload

pytestmark = pytest.mark.gpu


def run(workload, config=None, seed=0):
    """Build and run on the task's random inputs with the output NaN-poisoned: (output, inputs,
    the kernel's config)."""
    import tvm

    from tc_autotune.api.build import build

    if config is not None and config.intrinsic == "wgmma" and default_gpu().arch != "sm_90":
        pytest.skip(f"wgmma needs a Hopper GPU, this one is {default_gpu().arch}")
    kernel = build(workload, config)
    inputs = tasks.of(workload).inputs(workload, seed)
    out = tvm.runtime.tensor(np.full(workload.out_shape, np.nan, workload.out_dtype), device=tvm.cuda(0))
    return kernel(*inputs, out).numpy(), inputs, kernel.config


def check(workload, config=None, seed=0):
    """``run``, then compare with the fp32 reference (as tests/test_gpu_conv2d.py's check,
    for any task)."""
    result, inputs, applied = run(workload, config, seed)
    assert np.isfinite(result).all(), "some outputs were never written (NaN poison left)"
    err = relative_l2_error(result, tasks.of(workload).reference(workload, *inputs))
    assert err < 1e-2, f"relative L2 error {err:.3g} for {workload} {applied}"
    return err


@pytest.mark.parametrize("index", range(len(NAMED)), ids=NAMED)
@pytest.mark.parametrize("base", [CONV, DENSE], ids=["conv2d", "dense"])
def test_every_epilogue_matches_the_reference_on_every_path(base, index):
    """wmma, mma, wgmma and split-K (on path index % 3), fp32 output; wmma and split-K with
    fp16 output too; and the space's default config."""
    name = NAMED[index]
    for out_dtype in ("float32", "float16"):
        wl = _workload(base, name, out_dtype)
        variants = [*VARIANTS, "split-k"] if out_dtype == "float32" else ["wmma", "split-k"]
        for variant in variants:
            check(wl, _config(wl, variant, SPLIT_PATHS[index % 3]))
    wl = _workload(base, name)
    check(wl, tasks.of(wl).space(wl, default_gpu()).default_config())


@pytest.mark.parametrize("spec", [
    "resnet50-res2-3x3-64-64-b32-bias_relu",
    "resnet50-res3-1x1-128-512-b32-bias_residual_relu",
    "resnet50-res5-3x3-512-512-s2-b32-scale_bias_residual_relu",
    "llm-4096x4096-m16-bias_gelu",
    "dense:batch=3,m=5,n=64,k=96,b=nk,out_dtype=float16,epilogue=scale_bias_residual_relu",
    "n=2,h=14,c=64,k=128,r=3,pad=1,dtype=float32,epilogue=bias_residual_relu",
])
def test_presets_and_odd_shapes_match_the_reference(spec):
    """The applied config (a record, zero-shot or the default) and a split-K one where valid."""
    from dataclasses import replace

    wl = workloads.get(spec)
    check(wl, seed=2)
    space = tasks.of(wl).space(wl, default_gpu())
    split = replace(space.default_config(), split_k=4)
    if space.is_valid(split):
        check(wl, split, seed=2)


def test_the_runner_checks_fused_kernels_and_the_benchmark_times_them():
    from tc_autotune.measure.checked_timing import checked_kernel_time, task_arrays
    from tc_autotune.api.build import build
    from tc_autotune.measure.measurer import LocalMeasurer, MeasureOptions

    wl = _workload(CONV, "scale_bias_residual_relu", "float16")
    space = tasks.of(wl).space(wl, default_gpu())
    configs = [space.default_config(), _config(wl, "split-k", "wmma")]
    with LocalMeasurer(space, MeasureOptions(build_workers=2, run_timeout=60, repeat=3, min_repeat_ms=5)) as measure:
        for result in measure(configs):
            assert result.ok, result.error_msg
    seconds, err = checked_kernel_time(build(wl, configs[1]), wl, *task_arrays(wl), number=5, repeat=3,
                                       min_repeat_ms=1)
    assert seconds is not None and 0 < seconds < 0.1 and err < 1e-2


@pytest.mark.parametrize("spec", ["resnet50-res3-1x1-128-512-b32-bias_residual_relu",
                                  f"{CONV},epilogue=scale_bias_relu,out_dtype=float16",
                                  f"{DENSE},epilogue=bias_gelu", f"{DENSE},b=nk,epilogue=scale_bias_residual_relu"])
def test_the_pytorch_baseline_applies_the_epilogue_and_matches_the_reference(spec):
    from tc_autotune.measure import baseline
    from tc_autotune.measure.checked_timing import task_arrays

    if not baseline.available():
        pytest.skip("needs PyTorch with CUDA")
    wl = workloads.get(spec)
    seconds, err = tasks.of(wl).baseline(wl, *task_arrays(wl), number=5, repeat=3, min_repeat_ms=1)
    assert err < 1e-2 and seconds is not None and seconds > 0


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_a_dense_bias_baseline_is_nn_linears_one_gemm_and_still_right(layout):
    """A dense's bias is added inside cuBLASLt's GEMM, as ``nn.Linear`` adds it: one kernel per call
    (with a GELU after it, two), not the GEMM plus an add a PyTorch model never launches."""
    from tc_autotune.measure import baseline
    from tc_autotune.measure.profiler import kernel_table
    from tc_autotune.measure.checked_timing import task_arrays

    if not baseline.available():
        pytest.skip("needs PyTorch with CUDA")
    for fused, kernels in (("bias", 1), ("bias_gelu", 2)):
        wl = workloads.get(f"dense:m=64,n=512,k=256,b={layout},out_dtype=float16,epilogue={fused}")
        *inputs, reference = task_arrays(wl)
        run, out = baseline.cublas_dense(wl, *inputs)
        assert relative_l2_error(out, reference) < 1e-2
        launched = [row for row in kernel_table(run, iters=5) if not row.name.startswith("Memset")]
        assert not any("add" in row.name.lower() and "bias" not in row.name.lower() for row in launched), launched
        assert sum(row.launches for row in launched) == kernels, launched
