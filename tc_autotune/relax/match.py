"""What the kernels can take in a Relax function: each conv2d / matmul and the elementwise ops
after it that the kernels' epilogue does (``tc_autotune.pytorch.fusion`` does the same on a
``torch.fx`` graph).

Within a dataflow block, a chain starts at a ``relax.nn.conv2d`` (NHWC data; ``layout.to_nhwc``
converts NCHW models first) or a ``relax.matmul`` (2-D B), and takes the next op while that op
is the only user of the chain's value and no earlier chain took it:

    conv2d | matmul -> [astype float16] -> [add, subtract, multiply, divide by a per-channel
                       constant; batch_norm (inference, constant statistics), its [0]]*
                    -> [add of a tensor of the output's shape and dtype] -> [relu | gelu_tanh]

(the epilogue grammar's order: scale, bias, residual, activation), with reshapes that keep the
channels anywhere among them (torch's linear on a 3-D input is reshape, matmul, reshape).  The per-channel constants
fold into one scale and one bias; a constant weight takes the scale (as ``FusedConv2d.of``
folds a batch norm), so a conv with a batch norm is a ``bias`` workload, as PyTorch's
extraction names it.  An ``astype`` from the fp32 accumulation to fp16 makes the kernel's
output fp16 (what ``from_torch`` emits after every conv and matmul).  A chain the kernels
cannot take is a ``Layer`` with ``why_not`` set: it stays Relax's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from tvm import relax
from tvm.ir import Op
from tvm.ir.expr import GenericConst, TupleGetItem

from ..workloads.conv2d import Conv2dWorkload
from ..workloads.dense import DenseWorkload

DTYPES = ("float16",)  # the kernels' input dtype
OUT_DTYPES = ("float16", "float32")
ACTIVATIONS = {"relax.nn.relu": "relu", "relax.nn.gelu_tanh": "gelu"}
AFFINE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


@dataclass(eq=False)
class Layer:
    """One conv2d or matmul and the ops its kernel fuses; its last var is bound to the kernel's
    output by the rewrite, the others are dropped."""

    kind: str  # "conv2d" or "dense"
    op: str  # what the report calls it: "conv2d lv3"
    vars: list = field(default_factory=list)  # the chain's vars, the anchor's first
    data: object = None  # the Relax expr of the data (conv2d NHWC) or A
    weight: object = None  # a numpy array (constant: HWIO, or dense B as laid out) or a Relax expr
    b_layout: str = "kn"
    scale: np.ndarray | None = None  # per output channel, fp32
    bias: np.ndarray | None = None
    residual: object = None  # a Relax expr
    activation: str | None = None
    out_dtype: str = "float32"
    workload: Conv2dWorkload | DenseWorkload | None = None
    why_not: str | None = None

    @property
    def epilogue(self) -> str:
        parts = ["scale"] * (self.scale is not None) + ["bias"] * (self.bias is not None)
        parts += ["residual"] * (self.residual is not None) + [self.activation] * (self.activation is not None)
        return "_".join(parts) or "none"


class Graph:
    """The bindings of one Relax function: what each var is bound to, who uses it, and the value
    of each var that is a constant expression (weights through permute_dims, reshape, astype)."""

    def __init__(self, func: relax.Function):
        self.defs, self.users, self._consts = {}, {}, {}
        for block in func.body.blocks:
            for binding in block.bindings:
                if isinstance(binding, relax.VarBinding):
                    self.defs[binding.var] = binding.value
            if isinstance(block, relax.DataflowBlock):
                self.users.update({var: list(users) for var, users in relax.analysis.udchain(block).items()})

    def only_user(self, var) -> relax.Var | None:
        """The var whose binding is ``var``'s only use, if ``var`` never leaves its dataflow block."""
        users = self.users.get(var)
        if not isinstance(var, relax.DataflowVar) or users is None or len(users) != 1:
            return None
        return users[0] if users[0] in self.defs else None

    def const(self, expr) -> np.ndarray | None:
        """``expr``'s value when it is a constant or computed from constants by layout ops, else None."""
        if isinstance(expr, GenericConst):
            return expr.value.numpy()
        if isinstance(expr, relax.Var):
            if expr not in self._consts:
                self._consts[expr] = self.const(self.defs[expr]) if expr in self.defs else None
            return self._consts[expr]
        if not isinstance(expr, relax.Call) or not isinstance(expr.op, Op):
            return None
        name, args = expr.op.name, expr.args
        value = self.const(args[0]) if args else None
        if value is None:
            return None
        if name == "relax.permute_dims":
            axes = expr.attrs.axes
            return np.transpose(value, None if axes is None else [int(a) for a in axes])
        if name == "relax.reshape":
            return value.reshape(static_shape(expr.ty))
        if name == "relax.astype":
            return value.astype(str(expr.attrs.dtype))
        if name in ("relax.expand_dims", "relax.squeeze"):
            return value.reshape(static_shape(expr.ty))
        return None


