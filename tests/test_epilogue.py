"""Fused epilogues without a GPU: the name grammar, spec strings and presets, records, the
task's signature, inputs and numpy reference, and CUDA that applies the epilogue in the
output's store (every epilogue on conv2d and dense, every path, split-K) and that nvcc
compiles."""

import math
import re
from dataclasses import replace

import numpy as np
import pytest
from generated import generated_source

from tc_autotune import workloads
from tc_autotune.workloads import conv2d, epilogue
from tc_autotune.database import records
from tc_autotune.core import tasks
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.workloads.dense import DenseWorkload
from tc_autotune.workloads.epilogue import Epilogue
from tc_autotune.backends.cuda.gpu import GpuInfo, gpu_for_arch
from tc_autotune.core.results import MeasureResult
from tc_autotune.workloads.conv2d import Conv2dWorkload

SM90 = gpu_for_arch("sm_90")
NAMED = ("bias", "bias_relu", "bias_gelu", "scale_bias", "scale_bias_relu", "bias_residual_relu",
         "scale_bias_residual_relu")
CONV = "n=2,h=14,c=64,k=128,r=3,pad=1"
DENSE = "dense:m=200,n=128,k=512"


# ---- the grammar ---------------------------------------------------------------------
@pytest.mark.parametrize("name,parts", [
    ("none", Epilogue()),
    ("bias", Epilogue(bias=True)),
    ("bias_relu", Epilogue(bias=True, activation="relu")),
    ("bias_gelu", Epilogue(bias=True, activation="gelu")),
    ("scale_bias", Epilogue(scale=True, bias=True)),
    ("scale_bias_relu", Epilogue(scale=True, bias=True, activation="relu")),
    ("bias_residual_relu", Epilogue(bias=True, residual=True, activation="relu")),
    ("scale_bias_residual_relu", Epilogue(True, True, True, "relu")),
    ("residual", Epilogue(residual=True)),
    ("gelu", Epilogue(activation="gelu")),
])
def test_names_spell_their_parts_and_round_trip(name, parts):
    assert epilogue.parse(name) == parts and str(parts) == name and bool(parts) == (name != "none")
    assert parts.inputs == tuple(n for n in ("scale", "bias", "residual") if n in name)


@pytest.mark.parametrize("name", ["relu_bias", "scale", "scale_relu", "bias_bias", "bias_relu_gelu", "tanh",
                                  "bias_", "", "Bias", "none_relu"])
def test_bad_names_say_the_grammar_in_one_line(name):
    with pytest.raises(ValueError, match=f"unknown epilogue {re.escape(repr(name))}: expected none, or scale") as err:
        epilogue.parse(name)
    assert "\n" not in str(err.value)


# ---- specs and presets -----------------------------------------------------------------
@pytest.mark.parametrize("spec,expected", [
    ("n=32,h=56,c=64,k=64,r=3,pad=1,epilogue=bias_relu",
     Conv2dWorkload(32, 56, 56, 64, 64, 3, 3, padding=1, epilogue="bias_relu")),
    ("dense:m=128,n=4096,k=4096,b=nk,epilogue=bias_gelu",
     DenseWorkload(128, 4096, 4096, b_layout="nk", epilogue="bias_gelu")),
    ("resnet50-res2-3x3-64-64-b32-bias_relu", Conv2dWorkload(32, 56, 56, 64, 64, 3, 3, padding=1,
                                                             epilogue="bias_relu")),
    ("resnet50-res3-1x1-128-512-b32-bias_residual_relu", Conv2dWorkload(32, 28, 28, 128, 512, 1, 1,
                                                                        epilogue="bias_residual_relu")),
    ("llm-4096x4096-m128-bias_gelu", DenseWorkload(128, 4096, 4096, b_layout="nk", epilogue="bias_gelu")),
    ("tutorial-scale_bias", conv2d.TUTORIAL.replace(epilogue="scale_bias")),
])
def test_fused_specs_and_presets_round_trip(spec, expected):
    wl = workloads.get(spec)
    assert wl == expected and workloads.get(str(wl)) == wl
    assert str(wl).endswith(f",epilogue={wl.epilogue}")
    assert workloads.get(workloads.display_name(wl)) == wl
    assert wl != replace(wl, epilogue="none") and hash(wl) != hash(replace(wl, epilogue="none"))


