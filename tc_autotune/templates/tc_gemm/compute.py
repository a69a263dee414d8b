"""The template's TE compute: the GEMM of a task's view, padded to the block tile, with its fused
epilogue and (fp32 input) the fp16 copies of the inputs.

It sees a task's GEMM view (``gemm.GemmView``), never the task's workload: the TE compute
reads A (M x K) and B (K x N) from the task's tensors and writes C (M x N) to its output
through the view's index maps.  A and B are defined padded to the block tile, so any M, N
and K work (the schedule inlines both into the shared-memory loads: nothing is
materialised).  A column-major B (an nn.Linear (N, K) weight) is defined as its transpose,
[n][k], K-contiguous like its tensor.  The output block computes the fused epilogue
(``view.epilogue``: scale, bias, residual, activation) from the fp32 accumulator, so the
schedule inlines it into the store from the staging tile (with split-K, into the kernel that
sums the slices).

A grouped view (``view.groups`` = G GEMMs of one shape) is split-K's structure without the sum:
A and B hold the G GEMMs' operands one after another along K (group g's at g*Kp .., each padded
to Kp), and C[z] is GEMM z's, computed by the blocks of blockIdx.z = z; with split-K too,
z = g * split_k + slice.  Without split-K its output is computed as (group, row, col) and laid
out as the task's tensor by ``gemm_schedule``: a tile's padded columns then fall outside the
output (the store from the C tile is bounded by the output block's domain), where as the
tensor's channels they would be the next group's.
"""

from __future__ import annotations

from types import SimpleNamespace

import tvm
from tvm import te

from ...workloads.epilogue import input_specs as epilogue_input_specs
from .gemm import GemmView, Operand
from .operand_layout import COL_MAJOR, ROW_MAJOR
from .packing import pack_groups
from .knobs import TcGemmConfig
from .rules import round_up as _round_up
from .views import conv2d_view
from ...workloads.conv2d import Conv2dWorkload


def gemm_schedule(view: GemmView, config: TcGemmConfig):
    """A TensorIR schedule of ``gemm_compute``'s PrimFunc, whose arguments are the task's tensors:
    a grouped view's (group, row, col) output is laid out as the task's tensor (C's map inverted)."""
    view = pack_groups(view, config.group_pack)
    inputs, out, extra = gemm_compute(view, config)
    sch = tvm.s_tir.Schedule(te.create_prim_func([*inputs, out, *extra]))
    c_op = view.c
    if tuple(out.shape) != tuple(c_op.shape):
        index = [tvm.tirx.Var(f"i{d}", "int32") for d in range(len(c_op.shape))]
        to_matrix = tvm.tirx.IndexMap(index, list(c_op.map.matrix_index(*index)), None)
        sch.transform_layout(sch.get_sblock(c_op.tensor), ("write", 0), to_matrix.inverse(list(c_op.shape)))
    return sch


def conv2d_compute(workload: Conv2dWorkload, config: TcGemmConfig):
    """``gemm_compute`` of a conv2d workload's view."""
    return gemm_compute(conv2d_view(workload), config)


