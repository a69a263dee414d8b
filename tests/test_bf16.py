"""bf16 operands (``dtype=bfloat16``, issue #32) on the CPU: the specs and their one-line refusals,
bf16 host arrays and the fp32 reference, the rules, the stored inputs a runner reads back, the
code of every path (WMMA, mma.sync, wgmma, the warp-specialized kernel) compiled by nvcc for sm_80
and sm_90(a), bf16's TMA im2col encoder and its key, same-GEMM siblings and zero-shot neighbours,
and the PyTorch face.  The kernels' results are checked on the GPU (``test_gpu_bf16.py``)."""

import re
from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.core import tasks
from tc_autotune.core.results import TOLERANCE, relative_l2_error
from tc_autotune.templates.tc_gemm.generator import BF16_PROBES, probe_kernels
from tc_autotune.templates.tc_gemm.views import view_of
from tc_autotune import workloads
from tc_autotune.workloads.reference import (conv2d_reference, dense_inputs, dense_reference, host_dtype,
                                             random_inputs)

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
BF16 = ml_dtypes.bfloat16
CONV = "n=2,h=9,w=7,c=24,k=40,r=3,pad=1,dtype=bfloat16"
DENSE = "dense:batch=2,m=5,n=24,k=40,b=nk,dtype=bfloat16,out_dtype=bfloat16,epilogue=bias_residual_gelu"


# ---- specs ------------------------------------------------------------------------------------
def test_bf16_specs_read_back_and_fp16_specs_are_what_they_were():
    for spec in (CONV, CONV + ",out_dtype=bfloat16,epilogue=bias_relu", DENSE):
        wl = workloads.get(spec)
        assert wl.dtype == "bfloat16" and workloads.get(str(wl)) == wl
    assert str(workloads.get(CONV)).endswith(",dtype=bfloat16,out_dtype=float32")
    # records key on these strings: an fp16 workload's is unchanged
    assert str(workloads.get("tutorial")) == ("n=256,h=14,w=14,c=256,k=512,r=3,s=3,stride=1,pad=1,dilation=1,"
                                              "dtype=float16,out_dtype=float32")
    assert str(workloads.get("llm-4096x4096-m16")) == ("dense:batch=1,m=16,n=4096,k=4096,b=nk,dtype=float16,"
                                                       "out_dtype=float32")


