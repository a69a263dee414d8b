"""On a Hopper GPU with PyTorch: chains of our kernels built with Programmatic Dependent Launch
(``tc_gemm.pdl``), each reading what the one before it wrote (and a residual from two layers
back, with a PyTorch op between two of them), run eagerly and replayed from a CUDA graph many
times: every intermediate is bit for bit the plain build's (the same configs: the same math), and
each layer is within tolerance of its fp32 reference.  The kinds of kernel: warp-specialized with
a split-K cluster, persistent warp-specialized, TIR mma with split-K (two kernels and a
workspace), TIR wmma, and the config a build chooses.  A kernel that read its input before the
one before it had finished would read the NaNs each run starts with.  And the PyTorch path binds
PDL kernels unless ``TC_AUTOTUNE_PDL=0``.

Not checked here: whether the launches really overlap (hardware may start a kernel late), for
the cluster launch of split-K too (TVM 0.27's runtime appends the PDL attribute after the cluster
one, by its disassembly).  ``lab/probes/pdl_chain.py``'s "started early" column shows it;
correctness does not depend on it."""

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tc_autotune.api.build import build
from tc_autotune.backends.cuda.gpu import default_gpu, has_pdl
from tc_autotune.core import tasks
from tc_autotune.templates.tc_gemm import pdl
from tc_autotune import workloads

sys.path.insert(0, str(Path(__file__).parent))
from launch_info import launch_tags  # noqa: E402
from matrix import sample_configs  # noqa: E402
from test_warp_specialized import WS  # noqa: E402

pytestmark = pytest.mark.gpu
ITERATIONS = 200  # runs of each chain: a race that loses one run in a hundred shows
DENSE = "dense:m=16,n=4096,k=4096,b=nk,out_dtype=float16,epilogue={}"
CONV = "n=1,h=14,w=14,c=256,k=256,r={r},s={r},pad={pad},out_dtype=float16,epilogue={}"


def _split_k_cluster(spec):
    return replace(WS, block_col_warps=1, warp_row_tiles=1, split_k=4)


def _persistent(spec):
    return replace(WS, block_col_warps=1, warp_row_tiles=1, warp_specialized=2)


def _tir_mma_split_k(spec):
    return next(c for c in sample_configs(spec, "mma", 16, seed=3) if c.split_k > 1)


def _tir_wmma(spec):
    return next(c for c in sample_configs(spec, "m16n16k16", 16, seed=3) if c.split_k == 1)


def _chosen(spec):
    return None  # the build's choice: the best record, else zero-shot, else the default


@dataclass(frozen=True)
class Layer:
    """One of our kernels in a chain: ``out = kernel(inputs...)``; ``config``: spec -> config."""

    spec: str
    config: object
    inputs: tuple  # buffer names, in the kernel's order (data, weight, bias[, residual])
    out: str


@dataclass(frozen=True)
class TorchOp:
    """A PyTorch op between two of ours: ``fn(src, out=dst)``."""

    fn: object
    src: str
    out: str


def _chains(torch):
    """name -> the steps of each chain (a PyTorch op in the middle of each)."""
    half = lambda src, out: torch.mul(src, 0.5, out=out)  # noqa: E731
    relu = lambda src, out: torch.clamp_min(src, 0.0, out=out)  # noqa: E731
    return {
        "dense": [Layer(DENSE.format("bias_gelu"), _split_k_cluster, ("x", "w1", "b1"), "y1"),
                  Layer(DENSE.format("bias"), _persistent, ("y1", "w2", "b2"), "y2"),
                  TorchOp(half, "y2", "t"),
                  Layer(DENSE.format("bias_residual"), _tir_mma_split_k, ("t", "w3", "b3", "y1"), "y3"),
                  Layer(DENSE.format("bias_relu"), _tir_wmma, ("y3", "w4", "b4"), "y4")],
        "conv": [Layer(CONV.format("bias_relu", r=3, pad=1), _chosen, ("x", "w1", "b1"), "y1"),
                 Layer(CONV.format("bias", r=1, pad=0), _persistent, ("y1", "w2", "b2"), "y2"),
                 TorchOp(relu, "y2", "t"),
                 Layer(CONV.format("bias_residual_relu", r=3, pad=1), _split_k_cluster, ("t", "w3", "b3", "y1"), "y3"),
                 Layer(CONV.format("bias_relu", r=3, pad=1), _tir_wmma, ("y3", "w4", "b4"), "y4")],
    }


