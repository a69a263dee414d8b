"""The Relax dispatch (issue #34), on the CPU: what ``partition`` takes and leaves, the layout
conversion once per model, extraction (the same ResNet-50 workloads as PyTorch's), the numbers a
partitioned module computes (each kernel swapped for its unscheduled TE twin and run on the
CPU), and that ``build`` compiles a partitioned module for CUDA down to nvcc's cubins."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from command_paths import run_completed
import tvm
from tvm import relax, te

import tc_autotune.relax as tcr
from tc_autotune.templates.tc_gemm.knobs import TcGemmConfig
from tc_autotune.relax import kernels
from tc_autotune.templates.tc_gemm.views import view_of
from tc_autotune.templates.tc_gemm.schedule import gemm_compute
from tc_autotune.tuning.jobs import load_job
from tc_autotune.workloads import get
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.core import tasks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))


# ---- helpers ----------------------------------------------------------------------------------
def ops(mod, name: str) -> int:
    """How many bindings of ``mod``'s main call the op ``name``."""
    graph = tcr.match.Graph(mod["main"])
    return sum(1 for v in graph.defs.values() if isinstance(v, relax.Call) and getattr(v.op, "name", "") == name)


def kernel_workloads(mod) -> list[str]:
    return [str(f.attrs[kernels.KERNEL_ATTR]) for _, f in mod.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and kernels.KERNEL_ATTR in (f.attrs or {})]


def cpu_twin(mod):
    """``mod`` with each kernel replaced by its workload's unscheduled TE compute (the same
    arguments, the same math), runnable on the CPU."""
    mod = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, tvm.tirx.PrimFunc) and kernels.KERNEL_ATTR in (func.attrs or {}):
            wl = get(str(func.attrs[kernels.KERNEL_ATTR]))
            config = TcGemmConfig(**json.loads(str(func.attrs[kernels.CONFIG_ATTR])))
            inputs, out, extra = gemm_compute(view_of(wl), config)
            twin = te.create_prim_func([*inputs, out, *extra])
            mod[gv] = twin.with_attrs({"global_symbol": gv.name_hint, "op_pattern": kernels.OPAQUE})
    return mod


def run_cpu(mod, *inputs):
    """``mod``'s main on the CPU (the LLVM target), numpy in and out."""
    target = tvm.target.Target({"kind": "llvm"})
    vm = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
    return out.numpy()


def rel_err(out, ref) -> float:
    out, ref = np.asarray(out, np.float32), np.asarray(ref, np.float32)
    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-6))


def nhwc_conv_module(epilogue_ops, groups=1, dtype="float16", weight_param=False, dilation=1, k=16, padding=None):
    """main(x: NHWC (2, 8, 8, 16)) = conv2d(x, HWIO weight) then ``epilogue_ops(bb, y)``."""
    rng = np.random.default_rng(0)
    c = 16
    x = relax.Var("x", relax.TensorType((2, 8, 8, c), dtype))
    w_value = (rng.standard_normal((3, 3, c // groups, k)) * 0.1).astype(dtype)
    w = relax.Var("w", relax.TensorType(w_value.shape, dtype)) if weight_param else relax.const(w_value)
    bb = relax.BlockBuilder()
    with bb.function("main", [x] + [w] * weight_param):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w, padding=padding or dilation, dilation=dilation, groups=groups,
                                           data_layout="NHWC", kernel_layout="HWIO", out_dtype=dtype))
            y = epilogue_ops(bb, y)
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def bias_relu(bb, y):
    bias = relax.const(np.linspace(-0.5, 0.5, int(y.ty.shape.values[-1])).astype(str(y.ty.dtype)))
    return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, bias))))


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def block_module(torch):
    """A ResNet bottleneck with a projection shortcut (fp16, NCHW, batch norms), as Relax."""
    from pytorch_models import Block

    from tc_autotune.pytorch.models import randomize_batch_norms

    torch.manual_seed(0)
    model = Block(16, 8, 32).eval()
    randomize_batch_norms(model)
    x = torch.randn(2, 16, 8, 8)
    return tcr.from_torch(model.half(), (x.half(),)), x.half().numpy()


