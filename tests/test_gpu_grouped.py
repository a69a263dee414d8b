"""On the GPU (issue #32): grouped convs, odd group widths and ResNeXt-50 32x4d's grouped 3x3
layers among them, and OIHW / OHWI weights, on every path that takes them, each against the
fp32 reference with the output poisoned first; with PyTorch, an nn.Conv2d's weight (contiguous
or channels_last) read in place, and grouped and depthwise layers giving PyTorch's outputs."""

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tc_autotune import build_conv2d, conv2d_space
from tc_autotune.core.results import relative_l2_error
from tc_autotune import workloads
from tc_autotune.workloads.reference import conv2d_reference, random_inputs

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]

# Odd group widths (C/G, K/G): (3, 5), (12, 18) strided, a 1x1 of (12, 6), (8, 12) 5x5 with a fused
# epilogue, ResNeXt's (4, 4), fp32 input (8, 8); all padded per group to the block tile.
ODD_GROUPS = [
    "n=3,h=9,w=11,c=12,k=20,r=3,pad=1,groups=4",
    "n=2,h=10,c=24,k=36,r=3,stride=2,pad=1,groups=2",
    "n=2,h=8,c=48,k=24,r=1,groups=4",
    "n=2,h=12,c=64,k=96,r=5,pad=2,groups=8,out_dtype=float16,epilogue=bias_residual_relu",
    "n=2,h=14,c=128,k=128,r=3,pad=1,groups=32",
    "n=1,h=9,c=40,k=40,r=3,pad=1,groups=5,dtype=float32",
]
LAYOUTS = ["n=2,h=14,c=64,k=96,r=3,pad=1", "n=2,h=14,c=256,k=96,r=1", "n=2,h=14,c=64,k=64,r=3,pad=1,groups=4",
           "n=3,h=11,w=9,c=24,k=40,r=3,s=2,stride=2x1,pad=1x0x2x1,groups=2"]
# The warp-specialized kernel (Hopper) on the weights it takes: OHWI, and OIHW of a 1x1 conv.
WS = dict(intrinsic="wgmma", wmma="m16n16k16", offset_a=0, offset_b=0, offset_c=0, block_row_warps=4,
          block_col_warps=1, warp_row_tiles=1, warp_col_tiles=8, chunk=4, stages=3, vec_a=8, vec_b=8, vec_c=1,
          frag_buffers=1, split_k=1, warp_specialized=1)


def sm() -> int:
    from tc_autotune.backends.cuda.gpu import default_gpu

    return int(default_gpu().arch[3:])


def check(workload, config, seed=0) -> float:
    """The kernel of ``config`` against the fp32 reference, its output poisoned with NaN first."""
    import tvm

    kernel = build_conv2d(workload, config)
    inputs = random_inputs(workload, seed)
    out = tvm.runtime.tensor(np.full(workload.out_shape, np.nan, workload.out_dtype), device=tvm.cuda(0))
    kernel(*inputs, out)
    result = out.numpy()
    assert np.isfinite(result).all(), f"some outputs were never written (NaN poison left): {config}"
    err = relative_l2_error(result, conv2d_reference(workload, *inputs))
    assert err < 1e-2, f"relative L2 error {err:.3g} for {workload} with {config}"
    return err


def path_configs(space, per_path: int = 2, seed: int = 0) -> list:
    """The default config, then up to ``per_path`` seeded ones of each path valid on this GPU
    (wmma, mma, wgmma, the warp-specialized kernels), each drawn from the space with the path
    pinned (some are a sliver of the whole), and of split-K."""
    from tc_autotune.templates.registry import ConfigSpace
    from tc_autotune.templates.tc_gemm.knobs import KNOBS
    from tc_autotune.templates.tc_gemm.validity import INTRINSIC_REQUIRES

    picked = [space.default_config()]
    pins = [{"intrinsic": (name,), "warp_specialized": (ws,), "split_k": (1,),
             **{knob: (value,) for knob, value in INTRINSIC_REQUIRES.get(name, {}).items()}}
            for name in KNOBS["intrinsic"] for ws in ((0, 1, 2) if name == "wgmma" else (0,))]
    pins.append({"split_k": KNOBS["split_k"][1:], "warp_specialized": (0,)})
    for pinned in pins:
        sub = ConfigSpace(space.workload, space.gpu, knobs={**KNOBS, **pinned})
        picked += [c for c in sub.sample(per_path, seed=seed) if c not in picked]
    return picked


