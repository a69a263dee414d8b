"""Finding what a model's layers can fuse: a conv2d or linear and the ops after it that the
kernels' epilogue does (a batch norm folded in eval mode, a residual add, ReLU or tanh-GELU).

On a ``torch.fx`` graph (``symbolic_trace``) each ``nn.Conv2d`` / ``nn.Linear`` call starts a
chain; an op joins it when it is the only user of the chain's last value and is:

    conv2d  -> [BatchNorm2d] -> [add of a tensor of the output's shape] -> [ReLU | tanh-GELU]
    linear  ->                  [add of a tensor of the output's shape] -> [ReLU | tanh-GELU]

(the order of ``epilogue.py``: scale, bias, residual, activation).  A layer the kernels cannot
take (a depthwise or non-zero-padded conv, a dtype other than fp16 or bf16, a batch norm in training
mode) is a ``Layer`` with ``why_not`` set: it stays PyTorch's.  A grouped conv is one kernel
(an implicit GEMM per group); its weight is read in place where no batch norm is folded into it
(``weight_layout``).  Exact GELU is not the kernels'
tanh approximation: it stays unfused after the layer.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import fx, nn

from ..workloads.conv_weights import DEPTHWISE
from ..workloads.dense import DenseWorkload
from ..workloads.conv2d import Conv2dWorkload

_ADDS = (operator.add, operator.iadd, torch.add)
_RELUS = (F.relu, torch.relu, torch.relu_)
DTYPES = (torch.float16, torch.bfloat16)  # what the kernels take today (bf16: sm_80+)


@dataclass
class Layer:
    """One conv2d or linear of the graph and the ops its kernel fuses."""

    kind: str  # "conv2d" or "dense"
    name: str  # the module's qualified name
    nodes: list = field(default_factory=list)  # the layer's node, then the fused ops' nodes
    bn: nn.BatchNorm2d | None = None
    residual: fx.Node | None = None
    activation: str = "none"
    has_bias: bool = False  # the conv's own bias or a folded batch norm's
    why_not: str | None = None  # why the kernels do not take it (then nothing is fused)

    @property
    def epilogue(self) -> str:
        parts = ["bias"] * self.has_bias + ["residual"] * (self.residual is not None)
        return "_".join(parts + [self.activation] * (self.activation != "none")) or "none"


def _only_user(node: fx.Node) -> fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _module(gm: fx.GraphModule, node: fx.Node):
    return gm.get_submodule(node.target) if node.op == "call_module" else None


def _meta_shape(node) -> tuple | None:
    meta = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None


def _activation(gm, node: fx.Node) -> str | None:
    """"relu" / "gelu" when ``node`` applies one to its first argument and nothing else."""
    module = _module(gm, node)
    if isinstance(module, nn.ReLU):
        return "relu"
    if isinstance(module, nn.GELU):
        return "gelu" if module.approximate == "tanh" else None
    if node.op == "call_function" and node.target in _RELUS and len(node.args) == 1:
        return "relu"
    if node.op == "call_method" and node.target in ("relu", "relu_") and len(node.args) == 1:
        return "relu"
    if node.op == "call_function" and node.target is F.gelu and node.kwargs.get("approximate") == "tanh":
        return "gelu"
    return None


def _residual(node: fx.Node, value: fx.Node) -> fx.Node | None:
    """The other operand when ``node`` adds a same-shaped tensor to ``value`` (no alpha, no
    broadcasting: shapes from shape propagation must agree)."""
    if node.op != "call_function" or node.target not in _ADDS or node.kwargs or len(node.args) != 2:
        return None
    a, b = node.args
    other = b if a is value else a if b is value else None
    if not isinstance(other, fx.Node) or other is value:
        return None
    shape = _meta_shape(value)
    return other if shape is not None and shape == _meta_shape(other) == _meta_shape(node) else None


def _why_not(module, bn=None) -> str | None:
    if module.weight.dtype not in DTYPES:
        return f"its parameters are {str(module.weight.dtype).removeprefix('torch.')} (the kernels take float16 or bfloat16)"
    if isinstance(module, nn.Conv2d):
        if module.groups > 1 and module.groups == module.in_channels:
            return DEPTHWISE
        if module.padding_mode != "zeros":
            return f"padding_mode={module.padding_mode!r}"
    if bn is not None and (bn.training or not bn.track_running_stats):
        return "its batch norm is in training mode (call model.eval())"
    return None


def find_layers(gm: fx.GraphModule) -> list[Layer]:
    """Every conv2d and linear of ``gm`` with the ops its kernel can fuse (see the module).
    Shapes come from ``node.meta["tensor_meta"]`` (``ShapeProp``): without them no residual
    add is fused."""
    layers, claimed = [], set()  # an add after two layers (a block's two branches) fuses into the first
    for node in list(gm.graph.nodes):
        module = _module(gm, node)
        if not isinstance(module, (nn.Conv2d, nn.Linear)):
            continue
        layer = Layer("conv2d" if isinstance(module, nn.Conv2d) else "dense", node.target, [node])
        layer.has_bias = module.bias is not None
        last = node
        user = _free(_only_user(last), claimed)
        if layer.kind == "conv2d" and user is not None and isinstance(_module(gm, user), nn.BatchNorm2d):
            layer.bn = _module(gm, user)
            layer.has_bias = True
        layer.why_not = _why_not(module, layer.bn)
        if layer.why_not is None:
            if layer.bn is not None:
                layer.nodes.append(user)
                last, user = user, _free(_only_user(user), claimed)
            residual = _residual(user, last) if user is not None else None
            if residual is not None:
                layer.residual = residual
                layer.nodes.append(user)
                last, user = user, _free(_only_user(user), claimed)
            activation = _activation(gm, user) if user is not None else None
            if activation is not None:
                layer.activation = activation
                layer.nodes.append(user)
        claimed.update(layer.nodes)
        layers.append(layer)
    return layers


def _free(node: fx.Node | None, claimed: set) -> fx.Node | None:
    return None if node in claimed else node


def workload(layer: Layer, gm: fx.GraphModule):
    """The workload a layer's kernel is built for, from its input's propagated shape."""
    node = layer.nodes[0]
    module = gm.get_submodule(node.target)
    shape = _meta_shape(node.args[0])
    if shape is None:
        raise ValueError(f"{layer.name}: no input shape (run shape propagation first)")
    dtype = str(module.weight.dtype).removeprefix("torch.")
    if layer.kind == "conv2d":
        n, c, h, w = shape
        padding = module.padding if not isinstance(module.padding, str) else same_padding(module)
        return Conv2dWorkload(n, h, w, c, module.out_channels, *module.kernel_size, stride=tuple(module.stride),
                              padding=tuple(padding), dilation=tuple(module.dilation), dtype=dtype,
                              out_dtype=dtype, epilogue=layer.epilogue, groups=module.groups,
                              weight_layout=weight_layout(module, layer.bn))
    m = 1
    for size in shape[:-1]:
        m *= size
    return DenseWorkload(m=m, n=module.out_features, k=module.in_features, b_layout="nk", dtype=dtype,
                         out_dtype=dtype, epilogue=layer.epilogue)


def weight_layout(conv: nn.Conv2d, bn: nn.BatchNorm2d | None) -> str:
    """The layout a fused conv's kernel reads its weight in: with a batch norm folded in, a new
    HWIO tensor (the layout the shipped records were tuned with); else the conv's own weight in
    place, OIHW where contiguous, OHWI where channels_last (a channels_last model's), and HWIO
    (a copy, counted) where it is neither."""
    weight = conv.weight
    if bn is not None:
        return "HWIO"
    if weight.is_contiguous():
        return "OIHW"
    return "OHWI" if weight.is_contiguous(memory_format=torch.channels_last) else "HWIO"


def same_padding(conv: nn.Conv2d) -> tuple[int, int, int, int]:
    """``padding="same"`` / ``"valid"`` as (top, left, bottom, right), as PyTorch pads it (the
    odd pixel at the bottom/right)."""
    if conv.padding == "valid":
        return (0, 0, 0, 0)
    pads = []
    for dilation, size in zip(conv.dilation, conv.kernel_size):
        total = dilation * (size - 1)
        pads.append((total // 2, total - total // 2))
    (top, bottom), (left, right) = pads
    return (top, left, bottom, right)
