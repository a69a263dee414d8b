"""The output check on the device (``checker``, ``bench.Bench``): the same relative L2 error as
``results.relative_l2_error`` and NaN left = wrong, for every task's output (conv2d and dense,
float32 and float16); the CUDA checker compiles with nvcc here and agrees with numpy on a GPU,
split-K kernels included."""

import numpy as np
import pytest

from tc_autotune.backends.cuda import checker
from tc_autotune.backends.cuda.gpu import default_gpu
from tc_autotune.core import tasks
from tc_autotune import workloads
from tc_autotune.backends.cuda.nvcc import compile_cubin
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.core.results import TOLERANCE, relative_l2_error
from tc_autotune.measure.bench import Bench

OUTPUTS = ["n=2,h=14,c=64,k=64,r=3,pad=1", "n=2,h=8,c=16,k=32,r=3,pad=1,dtype=float32,out_dtype=float16",
           "dense:m=33,n=70,k=64,b=nk", "dense:batch=3,m=5,n=48,k=32,out_dtype=float16"]


def _output_of(spec):
    workload = workloads.get(spec)
    _, shape, dtype = tasks.of(workload).signature(workload)[-1]
    return workload, shape, dtype


def _cpu_bench(tmp_path, spec, reference):
    import tvm

    workload, shape, dtype = _output_of(spec)
    path = checker.export(str(tmp_path / f"{workload.flops}-{dtype}.so"), shape, dtype,
                          checker.target_for("cpu", "sm_90"))
    return Bench(tvm.cpu(), [], reference, tvm.runtime.load_module(path))


@pytest.mark.parametrize("spec", OUTPUTS)
def test_cpu_checker_gives_numpys_relative_error_and_nan_is_wrong(tmp_path, spec):
    _, shape, dtype = _output_of(spec)
    rng = np.random.default_rng(1)
    reference = rng.standard_normal(shape).astype(np.float32)
    bench = _cpu_bench(tmp_path, spec, reference)
    for noise in (1e-3, 0.3):
        result = (reference + noise * rng.standard_normal(shape)).astype(dtype)
        (out,) = bench.arguments([(shape, dtype)])
        assert np.isnan(out.numpy()).all()  # poisoned before every candidate
        out.copyfrom(result)
        assert bench.error() == pytest.approx(relative_l2_error(result, reference), rel=1e-9)
    assert bench.error() > TOLERANCE  # a wrong result (noise 0.3) is wrong here too
    result.flat[len(result.flat) // 2] = np.nan  # one output left unwritten
    out.copyfrom(result)
    assert bench.error() == float("inf")
    (out,) = bench.arguments([(shape, dtype)])
    assert bench.error() == float("inf")  # the poisoned output as it is


def test_bench_passes_fresh_workspaces_after_the_output(tmp_path):
    spec = OUTPUTS[0]
    _, shape, dtype = _output_of(spec)
    bench = _cpu_bench(tmp_path, spec, np.ones(shape, np.float32))
    split_k = ((4, 512, 64), "float32")
    out, workspace = bench.arguments([(shape, dtype), split_k])
    assert (tuple(out.shape), str(out.dtype)) == (shape, dtype)
    assert (tuple(workspace.shape), str(workspace.dtype)) == split_k


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("spec", [OUTPUTS[1], OUTPUTS[2]])
def test_cuda_checker_compiles_for_sm90(spec):
    _, shape, dtype = _output_of(spec)
    source = checker.build(shape, dtype, checker.target_for("cuda", "sm_90")).mod.imports[0].inspect_source()
    assert "threadIdx.x" in source and "double" in source
    assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize("spec,knobs", [
    ("n=2,h=14,c=64,k=64,r=3,pad=1", {}),
    ("n=1,h=7,c=256,k=64,r=3,pad=1,out_dtype=float16", {"split_k": 4}),
    ("dense:m=16,n=256,k=1024,b=nk", {"split_k": 2}),
])
def test_cuda_checker_agrees_with_numpy_on_real_kernels(tmp_path, spec, knobs):
    import dataclasses

    import tvm

    from tc_autotune.api.build import build

    workload, shape, dtype = _output_of(spec)
    task = tasks.of(workload)
    space = task.space(workload, default_gpu())
    config = dataclasses.replace(space.default_config(), **knobs)
    assert space.why_invalid(config) is None
    kernel = build(workload, config)
    data, weight = task.inputs(workload, seed=0)
    reference = task.reference(workload, data, weight)
    dev = tvm.cuda(0)
    path = checker.export(str(tmp_path / "check.so"), shape, dtype, checker.target_for("cuda", space.gpu.arch))
    bench = Bench(dev, [data, weight], reference, tvm.runtime.load_module(path))
    args = bench.arguments([(shape, dtype), *kernel.workspaces])  # inputs, out, workspaces
    out = args[len(bench.inputs)]
    kernel._function()(*args)
    dev.sync()
    expected = relative_l2_error(out.numpy(), reference)
    assert bench.error() == pytest.approx(expected, rel=1e-6) and expected < TOLERANCE
    bench.arguments([(shape, dtype), *kernel.workspaces])
    assert bench.error() == float("inf")  # poisoned, not run: NaN left is wrong