@pytest.mark.parametrize("spec", ODD_GROUPS)
def test_grouped_convs_with_odd_group_widths_match_the_reference(spec):
    workload = workloads.get(spec)
    space = conv2d_space(workload)
    configs = path_configs(space)
    paths = {c.intrinsic for c in configs}
    assert "wmma" in paths and (sm() < 80 or "mma" in paths), paths
    for config in configs:
        check(workload, config)


def _resnext_layers():
    from tc_autotune.tuning.jobs import load_job

    return [entry.workload for entry in load_job(ROOT / "tuning_logs" / "resnext50-grouped-b32.toml").entries]


@pytest.mark.parametrize("index", range(7))
def test_resnext50_grouped_3x3_layers_match_the_reference(index):
    """At batch 32 the config a build picks (best record, else zero-shot); at batch 2 each path's."""
    workload = _resnext_layers()[index]
    assert workload.groups == 32 and workload.batch == 32
    check(workload, build_conv2d(workload).config)
    small = workload.replace(batch=2)
    for config in path_configs(conv2d_space(small), per_path=1, seed=index):
        check(small, config, seed=1)


# Packed groups (group_pack): odd widths (C/G, K/G) of (3, 5), (2, 4) OIHW with a fused epilogue, (4, 4)
# OHWI strided, ResNeXt's (8, 8) with fp32 input; each pack's prior pick and a seeded config of
# each path with the pack pinned, against the reference and the unpacked kernel.
PACKED_GROUPS = [
    "n=3,h=9,w=11,c=12,k=20,r=3,pad=1,groups=4",
    "n=2,h=12,w=10,c=16,k=32,r=3,pad=1,groups=8,weight_layout=OIHW,out_dtype=float16,epilogue=bias_residual_relu",
    "n=2,h=15,c=32,k=32,r=3,stride=2,pad=1,groups=8,weight_layout=OHWI",
    "n=1,h=10,c=64,k=64,r=3,pad=1,groups=8,dtype=float32",
]


def packed_configs(space, seed: int = 0) -> list:
    """Per valid group_pack > 1: the prior's best config of that pack, then a seeded one of each
    path (wmma, mma, wgmma without warp specialization) with the pack pinned."""
    from tc_autotune.templates.registry import ConfigSpace
    from tc_autotune.templates.tc_gemm.knobs import KNOBS
    from tc_autotune.templates.tc_gemm.packing import why_not_packed
    from tc_autotune.templates.tc_gemm.validity import INTRINSIC_REQUIRES, default_config

    picked = []
    for pack in KNOBS["group_pack"][1:]:
        if why_not_packed(space.view, pack) is not None:
            continue
        picked.append(default_config(space, group_pack=pack))
        for name in KNOBS["intrinsic"]:
            pinned = {"intrinsic": (name,), "group_pack": (pack,), "warp_specialized": (0,),
                      **{knob: (value,) for knob, value in INTRINSIC_REQUIRES.get(name, {}).items()}}
            sub = ConfigSpace(space.workload, space.gpu, knobs={**KNOBS, **pinned})
            picked += [c for c in sub.sample(1, seed=seed) if c not in picked]
    return picked


def run(workload, config, inputs):
    import tvm

    out = tvm.runtime.tensor(np.full(workload.out_shape, np.nan, workload.out_dtype), device=tvm.cuda(0))
    build_conv2d(workload, config)(*inputs, out)
    return out.numpy().astype(np.float32)


