"""``tc_autotune.pytorch`` without a GPU (issue #29): the custom ops' registration and fake
implementations, fusion and workload extraction from small models, ``optimize``'s rewrite and
its outputs (PyTorch's ops run on the CPU, counted as fallbacks), the cached launch path, and
the disk build cache."""

import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import tc_autotune as tc  # noqa: E402
from tc_autotune.api import apply  # noqa: E402
from tc_autotune.api import build_cache
from tc_autotune.tuning import jobs
from tc_autotune.backends.cuda.gpu import default_gpu
from tc_autotune.core import tasks
from tc_autotune import workloads
from tc_autotune.workloads.dense import DenseWorkload  # noqa: E402
from tc_autotune.pytorch import FusedConv2d, FusedLinear, fallbacks, ops, reset_fallbacks  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from pytorch_models import SmallNet  # noqa: E402


def small():
    torch.manual_seed(0)
    model = SmallNet().eval()
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
    return model.half().to(memory_format=torch.channels_last), x.half().to(memory_format=torch.channels_last), expected


def rel_err(out, ref):
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())


# ---- the operators -----------------------------------------------------------------------------
def test_the_ops_are_registered_with_fake_implementations():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        data, weight = torch.empty(2, 9, 11, 32, dtype=torch.float16), torch.empty(3, 5, 32, 48, dtype=torch.float16)
        out = torch.ops.tc_autotune.conv2d(data, weight, None, None, None, [2, 1], [1, 2, 0, 1], [1, 1], "relu",
                                           torch.float32)
        # (9 + 1 + 0 - 3) // 2 + 1 = 4 rows, (11 + 2 + 1 - 5) // 1 + 1 = 10 columns
        assert out.shape == (2, 4, 10, 48) and out.dtype == torch.float32
        a, w = torch.empty(3, 7, 64, dtype=torch.float16), torch.empty(96, 64, dtype=torch.float16)
        dense = torch.ops.tc_autotune.dense(a, w, None, torch.empty(96), None, "gelu", torch.float16)
        assert dense.shape == (3, 7, 96) and dense.dtype == torch.float16
    schema = str(torch.ops.tc_autotune.conv2d.default._schema)
    assert "Tensor? residual" in schema and "ScalarType out_dtype" in schema
    with pytest.raises(ValueError, match="activation must be one of none, relu, gelu, got 'tanh'"):
        torch.ops.tc_autotune.dense(torch.ones(2, 4), torch.ones(3, 4), None, None, None, "tanh", torch.float32)


def test_the_ops_pass_opcheck_on_the_cpu():
    """On CPU tensors the ops run PyTorch's ops (a fallback, counted): schema, fake and eager
    implementations must still agree."""
    torch.manual_seed(0)
    data, weight = torch.randn(2, 8, 8, 16).half(), (torch.randn(3, 3, 16, 24) * 0.1).half()
    bias, residual = torch.randn(24), torch.randn(2, 8, 8, 24).half()
    torch.library.opcheck(torch.ops.tc_autotune.conv2d.default,
                          (data, weight, None, bias, residual, [1, 1], [1, 1, 1, 1], [1, 1], "relu", torch.float16))
    a, w = torch.randn(5, 32).half(), (torch.randn(40, 32) * 0.1).half()
    torch.library.opcheck(torch.ops.tc_autotune.dense.default, (a, w, torch.rand(40), torch.randn(40), None,
                                                                  "gelu", torch.float32))


def test_the_ops_refuse_to_run_where_a_gradient_is_wanted():
    """The kernels have no backward: an input that requires grad (grad mode on) is an error
    that says what to do, never a result whose gradient would silently be missing; under
    no_grad the same call runs."""
    a, w = torch.randn(4, 16, requires_grad=True), torch.randn(8, 16)
    args = (a, w, None, None, None, "none", torch.float32)
    with pytest.raises(RuntimeError, match=r"tc_autotune::dense has no backward.*torch.no_grad"):
        torch.ops.tc_autotune.dense(*args)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.FallbackWarning)
        out = torch.ops.tc_autotune.dense(*args)
    torch.testing.assert_close(out, a.detach() @ w.T)
    assert not out.requires_grad