@pytest.mark.parametrize("spec,message", [
    (CONV + ",out_dtype=float16", "dtype=bfloat16 writes out_dtype float32 or bfloat16, not float16"),
    ("n=1,h=4,c=8,k=8,r=1,out_dtype=bfloat16", "out_dtype=bfloat16 needs dtype=bfloat16, not float16"),
    ("n=1,h=4,c=8,k=8,r=1,dtype=float32,out_dtype=bfloat16", "out_dtype=bfloat16 needs dtype=bfloat16, not float32"),
    ("dense:m=4,n=8,k=8,dtype=bfloat16,out_dtype=float16", "dtype=bfloat16 writes out_dtype float32 or bfloat16"),
    ("dense:m=4,n=8,k=8,dtype=bf16", "unknown dtype 'bf16': expected one of float16, bfloat16"),
])
def test_dtype_pairs_the_kernels_do_not_write_are_refused_in_one_line(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        workloads.get(spec)
    assert "\n" not in str(err.value)


def test_the_cli_refuses_a_bad_dtype_pair_with_its_bad_input_code(capsys):
    from tc_autotune.cli import common
    from tc_autotune.cli.tune import main

    with pytest.raises(SystemExit) as exit_:
        main(["--workload", CONV + ",out_dtype=float16", "--trials", "1"])
    assert exit_.value.code == common.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dtype=bfloat16 writes out_dtype float32 or bfloat16, not float16" in err


def test_tuning_bf16_on_a_gpu_older_than_sm80_is_refused_in_one_line(monkeypatch, capsys):
    from tc_autotune.cli import common
    from tc_autotune.cli.tune import main
    from tc_autotune.tuning import autotune

    monkeypatch.setattr(autotune, "measurement_devices", lambda *args: (gpu_for_arch("sm_75"), ["cuda:0"]))
    with pytest.raises(SystemExit) as exit_:
        main(["--workload", "tutorial", "--workload", CONV, "--trials", "1"])
    assert exit_.value.code == common.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bfloat16 needs sm_80 or newer" in err and "is sm_75" in err


# ---- host arrays and the reference ------------------------------------------------------------
def test_bf16_inputs_are_bf16_arrays_and_the_reference_is_their_fp32_product():
    wl = workloads.get(CONV + ",out_dtype=bfloat16,epilogue=bias_residual_relu")
    data, weight, bias, residual = random_inputs(wl, seed=1)
    assert data.dtype == weight.dtype == residual.dtype == host_dtype("bfloat16") == BF16
    assert bias.dtype == np.float32
    ref = conv2d_reference(wl, data, weight, bias, residual)
    x = np.pad(data.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    w = weight.astype(np.float64)
    acc = sum(x[:, r:r + 9, s:s + 7, :] @ w[r, s] for r in range(3) for s in range(3))
    expected = np.maximum(acc + bias + residual.astype(np.float64), 0)
    assert np.allclose(ref, expected, rtol=1e-5, atol=1e-5)  # bf16 values taken exactly, not via fp16
    # a bf16 output's own rounding (8 significant bits) stays far inside the measurement's tolerance
    assert relative_l2_error(ref.astype(BF16), ref) < TOLERANCE / 4


def test_dense_bf16_reference_rounds_operands_to_bf16_not_fp16():
    wl = workloads.get(DENSE)
    a, b, bias, residual = dense_inputs(wl, seed=2)
    assert a.dtype == b.dtype == residual.dtype == BF16 and a.shape == (2, 5, 40)
    wide = [np.asarray(v, np.float32) * 3.0e4 for v in (a, b)]  # past fp16's range: bf16 keeps them
    ref = dense_reference(wl, *(v.astype(BF16) for v in wide), bias, residual)
    assert np.isfinite(ref).all()


def test_a_runner_reads_stored_bf16_inputs_back_as_bf16(tmp_path):
    """npz keeps a bf16 array's bytes but not its dtype: the measurer stores the names beside them."""
    from tc_autotune.measure.bench import load_inputs

    wl = workloads.get(DENSE)
    inputs = dense_inputs(wl)
    np.savez(tmp_path / "k.npz", **{f"input_{i}": a for i, a in enumerate(inputs)},
             reference=dense_reference(wl, *inputs), dtypes=[a.dtype.name for a in inputs])
    loaded, reference = load_inputs(str(tmp_path), "k")
    assert [a.dtype for a in loaded] == [BF16, BF16, np.float32, BF16]
    assert all(np.array_equal(x.view(np.uint16), y.view(np.uint16)) for x, y in zip(loaded, inputs)
               if x.dtype == BF16)
    assert reference.dtype == np.float32


# ---- the template's rules and view ------------------------------------------------------------
def test_bf16_needs_sm80_and_takes_every_path_on_hopper():
    wl = workloads.get(CONV)
    old = tasks.of(wl).space(wl, gpu_for_arch("sm_75"))
    fp16 = workloads.get(CONV.replace("bfloat16", "float16"))
    assert old.why_invalid(tasks.of(fp16).space(fp16, gpu_for_arch("sm_75")).default_config()) == (
        "bfloat16 operands need sm_80 or newer (bf16 Tensor Cores), not sm_75")
    for spec, config in probe_kernels(BF16_PROBES):
        arch = "sm_90" if config.intrinsic == "wgmma" else "sm_80"
        assert tasks.of(spec).space(spec, gpu_for_arch(arch)).why_invalid(config) is None, (str(spec), config)
    view = view_of(wl)
    assert view.operand_dtype == "bfloat16" and view_of(fp16).operand_dtype == "float16"
    assert tasks.of(wl).template.workspaces(wl, replace(probe_kernels(BF16_PROBES)[0][1], split_k=1)) == []
    # bf16 input takes the warp-specialized kernel as fp16 does (no fp16 copies); fp32 input takes it only
    # converting in its producer's loads, so not with an operand by TMA
    ws = probe_kernels(BF16_PROBES)[7][1]
    assert tasks.of(wl).template.workspaces(wl, ws) == []
    fp32 = workloads.get("n=4,h=14,c=128,k=256,r=3,pad=1,dtype=float32")
    fp32_space = tasks.of(fp32).space(fp32, gpu_for_arch("sm_90"))
    assert fp32_space.why_invalid(ws) is None
    assert "converts A and B in its producer's loads" in fp32_space.why_invalid(replace(ws, tma_im2col=1))


# ---- the code of every path --------------------------------------------------------------------
_BUILDS = [(i, arch) for i, (_, config) in enumerate(probe_kernels(BF16_PROBES))
           for arch in (("sm_80", "sm_90") if config.intrinsic != "wgmma" else ("sm_90",))]


def _build(index: int, arch: str):
    from tc_autotune.api.build import build

    workload, config = probe_kernels(BF16_PROBES)[index]
    return workload, config, build(workload, config, target=arch)


@needs_nvcc
@pytest.mark.parametrize("index,arch", _BUILDS, ids=[f"{BF16_PROBES[i][0]}-{a}" for i, a in _BUILDS])
def test_every_path_generates_bf16_code_that_nvcc_compiles(index, arch):
    from tc_autotune.templates.tc_gemm.warp_specialized.layout import fixed_cuda

    workload, config, kernel = _build(index, arch)
    source = kernel.cuda_source
    assert kernel.cubin[:4] == b"\x7fELF" and kernel.arch == arch + ("a" if config.intrinsic == "wgmma" else "")
    signature = next(line for line in source.splitlines() if "__global__" in line)
    # the tensors as they are (the warp-specialized kernel's parameters are A, B and C)
    assert not re.search(r"\bhalf\b", signature) and re.search(r"nv_bfloat16\* __restrict__ (data|A)_ptr", signature)
    assert bool(re.search(r"nv_bfloat16\* __restrict__ (out|C)_ptr", signature)) == (workload.out_dtype == "bfloat16")
    path = "warp_specialized" if config.warp_specialized else config.intrinsic
    expected = {"wmma": f"fragment<nvcuda::wmma::matrix_a, {', '.join(map(str, config.wmma_mnk))}, nv_bfloat16",
                "mma": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                "wgmma": "k16.f32.bf16.bf16 ", "warp_specialized": "tc_ws_gemm(const __nv_bfloat16* __restrict__ A"}
    assert expected[path] in source
    # (TVM's prelude comments say "bfp16"; the stage ring's 16-byte cp.async takes any 2-byte element
    # as fp16's: pipeline.cuh, and bf16.cuh's overload for bf16)
    code = re.sub(r"//[^\n]*", "", source.replace(fixed_cuda("pipeline.cuh"), "").replace(fixed_cuda("bf16.cuh"), ""))
    assert not re.search(r"\.f16\.f16|fp16|, half, |\bhalf\*", code)  # no fp16 instruction, fragment or pointer
    if path == "warp_specialized":
        assert "k16.f32.bf16.bf16 " in source and re.search(r"k64(_bcol)?_bf16(_in_flight)?\(acc, ", source)
        assert ("copy16(a_s" in source) == ("TMA" not in source.split("A by ")[1].split(",")[0])


@needs_nvcc
@pytest.mark.parametrize("index", [i for i, (_, c) in enumerate(probe_kernels(BF16_PROBES)) if c.intrinsic == "wgmma"],
                         ids=[p[0] for p, (_, c) in zip(BF16_PROBES, probe_kernels(BF16_PROBES))
                              if c.intrinsic == "wgmma"])
def test_bf16_wgmma_kernels_are_not_serialized_and_do_not_spill(index):
    from test_codegen import _ptxas_report

    _, _, kernel = _build(index, "sm_90")
    report = _ptxas_report(kernel.cuda_source)
    assert "serialized" not in report and "(C7514" not in report and "(C7517" not in report, report
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report


def test_fp16_kernels_name_their_functions_and_intrinsics_as_before():
    """What keys fp16 records is their code: bf16 adds names (``_bf16``), fp16's stay."""
    from tc_autotune.templates.tc_gemm.wgmma_source import wgmma_name, wgmma_source

    assert wgmma_name(128, "row_major", True) == "tc_wgmma_m64n128k64_in_flight"
    assert wgmma_name(128, "row_major", True, "bfloat16") == "tc_wgmma_m64n128k64_bf16_in_flight"
    assert ".f32.f16.f16 " in wgmma_source(64) and ".f32.bf16.bf16 " in wgmma_source(64, dtype="bfloat16")


# ---- TMA im2col maps of bf16 data --------------------------------------------------------------
def test_a_bf16_im2col_kernel_encodes_its_map_as_bf16_and_keys_the_encoder(monkeypatch):
    import ctypes

    import tvm_ffi

    from tc_autotune.api.kernel import kernel_code_hash
    from tc_autotune.backends.cuda import tensormap, tensormap_bf16
    from tc_autotune.backends.cuda.code_hash import code_hash
    from tc_autotune.templates.tc_gemm.warp_specialized import kernel_module, plan

    workload, config = probe_kernels(BF16_PROBES)[10]
    assert config.tma_im2col
    script = kernel_module(view_of(workload), config).script()
    assert f'"{tensormap_bf16.ENCODE_IM2COL}"' in script and f'"{tensormap.ENCODE_IM2COL}"' not in script
    # B's tiled map described as bf16, its CUtensorMapDataType derived by TVM's runtime (which
    # refuses force_cu_dtype=BFLOAT16); A's is im2col
    assert script.count('descriptor_dtype="bfloat16"') == 1 and "force_cu_dtype=-1" in script
    assert tvm_ffi.get_global_func(tensormap_bf16.ENCODE_IM2COL, allow_missing=True) is not None
    calls = []

    def fake_driver(slot, dtype, *rest):
        calls.append(dtype)
        return 0

    monkeypatch.setattr(tensormap, "_driver", lambda: fake_driver)
    tensormap_bf16._im2col_map.cache_clear()
    slot = ctypes.create_string_buffer(tensormap.MAP_BYTES)
    args = plan(view_of(workload), config).a_box.encode_args()
    assert tensormap_bf16.encode_im2col(ctypes.c_void_p(ctypes.addressof(slot)), ctypes.c_void_p(4096), *args) == 0
    assert calls == [tensormap_bf16.BFLOAT16] == [9]
    tensormap_bf16._im2col_map.cache_clear()
    # the key of a bf16 im2col kernel takes both encoders' files; an fp16 one's only tensormap's, as before
    fp16 = workload.replace(dtype="float16", out_dtype="float16")
    files = {name: (f"backends/cuda/{name}.py", Path(module.__file__))
             for name, module in (("tensormap", tensormap), ("tensormap_bf16", tensormap_bf16))}
    assert kernel_code_hash(fp16, config, "sm_90a", "src") == code_hash("src", "sm_90a", [files["tensormap"]])
    assert kernel_code_hash(workload, config, "sm_90a", "src") == code_hash("src", "sm_90a", list(files.values()))


# ---- records, siblings and zero-shot -------------------------------------------------------------
def test_fp16_and_bf16_workloads_of_one_shape_are_one_gemm():
    from tc_autotune.api.apply import same_gemm

    fp16 = workloads.get("rfc-3x3-b32")
    bf16 = fp16.replace(dtype="bfloat16", out_dtype="bfloat16", epilogue="bias_relu")
    assert same_gemm(fp16, bf16) and same_gemm(bf16, fp16)
    assert not same_gemm(fp16.replace(dtype="float32"), bf16) and not same_gemm(bf16, bf16.replace(batch=2))


def test_a_bf16_conv_gets_a_zero_shot_pick_from_the_stored_model_and_its_fp16_neighbours():
    from tc_autotune.search import zero_shot

    fp16 = workloads.get("n=16,h=14,c=256,k=256,r=3,pad=1,out_dtype=float16")
    bf16 = fp16.replace(dtype="bfloat16", out_dtype="bfloat16")
    assert np.array_equal(zero_shot._shape_vector(fp16), zero_shot._shape_vector(bf16))
    gpu = gpu_for_arch("sm_90")
    config = zero_shot.zero_shot_config(bf16, gpu)
    assert config is not None and tasks.of(bf16).space(bf16, gpu).is_valid(config)


# ---- PyTorch ------------------------------------------------------------------------------------
def test_bf16_layers_fuse_and_the_ops_write_bf16_by_default():
    torch = pytest.importorskip("torch")
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    import tc_autotune as tc
    from tc_autotune.pytorch import fusion, ops

    with FakeTensorMode():
        data, weight = torch.empty(2, 8, 8, 16, dtype=torch.bfloat16), torch.empty(3, 3, 16, 32, dtype=torch.bfloat16)
        out = torch.ops.tc_autotune.conv2d(data, weight, None, None, None, [1, 1], [1, 1, 1, 1], [1, 1], "none",
                                           torch.bfloat16)
        assert out.dtype == torch.bfloat16 and out.shape == (2, 8, 8, 32)
        dense = torch.ops.tc_autotune.dense(torch.empty(3, 16, dtype=torch.bfloat16), torch.empty(8, 16, dtype=torch.bfloat16),
                                            None, None, None, "gelu", torch.float32)
        assert dense.dtype == torch.float32
    assert fusion._why_not(torch.nn.Conv2d(4, 8, 3).bfloat16()) is None
    assert "the kernels take float16 or bfloat16" in fusion._why_not(torch.nn.Linear(4, 8).double())
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU()).eval().bfloat16()
    x = torch.randn(2, 8, 6, 6).bfloat16().to(memory_format=torch.channels_last)
    found = tc.extract_workloads(model, (x,))
    assert [str(w) for w in found] == [str(workloads.get(  # no batch norm: the conv's own OIHW weight, in place
        "n=2,h=6,c=8,k=16,r=3,pad=1,dtype=bfloat16,out_dtype=bfloat16,weight_layout=OIHW,epilogue=bias_relu"))]
    with warnings.catch_warnings():  # on the CPU the ops run PyTorch's (counted fallbacks)
        warnings.simplefilter("ignore", ops.FallbackWarning)
        y = ops.dense_nk(torch.randn(3, 16).bfloat16(), torch.randn(8, 16).bfloat16())
        fast = tc.optimize(model, (x,), build=False)
        with torch.no_grad():
            z = fast(x)
    assert y.dtype == torch.bfloat16 and z.dtype == torch.bfloat16
    with torch.no_grad():
        assert float((z.float() - model(x).float()).abs().max()) < 0.1