@pytest.fixture(scope="module")
def torch(cuda_torch):
    if not has_pdl(default_gpu().arch):
        pytest.skip(f"PDL needs sm_90 or above (this GPU is {default_gpu().arch})")
    return cuda_torch


class Chain:
    """A chain's kernels (plain and PDL builds of the same configs), its buffers, and one run."""

    def __init__(self, torch, steps, seed: int):
        self.torch, self.steps = torch, steps
        self.layers = [s for s in steps if isinstance(s, Layer)]
        self.kernels = {}
        for layer in self.layers:
            wl = workloads.get(layer.spec)
            plain = build(wl, layer.config(layer.spec))
            self.kernels[layer.out] = {False: plain, True: build(wl, plain.config, pdl=True)}
        self.buffers = self._buffers(seed)

    def _buffers(self, seed: int) -> dict:
        torch = self.torch
        gen = torch.Generator(device="cuda").manual_seed(seed)
        buffers = {}
        for layer in self.layers:
            wl = workloads.get(layer.spec)
            signature = {name: (shape, dtype) for name, shape, dtype in tasks.of(wl).signature(wl)}
            for name, role in zip(layer.inputs, ("data", "weight", "bias")):  # a residual is an output already
                shape, dtype = signature[role]
                if name not in buffers:  # O(1) activations: weights by 1 / sqrt(fan-in) (HWIO's or (N, K)'s)
                    fan_in = math.prod(shape[:-1]) if len(shape) == 4 else shape[-1]
                    scale = {"data": 1.0, "weight": fan_in ** -0.5, "bias": 0.1}[role]
                    buffers[name] = (torch.randn(shape, generator=gen, device="cuda") * scale).to(getattr(torch, dtype))
            shape, dtype = signature["out"]
            buffers[layer.out] = torch.empty(shape, device="cuda", dtype=getattr(torch, dtype))
        for step in self.steps:
            if isinstance(step, TorchOp):
                buffers[step.out] = torch.empty_like(buffers[step.src])
        return buffers

    @property
    def outputs(self) -> list[str]:
        return [s.out for s in self.steps]

    def run(self, pdl: bool, poison: bool = True) -> None:
        """One run on the current stream: the intermediates poisoned first (a premature read
        sees NaN), then each step."""
        if poison:
            for name in self.outputs:
                self.buffers[name].fill_(float("nan"))
        for step in self.steps:
            if isinstance(step, TorchOp):
                step.fn(self.buffers[step.src], self.buffers[step.out])
                continue
            launch = self.kernels[step.out][pdl].torch_launch(self.buffers["x"].device)
            launch(*(self.buffers[name] for name in step.inputs), out=self.buffers[step.out])

    def snapshot(self) -> list:
        return [self.buffers[name].clone() for name in self.outputs]


@pytest.fixture(scope="module", params=["dense", "conv"])
def chain(request, torch):
    return Chain(torch, _chains(torch)[request.param], seed=len(request.param))


def _inputs(torch, chain, count=3):
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = chain.buffers["x"]
    return [torch.randn(x.shape, generator=gen, device="cuda").to(x.dtype) for _ in range(count)]


def _plain_runs(torch, chain, inputs) -> list:
    """Every intermediate of the plain chain on each input: what the PDL runs must equal."""
    return _runs(torch, chain, inputs, lambda: chain.run(pdl=False), runs=len(inputs))


def _reference(torch, layer: Layer, buffers) -> "torch.Tensor":
    """A layer's output in fp32 from its (fp16) inputs as the chain computed them: the GEMM in
    fp32, then the workload's epilogue by the package's one formula (``Epilogue.apply``)."""
    import torch.nn.functional as F

    from tc_autotune.pytorch.ops import TORCH_OPS
    from tc_autotune.workloads import epilogue

    wl = workloads.get(layer.spec)
    data, weight, bias, *residual = (buffers[name].float() for name in layer.inputs)
    if layer.spec.startswith("dense:"):
        acc = F.linear(data, weight)
    else:
        acc = F.conv2d(data.permute(0, 3, 1, 2), weight.permute(3, 2, 0, 1), padding=wl.padding[:2])
        acc = acc.permute(0, 2, 3, 1)
    return epilogue.parse(wl.epilogue).apply(acc, TORCH_OPS, bias=bias, residual=residual[0] if residual else None)