def test_the_fallback_is_the_ops_math_and_is_said_once():
    torch.manual_seed(1)
    data, weight = torch.randn(1, 5, 6, 8).half(), torch.randn(3, 3, 8, 4).half()
    bias, residual = torch.randn(4), torch.randn(1, 5, 6, 4).half()
    reset_fallbacks()
    with pytest.warns(ops.FallbackWarning, match="the tensors are on cpu"):
        out = torch.ops.tc_autotune.conv2d(data, weight, None, bias, residual, [1, 1], [1, 1, 1, 1], [1, 1],
                                           "relu", torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: a second call is counted, not warned
        torch.ops.tc_autotune.conv2d(data, weight, None, bias, residual, [1, 1], [1, 1, 1, 1], [1, 1], "relu",
                                     torch.float32)
    ref = torch.nn.functional.conv2d(data.permute(0, 3, 1, 2).float(), weight.permute(3, 2, 0, 1).float(), padding=1)
    ref = torch.relu(ref + bias.view(1, -1, 1, 1) + residual.permute(0, 3, 1, 2).float()).permute(0, 2, 3, 1)
    assert rel_err(out, ref) < 1e-5
    assert list(fallbacks().values()) == [2]


# ---- fusion, extraction, optimize --------------------------------------------------------------
def test_extraction_lists_each_layer_with_the_epilogue_it_fuses(tmp_path):
    model, x, _ = small()
    found = tc.extract_workloads(model, (x,), job=tmp_path / "small.toml", trials=8)
    conv = "n=4,h=32,w=32,dtype=float16,out_dtype=float16,"
    assert [str(w) for w in found] == [
        str(workloads.get(spec)) for spec in (
            conv + "c=3,k=32,r=3,pad=1,weight_layout=OHWI,epilogue=bias_relu",  # own bias, F.relu; its weight in place
            conv + "c=32,k=16,r=1,epilogue=bias_relu",  # batch norm folded, ReLU module
            conv + "c=16,k=16,r=3,pad=1,epilogue=bias_relu",
            conv + "c=16,k=64,r=1,epilogue=bias_residual_relu",  # the block's add and ReLU
            conv + "c=32,k=64,r=1,epilogue=bias",  # the shortcut: the add went to conv3
            conv + "c=64,k=64,r=3,stride=2,pad=1,epilogue=bias_relu",  # torch.relu
            "dense:m=4,n=128,k=64,b=nk,dtype=float16,out_dtype=float16,epilogue=bias_gelu",
            "dense:m=4,n=10,k=128,b=nk,dtype=float16,out_dtype=float16,epilogue=bias")]
    job = jobs.load_job(tmp_path / "small.toml")
    assert [e.workload for e in job.entries] == found and {e.trials for e in job.entries} == {8}
    assert job.log == tmp_path / "small.jsonl"


def test_optimize_replaces_the_layers_and_agrees_with_the_model():
    model, x, expected = small()
    before = {name: p.clone() for name, p in model.state_dict().items()}
    reset_fallbacks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.FallbackWarning)
        fast = tc.optimize(model, (x,), build=False)
        out = fast(x)
    kinds = [type(m) for m in fast.modules()]
    assert kinds.count(FusedConv2d) == 6 and kinds.count(FusedLinear) == 2
    assert not any(isinstance(m, (nn.BatchNorm2d, nn.ReLU, nn.GELU)) for m in fast.modules())
    report = fast.tc_autotune_report
    assert (report.layers, report.fused_ops, report.left) == (8, 12, {})
    assert rel_err(out, expected) < 1e-2 and rel_err(out, model(x)) < 1e-2
    assert out.dtype == torch.float16 and out.shape == (4, 10)
    assert sum(fallbacks().values()) == 8  # every layer, on the CPU
    assert all(torch.equal(p, before[name]) for name, p in model.state_dict().items())  # model untouched
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


def test_a_backend_that_runs_the_graph_while_it_compiles_gets_the_ops_results():
    """torch.compile's flag stays up while a backend compiles: the op's implementation must
    then run the call, not hand it back to the op (which recursed until the stack ran out)."""
    model, x, expected = small()
    ran = []

    def backend(gm, inputs):  # as a backend that benchmarks or constant-folds the graph does
        ran.append(gm(*inputs))
        return gm.forward

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", ops.FallbackWarning)
        fast = tc.optimize(model, (x,), build=False)
        torch._dynamo.reset()
        out = torch.compile(fast, backend=backend, fullgraph=True)(x)
        torch._dynamo.reset()
    assert len(ran) == 1 and rel_err(ran[0][0], expected) < 1e-2 and rel_err(out, expected) < 1e-2


