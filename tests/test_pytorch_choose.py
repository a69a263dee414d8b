"""``optimize(..., measure=True)`` without a GPU: PyTorch's side of a layer is exactly the model's
own ops for it, the decision keeps PyTorch's layer only where it is faster beyond the margin or
where the fused layer disagrees, layers of one shape share one timing, and what cannot be
measured is refused in one line.  (On the GPU: ``test_gpu_pytorch.py``.)"""

import math
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import fx, nn  # noqa: E402

import tc_autotune as tc  # noqa: E402
from tc_autotune.api import build_cache  # noqa: E402
from tc_autotune.core.results import TOLERANCE  # noqa: E402
from tc_autotune.pytorch import FusedConv2d, FusedLinear, choose, fusion, ops, trace  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from pytorch_models import SmallNet  # noqa: E402


def small():
    torch.manual_seed(0)
    model = SmallNet().eval().half().to(memory_format=torch.channels_last)
    return model, torch.randn(4, 3, 32, 32).half().to(memory_format=torch.channels_last)


class _Values(fx.Interpreter):
    """Every node's value in one real forward (cloned: in-place ops change them later)."""

    def run_node(self, node):
        result = super().run_node(node)
        self.values[node] = result.clone() if isinstance(result, torch.Tensor) else result
        return result


def test_pytorchs_side_of_each_layer_is_the_models_own_ops():
    model, x = small()
    gm = trace(model, (x,))
    values = _Values(gm)
    values.values = {}
    with torch.no_grad():
        values.run(x)
    layers = [layer for layer in fusion.find_layers(gm) if layer.why_not is None]
    assert len(layers) == 8
    for layer in layers:
        args = (values.values[layer.nodes[0].args[0]],)
        if layer.residual is not None:
            args += (values.values[layer.residual],)
        with torch.no_grad():
            out = choose.pytorch_layer(gm, layer)(*(a.clone() for a in args))
        assert torch.equal(out, values.values[layer.nodes[-1]]), layer.name
    # the example tensors take the shapes, dtypes and memory format shape propagation saw
    conv_input = choose.example_tensor(layers[1].nodes[0].args[0], "cpu")
    assert conv_input.shape == (4, 32, 32, 32) and conv_input.is_contiguous(memory_format=torch.channels_last)
    assert not conv_input.is_contiguous()
    assert choose.example_tensor(layers[-1].nodes[0].args[0], "cpu").shape == (4, 128)


@pytest.mark.parametrize("ours, pytorch, error, kept_pytorch", [
    (30e-6, 20e-6, 1e-3, True),  # PyTorch's 33% and 10 us faster
    (30e-6, 28e-6, 1e-3, False),  # 7% faster: within the relative margin, the fused layer stays
    (5.9e-6, 5.3e-6, 1e-3, False),  # 11% but 0.6 us faster: within the absolute margin
    (9e-6, 10e-6, 1e-3, False),
    (math.nan, math.nan, 5 * TOLERANCE, True),  # wrong: PyTorch's, whatever the times
])
def test_pytorchs_layer_is_kept_only_when_faster_beyond_the_margin_or_when_ours_is_wrong(ours, pytorch, error,
                                                                                          kept_pytorch):
    timing = choose.Timing(ours, pytorch, error)
    assert timing.keep_pytorch is kept_pytorch
    if kept_pytorch:
        assert ("disagreed" if error > TOLERANCE else "faster") in timing.why_pytorch()


def test_a_wrong_fused_layer_is_never_timed():
    timed = []
    fused, theirs = (lambda x: torch.zeros_like(x)), (lambda x: x + 1)
    original = choose.time_torch
    try:
        choose.time_torch = lambda run, **options: timed.append(run) or [1.0]
        timing = choose.time_both(fused, theirs, (torch.randn(8, 8),))
    finally:
        choose.time_torch = original
    assert timing.keep_pytorch and timing.error > TOLERANCE and not timed


