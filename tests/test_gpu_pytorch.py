"""On the GPU with PyTorch (issue #29): the custom ops pass ``torch.library.opcheck``, a model
with optimized layers compiles with ``fullgraph=True`` and runs under ``reduce-overhead``'s
CUDA graphs, ``optimize`` agrees with PyTorch on a small model, a layout the kernels cannot take
falls back (counted, correct), and a kernel built in one process is loaded by the next."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def torch(cuda_torch):
    import tc_autotune.pytorch  # noqa: F401 (registers the ops)

    return cuda_torch


def rel_err(out, ref):
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())


@pytest.fixture(scope="module")
def small(torch):
    """A bottleneck network in fp16 on the GPU, its channels-last input, and its fp32 output."""
    sys.path.insert(0, str(Path(__file__).parent))
    from pytorch_models import SmallNet

    torch.manual_seed(0)
    model = SmallNet().eval().cuda()
    x = torch.randn(4, 3, 32, 32, device="cuda")
    with torch.no_grad():
        expected = model(x)
    model = model.half().to(memory_format=torch.channels_last)
    return model, x.half().to(memory_format=torch.channels_last), expected


def test_the_ops_pass_opcheck(torch):
    from tc_autotune.pytorch import ops

    rng = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape, dtype=torch.float16):
        return torch.randn(*shape, generator=rng, device="cuda").to(dtype)

    data, weight = randn(2, 8, 8, 32), randn(3, 3, 32, 64) * 0.1
    bias, residual = randn(64, dtype=torch.float32), randn(2, 8, 8, 64)
    torch.library.opcheck(torch.ops.tc_autotune.conv2d.default,
                          (data, weight, None, bias, residual, [1, 1], [1, 1, 1, 1], [1, 1], "relu", torch.float16))
    torch.library.opcheck(torch.ops.tc_autotune.conv2d.default,
                          (data, weight, None, None, None, [2, 2], [1, 1, 1, 1], [1, 1], "none", torch.float32))
    a, w, b = randn(3, 5, 64), randn(96, 64) * 0.1, randn(96, dtype=torch.float32)
    torch.library.opcheck(torch.ops.tc_autotune.dense.default, (a, w, None, b, None, "gelu", torch.float16))
    assert not ops.fallbacks(), ops.fallbacks()


def test_the_ops_match_pytorch(torch):
    from tc_autotune.pytorch import ops

    data = torch.randn(2, 8, 8, 32, device="cuda").half()
    weight = (torch.randn(3, 3, 32, 64, device="cuda") * 0.1).half()
    bias, residual = torch.randn(64, device="cuda"), torch.randn(2, 8, 8, 64, device="cuda").half()
    args = (data, weight, None, bias, residual, [1, 1], [1, 1, 1, 1], [1, 1], "relu", torch.float16)
    out = torch.ops.tc_autotune.conv2d(*args)
    assert out.shape == (2, 8, 8, 64) and out.dtype == torch.float16 and out.is_contiguous()
    assert rel_err(out, ops.conv2d_reference(*args)) < 1e-2
    assert not ops.fallbacks()


def test_optimize_agrees_with_pytorch_and_compiles_without_graph_breaks(torch, small):
    import tc_autotune as tc
    from tc_autotune.pytorch import FusedConv2d, FusedLinear, fallbacks, reset_fallbacks

    model, x, expected = small
    reset_fallbacks()
    with torch.no_grad():
        fast = tc.optimize(model, (x,), measure=False)  # every layer fused, whatever it times
        kinds = [type(m) for m in fast.modules()]
        assert kinds.count(FusedConv2d) == 6 and kinds.count(FusedLinear) == 2
        assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in fast.modules())
        eager = fast(x)
        assert rel_err(eager, expected) < 2e-2 and rel_err(model(x), expected) < 2e-2
        assert not fallbacks(), fallbacks()
        compiled = torch.compile(fast, fullgraph=True)  # a graph break is an error here
        assert rel_err(compiled(x), eager) < 1e-3
        torch._dynamo.reset()
        graphed = torch.compile(fast, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):  # warm-up runs, then CUDA graph replays
            out = graphed(x)
        assert rel_err(out, eager) < 1e-3
        launches = {name: _launches(torch, fn) for name, fn in (("eager", lambda: fast(x)),
                                                                 ("graphed", lambda: graphed(x)))}
    # the profiler sees each of our 8 kernels launched eagerly; replayed, only the graph launch
    # (and at most the copy of the input into the graph's buffer)
    assert len(launches["eager"][0]) >= 8 and "cudaGraphLaunch" not in launches["eager"][1], launches
    assert len(launches["graphed"][0]) <= 1 and "cudaGraphLaunch" in launches["graphed"][1], launches
    assert launches["graphed"][2] >= 8  # our kernels ran on the GPU, from the graph
    assert not fallbacks(), fallbacks()


def test_measured_optimize_times_every_layer_and_keeps_the_faster_side(torch, small):
    import tc_autotune as tc
    from tc_autotune.pytorch import FusedConv2d, FusedLinear, choose, fallbacks, reset_fallbacks

    model, x, expected = small
    reset_fallbacks()
    with torch.no_grad():
        fast = tc.optimize(model, (x,), measure=True)
        out = fast(x)
    report = fast.tc_autotune_report
    assert len(report.timed) == 8, report.timed
    for name, (ours, theirs) in report.timed.items():
        # a layer of this size is microseconds on either side: an empty capture would be ~0
        assert 5e-7 < ours < 1e-3 and 5e-7 < theirs < 1e-3, (name, ours, theirs)
        fused = not (theirs * (1 + choose.MARGIN) < ours and ours - theirs > choose.MIN_GAIN)
        assert (name not in report.left) == fused, (name, ours, theirs, report.left.get(name))
        assert isinstance(fast.get_submodule(name), (FusedConv2d, FusedLinear)) == fused, name
    assert report.layers == 8 - len(report.left)
    assert rel_err(out, expected) < 2e-2
    assert not fallbacks(), fallbacks()


def test_by_default_optimize_times_exactly_the_layers_without_a_record(torch, small):
    import tc_autotune as tc
    from tc_autotune.pytorch import fusion, trace

    model, x, expected = small
    with torch.no_grad():
        fast = tc.optimize(model, (x,))
        out = fast(x)
    report = fast.tc_autotune_report
    gm = trace(model, (x,))
    untuned = {str(w) for w in report.untuned}
    layers = [layer for layer in fusion.find_layers(gm) if layer.why_not is None]
    expect = {layer.name for layer in layers if str(fusion.workload(layer, gm)) in untuned}
    assert set(report.timed) == expect, (sorted(report.timed), sorted(expect))
    assert report.layers == len(layers) - len(report.left) and rel_err(out, expected) < 2e-2


def test_a_model_compiled_before_its_first_eager_call_binds_its_kernels_while_graphs_record(torch):
    """ResNet-50's layer3 at batch 1 (split-K layers among them, with workspaces): compiled
    with CUDA graphs before any eager call, its kernels are bound during the graphs' warm-up
    run, which must neither leave untracked memory in their pool nor break the fullgraph
    compile."""
    import tc_autotune as tc
    from tc_autotune.pytorch import models, ops

    layer3 = models.resnet50().layer3.cuda().half().to(memory_format=torch.channels_last).eval()
    x = torch.randn(1, 512, 28, 28, device="cuda").half().to(memory_format=torch.channels_last)
    with torch.no_grad():
        fast = tc.optimize(layer3, (x,), measure=False)
        ops.clear_launches()
        torch._dynamo.reset()
        graphed = torch.compile(fast, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            out = graphed(x)
        assert any(launch.workspaces for launch in ops._LAUNCHES.values()), "no layer with a workspace"
        assert rel_err(out, fast(x)) < 1e-3 and rel_err(out, layer3(x)) < 2e-2


def _launches(torch, fn):
    """(kernel launches on the host, the host's launch-like calls, our kernels run on the GPU)
    of one ``fn()``."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = prof.events()
    cuda = torch.autograd.DeviceType.CUDA
    host = [e.name for e in events if e.device_type != cuda]
    kernels = [n for n in host if "LaunchKernel" in n]
    ours = sum("main_kernel" in e.name for e in events if e.device_type == cuda)
    return kernels, sorted({n for n in host if "aunch" in n}), ours


def test_an_nchw_input_falls_back_once_and_stays_correct(torch, small):
    import tc_autotune as tc
    from tc_autotune.pytorch import FallbackWarning, fallbacks, reset_fallbacks

    model, x, expected = small
    reset_fallbacks()
    with torch.no_grad():
        fast = tc.optimize(model, (x,), measure=False)  # the stem fused, so that it falls back
        contiguous = x.contiguous()  # NCHW in memory: the first conv cannot read it in place
        with pytest.warns(FallbackWarning, match="data is not contiguous"):
            first = fast(contiguous)
        second = fast(contiguous)
    assert rel_err(first, expected) < 2e-2 and torch.equal(first, second)
    (key, count), = fallbacks().items()
    assert key[0] == "conv2d" and count == 2


def test_a_new_process_loads_the_kernel_from_the_disk_cache(torch, tmp_path):
    code = ("import time, torch, tc_autotune as tc; from tc_autotune import workloads; from tc_autotune.api import build_cache; torch.manual_seed(0)\n"
            "wl = workloads.get('n=2,h=8,c=32,k=64,r=3,pad=1,out_dtype=float16')\n"
            "start = time.perf_counter(); k = build_cache.kernel(wl)\n"
            "x = torch.randn(wl.data_shape, device='cuda').half(); w = torch.randn(wl.weight_shape, device='cuda').half()\n"
            "y = k(x, w); ref = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2).float(), w.permute(3, 2, 0, 1).float(), padding=1)\n"
            "err = float((y.permute(0, 3, 1, 2).float() - ref).abs().max() / ref.abs().max())\n"
            "print(type(k.executable).__name__, err, time.perf_counter() - start)\n")
    env = {**os.environ, "TC_AUTOTUNE_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                           timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), [r.stderr[-2000:] for r in runs]
    (built, err1, _), (loaded, err2, load_s) = (r.stdout.split()[-3:] for r in runs)
    assert built == "Executable" and loaded == "Module"  # compiled, then loaded as a library
    assert float(err1) < 1e-2 and float(err1) == float(err2)
    assert len(list((tmp_path / "kernels" / "modules").glob("*.so"))) == 1
