"""NCHW models to the kernels' NHWC, with one layout conversion per model rather than per layer.

The kernels take NHWC data and HWIO weights.  Transposing around each conv would cost two
passes over every activation; instead TVM's ``ConvertLayout`` makes each conv the kernels can
take NHWC / HWIO and carries the layout through the layout-agnostic ops after it (adds, ReLU,
batch norm, pooling, mean), so the activations are transposed where the NCHW model starts and
where it ends (at its input, and before a reshape such as the classifier's flatten).  A constant
weight's transpose is folded into the constant by ``match``; CSE merges the transposes of one
tensor that two convs read (a block's input and its shortcut), and what nothing reads any more
is dropped.
"""

from __future__ import annotations

from tvm import relax

from .match import DTYPES, Graph, static_shape

NHWC = {"relax.nn.conv2d": ["NHWC", "HWIO"]}
KEEP = {"relax.nn.conv2d": ["NCHW", "OIHW"]}
LAYOUT_OPS = ("relax.permute_dims", "relax.layout_transform")


def _takeable(graph: Graph, call) -> bool:
    """Whether a conv2d is worth converting: one ``match`` will give a kernel (fp16, ungrouped,
    static shapes, a constant weight).  Others keep NCHW, where TVM's own schedules run them."""
    attrs, (data, weight) = call.attrs, call.args
    return (int(attrs.groups) == 1 and str(attrs.data_layout) == "NCHW" and str(attrs.kernel_layout) == "OIHW"
            and all(str(getattr(x.ty, "dtype", "")) in DTYPES for x in (data, weight))
            and static_shape(data.ty) is not None and graph.const(weight) is not None)


def needs_conversion(mod) -> bool:
    """Whether any function of ``mod`` has an NCHW conv2d worth converting."""
    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            graph = Graph(func)
            if any(_is_conv(v) and _takeable(graph, v) for v in graph.defs.values()):
                return True
    return False


def _is_conv(value) -> bool:
    return isinstance(value, relax.Call) and getattr(value.op, "name", None) == "relax.nn.conv2d"


def to_nhwc(mod):
    """``mod`` with its takeable NCHW convs in NHWC / HWIO and the layout carried between them
    (see the module); ``mod`` itself when it has none."""
    if not needs_conversion(mod):
        return mod
    graphs = [Graph(f) for _, f in mod.functions.items() if isinstance(f, relax.Function)]

    def choose(call):
        if call.op.name != "relax.nn.conv2d":
            return {}
        weight = call.args[1]
        graph = next((g for g in graphs if g.const(weight) is not None), graphs[0])
        return NHWC if _takeable(graph, call) else KEEP

    mod = relax.transform.ConvertLayout({}, choose)(mod)
    mod = relax.transform.EliminateCommonSubexpr()(mod)
    # A tuple item of a tuple made in place becomes its value (torch's max_pool2d_with_indices
    # imports as (max_pool2d, zeros_like(input)): the indices' zeros, never read, would keep an
    # NCHW transpose of the pool's input alive), then whatever nothing reads goes.
    mod = relax.transform.CanonicalizeBindings()(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = relax.analysis.remove_all_unused(func)
    return mod


def layout_conversions(mod) -> int:
    """The transposes of activations (not constants) left in ``mod``'s Relax functions."""
    count = 0
    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            graph = Graph(func)
            count += sum(1 for v in graph.defs.values() if isinstance(v, relax.Call)
                         and getattr(v.op, "name", None) in LAYOUT_OPS and len(static_shape(v.ty) or ()) == 4
                         and graph.const(v.args[0]) is None)
    return count