@pytest.mark.parametrize("spec", PACKED_GROUPS)
def test_packed_groups_match_the_reference_and_the_unpacked_kernel(spec):
    from tc_autotune.templates.tc_gemm.validity import default_config

    workload = workloads.get(spec)
    space = conv2d_space(workload)
    configs = packed_configs(space)
    assert len({c.group_pack for c in configs}) >= 1 and all(c.group_pack > 1 for c in configs)
    inputs = random_inputs(workload, 4)
    unpacked = run(workload, default_config(space, group_pack=1), inputs)
    for config in configs:
        check(workload, config, seed=4)
        # the same sums in another order (fp32 accumulation), the block-diagonal zeros adding nothing
        err = relative_l2_error(run(workload, config, inputs), unpacked)
        assert err < 2e-3, f"{err:.3g} from the unpacked kernel: {config}"


@pytest.mark.parametrize("index", [0, 1, 2, 3, 4])
def test_packed_resnext50_grouped_layers_match_the_reference(index):
    """The 4-, 8- and 16-channel-group layers: at batch 32 each pack's prior pick, at batch 2 a
    seeded config of each path with each pack."""
    from tc_autotune.templates.tc_gemm.validity import default_config

    workload = _resnext_layers()[index]
    space = conv2d_space(workload)
    for config in [default_config(space, group_pack=p) for p in (2, 4, 8)]:
        assert config.group_pack > 1
        check(workload, config)
    small = workload.replace(batch=2)
    for config in packed_configs(conv2d_space(small), seed=index):
        check(small, config, seed=1)


@pytest.mark.parametrize("layout", ["OIHW", "OHWI"])
@pytest.mark.parametrize("spec", LAYOUTS)
def test_oihw_and_ohwi_weights_match_the_reference_on_every_path(spec, layout):
    workload = workloads.get(spec).replace(weight_layout=layout)
    space = conv2d_space(workload)
    configs = path_configs(space, seed=3)
    ws = replace(space.default_config(), **WS)
    takes_ws = sm() == 90 and workload.groups == 1 and (layout == "OHWI" or workload.kernel_h == 1)
    assert (space.why_invalid(ws) is None) == takes_ws, space.why_invalid(ws)
    for config in configs + [ws] * takes_ws:
        check(workload, config, seed=2)


# ---- PyTorch -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch(cuda_torch):
    import tc_autotune.pytorch  # noqa: F401 (registers the ops)

    return cuda_torch


def rel_err(out, ref):
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())


@pytest.mark.parametrize("channels_last", [False, True], ids=["oihw", "channels_last-ohwi"])
def test_an_nn_conv2d_weight_is_read_in_place(torch, channels_last):
    """The kernel is given the nn.Conv2d's own weight memory (OIHW, or channels_last read as OHWI):
    its pointer among the launch's arguments, and no allocation beyond the output."""
    from tc_autotune.pytorch import FusedConv2d, fallbacks, ops, reset_fallbacks

    torch.manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    conv = nn_conv(torch, 64, 128, groups=2).to(memory_format=fmt)
    x = torch.randn(2, 64, 28, 28, device="cuda").half().to(memory_format=torch.channels_last)
    fused = FusedConv2d.of(conv)
    assert fused.weight_layout == ("OHWI" if channels_last else "OIHW")
    assert fused.weight.data_ptr() == conv.weight.data_ptr()
    reset_fallbacks()
    ops.clear_launches()
    with torch.no_grad():
        y = fused(x)
        (launch,) = [v for v in ops._LAUNCHES.values() if isinstance(v, ops.TorchLaunch)]
        seen, function = [], launch.function
        launch.function = lambda *args: seen.append([a.data_ptr() for a in args]) or function(*args)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        again = fused(x)
        torch.cuda.synchronize()
        grown = torch.cuda.max_memory_allocated() - before
        ref = conv(x)
    assert conv.weight.data_ptr() in seen[0] and not fallbacks()
    assert grown <= again.numel() * again.element_size() + 4096, f"{grown} bytes: more than the output"
    assert torch.equal(y, again) and rel_err(y, ref) < 1e-2