def static_shape(ty) -> tuple | None:
    """A tensor type's shape as ints; None where it is unknown or symbolic."""
    shape = getattr(ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None:
        return None
    try:
        return tuple(int(v) for v in values)
    except (TypeError, ValueError):
        return None


def dtype_of(expr) -> str:
    return str(getattr(expr.ty, "dtype", ""))


def _call(graph: Graph, var, name: str | tuple = ()) -> relax.Call | None:
    value = graph.defs.get(var)
    if isinstance(value, relax.Call) and isinstance(value.op, Op):
        if not name or value.op.name in ((name,) if isinstance(name, str) else name):
            return value
    return None


def find_layers(func: relax.Function) -> list[Layer]:
    """Every conv2d and matmul of ``func``'s dataflow blocks, in binding order, with the ops its
    kernel fuses (see the module), or why it stays Relax's."""
    graph, claimed, layers = Graph(func), set(), []
    for var, value in graph.defs.items():
        if not (isinstance(value, relax.Call) and isinstance(value.op, Op)):
            continue
        if value.op.name == "relax.nn.conv2d":
            layer = _conv2d(graph, var, value)
        elif value.op.name == "relax.matmul":
            layer = _dense(graph, var, value)
        else:
            continue
        if layer.why_not is None:
            _epilogue(graph, layer, claimed)
            layer.why_not = _make_workload(layer, graph)
        if layer.why_not is None:
            claimed.update(layer.vars)
        layers.append(layer)
    return layers


def _common(var, call) -> str | None:
    """Why a conv2d / matmul cannot be a kernel whatever its kind (dtypes, shapes), or None."""
    for name, expr in (("data", call.args[0]), ("weight", call.args[1]), ("output", var)):
        if static_shape(expr.ty) is None:
            return f"its {name} has no static shape"
    dtypes = {dtype_of(call.args[0]), dtype_of(call.args[1])}
    if not dtypes <= set(DTYPES):
        return f"its inputs are {'/'.join(sorted(dtypes))} (the kernels take float16)"
    if dtype_of(var) not in OUT_DTYPES:
        return f"its output is {dtype_of(var)}"
    return None


def _conv2d(graph: Graph, var, call) -> Layer:
    attrs = call.attrs
    layer = Layer("conv2d", f"conv2d {var.name}", [var], data=call.args[0], out_dtype=dtype_of(var))
    layer.why_not = _common(var, call)
    if layer.why_not:
        return layer
    if int(attrs.groups) != 1:
        layer.why_not = f"a grouped conv (groups={int(attrs.groups)})"
    elif str(attrs.data_layout) != "NHWC" or str(attrs.out_layout) != "NHWC":
        layer.why_not = f"data layout {attrs.data_layout} (the kernels take NHWC)"
    else:
        weight, layout = call.args[1], str(attrs.kernel_layout)
        value = graph.const(weight)
        if value is not None and sorted(layout) == sorted("OIHW"):
            layer.weight = np.ascontiguousarray(np.transpose(value, [layout.index(c) for c in "HWIO"]))
        elif layout == "HWIO":
            layer.weight = weight
        else:
            layer.why_not = f"a weight in layout {layout} that is not a constant (the kernels take HWIO)"
    return layer


def _dense(graph: Graph, var, call) -> Layer:
    a, b = call.args
    layer = Layer("dense", f"matmul {var.name}", [var], data=a, out_dtype=dtype_of(var))
    layer.why_not = _common(var, call)
    if layer.why_not:
        return layer
    if len(static_shape(b.ty)) != 2:
        layer.why_not = "a batched matmul (the kernels take a 2-D B shared by the batch)"
        return layer
    if len(static_shape(a.ty)) < 2:
        layer.why_not = "a vector-matrix product (the kernels take a 2-D or batched A)"
        return layer
    transposed = _call(graph, b, "relax.permute_dims")  # nn.Linear's (N, K) weight, transposed for matmul
    axes = None if transposed is None else transposed.attrs.axes
    if transposed is not None and (axes is None or [int(a) for a in axes] == [1, 0]):
        b, layer.b_layout = transposed.args[0], "nk"
    value = graph.const(b)
    layer.weight = b if value is None else np.ascontiguousarray(value)
    return layer


def _channel_vector(value: np.ndarray | None, channels: int, ndim: int) -> np.ndarray | None:
    """``value`` as one fp32 value per output channel, when it broadcasts along the last axis only."""
    if value is None or value.ndim > ndim or any(d != 1 for d in value.shape[:-1]):
        return None
    if value.ndim and value.shape[-1] not in (1, channels):
        return None
    return np.broadcast_to(value.astype(np.float32).reshape(-1), (channels,)).copy()


def _epilogue(graph: Graph, layer: Layer, claimed: set) -> None:
    """Extend ``layer`` along the ops its kernel can fuse (see the module)."""
    last = layer.vars[0]
    shape = static_shape(last.ty)
    channels, scale, bias = shape[-1], None, None
    while True:
        user = graph.only_user(last)
        if user is None or user in claimed:
            break
        call, took = graph.defs[user], [user]
        name = call.op.name if isinstance(call, relax.Call) and isinstance(call.op, Op) else None
        if name == "relax.astype" and layer.out_dtype == "float32" and layer.residual is None \
                and str(call.attrs.dtype) == "float16":
            layer.out_dtype = "float16"
        elif layer.residual is None and layer.activation is None and name in AFFINE \
                and _affine_operand(call, last) is not None:
            other = _affine_operand(call, last)
            vector = _channel_vector(graph.const(other), channels, len(shape))
            if vector is None and name == "relax.add" and _is_residual(graph, other, last, layer):
                layer.residual = other
            elif vector is None or (name in ("relax.subtract", "relax.divide") and not call.args[0].same_as(last)):
                break
            else:
                scale, bias = _fold(name, vector, scale, bias)
        elif layer.residual is None and layer.activation is None and name == "relax.nn.batch_norm":
            folded = _batch_norm(graph, call, last, channels, len(shape))
            item = graph.only_user(user)
            getitem = graph.defs.get(item) if item is not None else None
            if folded is None or not isinstance(getitem, TupleGetItem) or int(getitem.index) != 0:
                break
            scale, bias = _fold("relax.multiply", folded[0], scale, bias)
            scale, bias = _fold("relax.add", folded[1], scale, bias)
            took.append(item)
        elif layer.activation is None and name in ACTIVATIONS and call.args[0].same_as(last):
            layer.activation = ACTIVATIONS[name]
        elif name == "relax.reshape" and (static_shape(call.ty) or (0,))[-1] == channels:
            shape = static_shape(call.ty)  # rows regrouped, channels kept: the epilogue's ops commute with it
        else:
            break
        layer.vars += took
        last = took[-1]
    layer.scale, layer.bias = scale, bias


def _affine_operand(call, value):
    """The operand of a binary ``call`` other than ``value`` (None if ``value`` is not one)."""
    a, b = call.args
    return b if a.same_as(value) else a if b.same_as(value) else None


def _is_residual(graph: Graph, other, value, layer: Layer) -> bool:
    """Whether ``value + other`` is a residual add: same shape and dtype, no broadcasting, and
    ``other`` is not computed from the chain itself."""
    if static_shape(other.ty) != static_shape(value.ty) or dtype_of(other) != dtype_of(value):
        return False
    return dtype_of(value) == layer.out_dtype and not any(other.same_as(v) for v in layer.vars)


def _fold(name: str, vector: np.ndarray, scale, bias):
    """(scale, bias) of ``x -> op(scale * x + bias, vector)``; None where one is still absent."""
    if name == "relax.add":
        return scale, vector if bias is None else bias + vector
    if name == "relax.subtract":
        return scale, -vector if bias is None else bias - vector
    factor = vector if name == "relax.multiply" else 1.0 / vector
    return factor if scale is None else scale * factor, None if bias is None else bias * factor


def _batch_norm(graph: Graph, call, value, channels: int, ndim: int):
    """(scale, shift) of an inference batch norm over the last axis with constant statistics."""
    attrs = call.attrs
    if bool(attrs.training) or int(attrs.axis) not in (ndim - 1, -1) or not call.args[0].same_as(value):
        return None
    gamma, beta, mean, var = (graph.const(arg) for arg in call.args[1:5])
    if any(v is None or v.shape != (channels,) for v in (gamma, beta, mean, var)):
        return None
    gamma = gamma.astype(np.float32) if bool(attrs.scale) else np.ones(channels, np.float32)
    beta = beta.astype(np.float32) if bool(attrs.center) else np.zeros(channels, np.float32)
    scale = gamma / np.sqrt(var.astype(np.float32) + float(attrs.epsilon))
    return scale, beta - mean.astype(np.float32) * scale


def _make_workload(layer: Layer, graph: Graph) -> str | None:
    """Fold the scale into a constant weight, then set the layer's workload; why not, or None."""
    if layer.scale is not None and isinstance(layer.weight, np.ndarray):
        weight = layer.weight.astype(np.float32)
        channel_axis = -1 if layer.kind == "conv2d" or layer.b_layout == "kn" else 0
        shape = [1] * weight.ndim
        shape[channel_axis] = -1
        layer.weight = (weight * layer.scale.reshape(shape)).astype(np.float16)
        layer.scale = None
    if layer.scale is not None and layer.bias is None:  # the grammar has no scale without bias
        layer.bias = np.zeros_like(layer.scale)
    data_shape = static_shape(layer.data.ty)
    weight_shape = layer.weight.shape if isinstance(layer.weight, np.ndarray) else static_shape(layer.weight.ty)
    try:
        if layer.kind == "conv2d":
            call = graph.defs[layer.vars[0]]
            attrs = call.attrs
            n, h, w, c = data_shape
            r, s, _, k = weight_shape
            layer.workload = Conv2dWorkload(n, h, w, c, k, r, s, stride=tuple(int(x) for x in attrs.strides),
                                            padding=tuple(int(x) for x in attrs.padding),
                                            dilation=tuple(int(x) for x in attrs.dilation), dtype="float16",
                                            out_dtype=layer.out_dtype, epilogue=layer.epilogue)
        else:
            n, k = weight_shape if layer.b_layout == "nk" else weight_shape[::-1]
            layer.workload = DenseWorkload(m=math.prod(data_shape[:-1]), n=n, k=k, b_layout=layer.b_layout,
                                           dtype="float16", out_dtype=layer.out_dtype, epilogue=layer.epilogue)
    except ValueError as err:
        return str(err)
    return None
