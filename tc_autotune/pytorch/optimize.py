"""Whole models: which workloads a model runs (``extract_workloads``, a nightly job to tune them)
and the model with its conv2d / linear layers on the tuned kernels (``optimize``).

    model = torchvision.models.resnet50().half().eval().cuda()
    x = torch.randn(32, 3, 224, 224, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    tc.extract_workloads(model, (x,), job="resnet50-b32.toml")   # then: tc-nightly resnet50-b32.toml
    fast = tc.optimize(model, (x,))                               # best records, else zero-shot
    y = fast(x)                                                   # or torch.compile(fast, ...)

The model is traced with ``torch.fx`` (``fusion.find_layers`` says what each layer fuses);
``optimize`` returns a new ``GraphModule`` (the model itself is not changed) whose fusable
layers are ``FusedConv2d`` / ``FusedLinear``.  With example inputs, the kernels of their
shapes are built before it returns, in parallel and from the disk cache (``build_cache``), launched
with Programmatic Dependent Launch on sm_90+ as every layer's (``pytorch.ops``; ``TC_AUTOTUNE_PDL=0``:
without).

The fused layers (``FusedConv2d``, ``FusedLinear``: a conv2d or linear with its fused epilogue)
each hold their parameters in a layout the kernels read, prepared once when made: a conv's own
weight in place (OIHW, or OHWI where the model is channels_last: ``fusion.weight_layout``), a
new HWIO weight where a batch norm's scale is folded in, fp32 biases.  One takes the tensors a
PyTorch model passes it: a conv's input and residual in NCHW shape, channels-last in memory
(``x.permute(0, 2, 3, 1)`` is then the NHWC tensor the kernel reads, no copy), and gives its
output the same way; it launches through the ops' eager path (``ops.conv2d_nhwc``), under
``torch.compile`` the ``tc_autotune`` ops.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import fx, nn

from ..api import build_cache
from ..tuning.jobs import write_job
from ..workloads.conv_weights import TO_HWIO
from . import choose, fusion, ops
from .launch import dtype_name

log = logging.getLogger(__name__)


@dataclass
class OptimizeReport:
    """What ``optimize`` did (``optimized.tc_autotune_report``)."""

    layers: int = 0  # conv2d / linear layers replaced by fused ones
    fused_ops: int = 0  # batch norms, adds and activations folded into them
    left: dict = field(default_factory=dict)  # layer name -> why it stays PyTorch's
    workloads: list = field(default_factory=list)  # the kernels built for the example inputs
    untuned: list = field(default_factory=list)  # those without a tuning record (zero-shot)
    trace_seconds: float = 0.0  # tracing and shape propagation (one forward)
    build_seconds: float = 0.0  # the kernels built or loaded from the disk cache
    timed: dict = field(default_factory=dict)  # measure: layer name -> (fused s, PyTorch's s) per call
    measure_seconds: float = 0.0  # measure: the layers checked and timed both ways

    def summary(self) -> str:
        text = f"{self.layers} layers on tc_autotune kernels ({self.fused_ops} ops fused into them)"
        if self.left:
            text += f", {len(self.left)} left to PyTorch"
        if self.workloads:
            text += (f"; traced in {self.trace_seconds:.1f} s, {len(self.workloads)} kernels ready in "
                     f"{self.build_seconds:.1f} s, "
                     f"{len(self.untuned)} of them untuned (zero-shot)")
        if self.timed:
            slower = sum(name in self.left for name in self.timed)
            text += (f"; {len(self.timed)} layers timed both ways in {self.measure_seconds:.1f} s, {slower} "
                     "kept PyTorch's")
        return text


def trace(model: nn.Module, example_inputs=None) -> fx.GraphModule:
    """``model`` as a ``torch.fx`` graph, with each node's shape propagated from
    ``example_inputs`` where given (``_ShapesOnly``)."""
    try:
        gm = fx.symbolic_trace(model)
    except Exception as err:  # noqa: BLE001 (dynamic control flow, untraceable ops)
        raise ValueError(f"cannot trace {type(model).__name__} with torch.fx ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None
    if example_inputs is not None:
        with torch.no_grad():
            _ShapesOnly(gm).propagate(*_as_tuple(example_inputs))
    return gm


class _ShapesOnly(fx.Interpreter):
    """Shape propagation (``node.meta["tensor_meta"]``: shape, dtype, channels-last memory) by one forward in which
    the convs and linears only make their output (uninitialised: only shapes are read) and
    batch norms pass theirs on.  Running them would set up cuDNN and cuBLAS in a new process
    (3-4 s on an H100 host, the most of a warm ``optimize``); fake or meta tensors, or fx's
    ShapeProp, would import dynamo or sympy (seconds too)."""

    def propagate(self, *args):
        return self.run(*args)

    def run_node(self, node):
        result = super().run_node(node)
        if isinstance(result, torch.Tensor):
            channels_last = result.dim() == 4 and result.is_contiguous(memory_format=torch.channels_last) \
                and not result.is_contiguous()
            node.meta["tensor_meta"] = SimpleNamespace(shape=result.shape, dtype=result.dtype,
                                                       channels_last=channels_last)
        return result

    def call_module(self, target, args, kwargs):
        module, x = self.fetch_attr(target), args[0] if args else None
        if isinstance(x, torch.Tensor) and not kwargs and len(args) == 1:
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                return x
            if isinstance(module, nn.Linear):
                return x.new_empty((*x.shape[:-1], module.out_features))
            if isinstance(module, nn.Conv2d) and x.dim() == 4:
                return x.new_empty(_conv_out_shape(module, x.shape)).contiguous(
                    memory_format=torch.channels_last if x.is_contiguous(memory_format=torch.channels_last)
                    and not x.is_contiguous() else torch.contiguous_format)
        return super().call_module(target, args, kwargs)


def _conv_out_shape(conv: nn.Conv2d, shape) -> tuple[int, int, int, int]:
    n, _, h, w = shape
    top, left, bottom, right = (fusion.same_padding(conv) if isinstance(conv.padding, str)
                                else (*conv.padding, *conv.padding))
    (kh, kw), (sh, sw), (dh, dw) = conv.kernel_size, conv.stride, conv.dilation
    return (n, conv.out_channels, (h + top + bottom - dh * (kh - 1) - 1) // sh + 1,
            (w + left + right - dw * (kw - 1) - 1) // sw + 1)


def _as_tuple(inputs) -> tuple:
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _check_eval(model: nn.Module) -> None:
    if model.training:
        raise ValueError("the model is in training mode: call model.eval() first (batch norms are folded "
                         "with their running statistics)")


def extract_workloads(model: nn.Module, example_inputs, job: str | Path | None = None, trials: int = 64) -> list:
    """The workloads (``Conv2dWorkload`` / ``DenseWorkload``, each with the epilogue its layer
    fuses) that ``model`` runs on ``example_inputs``, in order, each once; with ``job``, also
    written there as a nightly job file (``tc-nightly <job>`` tunes them, ``trials`` each)."""
    _check_eval(model)
    gm = trace(model, example_inputs)
    workloads = list(dict.fromkeys(fusion.workload(layer, gm) for layer in fusion.find_layers(gm)
                                   if layer.why_not is None))
    if job is not None:
        write_job(job, workloads, trials, f"{type(model).__name__} on inputs "
                  f"{', '.join(str(list(x.shape)) for x in _as_tuple(example_inputs))}")
    return workloads


MEASURES = (None, False, True, "untuned")


def optimize(model: nn.Module, example_inputs=None, build: bool = True,
             measure: bool | str | None = None) -> fx.GraphModule:
    """``model`` with every conv2d / linear the kernels take (``fusion``) replaced by a fused
    layer on the tuned kernels: the best records of the active logs, else zero-shot.  The model
    itself is left as it was; its activations must be channels-last (NCHW shape, NHWC memory:
    ``x.to(memory_format=torch.channels_last)``), else a layer runs PyTorch's conv, said once.
    With ``example_inputs`` (their shapes fuse residual adds and say which kernels to build),
    the kernels are built before it returns (``build=False``: on first use).  ``measure=True``
    (a CUDA GPU and example inputs): each layer is timed both ways and stays PyTorch's where
    PyTorch's is faster (``choose``); the report gives both times of every layer timed.
    ``measure="untuned"``: only the layers whose kernel has no tuning record (a zero-shot pick).
    The default (None) is "untuned" where it can be (example inputs, a model on a CUDA GPU,
    ``build=True``), else False: a zero-shot pick far off the best is never kept over PyTorch's
    own layer, and a tuned model costs no timing."""
    _check_eval(model)
    if measure not in MEASURES or not isinstance(measure, (bool, str, type(None))):
        raise ValueError(f"measure must be False, True or 'untuned', got {measure!r}")
    if measure and (example_inputs is None or not build):
        raise ValueError(f"measure={measure!r} times layers on the example inputs' shapes: give example_inputs "
                         "(and build=True)")
    if measure and not torch.cuda.is_available():
        raise ValueError(f"measure={measure!r} times the layers on a CUDA GPU, and PyTorch sees none")
    start = time.time()
    gm = trace(model, example_inputs)
    report = OptimizeReport(trace_seconds=time.time() - start)
    if measure is None:
        measure = "untuned" if _can_measure(gm, example_inputs, build) else False
    layers = []
    for layer in fusion.find_layers(gm):
        if layer.why_not is not None:
            report.left[layer.name] = layer.why_not
        else:
            layers.append(layer)
    if build and example_inputs is not None and layers:
        start = time.time()
        report.workloads = list(build_cache.kernels([fusion.workload(layer, gm) for layer in layers],
                                                    pdl=build_cache.model_pdl()))
        report.untuned = build_cache.untuned(report.workloads)
        report.build_seconds = time.time() - start
    fused = {layer.name: _fused(gm, layer) for layer in layers}
    if measure:
        untuned = {str(w) for w in report.untuned} if measure == "untuned" else None
        layers = _faster_fused(gm, layers, fused, report, untuned)
    new_nodes = {}
    for layer in layers:
        if layer.residual in new_nodes:  # the residual ended a chain replaced before
            layer.residual = new_nodes[layer.residual]
        new_nodes[layer.nodes[-1]] = _replace(gm, layer, fused[layer.name])
        report.layers += 1
        report.fused_ops += len(layer.nodes) - 1
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    for name, why in report.left.items():
        log.info("optimize: %s stays PyTorch's: %s", name, why)
    log.info("optimize: %s", report.summary())
    gm.tc_autotune_report = report
    return gm


def _can_measure(gm: fx.GraphModule, example_inputs, build: bool) -> bool:
    return (example_inputs is not None and build and torch.cuda.is_available()
            and choose.device_of(gm).type == "cuda")


def _faster_fused(gm: fx.GraphModule, layers: list, fused: dict, report: OptimizeReport, only=None) -> list:
    """The layers whose fused module is right and not slower than PyTorch's own ops beyond
    ``choose``'s margins, each layer's times in the report; layers of the same shapes and ops
    share one timing (and its check).  ``only``: the workloads (as text) to time, None: all; the
    other layers stay fused."""
    start, timings, kept = time.time(), {}, []
    device = choose.device_of(gm)
    for layer in layers:
        key = choose.layer_key(gm, layer)
        if only is not None and str(key[0]) not in only:
            kept.append(layer)
            continue
        if key not in timings:
            timings[key] = choose.time_layer(gm, layer, fused[layer.name], device)
        timing = timings[key]
        report.timed[layer.name] = (timing.ours, timing.pytorch)
        if timing.keep_pytorch:
            report.left[layer.name] = timing.why_pytorch()
        else:
            kept.append(layer)
    report.measure_seconds = time.time() - start
    return kept


def _fused(gm: fx.GraphModule, layer: fusion.Layer) -> nn.Module:
    """The fused module of ``layer`` (made of the model's own conv / linear and batch norm)."""
    module = gm.get_submodule(layer.name)
    residual = layer.residual is not None
    if layer.kind == "conv2d":
        return FusedConv2d.of(module, layer.bn, layer.activation, residual)
    return FusedLinear.of(module, layer.activation, residual)


def _replace(gm: fx.GraphModule, layer: fusion.Layer, fused: nn.Module) -> fx.Node:
    """Put the fused module where the layer's module was and one call to it where the chain's
    last op was (the residual is computed by then), then drop the chain's nodes."""
    first, last = layer.nodes[0], layer.nodes[-1]
    residual = layer.residual is not None
    gm.set_submodule(layer.name, fused)
    with gm.graph.inserting_before(last):
        node = gm.graph.call_module(layer.name, (first.args[0],) + ((layer.residual,) if residual else ()))
    node.meta = dict(last.meta)
    last.replace_all_uses_with(node)
    for old in reversed(layer.nodes):
        gm.graph.erase_node(old)
    return node


# ---- the fused layers ------------------------------------------------------------------------
def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _bias(conv: nn.Conv2d) -> torch.Tensor | None:
    return conv.bias.detach().float() if conv.bias is not None else None


class FusedConv2d(nn.Module):
    """``act(conv2d(x, weight) + bias [+ residual])`` on a tuned kernel (``ops.conv2d_nhwc``)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, stride, padding, dilation,
                 activation: str = "none", residual: bool = False, out_dtype: torch.dtype | str = torch.float16,
                 groups: int = 1, weight_layout: str = "HWIO"):
        """``weight``: HWIO [R, S, C/G, K] (its earlier only layout), or as ``weight_layout``
        says (OIHW [K, C/G, R, S], OHWI [K, R, S, C/G]), held as it is."""
        super().__init__()
        # HWIO as before (a view made contiguous); OIHW / OHWI are a conv's own weight, read in place
        self.register_buffer("weight", weight.contiguous() if weight_layout == "HWIO" else weight)
        self.register_buffer("bias", None if bias is None else bias.float().contiguous())
        # Plain immutable values (ints, tuples, strings: the dtype by name), so that under
        # torch.compile dynamo's guards skip an unchanged layer whole (a list or a torch.dtype
        # would have every one of them checked on every call).
        self.stride, self.padding, self.dilation = _ints(stride), _ints(padding), _ints(dilation)
        self.activation, self.residual, self.out_dtype = activation, residual, dtype_name(out_dtype)
        self.groups, self.weight_layout = int(groups), weight_layout
        self._key = ops.conv2d_key(self.stride, self.padding, self.dilation, activation, out_dtype, groups,
                                   weight_layout)

    @classmethod
    def of(cls, conv: nn.Conv2d, bn: nn.BatchNorm2d | None = None, activation: str = "none",
           residual: bool = False) -> "FusedConv2d":
        """From a (zero-padded, not depthwise) ``nn.Conv2d`` and the eval-mode batch norm after it,
        folded in: weight * gamma / sqrt(var + eps) per output channel, bias likewise.  Without a
        batch norm the conv's own weight is held, no copy (``fusion.weight_layout``)."""
        padding = conv.padding if not isinstance(conv.padding, str) else fusion.same_padding(conv)
        args = (conv.stride, padding, conv.dilation, activation, residual, conv.weight.dtype, conv.groups)
        layout = fusion.weight_layout(conv, bn)
        if layout == "OIHW":
            return cls(conv.weight.detach(), _bias(conv), *args, weight_layout="OIHW")
        if layout == "OHWI":  # channels_last memory: the permuted view is the contiguous OHWI tensor
            return cls(conv.weight.detach().permute(0, 2, 3, 1), _bias(conv), *args, weight_layout="OHWI")
        if bn is None:  # neither contiguous nor channels_last: no kernel reads it in place
            ops.copied_weight("a conv weight neither contiguous (OIHW) nor channels_last (OHWI): the layer "
                              "holds an HWIO copy")
        weight = conv.weight.detach().float()
        bias = _bias(conv)
        if bn is not None:
            scale = bn.weight.detach().float() if bn.affine else torch.ones_like(bn.running_var, dtype=torch.float32)
            shift = bn.bias.detach().float() if bn.affine else torch.zeros_like(scale)
            scale = scale / torch.sqrt(bn.running_var.float() + bn.eps)
            weight = weight * scale.view(-1, 1, 1, 1)
            base = bias if bias is not None else torch.zeros_like(scale)
            bias = (base - bn.running_mean.float()) * scale + shift
        # a new tensor either way: HWIO, the layout the shipped records were tuned with
        return cls(weight.to(conv.weight.dtype).permute(2, 3, 1, 0).contiguous(), bias, *args)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        res = residual.permute(0, 2, 3, 1) if residual is not None else None
        y = ops.conv2d_nhwc(x.permute(0, 2, 3, 1), self.weight, None, self.bias, res, self.stride, self.padding,
                            self.dilation, self.activation, self.out_dtype, static_key=self._key, groups=self.groups,
                            weight_layout=self.weight_layout)
        return y.permute(0, 3, 1, 2)

    def extra_repr(self) -> str:
        r, s, c, k = (self.weight.shape[axis] for axis in TO_HWIO[self.weight_layout])
        c *= self.groups
        epilogue = "+".join(["bias"] * (self.bias is not None) + ["residual"] * self.residual
                            + [self.activation] * (self.activation != "none")) or "none"
        grouped = f", groups={self.groups}" if self.groups != 1 else ""
        return (f"{c}, {k}, kernel_size=({r}, {s}), stride={self.stride}, padding={self.padding}"
                f"{grouped}, weight={self.weight_layout}, epilogue={epilogue}")


class FusedLinear(nn.Module):
    """``act(x @ weight.T + bias [+ residual])`` on a tuned kernel (``ops.dense_nk``): an
    nn.Linear's (N, K) weight is used as it is."""

    def __init__(self, weight_nk: torch.Tensor, bias: torch.Tensor | None, activation: str = "none",
                 residual: bool = False):
        super().__init__()
        self.register_buffer("weight", weight_nk.detach().contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float().contiguous())
        self.activation, self.residual, self.out_dtype = activation, residual, dtype_name(weight_nk.dtype)

    @classmethod
    def of(cls, linear: nn.Linear, activation: str = "none", residual: bool = False) -> "FusedLinear":
        return cls(linear.weight, linear.bias, activation, residual)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return ops.dense_nk(x, self.weight, None, self.bias, residual, self.activation, self.out_dtype)

    def extra_repr(self) -> str:
        n, k = self.weight.shape
        epilogue = "+".join(["bias"] * (self.bias is not None) + ["residual"] * self.residual
                            + [self.activation] * (self.activation != "none")) or "none"
        return f"in_features={k}, out_features={n}, epilogue={epilogue}"