def test_what_the_kernels_cannot_take_stays_pytorchs():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8).half()  # no Tensor Core GEMM
            self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2).half()  # one kernel, a GEMM per group
            self.fp32 = nn.Linear(8, 8)
            self.exact = nn.Linear(8, 8).half()
            self.gelu = nn.GELU()  # exact GELU: not the kernels' tanh approximation
            self.shared = nn.Conv2d(8, 8, 1).half()

        def forward(self, x):
            y = self.grouped(self.depthwise(x))
            s = self.shared(y)
            y = torch.relu(s) + s  # s has two users: nothing fuses into its conv
            z = self.gelu(self.exact(y.mean((2, 3))))
            return self.fp32(z.float()) + y.float().mean()

    model = Odd().eval()
    x = torch.randn(2, 8, 6, 6).half()
    fast = tc.optimize(model, (x,), build=False)
    report = fast.tc_autotune_report
    assert set(report.left) == {"depthwise", "fp32"}
    assert "a depthwise conv" in report.left["depthwise"] and "float32" in report.left["fp32"]
    assert isinstance(fast.grouped, FusedConv2d) and fast.grouped.groups == 2
    assert fast.grouped.weight.data_ptr() == model.grouped.weight.data_ptr()  # its OIHW weight, in place
    assert isinstance(fast.exact, FusedLinear) and fast.exact.activation == "none"
    assert isinstance(fast.shared, FusedConv2d) and fast.shared.activation == "none" and not fast.shared.residual
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.FallbackWarning)
        assert rel_err(fast(x), model(x)) < 1e-2


def test_a_model_in_training_mode_is_refused():
    model = SmallNet()
    with pytest.raises(ValueError, match=r"training mode: call model.eval\(\) first"):
        tc.optimize(model)


# ---- the cached launch path --------------------------------------------------------------------
def test_a_call_finds_its_launch_by_a_cheap_key(monkeypatch):
    """The kernel is looked up once per (shapes, dtypes, device, epilogue, logs); later calls
    make no workload and consult no log."""
    made = []

    def fake_bind(key, workload_of_call, device):
        made.append(workload_of_call())
        ops._LAUNCHES[key] = ValueError("no GPU here")
        return ops._LAUNCHES[key]

    monkeypatch.setattr(ops, "_bind", fake_bind)
    ops.clear_launches()
    data, weight, bias = torch.randn(1, 4, 4, 8).half(), torch.randn(1, 1, 8, 16).half(), torch.randn(16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.FallbackWarning)
        for _ in range(3):
            ops.conv2d_nhwc(data, weight, bias=bias, activation="relu")
        ops.conv2d_nhwc(data, weight, activation="relu")  # another epilogue: another kernel
        ops.dense_nk(torch.randn(2, 3, 8).half(), torch.randn(16, 8).half(), bias=bias)
    assert [str(w) for w in made] == [
        str(workloads.get("n=1,h=4,c=8,k=16,r=1,out_dtype=float16,epilogue=bias_relu")),
        str(workloads.get("n=1,h=4,c=8,k=16,r=1,out_dtype=float16,epilogue=relu")),
        str(DenseWorkload(m=6, n=16, k=8, b_layout="nk", out_dtype="float16", epilogue="bias"))]  # leading dims fold into M
    with pytest.raises(ValueError, match="no GPU here"):
        ops.conv2d_nhwc(data, weight, bias=bias, activation="relu", fallback=False)


def _llvm_function_of(wl):
    """A TVM function (built for the CPU) of ``wl``'s signature, computing out = data[..., :1] *
    weight[0, 0, 0] + bias: its argument checks are the ones TVM puts before every kernel."""
    import tvm
    from tvm import te

    specs = tasks.of(wl).signature(wl)
    data, weight, bias = (te.placeholder(shape, dtype, name) for name, shape, dtype in specs[:3])
    out = te.compute(specs[3][1], lambda n, h, w, k: (data[n, h, w, 0].astype("float32") * weight[0, 0, 0, k]
                                                      .astype("float32") + bias[k]).astype("float16"), name="out")
    return tvm.compile(te.create_prim_func([data, weight, bias, out]), target="llvm")["main"]