# ---- what partition takes ---------------------------------------------------------------------
def test_conv_bias_relu_becomes_one_kernel_call():
    mod = nhwc_conv_module(bias_relu)
    new = tcr.partition(mod, target="sm_90")
    report = tcr.report(new)
    assert (report.layers, report.fused_ops, report.left, report.layout_conversions) == (1, 2, {}, 0)
    assert ops(new, "relax.nn.conv2d") == ops(new, "relax.nn.relu") == ops(new, "relax.add") == 0
    assert kernel_workloads(new) == ["n=2,h=8,w=8,c=16,k=16,r=3,s=3,stride=1,pad=1,dilation=1,dtype=float16,"
                                     "out_dtype=float16,epilogue=bias_relu"]
    assert list(report.kernels.values())[0] in ("record", "sibling", "zero-shot", "default")
    assert ops(mod, "relax.nn.conv2d") == 1  # the input module is left as it was
    x = np.random.default_rng(1).standard_normal((2, 8, 8, 16)).astype("float16")
    assert rel_err(run_cpu(cpu_twin(new), x), run_cpu(mod, x)) < 1e-2


def test_a_residual_block_with_batch_norms_in_nchw(block_module):
    """Four convs, three folded batch norms each, the add into conv3 (claimed before the
    shortcut's conv reaches it), ReLUs; one transpose at the input and one at the output."""
    mod, x = block_module
    new = tcr.partition(mod, target="sm_90")
    report = tcr.report(new)
    assert report.layers == 4 and report.left == {}
    epilogues = sorted(get(w).epilogue for w in kernel_workloads(new))
    assert epilogues == ["bias", "bias_relu", "bias_relu", "bias_residual_relu"]
    assert ops(new, "relax.nn.batch_norm") == ops(new, "relax.nn.conv2d") == 0
    # exactly one layout conversion at each edge: x in, the result out
    graph = tcr.match.Graph(new["main"])
    transposes = [(var, v) for var, v in graph.defs.items()
                  if isinstance(v, relax.Call) and v.op.name == "relax.permute_dims"]
    assert report.layout_conversions == len(transposes) == 2
    (_, first), (last_var, _) = transposes
    assert first.args[0].same_as(new["main"].params[0])
    assert graph.users.get(last_var) == [] or not isinstance(last_var, relax.DataflowVar) \
        or all(not isinstance(graph.defs[u], relax.Call) for u in graph.users[last_var])
    assert rel_err(run_cpu(cpu_twin(new), x), run_cpu(mod, x)) < 2e-2


def test_linear_gelu_on_a_3d_input(torch):
    """A transformer's MLP on (batch, tokens, d): two dense kernels over the tokens folded into M
    (nn.Linear's (N, K) weight used as it is), the tanh-GELU fused into the first."""
    from tc_autotune.pytorch.models import MLPBlock

    torch.manual_seed(0)
    model = MLPBlock(32, 64).eval().half()
    x = torch.randn(2, 5, 32).half()
    mod = tcr.from_torch(model, (x,))
    new = tcr.partition(mod, target="sm_90")
    assert kernel_workloads(new) == [
        "dense:batch=1,m=10,n=64,k=32,b=nk,dtype=float16,out_dtype=float16,epilogue=bias_gelu",
        "dense:batch=1,m=10,n=32,k=64,b=nk,dtype=float16,out_dtype=float16,epilogue=bias"]
    assert ops(new, "relax.matmul") == ops(new, "relax.nn.gelu_tanh") == 0
    assert rel_err(run_cpu(cpu_twin(new), x.numpy()), run_cpu(mod, x.numpy())) < 1e-2


def test_a_non_constant_weight_keeps_the_scale_in_the_epilogue():
    scale = relax.const(np.linspace(0.5, 1.5, 16).astype("float16"))
    mod = nhwc_conv_module(lambda bb, y: bb.emit(relax.op.multiply(y, scale)), weight_param=True)
    new = tcr.partition(mod, target="sm_90")
    assert [get(w).epilogue for w in kernel_workloads(new)] == ["scale_bias"]
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 8, 8, 16)).astype("float16"), (rng.standard_normal((3, 3, 16, 16)) * 0.1).astype(
        "float16")
    assert rel_err(run_cpu(cpu_twin(new), x, w), run_cpu(mod, x, w)) < 1e-2


