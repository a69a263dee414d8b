"""fp32 input (``dtype=float32``): one vectorised cast kernel writes fp16 copies of data and
weight (workspaces), then the fp16 workload's conv kernel, unchanged, reads them.

CPU: the generated CUDA (cast kernel, conv kernel identical to the fp16 one), nvcc for sm_90 and
sm_90a, the workspace lists.  GPU (marker gpu): results against the fp32 reference through
``Kernel``, the measurement runner and the timing path."""

import re
from dataclasses import replace

import numpy as np
import pytest
from generated import generated_source

from tc_autotune import build_conv2d, conv2d_space
from tc_autotune import workloads
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.templates.tc_gemm.schedule import schedule_conv2d
from tc_autotune.templates.tc_gemm.workspaces import workspace_shape, workspaces

from matrix import variant_space

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

FP16 = workloads.get("n=4,h=14,c=64,k=128,r=3,pad=1")
FP32 = FP16.replace(dtype="float32")
# The workload (n=32, 14x14, 256 -> 256, 3x3, pad 1), fp32 input.
RFC_FP32 = workloads.get("rfc-3x3-b32").replace(dtype="float32")
SM90 = gpu_for_arch("sm_90")

_KERNEL = re.compile(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(([^)]*)\) \{\n')


def kernels(src: str) -> list[tuple[str, str, str, str]]:
    """(name, threads, parameters, body) of each __global__ definition, in source order."""
    out = []
    for m in _KERNEL.finditer(src):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        out.append((m.group(2), m.group(1), m.group(3), src[m.end():i]))
    return out


def normalized(kernel) -> tuple[str, str, str]:
    """A kernel without its name, its CSE temporaries renumbered in order of appearance (the
    counter runs over the whole module, so the cast kernel ahead shifts the numbers)."""
    _, threads, params, body = kernel
    names = {}
    body = re.sub(r"\bcse_v\d+\b", lambda m: names.setdefault(m.group(0), f"cse_{len(names)}"), body)
    return threads, params, body


def split_cast(src: str):
    """(cast kernel, the other kernels) of an fp32-input module."""
    found = kernels(src)
    return found[0], found[1:]


def configs_for_identity():
    """Configs of every intrinsic, with and without split-K, pipelined and not."""
    space = conv2d_space(FP16, SM90)
    base = replace(space.default_config(), split_k=1)
    picked = [base, replace(base, split_k=2), replace(base, stages=1, frag_buffers=1)]
    for variant in ("m8n32k16", "mma", "wgmma"):
        picked += variant_space(str(FP16), variant).sample(2, seed=4)
    for config in picked:
        assert space.why_invalid(config) is None, config
    return picked


# ---- CPU: workspaces --------------------------------------------------------------------
def test_workspaces_list_split_k_partials_then_the_fp16_copies():
    space = conv2d_space(FP16, SM90)
    plain = replace(space.default_config(), split_k=1)
    split = replace(plain, split_k=4)
    partials = workspace_shape(FP16, split)
    assert workspaces(FP16, plain) == []
    assert workspaces(FP16, split) == [(partials, "float32")]
    copies = [(FP32.data_shape, "float16"), (FP32.weight_shape, "float16")]
    assert workspaces(FP32, plain) == copies
    assert workspaces(FP32, split) == [(partials, "float32")] + copies
    # the kernel's parameters: data, weight, out, then the workspaces in that order
    for wl, config in ((FP16, plain), (FP16, split), (FP32, plain), (FP32, split)):
        params = schedule_conv2d(wl, config)["main"].params
        assert len(params) == 3 + len(workspaces(wl, config))
    header = re.search(r"def main\((.*)\):", schedule_conv2d(FP32, split)["main"].script()).group(1)
    buffers = re.findall(r'(\w+): T\.Buffer\(\(([\d, ]+)\), "(\w+)"\)', header)
    assert [(name, tuple(int(d) for d in shape.split(",")), dtype) for name, shape, dtype in buffers] == [
        ("data_fp32", FP32.data_shape, "float32"), ("weight_fp32", FP32.weight_shape, "float32"),
        ("out", FP32.out_shape, "float32"),
        *((name, shape, dtype) for name, (shape, dtype) in zip(("C", "data", "weight"), workspaces(FP32, split)))]


def test_conv2d_kernel_allocates_its_workspaces_once():
    """Kernel passes (and keeps) one tensor per workspace; checked on the CPU device."""
    import tvm

    from tc_autotune.api.kernel import Kernel

    config = replace(conv2d_space(FP16, SM90).default_config(), split_k=2)
    kernel = Kernel(FP32, config, None, None, b"")
    assert kernel.workspaces == workspaces(FP32, config)
    assert kernel.workspace_shape == workspace_shape(FP32, config)
    dev = tvm.cpu(0)
    extra = kernel._extra_args(dev)
    assert [(tuple(t.shape), str(t.dtype)) for t in extra] == workspaces(FP32, config)
    assert all(a is b for a, b in zip(kernel._extra_args(dev), extra))  # reused, not reallocated
    assert Kernel(FP16, replace(config, split_k=1), None, None, b"")._extra_args(dev) == ()


# ---- CPU: generated CUDA -----------------------------------------------------------------
@pytest.mark.parametrize("wl", [FP32, RFC_FP32, FP32.replace(out_dtype="float16")], ids=str)
def test_cast_kernel_converts_both_operands_with_vector_accesses(wl):
    from tc_autotune.templates.tc_gemm.schedule import CAST_THREADS

    config = replace(conv2d_space(wl, SM90).default_config(), split_k=1)
    src = build_conv2d(wl, config, target="sm_90").cuda_source
    (name, threads, params, body), rest = split_cast(src)
    assert name == "main_kernel" and int(threads) == CAST_THREADS
    # it reads the fp32 inputs and writes the fp16 copies, nothing else
    assert sorted(p.strip() for p in params.split(",")) == sorted([
        "float* __restrict__ data_fp32_ptr", "float* __restrict__ weight_fp32_ptr",
        "half* __restrict__ data_ptr", "half* __restrict__ weight_ptr"])
    # 16-byte loads (float4) and 8-byte stores (half4), one of each per operand, no scalar access
    for operand in ("data", "weight"):
        assert len(re.findall(rf"\*\(float4\*\)\({operand}_fp32_ptr \+", body)) == 1
        assert len(re.findall(rf"\*\(half4\*\)\({operand}_ptr \+", body)) == 1
    assert not re.search(r"(data|weight)(_fp32)?_ptr\[", body)
    # the conv kernels no longer see fp32 input: they read the fp16 copies
    assert all("_fp32" not in params and "float* __restrict__ data" not in params for _, _, params, _ in rest)


def test_cast_kernel_grid_covers_the_larger_operand():
    """One block per CAST_THREADS vectors of the larger operand; the smaller operand's part is
    predicated on whole vectors (blockIdx/threadIdx only), so it stays vectorised."""
    from tc_autotune.templates.tc_gemm.schedule import CAST_THREADS

    config = replace(conv2d_space(RFC_FP32, SM90).default_config(), split_k=1)
    func = schedule_conv2d(RFC_FP32, config)["main"]
    text = func.script()
    data_vectors = int(np.prod(RFC_FP32.data_shape)) // 4
    weight_vectors = int(np.prod(RFC_FP32.weight_shape)) // 4
    grid = -(-max(data_vectors, weight_vectors) // CAST_THREADS)
    assert f'T.thread_binding({grid}, thread="blockIdx.x")' in text
    src = build_conv2d(RFC_FP32, config, target="sm_90").cuda_source
    (_, _, _, body), _ = split_cast(src)
    # n=32 x 14 x 14 x 256 data needs 1568 blocks; the 3x3x256x256 weight 576 of them
    assert grid == 1568 and "if (((int)blockIdx.x) < 576) {" in body


@pytest.mark.parametrize("spec,vec", [("n=1,h=7,c=3,k=16,r=3,pad=1", 1), ("n=1,h=5,c=2,k=8,r=1", 2)])
def test_cast_kernel_narrows_the_vector_for_odd_sizes(spec, vec):
    """147 (7*7*3) data elements: scalar accesses; 50 (5*5*2): 2-element vectors."""
    wl = workloads.get(spec).replace(dtype="float32")
    kernel = build_conv2d(wl, target="sm_90")
    (_, _, _, body), _ = split_cast(kernel.cuda_source)
    if vec == 1:
        assert re.search(r"data_ptr\[.*\] = \(\(half\)data_fp32_ptr\[", body)
    else:
        assert "*(float2*)(data_fp32_ptr +" in body and "*(half2*)(data_ptr +" in body
    assert kernel.cubin[:4] == b"\x7fELF"


@needs_nvcc
@pytest.mark.parametrize("config", configs_for_identity(),
                         ids=lambda c: f"{c.intrinsic}-{c.wmma}-split{c.split_k}-stages{c.stages}")
def test_fp32_conv_kernels_are_the_fp16_kernels(config):
    """Apart from the cast kernel ahead of them, an fp32-input module's kernels are the fp16
    workload's (same parameters, same code, modulo kernel names and CSE numbering), and nvcc
    compiles the module (sm_90, or sm_90a for wgmma)."""
    fp16_source = generated_source(FP16, config)  # compiled by the fp16 tests
    fp32 = build_conv2d(FP32, config, target="sm_90")
    cast, rest = split_cast(fp32.cuda_source)
    expected = kernels(fp16_source)
    assert len(rest) == len(expected) == (2 if config.split_k > 1 else 1)
    assert [normalized(k) for k in rest] == [normalized(k) for k in expected]
    assert "float4" in cast[3]
    assert fp32.arch == ("sm_90a" if config.intrinsic == "wgmma" else "sm_90")
    assert fp32.cubin[:4] == b"\x7fELF"


@needs_nvcc
def test_split_k_with_fp32_input_takes_both_kinds_of_workspace():
    space = conv2d_space(RFC_FP32.replace(batch=1), SM90)
    config = replace(space.default_config(), split_k=4, stages=2)
    assert space.why_invalid(config) is None
    kernel = build_conv2d(space.workload, config, target="sm_90")
    assert [dtype for _, dtype in kernel.workspaces] == ["float32", "float16", "float16"]
    names = [name for name, *_ in kernels(kernel.cuda_source)]
    assert names == ["main_kernel", "main_kernel_1", "main_kernel_2"]  # cast, GEMM, K-slice sum
    _, gemm, total = kernels(kernel.cuda_source)
    assert "blockIdx.z" in gemm[3] and "zk < 4" in total[3]
    assert "half* __restrict__ data_ptr" in gemm[2] and "float* __restrict__ C_ptr" in gemm[2]
    assert kernel.cubin[:4] == b"\x7fELF"


@needs_nvcc
def test_wgmma_with_fp32_input_and_split_k_compiles_for_sm90a():
    space = variant_space(str(RFC_FP32.replace(batch=1)), "wgmma")
    config = next(c for c in space.sample(200, seed=1) if c.split_k > 1)
    kernel = build_conv2d(RFC_FP32.replace(batch=1), config, target="sm_90")
    assert kernel.arch == "sm_90a" and "wgmma.mma_async" in kernel.cuda_source
    assert len(kernels(kernel.cuda_source)) == 3 and kernel.cubin[:4] == b"\x7fELF"


# ---- CPU: the warp-specialized kernel folds the cast into its producer's loads ----------------
_WS32 = dict(block_row_warps=4, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, chunk=4, wmma="m16n16k16",
             offset_a=0, offset_b=0, offset_c=0, vec_a=8, vec_b=8, vec_c=1, stages=4, frag_buffers=1, split_k=1,
             intrinsic="wgmma", wgmma_in_flight=1, warp_specialized=1)
# (spec, knobs): a gathered 3x3 A and a [k][n] B; a 1x1 conv's matrix A, persistent, C by TMA stores,
# fp16 output; split-K over a cluster with an OHWI weight (B [n][k]); consumers along M, an epilogue.
WS32_CASES = (
    ("n=2,h=14,c=64,k=256,r=3,pad=1,dtype=float32", _WS32),
    ("n=4,h=14,c=512,k=256,r=1,dtype=float32,out_dtype=float16", dict(_WS32, warp_specialized=2, tma_store=1)),
    ("n=2,h=9,w=11,c=32,k=128,r=3,pad=2,dilation=2,dtype=float32,weight_layout=OHWI",
     dict(_WS32, warp_col_tiles=4, stages=2, split_k=2)),
    ("n=2,h=14,c=64,k=256,r=3,pad=1,dtype=float32,out_dtype=float16,epilogue=bias_relu",
     dict(_WS32, consumers_along_m=1, stages=3, wgmma_in_flight=0)),
)


def _ws32(case):
    from tc_autotune.templates.registry import TcGemmConfig

    spec, knobs = case
    return workloads.get(spec), TcGemmConfig(**knobs)


@needs_nvcc
@pytest.mark.parametrize("case", WS32_CASES, ids=lambda c: c[0])
def test_warp_specialized_kernel_converts_fp32_input_as_it_loads(case):
    wl, config = _ws32(case)
    space = conv2d_space(wl, SM90)
    assert space.why_invalid(config) is None
    assert workspaces(wl, config) == []  # no fp16 copies (and split-K sums in its cluster)
    kernel = build_conv2d(wl, config, target="sm_90")
    src = kernel.cuda_source
    (gemm,) = kernels(src)  # one kernel: no cast kernel before it
    assert "const float* __restrict__ A, const float* __restrict__ B" in src
    assert src.count("load8_f32(v[j], A,") == 1 and src.count("load8_f32(v[j], B,") == 1
    assert "store8_f16(" in src and 'fence.proxy.async.shared::cta;" ::: "memory");  // the stores' in src
    body = src.split("void tc_ws_gemm(")[1]
    assert "copy16(" not in body and "tma_load_" not in body  # neither operand by cp.async or TMA
    assert kernel.arch == "sm_90a" and kernel.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("knob", ["tma_im2col", "multicast_b", "setmaxnreg"])
def test_fp32_input_refuses_what_loads_an_operand_by_tma_or_starves_the_producer(knob):
    from tc_autotune.templates.registry import TcGemmConfig

    spec = "n=8,h=28,c=64,k=256,r=3,pad=1"
    fp32, fp16 = workloads.get(spec + ",dtype=float32"), workloads.get(spec)
    extra = dict(block_col_warps=1, warp_specialized=2, ping_pong=1) if knob == "setmaxnreg" else {}
    config = TcGemmConfig(**{**_WS32, **extra, knob: 1})
    assert conv2d_space(fp16, SM90).why_invalid(config) is None
    why = conv2d_space(fp32, SM90).why_invalid(config)
    assert why is not None and "float32 input converts A and B in its producer's loads" in why and f"{knob}=1" in why


# ---- GPU -------------------------------------------------------------------------------------
def gpu_configs(wl):
    """The default config, a split-K one, an mma one and (on Hopper) a wgmma one."""
    from tc_autotune.backends.cuda.gpu import default_gpu

    gpu = default_gpu()
    space = conv2d_space(wl, gpu)
    picked = {"default": space.default_config()}
    split = [c for c in space.sample(300, seed=2) if c.split_k > 1]
    picked["split-k"] = split[0]
    picked["mma"] = variant_space(str(wl), "mma", gpu.arch).sample(1, seed=3)[0]
    if gpu.arch == "sm_90":
        picked["wgmma"] = variant_space(str(wl), "wgmma", gpu.arch).sample(1, seed=3)[0]
        picked["wgmma-split-k"] = next(
            c for c in variant_space(str(wl), "wgmma", gpu.arch).sample(300, seed=5) if c.split_k > 1)
    return picked


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["n=2,h=14,c=64,k=64,r=3,pad=1,dtype=float32",
                                  "n=1,h=14,c=256,k=256,r=3,pad=1,dtype=float32,out_dtype=float16"])
def test_gpu_fp32_input_matches_the_reference(spec):
    import tvm

    from tc_autotune.workloads.reference import conv2d_reference, random_inputs
    from tc_autotune.core.results import relative_l2_error

    wl = workloads.get(spec)
    dev = tvm.cuda(0)
    data, weight = random_inputs(wl, seed=3)
    assert data.dtype == weight.dtype == np.float32
    reference = conv2d_reference(wl, data, weight)
    for name, config in gpu_configs(wl).items():
        kernel = build_conv2d(wl, config)
        for _ in range(2):  # the second call reuses the workspaces
            out = tvm.runtime.tensor(np.full(wl.out_shape, np.nan, wl.out_dtype), device=dev)
            kernel(data, weight, out)
            result = out.numpy()
            assert np.isfinite(result).all(), f"{name}: outputs never written"
            err = relative_l2_error(result, reference)
            assert err < 1e-2, f"{name}: relative L2 error {err:.3g} for {config}"
        if config.warp_specialized:  # its producer converts as it loads: no fp16 copies
            continue
        # the fp16 copies are the inputs rounded to nearest (as numpy rounds them)
        data16, weight16 = kernel._extra_args(dev)[-2:]
        assert np.array_equal(data16.numpy(), data.astype(np.float16))
        assert np.array_equal(weight16.numpy(), weight.astype(np.float16))


@pytest.mark.gpu
def test_gpu_fp32_input_through_the_runner_and_the_timing_path():
    """LocalMeasurer checks against the reference and times with the workspaces allocated;
    time_kernel and checked_kernel_time pass them through Kernel.time (the one timer)."""
    from tc_autotune.measure.checked_timing import checked_kernel_time
    from tc_autotune.measure.measurer import LocalMeasurer, MeasureOptions, time_kernel
    from tc_autotune.workloads.reference import conv2d_reference, random_inputs

    wl = workloads.get("n=2,h=14,c=64,k=64,r=3,pad=1,dtype=float32")
    configs = gpu_configs(wl)
    space = conv2d_space(wl)
    options = MeasureOptions(build_workers=2, run_timeout=60, repeat=3, min_repeat_ms=5)
    with LocalMeasurer(space, options) as measure:
        for name in ("default", "split-k"):
            (result,) = measure([configs[name]])
            assert result.ok, f"{name}: {result.error_msg}"
            assert all(0 < c < 0.1 for c in result.costs)
    kernel = build_conv2d(wl, configs["split-k"])
    data, weight = random_inputs(wl, seed=0)
    seconds, err = checked_kernel_time(kernel, wl, data, weight, conv2d_reference(wl, data, weight),
                                       number=5, repeat=3, min_repeat_ms=1)
    assert seconds is not None and 0 < seconds < 0.1 and err < 1e-2

    import tvm

    dev = tvm.cuda(0)
    d, w = tvm.runtime.tensor(data, device=dev), tvm.runtime.tensor(weight, device=dev)
    out = tvm.runtime.empty(wl.out_shape, wl.out_dtype, device=dev)
    times = time_kernel(kernel, d, w, out, number=5, repeat=3)
    assert len(times) == 3 and all(0 < t < 0.1 for t in times)


@pytest.mark.gpu
@pytest.mark.parametrize("case", WS32_CASES, ids=lambda c: c[0])
def test_gpu_warp_specialized_fp32_input_matches_the_reference(case):
    """The producer's converted loads (fp32 -> fp16, round to nearest) give what the cast kernel's
    copies give: the fp32 reference of the fp16-rounded inputs, on NaN-poisoned output."""
    import tvm

    from tc_autotune.core.results import relative_l2_error
    from tc_autotune.workloads.reference import conv2d_reference, random_inputs

    wl, config = _ws32(case)
    dev = tvm.cuda(0)
    inputs = random_inputs(wl, seed=5)
    reference = conv2d_reference(wl, *inputs)
    kernel = build_conv2d(wl, config)
    for _ in range(2):
        out = tvm.runtime.tensor(np.full(wl.out_shape, np.nan, wl.out_dtype), device=dev)
        kernel(*inputs, out)
        result = out.numpy()
        assert np.isfinite(result).all(), "outputs never written"
        err = relative_l2_error(result, reference)
        assert err < (2e-3 if wl.out_dtype == "float16" else 1e-5), f"relative L2 error {err:.3g}"


@pytest.mark.gpu
def test_gpu_cudnn_baseline_of_fp32_input_casts_both_tensors_on_every_call():
    """cuDNN's figure for an fp32-input conv is PyTorch's cast of data and weight, then the fp16
    conv, each call (as our kernel reads the fp32 tensors each call); an fp16 conv has no cast."""
    import torch

    from tc_autotune.core.results import relative_l2_error
    from tc_autotune.measure.baseline import cudnn_conv2d
    from tc_autotune.workloads.reference import conv2d_reference, random_inputs

    copies = {}
    for dtype in ("float32", "float16"):
        wl = workloads.get(f"n=2,h=14,c=64,k=128,r=3,pad=1,dtype={dtype}")
        data, weight = random_inputs(wl, seed=1)
        run, out = cudnn_conv2d(wl, data, weight)
        assert relative_l2_error(out, conv2d_reference(wl, data, weight)) < 1e-2
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        copies[dtype] = sum("copy" in name for name in names)
    assert copies == {"float32": 2, "float16": 0}, copies