def test_plain_specs_do_not_mention_the_epilogue():
    for spec in ("tutorial", "rfc-3x3-b32", "llm-4096x4096-m1", "n=1,h=8,c=16,k=16,r=1,epilogue=none",
                 "dense:m=1,n=2,k=3,epilogue=none"):
        wl = workloads.get(spec)
        assert wl.epilogue == "none" and "epilogue" not in str(wl)
    assert str(conv2d.TUTORIAL) == ("n=256,h=14,w=14,c=256,k=512,r=3,s=3,stride=1,pad=1,dilation=1,"
                                       "dtype=float16,out_dtype=float32")


def test_resnet50_fused_presets_follow_the_network():
    layers = workloads.resnet50_fused_layers(32)
    assert len(layers) == len(conv2d.RESNET50_LAYERS)
    for name, wl in layers.items():
        assert workloads.get(name) == wl and wl.batch == 32
        assert workloads.preset_name(wl).endswith(f"-b32-{wl.epilogue}")  # (or the RFC's name of its shape)
    epilogues = {name.split("-b32-")[0][len("resnet50-"):]: wl.epilogue for name, wl in layers.items()}
    assert epilogues["res2-3x3-64-64"] == epilogues["conv1"] == "bias_relu"
    assert epilogues["res4-1x1-256-1024"] == "bias_residual_relu"
    assert epilogues["res4-1x1-512-1024-s2"] == "bias"  # the projection shortcut
    assert set(layers) <= set(workloads.preset_names())


def test_the_fused_resnet50_job_tunes_those_presets():
    from pathlib import Path

    from tc_autotune.tuning.jobs import load_job

    job = load_job(Path(__file__).resolve().parent.parent / "tuning_logs" / "resnet50-fused-b32.toml")
    assert [(e.name, e.workload) for e in job.entries] == list(workloads.resnet50_fused_layers(32).items())


@pytest.mark.parametrize("text,message", [
    ("n=1,h=8,c=16,k=16,r=1,epilogue=relu_bias", "unknown epilogue 'relu_bias': expected none, or"),
    ("dense:m=1,n=2,k=3,epilogue=scale_relu", "unknown epilogue 'scale_relu'"),
    ("n=1,h=8,c=16,k=16,r=1,epilogue=bias,epilogue=bias", "key 'epilogue' given twice"),
    ("tutorial-swish", "unknown workload preset 'tutorial-swish'"),
    ("resnet50-res2-3x3-64-64-b32-none", "unknown workload preset"),
])
def test_bad_epilogues_in_specs_say_why_in_one_line(text, message):
    with pytest.raises(ValueError, match=message) as err:
        workloads.get(text)
    assert "\n" not in str(err.value)


# ---- records ---------------------------------------------------------------------------
def test_fused_and_plain_records_never_mix(tmp_path):
    fused = workloads.get("rfc-3x3-b32-bias_relu")
    plain = replace(fused, epilogue="none")
    log = tmp_path / "log.jsonl"
    for wl, seconds in ((plain, 1e-5), (fused, 2e-5)):
        space = tasks.of(wl).space(wl, SM90)
        config = space.default_config()
        record = records.stamped("cuda -arch=sm_90", space, config, MeasureResult((seconds,)))
        assert records.Record.from_json(record.to_json()) == record and not record.stale
        records.append(log, [record])
    assert records.load_best(log, plain, target="sm_90")[1] == pytest.approx(1e-5)
    assert records.load_best(log, fused, target="sm_90")[1] == pytest.approx(2e-5)
    lines = log.read_text().splitlines()
    assert "epilogue" not in lines[0] and ",epilogue=bias_relu" in lines[1]