def test_what_the_kernels_cannot_take_stays_untouched():
    """Grouped, fp32 and exact-GELU chains, a batched matmul: left as they were, counted once each."""
    grouped = tcr.partition(nhwc_conv_module(bias_relu, groups=2, k=16), target="sm_90")
    assert tcr.report(grouped).left == {"a grouped conv (groups=2)": 1}
    assert ops(grouped, "relax.nn.conv2d") == 1 and not kernel_workloads(grouped)
    fp32 = tcr.partition(nhwc_conv_module(bias_relu, dtype="float32"), target="sm_90")
    assert tcr.report(fp32).left == {"its inputs are float32 (the kernels take float16)": 1}
    exact = tcr.partition(nhwc_conv_module(lambda bb, y: bb.emit(relax.op.nn.gelu(y))), target="sm_90")
    assert ops(exact, "relax.nn.gelu") == 1 and [get(w).epilogue for w in kernel_workloads(exact)] == ["none"]
    a = relax.Var("a", relax.TensorType((4, 8, 16), "float16"))
    b = relax.Var("b", relax.TensorType((4, 16, 8), "float16"))
    bb = relax.BlockBuilder()
    with bb.function("main", [a, b]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(a, b))
        bb.emit_func_output(out)
    batched = tcr.partition(bb.get(), target="sm_90")
    assert tcr.report(batched).left == {"a batched matmul (the kernels take a 2-D B shared by the batch)": 1}
    assert ops(batched, "relax.matmul") == 1


def test_dilation_and_uneven_padding_are_taken():
    mod = nhwc_conv_module(bias_relu, dilation=2, padding=(2, 1, 0, 3))  # top, left, bottom, right
    new = tcr.partition(mod, target="sm_90")
    [workload] = [get(w) for w in kernel_workloads(new)]
    assert (workload.dilation, workload.padding) == ((2, 2), (2, 1, 0, 3))
    x = np.random.default_rng(3).standard_normal((2, 8, 8, 16)).astype("float16")
    assert rel_err(run_cpu(cpu_twin(new), x), run_cpu(mod, x)) < 1e-2


# ---- extraction -------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 32])
def test_resnet50_extraction_gives_the_pytorch_jobs_workloads(torch, tmp_path, batch):
    """The Relax extraction of the package's ResNet-50 gives the workloads PyTorch's gave for the
    shipped jobs, in the same order, so the records tuned from those jobs apply."""
    from tc_autotune.pytorch.models import resnet50

    mod = tcr.from_torch(resnet50().half(), (torch.randn(batch, 3, 224, 224).half(),))
    job = tmp_path / f"relax-b{batch}.toml"
    workloads = tcr.extract_workloads(mod, job=job, trials=16)
    shipped = load_job(ROOT / "tuning_logs" / f"resnet50-fp16-b{batch}.toml")
    assert workloads == [entry.workload for entry in shipped.entries]
    written = load_job(job)
    assert [e.workload for e in written.entries] == workloads and written.log.name == f"relax-b{batch}.jsonl"
    assert job.read_text().splitlines()[0] == "# The workloads of a Relax module (tc_autotune.relax.extract_workloads)."


# ---- building ---------------------------------------------------------------------------------
def test_a_partitioned_model_builds_for_cuda_down_to_cubins(block_module):
    mod, _ = block_module
    new = tcr.partition(mod, target="sm_90")
    executable = tcr.build(new)
    arch = str(tcr.target_of(new).attrs["arch"])
    modules = tcr.cuda_modules(executable)
    assert len(modules) == len(kernel_workloads(new)) + 1  # a module per kernel, one for TVM's own kernels
    assert tcr.compile_check(executable, arch) > 0
    # tvm.compile (relax.build) itself compiles it too, with the kernels' pass options: the kernels
    # carry their own target, in a module each
    with tvm.transform.PassContext(opt_level=3, config=tcr.PASS_CONFIG):
        plain = tvm.compile(new, tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm"))
    assert len(tcr.cuda_modules(plain)) == len(modules)


def test_warp_specialized_kernels_each_compile_in_their_own_module():
    """Two warp-specialized configs define the same device functions: one module each."""
    conv = get("n=32,h=14,w=14,c=1024,k=2048,r=1,s=1,stride=2,pad=0,dtype=float16,out_dtype=float16,epilogue=bias")
    dense = get("dense:batch=1,m=2048,n=4096,k=11008,b=nk,dtype=float16,out_dtype=float16,epilogue=bias")
    gpu = kernels.gpu_of("sm_90")
    choices = kernels.choose([conv, dense], gpu, im2col=True)  # the shipped records: both warp-specialized
    assert all(c.config.warp_specialized for c in choices.values()), choices
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(conv.data_shape, "float16"))
    a = relax.Var("a", relax.TensorType(dense.a_shape, "float16"))
    with bb.function("main", [x, a]):
        with bb.dataflow():
            outs = []
            for i, (wl, data) in enumerate(((conv, x), (dense, a))):
                func = kernels.prim_func(wl, choices[wl].config, f"k{i}", "sm_90a")
                gv = bb.add_func(func, f"k{i}")
                weight = relax.const(np.zeros(wl.weight_shape if wl is conv else wl.b_shape, "float16"))
                bias = relax.const(np.zeros(wl.out_shape[-1], "float32"))
                out_type = relax.TensorType(wl.out_shape, "float16")
                outs.append(bb.emit(relax.call_tir(gv, [data, weight, bias], out_type)))
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    executable = tcr.build(bb.get(), target="sm_90a")
    assert tcr.compile_check(executable, "sm_90a") > 0