def gemm_compute(view: GemmView, config: TcGemmConfig):
    """TE definition from the view's index maps: (input tensors in argument order, C's
    tensor, workspace tensors in ``workspaces`` order), the GEMM padded to the tile (of the
    config's packed groups: ``packing``)."""
    view = pack_groups(view, config.group_pack)
    m, n, k = view.shape
    mp, np_ = _round_up(m, config.block_m), _round_up(n, config.block_n)
    kp = _round_up(k, config.block_k * config.split_k)
    groups = view.groups
    a_op, b_op, c_op = view.a, view.b, view.c
    if (a_op.layout, c_op.layout) != (ROW_MAJOR, ROW_MAJOR):
        raise ValueError("the template reads A and writes C row-major (contiguous along K and N)")

    operand_dtype = view.operand_dtype  # fp16, or bf16
    a_in = te.placeholder(a_op.shape, view.dtype, name=_input_name(a_op.tensor, view))
    b_in = te.placeholder(b_op.shape, view.dtype, name=_input_name(b_op.tensor, view))
    if view.dtype == operand_dtype:
        a_tensor, b_tensor, copies = a_in, b_in, []
    else:
        # fp16 copies (workspaces) written by the cast kernel, named as the fp16 workload's
        # inputs: the GEMM kernel reading them is the fp16 kernel, names included.
        a_tensor, b_tensor = copies = [_fp16_copy(a_in, a_op.tensor), _fp16_copy(b_in, b_op.tensor)]
    zero = tvm.tirx.const(0, operand_dtype)
    epilogue_in, finish = _epilogue(view)
    inputs = [a_in, b_in, *epilogue_in]

    def operand(tensor: te.Tensor, held: Operand, rows: int, cols: int, k_axis: int):
        """Matrix element [row, col] of an input: its tensor's element through the index
        map, 0 outside the matrix or where the map says it is outside the tensor.  Grouped:
        index ``k_axis`` (A's col, B's row) runs over the groups' K, Kp each."""

        def element(row, col):
            if groups > 1:
                at = [row, col]
                group, at[k_axis] = at[k_axis] // kp, at[k_axis] % kp
                row, col = at
                index, inside = held.map.element(row, col, group)
            else:
                index, inside = held.map.element(row, col)
            inside = tvm.tirx.all(row < rows, col < cols, *inside)
            return tvm.tirx.if_then_else(inside, tensor[index].astype(operand_dtype), zero)

        return element

    kg = groups * kp  # A's columns and B's rows: every group's K
    a = te.compute((mp, kg), operand(a_tensor, a_op, m, k, 1), name="A")
    b_element = operand(b_tensor, b_op, k, n, 0)
    if b_op.layout == COL_MAJOR:  # B's tile [n][k], contiguous along K as its tensor
        b = te.compute((np_, kg), lambda col, row: b_element(row, col), name="B")
        b_at = lambda row, col: b[col, row]  # noqa: E731
    else:
        b = te.compute((kg, np_), b_element, name="B")
        b_at = lambda row, col: b[row, col]  # noqa: E731
    axes = list(c_op.axes) or None  # the output's iter var names
    if groups > 1:
        return _grouped_gemm(view, config, (a, b_at, kp), inputs, finish, copies, axes)
    if config.split_k == 1:
        red = te.reduce_axis((0, kp), name="rk")
        gemm = te.compute(
            (mp, np_),
            lambda i, j: te.sum(a[i, red].astype("float32") * b_at(red, j).astype("float32"), axis=red),
            name="C",
        )
        out = te.compute(
            c_op.shape, lambda *idx: finish(gemm[c_op.map.matrix_index(*idx)], idx),
            name=c_op.tensor, varargs_names=axes,
        )
        return inputs, out, copies
    # Split-K: slice z of the reduction goes to partial sums C[z], and a second kernel adds
    # the slices up: more blocks for a grid that cannot fill the GPU.  C is a parameter (the
    # caller's workspace, see ``workspace_shape``): TVM would allocate it on every call.
    # Slice z takes k-steps z, z + split, ...: the k offset stays a multiple of block_k, which
    # lets the vectorizer prove that 16-byte im2col loads never straddle a filter tap.
    split, bk = config.split_k, config.block_k
    red = te.reduce_axis((0, kp // split), name="rk")

    def k_of(z, r):
        return (r // bk * split + z) * bk + r % bk

    gemm = te.compute(
        (split, mp, np_),
        lambda z, i, j: te.sum(a[i, k_of(z, red)].astype("float32")
                               * b_at(k_of(z, red), j).astype("float32"), axis=red),
        name="C",
    )
    zk = te.reduce_axis((0, config.split_k), name="zk")
    total = te.compute(
        c_op.shape, lambda *idx: te.sum(gemm[(zk, *c_op.map.matrix_index(*idx))], axis=zk),
        name="total", varargs_names=axes,
    )
    out = te.compute(c_op.shape, lambda *idx: finish(total[idx], idx), name=c_op.tensor)
    return inputs, out, [gemm] + copies


def _grouped_gemm(view: GemmView, config: TcGemmConfig, operands, inputs, finish, copies, axes):
    """``gemm_compute``'s GEMMs of a grouped view: C[z] of GEMM z = g * split_k + slice reads
    group g's part of A and B (its K from g * kp).  Without split-K the output is (group, row,
    col) (see the module); with it the sum kernel reads each output element's (group, row, col)
    from C's map, as ungrouped slices are summed."""
    a, b_at, kp = operands
    c_op, split, bk = view.c, config.split_k, config.block_k
    mp, np_ = _round_up(view.m, config.block_m), _round_up(view.n, config.block_n)
    red = te.reduce_axis((0, kp // split), name="rk")

    def k_of(z, r):  # split-K's k-step interleave (see gemm_compute) within the group's K
        return z // split * kp + (r // bk * split + z % split) * bk + r % bk

    gemm = te.compute(
        (view.groups * split, mp, np_),
        lambda z, i, j: te.sum(a[i, k_of(z, red)].astype("float32") * b_at(k_of(z, red), j).astype("float32"),
                               axis=red),
        name="C",
    )
    if split == 1:  # (group, row, col): ``gemm_schedule`` lays it out as the task's tensor
        out = te.compute((view.groups, view.m, view.n),
                         lambda g, i, j: finish(gemm[g, i, j], c_op.map.element(i, j, g)[0]),
                         name=c_op.tensor, varargs_names=["g", "row", "col"])
        return inputs, out, copies
    zk = te.reduce_axis((0, split), name="zk")

    def summed(*idx):
        g, row, col = c_op.map.matrix_index(*idx)
        return te.sum(gemm[g * split + zk, row, col], axis=zk)

    total = te.compute(c_op.shape, summed, name="total", varargs_names=axes)
    out = te.compute(c_op.shape, lambda *idx: finish(total[idx], idx), name=c_op.tensor)
    return inputs, out, [gemm] + copies


def _let(value, body):
    """``body(value)`` with ``value`` bound once: its loads are not repeated per use."""
    var = tvm.tirx.Var("v", "float32")
    return tvm.tirx.Let(var, value, body(var))


# The epilogue's math on TVM expressions (``Epilogue.apply`` takes numpy's for the reference).
_TVM_OPS = SimpleNamespace(maximum=lambda x, y: tvm.tirx.max(x, tvm.tirx.const(y, "float32")),
                           tanh=tvm.tirx.tanh, let=_let)


def _epilogue(view: GemmView):
    """(placeholders of the epilogue's inputs, ``finish(acc, idx)``): the output element at
    tensor index ``idx`` from its fp32 accumulator: the epilogue, then the output cast.  The
    output block computes it, so it is inlined into the store from the staging tile."""
    c_op, epilogue = view.c, view.epilogue
    specs = epilogue_input_specs(epilogue, view.n * view.groups, c_op.shape, view.out_dtype)
    tensors = {name: te.placeholder(shape, dtype, name=name) for name, shape, dtype in specs}

    def finish(acc, idx):
        # the output channel / feature (a grouped C's matrix column is within its group)
        column = idx[-1] if view.groups > 1 else c_op.map.matrix_index(*idx)[1]
        values = {name: tensors[name][column] for name in epilogue.channel_inputs}
        if epilogue.residual:
            values["residual"] = tensors["residual"][idx].astype("float32")
        return epilogue.apply(acc, _TVM_OPS, **values).astype(view.out_dtype)

    return list(tensors.values()), finish


def _fp16_copy(tensor: te.Tensor, name: str) -> te.Tensor:
    return te.compute(tensor.shape, lambda *i: tensor(*i).astype("float16"), name=name)


def _input_name(name: str, view: GemmView) -> str:
    """An input's name: the tensor's where the GEMM reads it as it is (fp16, bf16), else the
    tensor's with its dtype (data_fp32: its fp16 copy has the tensor's name)."""
    return name if view.dtype == view.operand_dtype else f"{name}_{view.dtype.replace('float', 'fp')}"