# ---- the task: signature, inputs, reference ---------------------------------------------
def _workload(base: str, name: str, out_dtype: str = "float32"):
    return replace(workloads.get(base), epilogue=name, out_dtype=out_dtype)


@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", NAMED)
@pytest.mark.parametrize("base", [CONV, "dense:batch=2,m=5,n=24,k=40,b=nk"])
def test_signature_inputs_and_reference_apply_the_epilogue(base, name, out_dtype):
    wl = _workload(base, name, out_dtype)
    plain = replace(wl, epilogue="none")
    task = tasks.of(wl)
    signature = task.signature(wl)
    fused = epilogue.parse(name)
    assert [s[0] for s in signature] == ["data", "weight", *fused.inputs, "out"]
    assert signature[:2] == task.signature(plain)[:2] and signature[-1] == task.signature(plain)[-1]
    inputs = task.inputs(wl, seed=4)
    assert [(a.shape, str(a.dtype)) for a in inputs] == [(tuple(s[1]), s[2]) for s in signature[:-1]]
    channels = wl.out_shape[-1]
    by_name = dict(zip(fused.inputs, inputs[2:]))
    assert all(by_name[n].shape == (channels,) and by_name[n].dtype == np.float32 for n in fused.channel_inputs)
    if fused.residual:
        assert by_name["residual"].shape == wl.out_shape and by_name["residual"].dtype == np.dtype(out_dtype)
    operands = task.inputs(plain, seed=4)
    assert all(np.array_equal(a, b) for a, b in zip(inputs[:2], operands))  # drawn as the plain ones

    # the reference: the plain result through the epilogue, written out here by hand
    x = task.reference(plain, *operands).astype(np.float64)
    if fused.scale:
        x = x * by_name["scale"]
    x = x + by_name["bias"]
    if fused.residual:
        x = x + by_name["residual"].astype(np.float64)
    if fused.activation == "relu":
        x = np.where(x > 0, x, 0)
    elif fused.activation == "gelu":
        x = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    reference = task.reference(wl, *inputs)
    assert reference.dtype == np.float32 and reference.shape == wl.out_shape
    np.testing.assert_allclose(reference, x, rtol=1e-5, atol=1e-5)
    assert not np.allclose(reference, task.reference(plain, *operands), atol=1e-2)  # it does something
    if fused.activation == "relu":
        assert reference.min() == 0 and (reference == 0).mean() > 0.1


def test_gelu_is_the_tanh_approximation_of_the_exact_one():
    x = np.linspace(-6, 6, 1001, dtype=np.float32)
    gelu = Epilogue(activation="gelu").apply(x, epilogue.NUMPY)
    exact = 0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x]))
    assert gelu.dtype == np.float32 and np.abs(gelu - exact).max() < 1e-3


# ---- the template -------------------------------------------------------------------------
def test_the_kernel_takes_the_signature_then_its_workspaces():
    pytest.importorskip("tvm")
    from tc_autotune.templates.tc_gemm.views import view_of
    from tc_autotune.templates.tc_gemm.schedule import schedule_gemm
    from tc_autotune.templates.tc_gemm.workspaces import workspaces

    for spec in (CONV, DENSE):
        wl = _workload(spec, "scale_bias_residual_relu")
        config = replace(tasks.of(wl).space(wl, SM90).default_config(), split_k=2)
        params = [p.name for p in schedule_gemm(view_of(wl), config)["main"].params]
        expected = [s[0] for s in tasks.of(wl).signature(wl)]
        assert params[:len(expected)] == expected and len(params) == len(expected) + len(workspaces(wl, config))