def nn_conv(torch, c, k, groups=1, r=3):
    from torch import nn

    return nn.Conv2d(c, k, r, padding=r // 2, groups=groups, bias=True).half().cuda().eval()


def test_grouped_and_depthwise_layers_give_pytorchs_outputs(torch):
    """A grouped conv + batch norm + ReLU fuses into one kernel (a GEMM per group); a depthwise
    conv stays PyTorch's, and through the op it runs PyTorch's conv, said once for any shape."""
    from torch import nn

    import tc_autotune as tc
    from tc_autotune.pytorch import FallbackWarning, fallbacks, ops, reset_fallbacks
    from tc_autotune.workloads.conv_weights import DEPTHWISE

    torch.manual_seed(1)
    model = nn.Sequential(nn_conv(torch, 64, 96, groups=8), nn.BatchNorm2d(96), nn.ReLU(),
                          nn_conv(torch, 96, 96, groups=96), nn_conv(torch, 96, 48, groups=3, r=1)).cuda().half()
    with torch.no_grad():
        model[1].running_var.uniform_(0.5, 1.5)
    model = model.eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 64, 20, 20, device="cuda").half().to(memory_format=torch.channels_last)
    reset_fallbacks()
    with torch.no_grad():
        expected = copy.deepcopy(model).float()(x.float())  # the optimized model shares the depthwise conv
        fast = tc.optimize(model, (x,), measure=False)
        assert list(fast.tc_autotune_report.left) == ["3"] and DEPTHWISE in fast.tc_autotune_report.left["3"]
        assert rel_err(fast(x), expected) < 1e-2
        assert not fallbacks()
        with pytest.warns(FallbackWarning, match="a depthwise conv") as said:
            for c in (32, 48):
                data = torch.randn(1, 8, 8, c, device="cuda").half()
                weight = torch.randn(c, 1, 3, 3, device="cuda").half()
                out = ops.conv2d_nhwc(data, weight, stride=1, padding=1, groups=c, weight_layout="OIHW")
                ref = torch.nn.functional.conv2d(data.permute(0, 3, 1, 2), weight, padding=1, groups=c)
                assert rel_err(out.permute(0, 3, 1, 2), ref) < 1e-2
    assert len([w for w in said if issubclass(w.category, FallbackWarning)]) == 1
    assert fallbacks() == {("conv2d", DEPTHWISE): 2}


def test_resnext50_layers_optimized_and_compiled_give_pytorchs_outputs(torch):
    """ResNeXt-50 32x4d's layer1 and layer2 (grouped 3x3s of 4 and 8 channels a group, one
    strided), optimized, then compiled with fullgraph: the op's groups and weight layout trace."""
    from torch import nn

    import tc_autotune as tc
    from tc_autotune.pytorch import fallbacks, models, reset_fallbacks

    net = models.resnext50_32x4d()
    layers = nn.Sequential(net.layer1, net.layer2).cuda().half().to(memory_format=torch.channels_last).eval()
    x = torch.randn(2, 64, 32, 32, device="cuda").half().to(memory_format=torch.channels_last)
    reset_fallbacks()
    with torch.no_grad():
        expected = copy.deepcopy(layers).float()(x.float())
        fast = tc.optimize(layers, (x,), measure=False)
        grouped = [m for m in fast.modules() if getattr(m, "groups", 1) == 32]
        assert len(grouped) == 7 and not fast.tc_autotune_report.left
        eager = fast(x)
        torch._dynamo.reset()
        compiled = torch.compile(fast, fullgraph=True)(x)
    assert rel_err(eager, expected) < 2e-2 and rel_err(compiled, eager) < 1e-3
    assert not fallbacks(), fallbacks()