def test_a_fused_layers_settings_are_immutable_values():
    """Under torch.compile dynamo skips the guards of an unchanged module whose attributes are all
    immutable (a list or a torch.dtype among them has each of its guards checked on every call): a
    fused layer's settings are ints, strings, bools and tuples of them, the dtype by name."""
    def immutable(value):
        return value is None or isinstance(value, (int, str)) or (
            isinstance(value, tuple) and all(immutable(v) for v in value))

    conv = FusedConv2d.of(nn.Conv2d(8, 16, 3, stride=[2, 2], padding=1).half(), activation="relu")
    linear = FusedLinear.of(nn.Linear(8, 16).half())
    for layer in (conv, linear):
        settings = {name: value for name, value in vars(layer).items() if not name.startswith("_")}
        assert len(settings) >= 3 and all(immutable(v) for v in settings.values()), settings
    assert (conv.stride, conv.padding, conv.dilation, conv.out_dtype) == ((2, 2), (1, 1), (1, 1), "float16")
    assert linear.out_dtype == "float16"


def test_a_launch_refuses_what_it_cannot_read_in_place():
    """The launch checks alignment (TVM assumes it) and leaves shapes, dtypes, strides and the device
    to TVM's own argument checks, naming the tensor TVM refused; nothing is ever copied."""
    from tc_autotune.api import kernel
    from tc_autotune.pytorch.launch import TorchLaunch
    import tvm

    wl = workloads.get("n=1,h=4,c=8,k=16,r=1,out_dtype=float16,epilogue=bias")
    k = kernel.Kernel(wl, tasks.of(wl).space(wl, default_gpu()).default_config(),
                      tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), None, b"")
    function, calls = _llvm_function_of(wl), []
    k._main = lambda *args: (calls.append(args), function(*args))
    launch = TorchLaunch(k, torch.device("cpu"))
    torch.manual_seed(0)
    data, weight, bias = torch.randn(1, 4, 4, 8).half(), torch.randn(1, 1, 8, 16).half(), torch.randn(16)
    expected = (data[..., :1].float() * weight[0, 0, 0].float() + bias).half()
    out = launch(data, weight, bias)
    assert out.shape == (1, 4, 4, 16) and out.dtype == torch.float16 and torch.equal(out, expected)
    assert calls[-1][:4] == (data, weight, bias, out)  # the tensors themselves: nothing copied
    odd = data.as_strided(data.shape, (7, 32, 8, 1))  # batch 1: the batch stride is arbitrary
    assert odd.is_contiguous()
    assert torch.equal(launch(odd, weight, bias), expected) and calls[-1][0] is odd  # TVM takes it as it is
    for args, message in [((data.transpose(1, 2), weight, bias), "data is not contiguous"),
                          ((data, weight, bias.half()), r"bias must be float32\[16\], got float16\[16\]"),
                          ((data, weight[..., :8], bias), r"weight must be float16\[1, 1, 8, 16\]"),
                          ((data, weight.numpy(), bias), "weight must be a torch tensor, got ndarray"),
                          ((torch.randn(1 * 4 * 4 * 8 + 1).half()[1:].view(1, 4, 4, 8), weight, bias),
                           "data cannot be read in place: its address is not 64-byte aligned")]:
        called = len(calls)
        with pytest.raises(ValueError, match=message):
            launch(*args)
        assert len(calls) == called + ("aligned" not in message and "ndarray" not in message)
    with pytest.raises(ValueError, match=r"out must be float16\[1, 4, 4, 16\]"):
        launch(data, weight, bias, out=torch.empty(1, 4, 4, 16))


def test_a_function_that_checks_size_1_strides_gets_canonical_views_from_then_on():
    """Where a function refuses a size-1 dimension's arbitrary stride, the launch passes such
    tensors as views with the canonical strides (the same memory), on that call and after."""
    from tc_autotune.api import kernel
    from tc_autotune.pytorch.launch import TorchLaunch
    import tvm

    wl = workloads.get("n=1,h=4,c=8,k=16,r=1,out_dtype=float16,epilogue=bias")
    k = kernel.Kernel(wl, tasks.of(wl).space(wl, default_gpu()).default_config(),
                      tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), None, b"")
    calls = []

    def strict(*args):
        if args[0].stride() != (128, 32, 8, 1):
            raise ValueError("Mismatched data.strides: expected to be compact array")
        calls.append(args)

    k._main = strict
    launch = TorchLaunch(k, torch.device("cpu"))
    data, weight, bias = torch.randn(1, 4, 4, 8).half(), torch.randn(1, 1, 8, 16).half(), torch.randn(16)
    odd = data.as_strided(data.shape, (7, 32, 8, 1))
    for _ in range(2):
        launch(odd, weight, bias)
        passed = calls[-1][0]
        assert passed.stride() == (128, 32, 8, 1) and passed.data_ptr() == data.data_ptr()
    assert len(calls) == 2
    with pytest.raises(ValueError, match="data is not contiguous"):
        launch(data.transpose(1, 2), weight, bias)