@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("name", NAMED)
@pytest.mark.parametrize("base", ["n=2,h=6,w=5,c=8,k=24,r=3,pad=1,out_dtype=float16", "dense:batch=2,m=5,n=24,k=40,b=nk"])
def test_the_templates_compute_run_unscheduled_on_the_cpu_is_the_reference(base, name, split_k):
    """The TE definition the schedule starts from (epilogue, its index maps, split-K's sum),
    compiled for the CPU as is, computes the numpy reference."""
    tvm = pytest.importorskip("tvm")
    from tvm import te

    from tc_autotune.templates.tc_gemm.views import view_of
    from tc_autotune.core.results import relative_l2_error
    from tc_autotune.templates.tc_gemm.knobs import TcGemmConfig
    from tc_autotune.templates.tc_gemm.compute import gemm_compute
    from tc_autotune.templates.tc_gemm.workspaces import workspaces

    wl = replace(workloads.get(base), epilogue=name)
    config = TcGemmConfig(**{**BASE, "block_row_warps": 1, "block_col_warps": 1, "split_k": split_k})
    inputs, out, extra = gemm_compute(view_of(wl), config)
    main = tvm.compile(tvm.IRModule({"main": te.create_prim_func([*inputs, out, *extra])}), "llvm")["main"]
    arrays = tasks.of(wl).inputs(wl, seed=1)
    dev = tvm.cpu()
    result = tvm.runtime.tensor(np.full(wl.out_shape, np.nan, wl.out_dtype), device=dev)
    main(*(tvm.runtime.tensor(a, device=dev) for a in arrays), result,
         *(tvm.runtime.empty(shape, dtype, device=dev) for shape, dtype in workspaces(wl, config)))
    assert relative_l2_error(result.numpy(), tasks.of(wl).reference(wl, *arrays)) < 1e-3


def test_a_call_with_the_wrong_inputs_says_which_it_takes():
    pytest.importorskip("tvm")
    from tc_autotune.api.kernel import Kernel

    wl = _workload(CONV, "bias_residual_relu")
    kernel = Kernel(wl, tasks.of(wl).space(wl, SM90).default_config(), None, None, b"")
    with pytest.raises(TypeError, match=r"takes data, weight, bias, residual \[, out\], got 2 arrays"):
        kernel(np.zeros(wl.data_shape, np.float16), np.zeros(wl.weight_shape, np.float16))


# ---- CUDA: the epilogue is applied in the output's store ----------------------------------
nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

BASE = dict(block_row_warps=2, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=2, chunk=2,
            wmma="m16n16k16", offset_a=8, offset_b=8, offset_c=4, vec_a=8, vec_b=8, vec_c=4)
_SWIZZLED = dict(offset_a=0, offset_b=0)
# variant -> knob changes from BASE; split-K takes fp16 output
VARIANTS = {
    "wmma": dict(stages=2),
    "mma": dict(_SWIZZLED, intrinsic="mma", stages=3, frag_buffers=2),
    "wgmma": dict(_SWIZZLED, intrinsic="wgmma", block_row_warps=4, warp_col_tiles=4, chunk=4, stages=2),
}
SPLIT_PATHS = ("wmma", "mma", "wgmma")  # the split-K case of epilogue i runs on path i % 3
MARKERS = {"wmma": "wmma::mma_sync", "mma": "mma.sync.aligned.m16n8k16", "wgmma": "tc_wgmma_m64n"}


def _config(wl, variant: str, split_path: str):
    from tc_autotune.templates.tc_gemm.knobs import TcGemmConfig

    if variant == "split-k":
        config = TcGemmConfig(**{**BASE, **VARIANTS[split_path], "split_k": 2})
    else:
        config = TcGemmConfig(**{**BASE, **VARIANTS[variant]})
    assert tasks.of(wl).space(wl, SM90).why_invalid(config) is None, (wl, config)
    return config