def test_measured_optimize_keeps_pytorchs_layers_where_they_are_faster(monkeypatch):
    model, x = small()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(build_cache, "kernels", lambda workloads, pdl=False: dict.fromkeys(workloads))
    monkeypatch.setattr(build_cache, "untuned", lambda workloads: list(workloads))
    timed = []

    def time_layer(gm, layer, fused, device):  # the linears lose, the 1x1 shortcut is wrong
        timed.append(choose.layer_key(gm, layer))
        assert isinstance(fused, FusedLinear if layer.kind == "dense" else FusedConv2d)
        if layer.name == "block.downsample.0":
            return choose.Timing(math.nan, math.nan, 1.0)
        return choose.Timing(*((20e-6, 10e-6) if layer.kind == "dense" else (10e-6, 20e-6)), 1e-3)

    monkeypatch.setattr(choose, "time_layer", time_layer)
    fast = tc.optimize(model, (x,), measure=True)
    report = fast.tc_autotune_report
    assert len(timed) == len(set(timed)) == 8 and len(report.timed) == 8
    assert set(report.left) == {"fc1", "fc2", "block.downsample.0"}
    assert "faster" in report.left["fc1"] and "disagreed" in report.left["block.downsample.0"]
    assert isinstance(fast.fc1, nn.Linear) and isinstance(fast.fc2, nn.Linear) and isinstance(fast.act, nn.GELU)
    shortcut = [fast.get_submodule(f"block.downsample.{i}") for i in (0, 1)]
    assert isinstance(shortcut[0], nn.Conv2d) and isinstance(shortcut[1], nn.BatchNorm2d)
    assert isinstance(fast.block.conv3, FusedConv2d) and fast.block.conv3.residual  # the kept shortcut is its residual
    assert report.layers == 5 and "8 layers timed both ways" in report.summary()
    assert "3 kept PyTorch's" in report.summary()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", ops.FallbackWarning)
        out, expected = fast(x), model(x)  # the fused layers run PyTorch's ops on the CPU
    assert float((out.float() - expected.float()).abs().max() / expected.float().abs().max()) < 1e-2


def test_measuring_needs_example_inputs_a_build_and_a_gpu():
    model, x = small()
    with pytest.raises(ValueError, match="example_inputs"):
        tc.optimize(model, measure=True)
    with pytest.raises(ValueError, match="build=True"):
        tc.optimize(model, (x,), build=False, measure=True)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA GPU"):
            tc.optimize(model, (x,), measure=True)


def test_measuring_only_the_untuned_layers_leaves_the_tuned_ones_fused_untimed(monkeypatch):
    model, x = small()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(build_cache, "kernels", lambda workloads, pdl=False: dict.fromkeys(workloads))
    # the two linears have no record: only they are timed, and PyTorch's are faster
    monkeypatch.setattr(build_cache, "untuned", lambda workloads: [w for w in workloads if "dense" in str(w)])
    timed = []

    def time_layer(gm, layer, fused, device):
        timed.append(layer.name)
        return choose.Timing(20e-6, 10e-6, 1e-3)

    monkeypatch.setattr(choose, "time_layer", time_layer)
    fast = tc.optimize(model, (x,), measure="untuned")
    report = fast.tc_autotune_report
    assert timed == ["fc1", "fc2"] and set(report.timed) == set(report.left) == {"fc1", "fc2"}
    assert isinstance(fast.fc1, nn.Linear) and report.layers == 6
    assert all(isinstance(fast.get_submodule(name), FusedConv2d) for name in ("stem", "block.conv3", "down"))
    with pytest.raises(ValueError, match="'untuned'"):
        tc.optimize(model, (x,), measure="always")


def test_by_default_the_untuned_layers_are_measured_where_they_can_be(monkeypatch):
    model, x = small()
    monkeypatch.setattr(build_cache, "kernels", lambda workloads, pdl=False: dict.fromkeys(workloads))
    monkeypatch.setattr(build_cache, "untuned", lambda workloads: [w for w in workloads if "dense" in str(w)])
    timed = []
    monkeypatch.setattr(choose, "time_layer", lambda gm, layer, fused, device: timed.append(layer.name)
                        or choose.Timing(20e-6, 10e-6, 1e-3))
    # no CUDA GPU (or a model on the CPU): nothing is timed and every layer is fused, no error
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tc.optimize(model, (x,)).tc_autotune_report.layers == 8 and not timed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert tc.optimize(model, (x,)).tc_autotune_report.layers == 8 and not timed  # the model is on the CPU
    monkeypatch.setattr(choose, "device_of", lambda gm: torch.device("cuda"))
    assert tc.optimize(model, (x,), build=False).tc_autotune_report.layers == 8 and not timed
    assert tc.optimize(model).tc_autotune_report.layers == 8 and not timed
    # on a GPU with example inputs: the untuned layers are timed, only they
    fast = tc.optimize(model, (x,))
    assert timed == ["fc1", "fc2"] and set(fast.tc_autotune_report.left) == {"fc1", "fc2"}
    timed.clear()
    assert tc.optimize(model, (x,), measure=False).tc_autotune_report.layers == 8 and not timed