def test_the_pdl_builds_are_launched_with_pdl_and_the_plain_ones_not(chain):
    for layer in chain.layers:
        plain, pdl_kernel = chain.kernels[layer.out][False], chain.kernels[layer.out][True]
        assert pdl_kernel.pdl and not plain.pdl and pdl_kernel.config == plain.config
        assert all(pdl.TAG in tags for tags in launch_tags(pdl_kernel.module).values()), layer.spec
        assert not any(pdl.TAG in tags for tags in launch_tags(plain.module).values()), layer.spec


def test_each_layer_is_within_tolerance_of_its_fp32_reference(torch, chain):
    chain.buffers["x"].copy_(_inputs(torch, chain, 1)[0])
    chain.run(pdl=True)
    torch.cuda.synchronize()
    for layer in chain.layers:
        out, ref = chain.buffers[layer.out].float(), _reference(torch, layer, chain.buffers)
        err = float((out - ref).abs().max() / ref.abs().max())
        assert err < 1e-2, f"{layer.spec} ({chain.kernels[layer.out][True].config}): rel. error {err:.1e}"


def test_eager_pdl_runs_equal_the_plain_chain_bit_for_bit(torch, chain):
    inputs = _inputs(torch, chain)
    expected = _plain_runs(torch, chain, inputs)
    # back to back: each run's first kernel overlaps the last one's tail
    got = _runs(torch, chain, inputs, lambda: chain.run(pdl=True))
    _assert_equal(torch, chain, got, expected, "eager run")


def test_graph_replays_of_the_pdl_chain_equal_the_plain_chain_bit_for_bit(torch, chain):
    inputs = _inputs(torch, chain)
    expected = _plain_runs(torch, chain, inputs)
    chain.run(pdl=True)  # bound (workspaces allocated) outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        chain.run(pdl=True)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain.run(pdl=True)  # the NaN fills are in the graph too
    got = _runs(torch, chain, inputs, graph.replay)
    _assert_equal(torch, chain, got, expected, "replay")


def _runs(torch, chain, inputs, run, runs: int = ITERATIONS):
    """``runs`` runs (``run()``) on the inputs in turn, each run's outputs snapshotted."""
    got = []
    for i in range(runs):
        chain.buffers["x"].copy_(inputs[i % len(inputs)])
        run()
        got.append(chain.snapshot())
    torch.cuda.synchronize()
    return got


def _assert_equal(torch, chain, got, expected, what):
    """Every run's outputs bit for bit equal to the plain build's on the same input."""
    for i, run in enumerate(got):
        for name, out, want in zip(chain.outputs, run, expected[i % len(expected)]):
            assert torch.equal(out, want), f"{what} {i}: {name} differs from the plain build's"


def test_the_torch_ops_bind_pdl_kernels_unless_the_environment_says_0(torch, monkeypatch):
    from tc_autotune.api import build_cache
    from tc_autotune.pytorch import ops

    gen = torch.Generator(device="cuda").manual_seed(0)
    data = torch.randn(1, 14, 14, 256, generator=gen, device="cuda").half()
    weight = (torch.randn(3, 3, 256, 256, generator=gen, device="cuda") * 0.03).half()
    bias = torch.randn(256, generator=gen, device="cuda")
    results = {}
    for value in ("1", "0"):
        monkeypatch.setenv(build_cache.PDL_ENV, value)
        ops.clear_launches()
        results[value] = ops.conv2d_nhwc(data, weight, bias=bias, padding=1, activation="relu", fallback=False)
        (launch,) = [v for v in ops._LAUNCHES.values() if isinstance(v, ops.TorchLaunch)]
        assert launch.kernel.pdl == (value == "1")
    ops.clear_launches()
    assert torch.equal(results["1"], results["0"])  # the same config, launched two ways
