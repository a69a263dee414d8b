"""fp8 dense (``dtype=float8_e4m3fn``, issue #32 item 4) on the CPU: the specs and their one-line
refusals, fp8 host arrays, the scales and the fp32 reference, the stored inputs a runner reads back,
the rules (only the warp-specialized wgmma kernel takes fp8), the kernel's code compiled by nvcc for
sm_90a (e4m3 and e5m2 B, every output dtype, a fused epilogue, the kernel's variants), the
``torch._scaled_mm`` baseline on PyTorch's CPU, siblings, the physical floor and the PyTorch face.
The kernels' results are checked on the GPU (``test_gpu_fp8.py``)."""

import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.core import tasks
from tc_autotune.core.results import TOLERANCE, relative_l2_error
from tc_autotune.templates.tc_gemm.generator import FP8_PROBES, probe_kernels
from tc_autotune.templates.tc_gemm.knobs import TcGemmConfig
from tc_autotune.templates.tc_gemm.views import view_of
from tc_autotune import workloads
from tc_autotune.workloads.reference import dense_inputs, dense_reference, host_dtype

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
HOPPER = gpu_for_arch("sm_90")
FP8 = "dense:m=200,n=136,k=272,b=nk,dtype=float8_e4m3,out_dtype=bfloat16"
E5M2_B = "dense:batch=2,m=40,n=192,k=1024,b=nk,dtype=float8_e4m3,b_dtype=float8_e5m2,out_dtype=float16,epilogue=bias_gelu"


def _space(spec, arch="sm_90"):
    wl = workloads.get(spec)
    return tasks.of(wl).space(wl, gpu_for_arch(arch))


# ---- specs ------------------------------------------------------------------------------------
def test_fp8_specs_read_back_and_other_specs_are_what_they_were():
    wl = workloads.get(FP8)
    assert wl.dtype == "float8_e4m3fn" and wl.b_dtype is None and wl.weight_dtype == "float8_e4m3fn" and wl.scaled
    assert str(wl) == "dense:batch=1,m=200,n=136,k=272,b=nk,dtype=float8_e4m3fn,out_dtype=bfloat16"
    e5m2 = workloads.get(E5M2_B)
    assert e5m2.weight_dtype == "float8_e5m2" and workloads.get(str(e5m2)) == e5m2
    assert ",dtype=float8_e4m3fn,b_dtype=float8_e5m2,out_dtype=float16,epilogue=bias_gelu" in str(e5m2)
    # B's dtype said twice (or in TVM's spelling) is one workload, its spec without b_dtype
    assert workloads.get(FP8 + ",b_dtype=float8_e4m3") == workloads.get(FP8.replace("e4m3", "e4m3fn")) == wl
    for out in ("float32", "float16"):
        assert workloads.get(FP8.replace("bfloat16", out)).out_dtype == out
    # records key on these strings: fp16's and bf16's are unchanged
    assert str(workloads.get("llm-4096x4096-m16")) == ("dense:batch=1,m=16,n=4096,k=4096,b=nk,dtype=float16,"
                                                       "out_dtype=float32")
    assert not workloads.get("llm-4096x4096-m16").scaled