# ---- grouped convs and conv weights in place (issue #32) ---------------------------------------------
def test_a_convs_own_weight_is_held_in_place_and_a_folded_one_is_hwio():
    """Without a batch norm a fused conv holds the nn.Conv2d's weight itself: OIHW where it is
    contiguous, its OHWI view where channels_last (the same memory); a folded batch norm makes
    a new HWIO tensor; a weight neither way is copied to HWIO, counted and said once."""
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 32, 3, padding=1, groups=4).half().eval()
    fused = FusedConv2d.of(conv)
    assert (fused.weight_layout, fused.groups) == ("OIHW", 4) and fused.weight.data_ptr() == conv.weight.data_ptr()
    last = nn.Conv2d(16, 32, 3, padding=1).half().to(memory_format=torch.channels_last)
    fused = FusedConv2d.of(last)
    assert fused.weight_layout == "OHWI" and fused.weight.data_ptr() == last.weight.data_ptr()
    assert fused.weight.shape == (32, 3, 3, 16) and fused.weight.is_contiguous()
    assert "groups" not in repr(fused) and "weight=OHWI" in repr(fused)
    assert FusedConv2d.of(conv, nn.BatchNorm2d(32).half().eval()).weight_layout == "HWIO"
    odd = nn.Conv2d(16, 32, 3, padding=1).half()
    odd.weight = nn.Parameter(odd.weight.detach().permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2))
    reset_fallbacks()
    with pytest.warns(ops.FallbackWarning, match="copies the weight: a conv weight neither contiguous"):
        held = FusedConv2d.of(odd)
    assert held.weight_layout == "HWIO" and held.weight.shape == (3, 3, 16, 32)
    assert sum(fallbacks().values()) == 1