def _kernels(src: str) -> dict[str, str]:
    """name -> body of each __global__ function in a CUDA source."""
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\([^)]*\) \{', src)]
    return {name: src[start:end] for (start, name), (end, _) in zip(starts, starts[1:] + [(len(src), "")])}


def _addresses(src: str, tensor: str) -> set[str]:
    """The index expressions of a kernel's accesses to ``tensor``: ``tensor_ptr[i]`` and
    vector ``*(T*)(tensor_ptr + i)``, i up to its unmatched closing bracket."""
    found = set()
    for match in re.finditer(rf"\b{tensor}_ptr(\[| \+ )", src):
        depth, start = 0, match.end()
        for end in range(start, len(src)):
            depth += src[end] in "(["
            if src[end] in ")]":
                if depth == 0:
                    break
                depth -= 1
        found.add(src[start:end])
    return found


ORDER = (*VARIANTS, "split-k")


@nvcc
@pytest.mark.parametrize("variant", ORDER)
@pytest.mark.parametrize("index", range(len(NAMED)), ids=NAMED)
@pytest.mark.parametrize("base", [CONV, DENSE], ids=["conv2d", "dense"])
def test_the_epilogue_is_fused_into_the_output_store(base, index, variant):
    from tc_autotune.api.build import build

    name = NAMED[index]
    split = variant == "split-k"
    wl = _workload(base, name, "float16" if split else "float32")
    config = _config(wl, variant, SPLIT_PATHS[index % 3])
    if ORDER.index(variant) == index % len(ORDER):  # each epilogue compiled on one path, each path by two
        kernel = build(wl, config, target="sm_90")
        assert kernel.cubin[:4] == b"\x7fELF" and len(kernel.cubin) > 1000  # nvcc compiled it
        source = kernel.cuda_source
    else:
        source = generated_source(wl, config)
    kernels = _kernels(source)
    assert len(kernels) == 1 + split  # no pass over the output besides the split-K sum
    writers = [k for k, body in kernels.items() if "out_ptr" in body.split("{", 1)[1]]
    assert len(writers) == 1
    store = kernels[writers[0]].split("{", 1)[1]
    for line in (line for line in store.splitlines() if "out_ptr" in line):  # written, never read
        assert re.match(r"\s*(\*\(\w+\*\)\(out_ptr \+|out_ptr\[)", line) and line.count("out_ptr") == 1, line
    fused = epilogue.parse(name)
    for tensor in fused.inputs:  # read where the output is stored, nowhere else
        assert f"{tensor}_ptr" in store
        assert all(f"{tensor}_ptr" not in body for k, body in kernels.items() if k != writers[0])
    if fused.residual:  # the output's own element
        assert _addresses(store, "residual") == _addresses(store, "out")
    assert ("max(" in store) == (fused.activation == "relu")
    assert ("tanhf(" in store) == (fused.activation == "gelu")
    marker = MARKERS[config.intrinsic]
    if split:  # the sum kernel reads the fp32 slices and applies the epilogue once
        assert "C_ptr[" in store and marker not in store and "((half)" in store
    else:  # the GEMM kernel's store from the staging tile
        assert marker in store and "buf_dyn_shmem" in store


# ---- measurement: the runner gets every input ---------------------------------------------
class InputsRunner:
    """Records what a runner is handed: the stored inputs and the output/workspace specs."""

    label, device = "fake", GpuInfo(name="Synthetic GPU", arch="sm_90", sm_count=132)

    def __init__(self, inputs_dir):
        self.inputs_dir, self.seen = inputs_dir, []

    def run(self, so_path, key, tensors):
        from tc_autotune.measure.bench import load_inputs

        self.seen.append((load_inputs(self.inputs_dir(), key), tensors))
        return "ok", [1e-5]

    def stop(self):
        pass


@nvcc
def test_the_measurer_stores_every_input_and_the_fused_reference():
    from tc_autotune.measure.measurer import LocalMeasurer, MeasureOptions

    wl = _workload(CONV, "scale_bias_residual_relu", "float16")
    space = tasks.of(wl).space(wl, SM90)
    runner = InputsRunner(lambda: measurer.inputs_dir)
    with LocalMeasurer(space, MeasureOptions(build_workers=1), runners=[runner]) as measurer:
        (result,) = measurer([space.default_config()])
    assert result.ok, result.error_msg
    (arrays, reference), tensors = runner.seen[0]
    expected = tasks.of(wl).inputs(wl, seed=0)
    assert len(arrays) == 5 and all(np.array_equal(a, b) for a, b in zip(arrays, expected))
    np.testing.assert_array_equal(reference, tasks.of(wl).reference(wl, *expected))
    assert tensors[0] == (wl.out_shape, "float16")