@pytest.mark.parametrize("spec,message", [
    (FP8.replace("b=nk", "b=kn"), "fp8 dense needs b=nk, an (N, K) weight: wgmma reads fp8 operands K-major only"),
    (FP8.replace("k=272", "k=270"), "fp8 dense needs K a multiple of 16 (16-byte TMA rows), not k=270"),
    (FP8.replace("dtype=float8_e4m3", "dtype=float8_e5m2"), "dtype=float8_e5m2 (an e5m2 A) is not supported"),
    ("dense:m=4,n=8,k=16,b=nk,b_dtype=float8_e5m2", "b_dtype=float8_e5m2 needs fp8 operands (dtype=float8_e4m3fn)"),
    (FP8 + ",b_dtype=float16", "unknown b_dtype 'float16': fp8 A takes a B of float8_e4m3fn, float8_e5m2"),
    ("n=1,h=4,c=16,k=16,r=1,dtype=float8_e4m3", "conv2d takes no fp8 operands (dtype=float8_e4m3 is dense only)"),
    ("n=1,h=4,c=16,k=16,r=1,dtype=float8_e4m3fn", "conv2d takes no fp8 operands"),
])
def test_what_the_fp8_kernels_cannot_take_is_refused_in_one_line(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        workloads.get(spec)
    assert "\n" not in str(err.value)


def test_the_cli_refuses_fp8_in_one_line_with_its_bad_input_code(monkeypatch, capsys):
    from tc_autotune.cli import common
    from tc_autotune.cli.tune import main
    from tc_autotune.tuning import autotune

    with pytest.raises(SystemExit) as exit_:
        main(["--workload", FP8.replace("b=nk", "b=kn"), "--trials", "1"])
    assert exit_.value.code == common.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fp8 dense needs b=nk" in err
    # on a GPU without Hopper's wgmma every config is invalid: refused before any tuning
    monkeypatch.setattr(autotune, "measurement_devices", lambda *args: (gpu_for_arch("sm_80"), ["cuda:0"]))
    with pytest.raises(SystemExit) as exit_:
        main(["--workload", FP8, "--trials", "1"])
    assert exit_.value.code == common.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fp8 needs sm_90 (Hopper's wgmma)" in err and "is sm_80" in err


# ---- host arrays, scales and the reference ----------------------------------------------------------
def test_fp8_inputs_are_fp8_arrays_with_scales_and_the_reference_scales_before_the_epilogue():
    wl = workloads.get(E5M2_B)
    names = [name for name, _, _ in tasks.of(wl).signature(wl)]
    assert names == ["data", "weight", "scale_a", "scale_b", "bias", "out"]
    a, b, scale_a, scale_b, bias = dense_inputs(wl, seed=3)
    assert a.dtype == host_dtype("float8_e4m3fn") == E4M3 and b.dtype == host_dtype("float8_e5m2") == E5M2
    assert scale_a.shape == scale_b.shape == (1,) and scale_a.dtype == scale_b.dtype == np.float32
    assert scale_a[0] != 1 and scale_b[0] != 1  # a kernel that drops a scale is wrong
    assert np.abs(a.astype(np.float32)).max() > 2  # spread over fp8's range, not subnormal
    ref = dense_reference(wl, a, b, scale_a, scale_b, bias)
    acc = a.astype(np.float64) @ b.astype(np.float64).T * (float(scale_a[0]) * float(scale_b[0])) + bias
    gelu = 0.5 * acc * (1 + np.tanh(np.sqrt(2 / np.pi) * (acc + 0.044715 * acc ** 3)))
    assert np.allclose(ref, gelu, rtol=1e-4, atol=1e-4)  # bias after the scales, as torch._scaled_mm
    assert 0.05 < np.std(ref) < 5  # O(1) outputs: the check's relative error means something
    # the output's rounding stays far inside the measurement's tolerance
    assert relative_l2_error(ref.astype(ml_dtypes.bfloat16), ref) < TOLERANCE / 4


def test_a_runner_reads_stored_fp8_inputs_back_as_fp8(tmp_path):
    """npz writes fp8 arrays with a descriptor it cannot read ('<f1'): the measurer stores bytes."""
    from tc_autotune.measure.measurer import _storable
    from tc_autotune.measure.bench import load_inputs

    wl = workloads.get(E5M2_B)
    inputs = dense_inputs(wl)
    np.savez(tmp_path / "k.npz", **{f"input_{i}": _storable(a) for i, a in enumerate(inputs)},
             reference=dense_reference(wl, *inputs), dtypes=[a.dtype.name for a in inputs])
    loaded, _ = load_inputs(str(tmp_path), "k")
    assert [a.dtype for a in loaded] == [a.dtype for a in inputs] == [E4M3, E5M2, np.float32, np.float32, np.float32]
    assert all(np.array_equal(x.view(np.uint8), y.view(np.uint8)) for x, y in zip(loaded, inputs))


# ---- the rules: only the warp-specialized wgmma kernel takes fp8 ------------------------------------
def test_every_fp8_config_the_space_yields_is_a_warp_specialized_wgmma_kernel():
    from tc_autotune.core.config_space import positions_from_indices, valid_mask

    for spec in (FP8, E5M2_B, "dense:m=16,n=4096,k=4096,b=nk,dtype=float8_e4m3,out_dtype=bfloat16"):
        space = _space(spec)
        configs = [space.default_config(), *space.template.starting_configs(space), *space.sample(300, seed=1)]
        assert len(configs) > 50
        assert all(c.intrinsic == "wgmma" and c.warp_specialized > 0 and space.is_valid(c) for c in configs)
    # random draws stay in the kernel's corner: more of them valid than of an fp16 space's draws (0.1%),
    # where a uniform draw over the whole table is valid for fp8 about never
    space = _space("dense:m=2048,n=4096,k=4096,b=nk,dtype=float8_e4m3,out_dtype=bfloat16")
    rng = np.random.default_rng(0)
    draws = space.drawn(rng.integers(0, space.draw_bound, 20000))
    assert valid_mask(space, positions_from_indices(space, draws)).mean() > 0.003
    assert not valid_mask(space, positions_from_indices(space, rng.integers(0, len(space), 20000))).any()
    assert not any(_space("llm-4096x4096-m16")._draw_offsets)  # fp16's draws pin at 0, as before


def test_fp8_configs_off_the_kernel_are_invalid_with_the_path_named():
    space = _space(FP8)
    ws = space.default_config()
    wmma = TcGemmConfig(**{**ws.as_dict(), "intrinsic": "wmma", "warp_specialized": 0, "wgmma_in_flight": 0})
    mma = TcGemmConfig(**{**wmma.as_dict(), "intrinsic": "mma"})
    tir = TcGemmConfig(**{**ws.as_dict(), "warp_specialized": 0})
    assert "not intrinsic=wmma: WMMA has no fp8 fragments" in space.why_invalid(wmma)
    assert "not intrinsic=mma: its ldmatrix and mma.sync" in space.why_invalid(mma)
    assert space.why_invalid(tir).startswith("float8_e4m3fn operands need the warp-specialized kernel")
    assert space.why_invalid(ws) is None
    # off Hopper no config is valid; an fp16 twin of the kernel's config is valid as before
    assert _space(FP8, "sm_80").sample(1, seed=0) == []
    fp16 = "dense:m=200,n=136,k=272,b=nk,out_dtype=float16"
    assert _space(fp16).why_invalid(ws) is None and _space(fp16).why_invalid(wmma) is None


def test_an_fp8_k_step_is_twice_the_elements_of_the_same_bytes():
    from tc_autotune.templates.tc_gemm.rules import derive, values_of_config
    from tc_autotune.templates.tc_gemm.warp_specialized.layout import block_layout

    space = _space(FP8)
    config = space.default_config()
    assert derive(values_of_config(config), space.context)["bk"] == 128
    assert derive(values_of_config(config), _space("dense:m=200,n=136,k=272,b=nk").context)["bk"] == 64
    lay = block_layout(view_of(workloads.get(FP8)), config)
    assert lay.k_step == 128 and lay.kt == 3 and lay.a_box.box[0] == 128 and lay.a_box.strides == (272,)
    assert lay.a_box.bytes == 128 * config.block_m  # 1-byte elements: the stage's bytes as fp16's


# ---- the kernel's code (``generator.FP8_PROBES``: every output dtype, an e5m2 B, fused epilogues, split-K,
# the persistent kernel with TMA stores, ping-pong, consumers along M with B multicast, a batch, M=1, odd N)
def _build(index: int):
    from tc_autotune.api.build import build

    workload, config = probe_kernels(FP8_PROBES)[index]
    assert tasks.of(workload).space(workload, HOPPER).why_invalid(config) is None
    return workload, config, build(workload, config, target="sm_90")


@needs_nvcc
@pytest.mark.parametrize("index", range(len(FP8_PROBES)), ids=[spec.split(",dtype")[0] for spec, _ in FP8_PROBES])
def test_the_fp8_kernel_generates_code_that_nvcc_compiles_for_sm90a(index):
    workload, config, kernel = _build(index)
    source = kernel.cuda_source
    assert kernel.cubin[:4] == b"\x7fELF" and kernel.arch == "sm_90a"
    b = "e5m2" if workload.b_dtype else "e4m3"
    assert f"wgmma.mma_async.sync.aligned.m64n{kernel_n(config)}k32.f32.e4m3.{b} " in source
    assert re.search(r"k32\.f32\.e4m3\.e[45]m[23] \{[^}]*\}, %\d+, %\d+, 1, 1, 1;", source)  # no transpose operands
    assert f"tc_ws_gemm(const __nv_fp8_e4m3* __restrict__ A, const __nv_fp8_{b}* __restrict__ B," in source
    assert "const float scale_ab = __ldg(scale_a) * __ldg(scale_b);" in source
    assert "v0 *= scale_ab; v1 *= scale_ab;" in source
    if workload.epilogue != "none":  # the scales before the epilogue's bias
        assert source.index("v0 *= scale_ab") < source.index("// epilogue ")
    assert not re.search(r"\.f16\.f16|\.bf16\.bf16|k16\.f32", source)  # no 16-bit wgmma
    signature = next(line for line in source.splitlines() if "__global__" in line)
    assert "__nv_fp8_e4m3* __restrict__ A_ptr" in signature
    # ptxas keeps the wgmma groups pipelined (nothing serialized, no injected waits) and nothing spills
    # (ptxas injects waits into any kernel whose k-loop is as short as its ring, fp16's too: the probes
    # have longer ones)
    from test_codegen import _ptxas_report

    report = _ptxas_report(source)
    assert "(C75" not in report and "serialized" not in report, report
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report


def kernel_n(config) -> int:
    """The columns of a consumer's wgmma."""
    return config.block_n if config.consumers_along_m or config.ping_pong else config.warp_col_tiles * 16


def test_the_fp8_kernel_encodes_its_operands_maps_as_bytes():
    from tc_autotune.templates.tc_gemm.warp_specialized import kernel_module

    workload = workloads.get(E5M2_B)
    space = _space(E5M2_B)
    script = kernel_module(view_of(workload), space.default_config()).script()
    # A's and B's maps described as bytes (TVM's runtime derives CU_TENSOR_MAP_DATA_TYPE_UINT8)
    assert script.count('descriptor_dtype="uint8"') == 2 and "force_cu_dtype=-1" in script
    assert '"float8_e4m3fn"' in script and '"float8_e5m2"' in script


def test_fp16_and_bf16_wgmma_names_stay_and_fp8_names_say_k128_and_both_types():
    from tc_autotune.templates.tc_gemm.wgmma_source import wgmma_name, wgmma_source

    assert wgmma_name(128, "col_major", True) == "tc_wgmma_m64n128k64_bcol_in_flight"
    assert wgmma_name(128, "col_major", True, "float8_e4m3fn", "float8_e5m2") == (
        "tc_wgmma_m64n128k128_bcol_e4m3_e5m2_in_flight")
    assert wgmma_name(64, "col_major", False, "float8_e4m3fn") == "tc_wgmma_m64n64k128_bcol_e4m3_e4m3"
    with pytest.raises(ValueError, match="K-major only"):
        wgmma_source(64, "row_major", dtype="float8_e4m3fn")


# ---- the baseline: torch._scaled_mm -------------------------------------------------------------------
@pytest.mark.parametrize("spec", [
    E5M2_B,
    "dense:m=33,n=32,k=128,b=nk,dtype=float8_e4m3,out_dtype=float32,epilogue=bias_relu",
    "dense:batch=2,m=5,n=48,k=64,b=nk,dtype=float8_e4m3,out_dtype=bfloat16,epilogue=scale_bias_residual_gelu",
])
def test_the_scaled_mm_baseline_computes_the_reference_on_the_cpu(spec):
    pytest.importorskip("torch")
    from tc_autotune.measure.baseline import scaled_mm_dense

    wl = workloads.get(spec)
    inputs = dense_inputs(wl, seed=5)
    _, out = scaled_mm_dense(wl, *inputs, device="cpu")
    assert out.shape == wl.out_shape
    assert relative_l2_error(out, dense_reference(wl, *inputs)) < TOLERANCE / 2
    assert tasks.of(wl).baseline_of(wl) == "torch._scaled_mm"
    assert tasks.of(wl).baseline_of(workloads.get("llm-4096x4096-m16")) == "cuBLAS"


# ---- records, siblings, the floor -----------------------------------------------------------------------
def test_fp8_siblings_are_fp8_first_then_valid_16_bit_configs_never_the_reverse(tmp_path, monkeypatch):
    from tc_autotune.api.apply import same_gemm, sibling_config
    from tc_autotune.database import records
    from tc_autotune.measure.measurer import MeasureResult

    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(tmp_path / "none"))
    fp8 = workloads.get("dense:m=128,n=512,k=1024,b=nk,dtype=float8_e4m3,out_dtype=bfloat16")
    e5m2 = replace(fp8, b_dtype="float8_e5m2", out_dtype="float16", epilogue="bias")
    fp16 = workloads.get("dense:m=128,n=512,k=1024,b=nk,out_dtype=float16")
    assert same_gemm(fp8, e5m2) and not same_gemm(fp8, fp16) and not same_gemm(fp16, fp8)
    space16, space8 = _space(str(fp16)), _space(str(e5m2))
    mma = space16.default_config()  # fastest, but on a path fp8 cannot take
    ws16, ws8 = space16.template.starting_configs(space16)[:2]
    log = tmp_path / "log.jsonl"
    records.append(log, [records.stamped("cuda -arch=sm_90", space16, config, MeasureResult((t,)))
                         for config, t in ((mma, 1e-5), (ws16, 2e-5))])
    logs = [(str(log), False)]
    assert mma.intrinsic != "wgmma" or not mma.warp_specialized
    assert sibling_config(fp8, HOPPER, logs)[0] == ws16  # the mma record skipped, the valid one taken
    records.append(log, [records.stamped("cuda -arch=sm_90", space8, ws8, MeasureResult((3e-5,)))])
    assert sibling_config(fp8, HOPPER, logs)[0] == ws8  # its own GEMM's first, though slower
    assert sibling_config(replace(fp16, epilogue="bias"), HOPPER, logs)[0] == mma  # never an fp8 record


def test_an_fp8_record_may_pass_fp16s_compute_peak():
    from tc_autotune.backends.cuda import peaks

    fp8 = workloads.get("dense:m=8192,n=8192,k=8192,b=nk,dtype=float8_e4m3,out_dtype=bfloat16")
    fp16 = workloads.get("dense:m=8192,n=8192,k=8192,b=nk,out_dtype=float16")
    assert peaks.floor_seconds(fp8, "NVIDIA H100 80GB HBM3", "sm_90") == pytest.approx(
        peaks.floor_seconds(fp16, "NVIDIA H100 80GB HBM3", "sm_90") / 2)


# ---- PyTorch ------------------------------------------------------------------------------------------
def test_the_torch_face_takes_fp8_tensors_with_their_scales():
    torch = pytest.importorskip("torch")
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    import tc_autotune as tc
    from tc_autotune.api.apply import dense_workload_of
    from tc_autotune.pytorch import ops

    a = (torch.rand(3, 32) * 8 - 4).to(torch.float8_e4m3fn)
    w = (torch.rand(16, 32) * 2 - 1).to(torch.float8_e5m2)
    scale_a, scale_b, bias = torch.tensor(0.25), torch.tensor([0.125]), torch.randn(16)
    assert str(dense_workload_of(a, w, "nk", "bfloat16", "bias")) == (
        "dense:batch=1,m=3,n=16,k=32,b=nk,dtype=float8_e4m3fn,b_dtype=float8_e5m2,out_dtype=bfloat16,epilogue=bias")
    with warnings.catch_warnings():  # on the CPU the op runs PyTorch's ops (a counted fallback)
        warnings.simplefilter("ignore", ops.FallbackWarning)
        y = ops.dense_nk(a, w, bias=bias, activation="relu", scale_a=scale_a, scale_b=scale_b)
    expected = torch.relu(a.float() @ w.float().t() * (0.25 * 0.125) + bias)
    assert y.dtype == torch.bfloat16 and torch.allclose(y.float(), expected, rtol=1e-2, atol=1e-2)
    for call, message in ((lambda: ops.dense_nk(a, w), "fp8 operands need both per-tensor scales"),
                          (lambda: tc.dense(a, w, scale_a=scale_a), "fp8 operands need both per-tensor scales"),
                          (lambda: tc.dense(a.float(), w.float(), scale_a=scale_a, scale_b=scale_b),
                           "per-tensor scales of fp8 operands, not of float32 ones")):
        with pytest.raises(ValueError, match=message):
            call()
    with warnings.catch_warnings():  # the op's schema, fake and autograd kernels with fp8 tensors and scales
        warnings.simplefilter("ignore", ops.FallbackWarning)
        torch.library.opcheck(torch.ops.tc_autotune.dense.default,
                              (a, w, None, bias, None, "gelu", torch.bfloat16, scale_a.reshape(1), scale_b),
                              test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
    with FakeTensorMode():  # the custom op's schema takes the scales (last, optional)
        out = torch.ops.tc_autotune.dense(torch.empty(3, 32, dtype=torch.float8_e4m3fn),
                                          torch.empty(16, 32, dtype=torch.float8_e4m3fn), None, None, None, "none",
                                          torch.float16, torch.empty(1), torch.empty(1))
        assert out.dtype == torch.float16 and out.shape == (3, 16)


def test_a_shape_scaled_mm_refuses_has_no_baseline_and_says_why_once(caplog):
    """torch._scaled_mm takes K and N that are multiples of 16: for any other fp8 shape the baseline
    is (None, None) and one log line says why, before any tensor is made (no PyTorch needed)."""
    from tc_autotune.measure import baseline

    wl = workloads.get("dense:m=200,n=136,k=272,b=nk,dtype=float8_e4m3,out_dtype=bfloat16")
    assert "N=136" in baseline.scaled_mm_refusal(wl)
    assert baseline.scaled_mm_refusal(workloads.get("dense:m=200,n=144,k=272,b=nk,dtype=float8_e4m3")) is None
    assert baseline.scaled_mm_refusal(workloads.get("dense:m=200,n=136,k=272,b=nk")) is None  # cuBLAS takes it
    with caplog.at_level("WARNING", logger="tc_autotune.measure.baseline"):
        assert baseline.checked_cublas_time(wl, None, None, None, None, None) == (None, None)
    assert [r.message for r in caplog.records if "no baseline" in r.message] == [
        f"{wl}: no baseline: torch._scaled_mm takes K and N that are multiples of 16, not K=272, N=136"]