@pytest.mark.parametrize("layout,channels_last", [("HWIO", False), ("OIHW", False), ("OIHW", True)])
def test_a_grouped_conv_in_any_layout_is_the_ops_math(layout, channels_last):
    """The op's math (here PyTorch's, on the CPU) with a grouped weight in each layout, and a
    channels_last OIHW weight taken as its OHWI view; the fake agrees on the shape."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch.manual_seed(2)
    conv = nn.Conv2d(12, 8, 3, stride=2, padding=1, groups=4, bias=False).half()
    x = torch.randn(2, 12, 9, 7).half()
    ref = conv.float()(x.float())
    weight = conv.weight.detach().half()
    if layout == "HWIO":
        weight = weight.permute(2, 3, 1, 0).contiguous()
    elif channels_last:
        weight = weight.contiguous(memory_format=torch.channels_last)
    args = (x.permute(0, 2, 3, 1).contiguous(), weight, None, None, None, [2, 2], [1, 1, 1, 1], [1, 1], "none",
            torch.float32, 4, layout)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.FallbackWarning)
        out = torch.ops.tc_autotune.conv2d(*args)
        torch.library.opcheck(torch.ops.tc_autotune.conv2d.default, args)
    assert rel_err(out.permute(0, 3, 1, 2), ref) < 1e-3
    with FakeTensorMode():
        fake = torch.ops.tc_autotune.conv2d(*(torch.empty_strided(a.shape, a.stride(), dtype=a.dtype)
                                              if isinstance(a, torch.Tensor) else a for a in args))
    assert fake.shape == out.shape == (2, 5, 4, 8)


def test_a_depthwise_conv_is_one_reason_whatever_its_shape():
    with pytest.raises(ValueError, match="a depthwise conv .* is no Tensor Core GEMM") as err:
        ops._conv_workload(torch.empty(1, 8, 8, 32), torch.empty(3, 3, 1, 32), 1, 1, 1, "float16", "none", 32, "HWIO")
    assert "32" not in str(err.value)  # no shape: said once for every depthwise layer


# ---- the disk build cache ----------------------------------------------------------------------
def test_the_build_cache_keys_move_with_what_the_kernel_depends_on(tmp_path, monkeypatch):
    wl = workloads.get("n=1,h=4,c=8,k=16,r=1")
    gpu = build_cache.default_gpu()
    config = tasks.of(wl).space(wl, gpu).default_config()
    key = build_cache.module_key(wl, config, "sm_90")
    assert key == build_cache.module_key(workloads.get("n=1,h=4,c=8,k=16,r=1"), config, "sm_90")
    assert key != build_cache.module_key(wl, config, "sm_90a")
    assert key != build_cache.module_key(workloads.get("n=2,h=4,c=8,k=16,r=1"), config, "sm_90")
    from dataclasses import replace

    assert key != build_cache.module_key(wl, replace(config, chunk=config.chunk * 2), "sm_90")
    monkeypatch.setattr(build_cache, "code_fingerprint", lambda: "other code")
    assert key != build_cache.module_key(wl, config, "sm_90")
    log = tmp_path / "a.jsonl"
    log.write_text("")
    before = build_cache.choice_key(wl, gpu, ((str(log), False),))
    log.write_text("\n")  # a log changed: the choice is made again
    assert build_cache.choice_key(wl, gpu, ((str(log), False),)) != before
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(shipped))
    before = build_cache.choice_key(wl, gpu, ())
    (shipped / "zero_shot_model.json").write_text("{}")  # the stored zero-shot model changed: so may the pick
    assert build_cache.choice_key(wl, gpu, ()) != before


def test_a_cached_kernel_is_loaded_not_built(tmp_path, monkeypatch):
    """The first call builds and stores (choice and module); the next finds both and loads the
    library: no lowering, no nvcc (a CPU machine cannot load CUDA modules, so a stand-in loader)."""
    monkeypatch.setenv("TC_AUTOTUNE_CACHE_DIR", str(tmp_path))
    wl = workloads.get("n=1,h=8,c=16,k=16,r=1,out_dtype=float16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", apply.NoTunedConfigWarning)
        built = build_cache.kernel(wl, logs=())
        entries = sorted(p.suffix for p in (tmp_path / "kernels" / "modules").iterdir())
        assert entries == [".cu", ".cubin", ".json", ".so"]
        assert len(list((tmp_path / "kernels" / "choices").iterdir())) == 1
        loaded_paths = []
        monkeypatch.setattr(build_cache, "_load_module", lambda path: loaded_paths.append(path) or "module")
        monkeypatch.setattr(build_cache, "compile_kernel", lambda *a, **k: pytest.fail("built again"))
        again = build_cache.kernel(wl, logs=())
    assert again.executable == "module" and loaded_paths[0].endswith(".so")
    assert again.config == built.config and again.cubin == built.cubin
    assert again.cuda_source == built.cuda_source  # kept beside the library
    assert build_cache.kernels([wl, wl], logs=())[wl].executable == "module"  # a hit: nothing spawned


def test_the_build_server_leaves_torch_out_only_where_it_is_asked_to(tmp_path):
    """The build workers' fork server imports no torch (TVM would, for seconds); any other
    process importing the module keeps torch."""
    import os
    import subprocess

    code = ("import tc_autotune.api.build_server, importlib.util\n"
            "try:\n    import torch\n    print('torch', torch.__version__)\nexcept ImportError:\n    print('no torch')\n")
    env = {k: v for k, v in os.environ.items() if k != "TC_AUTOTUNE_BUILD_SERVER"}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**env, **extra}, cwd=Path(__file__).parents[1]).stdout.strip()
            for extra in ({"TC_AUTOTUNE_BUILD_SERVER": "1"}, {})]
    assert runs[0] == "no torch" and runs[1].startswith("torch 2."), runs


def test_workspaces_are_allocated_on_a_thread_of_their_own():
    """torch routes a thread's allocations to a CUDA graph pool while torch.compile's graphs
    warm up; a launch's workspaces (kept for its lifetime) are made on another thread, and an
    error there is raised in the caller."""
    import threading

    from tc_autotune.pytorch.launch import _allocated_outside_graph_pools

    seen = _allocated_outside_graph_pools(lambda: (threading.current_thread().name, torch.zeros(3)))
    assert seen[0] != threading.current_thread().name and seen[1].tolist() == [0, 0, 0]
    with pytest.raises(RuntimeError, match="out of memory"):
        _allocated_outside_graph_pools(lambda: (_ for _ in ()).throw(RuntimeError("out of memory")))