def test_bad_input_is_one_clear_error(block_module):
    with pytest.raises(ValueError, match="expected a Relax IRModule"):
        tcr.partition("model.onnx")
    with pytest.raises(ValueError, match="did not come from tc_autotune.relax.partition"):
        tcr.report(block_module[0])
    with pytest.raises(ValueError, match="not a CUDA target"):
        tcr.partition(block_module[0], target={"kind": "llvm"})
    with pytest.raises(FileNotFoundError, match="tuning log not found"):
        tcr.partition(block_module[0], logs="/nonexistent/log.jsonl")


# ---- the benchmark's CPU side -----------------------------------------------------------------
def test_the_benchmark_builds_both_ways_and_reports(block_module):
    """``bench.build_both`` (what the GPU benchmark builds: relax as it comes, and partitioned)
    runs without a GPU; its table and timer work on plain values."""
    from tc_autotune.relax import bench

    phases, said = {}, []
    plain, fast, tuned = bench.build_both(block_module[0], phases, said.append)
    assert tcr.cuda_modules(plain) and len(tcr.cuda_modules(tuned)) == len(kernel_workloads(fast)) + 1
    assert {"build_relax_s", "partition_s", "build_relax_tc_s", "build_relax_tc_precompile_s"} <= set(phases)
    assert len(said) == 2 and "layers on" in said[1]
    assert bench._median_ms(lambda: None, lambda: None) >= 0
    row = {"batch": 1, "ms": {"torch_eager": 3.0, "relax": 9.0, "relax+tc": 1.5},
           "ratios": {"relax+tc_vs_relax": 6.0, "relax+tc_vs_torch_eager": 2.0}, "errors": {}}
    assert "| 1 | 3.0 | 9.0 | 1.5 | 6.0 | 2.0 |" in bench.table({"rows": [row]})


def test_the_benchmark_script_needs_a_gpu():
    import subprocess

    proc = run_completed(str(ROOT / "scripts" / "benchmark_relax.py"), "--batch", "1", timeout=300)
    if proc.returncode == 3:  # the CPU machines: one line
        assert len(proc.stderr.strip().splitlines()) == 1 and "no CUDA GPU" in proc.stderr
    bad = run_completed(str(ROOT / "scripts" / "benchmark_relax.py"), "--batch", "0", timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_the_vm_runs_no_python_between_kernels_unless_im2col_is_asked_for():
    """A TMA im2col kernel's host code calls Python per call: by default its workload runs the
    fastest timed config without im2col (else its own config with it off), ``im2col=True`` keeps it."""
    gpu = gpu_for_arch("sm_90")
    wl = get("n=32,h=14,w=14,c=256,k=256,r=3,s=3,stride=1,pad=1,dilation=1,dtype=float16,"
                          "out_dtype=float16,epilogue=bias_relu")
    kept = kernels.choose([wl], gpu, im2col=True)[wl]
    assert kept.config.tma_im2col == 1 and kept.source == "record"  # the shipped best uses im2col
    swapped = kernels.choose([wl], gpu)[wl]
    assert swapped.config.tma_im2col == 0 and swapped.source == "record without im2col"
    assert swapped.seconds >= kept.seconds  # the best overall was the im2col one
    assert tasks.of(wl).space(wl, gpu).is_valid(swapped.config)
