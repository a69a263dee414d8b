"""The template's views of the tasks' workloads: conv2d and dense as ``gemm.GemmView``s, which is
all that the space, the rules, the prior, the cost model and the schedule read of a workload.
No TVM."""

from __future__ import annotations

import functools

from ...workloads.dense import DenseWorkload
from ...workloads.epilogue import parse as parse_epilogue
from .gemm import ChannelsOuter, GemmView, Im2col, Operand, RowMajor, Transposed
from .operand_layout import COL_MAJOR
from ...workloads.conv2d import Conv2dWorkload


def view_of(workload) -> GemmView:
    """The GemmView of a task's workload (a GemmView is its own view)."""
    if isinstance(workload, GemmView):
        return workload
    try:
        func = _VIEWS[type(workload)]
    except KeyError:
        raise TypeError(f"no GEMM view for {type(workload).__name__} (the template's views: "
                        f"{', '.join(t.__name__ for t in _VIEWS)})") from None
    return func(workload)


@functools.lru_cache(maxsize=1024)
def conv2d_view(wl: Conv2dWorkload) -> GemmView:
    """NHWC conv2d as an implicit GEMM: M = N*OH*OW output pixels, N = K output channels,
    K = R*S*C.  The im2col A is contiguous along K in runs of C (one filter tap's
    channels); B (HWIO) and C (NHWC) are row-major with K output channels a row.  A grouped
    conv is ``groups`` GEMMs of N = K/G and K = R*S*C/G, whose runs are a group's channels;
    an OHWI or OIHW weight is a column-major B (``_weight``)."""
    m, n, k = wl.gemm_shape
    g = wl.groups
    a = Im2col(wl.in_height, wl.in_width, wl.in_channels // g, wl.out_height, wl.out_width, wl.kernel_w,
               wl.stride, wl.dilation, wl.padding[:2])
    per_group = " per group" if g > 1 else ""
    return GemmView(
        m, n, k, wl.dtype, wl.out_dtype,
        a=Operand("data", wl.data_shape, a, wl.in_channels // g, "input channels" + per_group),
        b=_weight(wl, n if g > 1 else 0, per_group),
        c=Operand("out", wl.out_shape, RowMajor(wl.out_shape, n if g > 1 else 0), n, "output channels" + per_group,
                  axes=("bi", "y", "x", "co")),
        epilogue=parse_epilogue(wl.epilogue),
        groups=g,
    )


def _weight(wl: Conv2dWorkload, group_cols: int, per_group: str) -> Operand:
    """B, the weight as the (R*S*C/G) x (K/G) matrix of each group: HWIO row-major (runs of a
    group's output channels), OHWI column-major (each output channel's R*S*C/G filter one run,
    as an (N, K) dense weight), OIHW column-major too, whose runs are a 1x1 conv's C/G input
    channels and one element otherwise (a row's channels are R*S apart)."""
    shape, n = wl.weight_shape, wl.out_channels // wl.groups
    if wl.weight_layout == "HWIO":
        return Operand("weight", shape, RowMajor(shape, group_cols), n, "output channels" + per_group)
    taps, channels = wl.kernel_h * wl.kernel_w, wl.in_channels // wl.groups
    if wl.weight_layout == "OHWI" or taps == 1:
        return Operand("weight", shape, Transposed(shape, group_cols), taps * channels,
                       "filter elements (R x S x C/G) of an output channel", layout=COL_MAJOR)
    return Operand("weight", shape, ChannelsOuter(shape, group_cols), 1,
                   "contiguous element of an OIHW weight along the reduction (its channels are R x S apart)",
                   layout=COL_MAJOR)


@functools.lru_cache(maxsize=1024)
def dense_view(wl: DenseWorkload) -> GemmView:
    """Dense as a GEMM: M = batch*m rows of A (a batch shares B), N, K.  A (M x K) and C
    (M x N) are row-major with runs of K and N; B is row-major (K, N) with runs of N, or an
    (N, K) weight (``b=nk``): the transposed map, column-major, with runs of K."""
    m, n, k = wl.gemm_shape
    if wl.b_layout == "kn":
        b = Operand("weight", wl.b_shape, RowMajor(wl.b_shape), n, "output features")
    else:
        b = Operand("weight", wl.b_shape, Transposed(wl.b_shape), k, "input features", layout=COL_MAJOR)
    return GemmView(
        m, n, k, wl.dtype, wl.out_dtype,
        a=Operand("data", wl.a_shape, RowMajor(wl.a_shape), k, "input features"),
        b=b,
        c=Operand("out", wl.out_shape, RowMajor(wl.out_shape), n, "output features"),
        epilogue=parse_epilogue(wl.epilogue),
        b_dtype=wl.b_dtype,
    )


# workload type -> its view function (``view_of``)
_VIEWS = {Conv2dWorkload: conv2d_view, DenseWorkload: dense_view}
