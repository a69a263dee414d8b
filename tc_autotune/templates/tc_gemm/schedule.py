"""The Tensor Core GEMM template: TE compute + TensorIR schedule driven by a config.

It sees a task's GEMM view (``gemm.GemmView``), never the task's workload: the TE compute
reads A (M x K) and B (K x N) from the task's tensors and writes C (M x N) to its output
through the view's index maps.  Conv2d is an implicit GEMM (``gemm.conv2d_view``):
M = N*OH*OW output pixels, N = output channels, K = R*S*C; A is the im2col matrix of
the data and B the HWIO weight as a row-major matrix.  A and B are defined padded to the
block tile, so any M, N and K work; both are inlined into the shared-memory loads, so
nothing is materialised.  A column-major B (an nn.Linear (N, K) weight) is defined as its
transpose, [n][k]: its shared tile is K-contiguous like its tensor, copied with vector
loads along K, and the Tensor Cores read it as such (``b_layout`` of the paths).  The fp32
accumulator tile is staged through shared memory and written out with vector stores; a
fused epilogue (``view.epilogue``: scale, bias, residual, activation) is computed in that
store, between the staging tile and the output (with split-K, in the kernel that sums the
slices), so it costs no pass over memory of its own.

The kernel's arguments are (A's tensor, B's tensor, *epilogue inputs, C's tensor,
*workspaces) (conv2d: data, weight, [scale, bias, residual,] out): workspaces are buffers the
caller allocates once (``workspaces``), because TVM would allocate an intermediate global
buffer on every call.  fp32 input (``dtype=float32``) is first cast to fp16 copies of the
inputs (workspaces) by one vectorised kernel; the GEMM kernel then reads those copies and
is the fp16 workload's kernel, instruction for instruction.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import tvm
import tvm_ffi
from tvm import te

from .intrinsics import (MMA_TILE, WGMMA_ATOM, WGMMA_K, mma_fragment_layout, mma_intrinsics, wgmma_drain,
    wgmma_intrinsic, wmma_intrinsics)
from ...core import tasks
from . import warp_specialized
from ...workloads.dense import DenseWorkload
from ...workloads.epilogue import input_specs as epilogue_input_specs
from .gemm import COL_MAJOR, ROW_MAJOR, GemmView, Operand, conv2d_view, dense_view, view_of
from .intrinsic_paths import get as intrinsic_path
from .intrinsic_paths import schedules
from .rules import round_up as _round_up
from ...core.space import TcGemmConfig
from ...workloads.conv2d import Conv2dWorkload

SMEM = "shared.dyn"


def conv2d_compute(workload: Conv2dWorkload, config: TcGemmConfig):
    """``gemm_compute`` of a conv2d workload's view."""
    return gemm_compute(conv2d_view(workload), config)


def gemm_compute(view: GemmView, config: TcGemmConfig):
    """TE definition from the view's index maps: (input tensors in argument order, C's
    tensor, workspace tensors in ``workspaces`` order), the GEMM padded to the tile."""
    m, n, k = view.shape
    mp, np_ = _round_up(m, config.block_m), _round_up(n, config.block_n)
    kp = _round_up(k, config.block_k * config.split_k)
    a_op, b_op, c_op = view.a, view.b, view.c
    if (a_op.layout, c_op.layout) != (ROW_MAJOR, ROW_MAJOR):
        raise ValueError("the template reads A and writes C row-major (contiguous along K and N)")

    a_in = te.placeholder(a_op.shape, view.dtype, name=_input_name(a_op.tensor, view.dtype))
    b_in = te.placeholder(b_op.shape, view.dtype, name=_input_name(b_op.tensor, view.dtype))
    if view.dtype == "float16":
        a_tensor, b_tensor, copies = a_in, b_in, []
    else:
        # fp16 copies (workspaces) written by the cast kernel, named as the fp16 workload's
        # inputs: the GEMM kernel reading them is the fp16 kernel, names included.
        a_tensor, b_tensor = copies = [_fp16_copy(a_in, a_op.tensor), _fp16_copy(b_in, b_op.tensor)]
    zero = tvm.tirx.const(0, "float16")
    epilogue_in, finish = _epilogue(view)
    inputs = [a_in, b_in, *epilogue_in]

    def operand(tensor: te.Tensor, held: Operand, rows: int, cols: int):
        """Matrix element [row, col] of an input: its tensor's element through the index
        map, 0 outside the matrix or where the map says it is outside the tensor."""

        def element(row, col):
            index, inside = held.map.element(row, col)
            inside = tvm.tirx.all(row < rows, col < cols, *inside)
            return tvm.tirx.if_then_else(inside, tensor[index].astype("float16"), zero)

        return element

    a = te.compute((mp, kp), operand(a_tensor, a_op, m, k), name="A")
    b_element = operand(b_tensor, b_op, k, n)
    if b_op.layout == COL_MAJOR:  # B's tile [n][k], contiguous along K as its tensor
        b = te.compute((np_, kp), lambda col, row: b_element(row, col), name="B")
        b_at = lambda row, col: b[col, row]  # noqa: E731
    else:
        b = te.compute((kp, np_), b_element, name="B")
        b_at = lambda row, col: b[row, col]  # noqa: E731
    axes = list(c_op.axes) or None  # the output's iter var names
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
    specs = epilogue_input_specs(epilogue, view.n, c_op.shape, view.out_dtype)
    tensors = {name: te.placeholder(shape, dtype, name=name) for name, shape, dtype in specs}

    def finish(acc, idx):
        column = c_op.map.matrix_index(*idx)[1]  # the output channel / feature
        values = {name: tensors[name][column] for name in epilogue.channel_inputs}
        if epilogue.residual:
            values["residual"] = tensors["residual"][idx].astype("float32")
        return epilogue.apply(acc, _TVM_OPS, **values).astype(view.out_dtype)

    return list(tensors.values()), finish


def _fp16_copy(tensor: te.Tensor, name: str) -> te.Tensor:
    return te.compute(tensor.shape, lambda *i: tensor(*i).astype("float16"), name=name)


def _input_name(name: str, dtype: str) -> str:
    return name if dtype == "float16" else f"{name}_{dtype.replace('float', 'fp')}"


def workspace_shape(workload, config: TcGemmConfig) -> tuple[int, int, int] | None:
    """Shape of the fp32 split-K partial sums (None: no split, or the warp-specialized kernel's,
    whose K slices sum in their cluster's shared memory); the first of ``workspaces``.
    ``workload``: a task's workload or its GemmView."""
    if config.split_k == 1 or config.warp_specialized:
        return None
    view = view_of(workload)
    return (config.split_k, _round_up(view.m, config.block_m), _round_up(view.n, config.block_n))


def workspaces(workload, config: TcGemmConfig) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of each buffer the kernel takes after its output, in order: the fp32
    split-K partial sums (split_k > 1), then for fp32 input the fp16 copies of the A and B
    tensors (conv2d: data and weight) that the cast kernel writes and the GEMM kernel reads.
    The caller allocates them (once; their contents need not survive between calls)."""
    view = view_of(workload)
    out = []
    split = workspace_shape(view, config)
    if split is not None:
        out.append((split, "float32"))
    if view.dtype != "float16":
        out += [(operand.shape, "float16") for operand in view.inputs]
    return out


def _cooperative_copy(sch, block, config: TcGemmConfig, vec: int):
    """All threads of the block copy a 2-D tile, ``vec`` contiguous elements each."""
    loops = sch.get_loops(block)
    fused = sch.fuse(*loops[-2:])
    _, ty, tz, tx, vi = sch.split(
        fused, [None, config.block_row_warps, config.block_col_warps, 32, vec]
    )
    sch.bind(ty, "threadIdx.y")
    sch.bind(tz, "threadIdx.z")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(vi)


def _schedule_split_k_sum(sch, out_block) -> None:
    """The split-K epilogue kernel: one thread per output element adds the K slices in
    registers (fp32) and writes the cast result."""
    total = sch.get_sblock("total")
    loops = sch.get_loops(total)
    fused = sch.fuse(*loops[:-1])
    bx, tx = sch.split(fused, [None, 256])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.reverse_compute_at(out_block, tx)
    sch.set_scope(total, 0, "local")


def schedule_conv2d(workload: Conv2dWorkload, config: TcGemmConfig) -> tvm.IRModule:
    """The scheduled TensorIR module of one (workload, config)."""
    return schedule_gemm(conv2d_view(workload), config)


def schedule_gemm(view: GemmView, config: TcGemmConfig) -> tvm.IRModule:
    """The scheduled TensorIR module of one GEMM view and config: everything below reads
    the GEMM (blocks "A", "B", "C" and the output's) and the view, never the task's workload.
    A warp-specialized config's kernel is written as CUDA instead (``warp_specialized``)."""
    if config.warp_specialized:
        return warp_specialized.kernel_module(view, config)
    inputs, out, extra = gemm_compute(view, config)
    sch = tvm.s_tir.Schedule(te.create_prim_func([*inputs, out, *extra]))
    gemm = sch.get_sblock("C")
    out_block = sch.get_sblock(view.c.tensor)
    if config.split_k == 1:
        # The output block's iterators become the GEMM's (m, n), so it inlines into the C tile.
        c_op = view.c
        axes = c_op.axes or tuple(f"i{d}" for d in range(len(c_op.shape)))
        index = [tvm.tirx.Var(name, "int32") for name in axes]
        sch.transform_block_layout(out_block, tvm.tirx.IndexMap(index, list(c_op.map.matrix_index(*index)), None))
        i, j, kk = sch.get_loops(gemm)
    else:
        _schedule_split_k_sum(sch, out_block)
        z, i, j, kk = sch.get_loops(gemm)
        sch.bind(z, "blockIdx.z")
    path = intrinsic_path(config.intrinsic)
    inline_out = view.c.tensor if config.split_k == 1 else None
    ko, ki = path.schedule(sch, gemm, (i, j, kk), config, inline_out=inline_out, b_layout=view.b.layout)

    if config.frag_buffers > 1:
        # ki's body is [A fragments, B fragments, MMAs]: load slice ki + 1 during MMAs of ki.
        sch.annotate(ki, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(ki, "software_pipeline_order", [0, 1, 2])
    if config.stages > 1:
        # ko's body is [A copy, B copy, ki loop]: the copies of step ko + stages - 1 are
        # issued as cp.async (zero-fill where im2col pads) while step ko computes.  A
        # pipelined ki loop is rewritten first, into prologue, steady loop and epilogue.
        compute = 3 if config.frag_buffers > 1 else 1
        stage, order = [0, 0] + [config.stages - 1] * compute, list(range(2 + compute))
        if config.wgmma_in_flight:  # [copies, compute], the compute first: "wgmma groups in flight"
            stage, order = [0, config.stages - 1], [1, 0]
        sch.annotate(ko, "software_pipeline_stage", stage)
        sch.annotate(ko, "software_pipeline_order", order)
        sch.annotate(ko, "software_pipeline_async_stages", [0])
    if view.dtype != "float16":
        _schedule_input_cast(sch, view)
    if config.wgmma_in_flight:
        return _drain_after(sch, ko, config)
    return sch.mod


# Measured on an H100 (rfc-1x1-b32: 40 MB moved): 16- or 32-byte vectors, 1, 2 or 4 of them
# a thread, 256 or 512 threads all cast at 2.49-2.64 TB/s; this, the simplest, at 2.64.
CAST_THREADS = 256
CAST_VECTOR_BYTES = 16  # a thread's load per operand: one float4 of fp32 (stored as 4 fp16)


def _schedule_input_cast(sch, view: GemmView) -> None:
    """The fp32 -> fp16 copies of the inputs (conv2d: data and weight) as ONE kernel, launched before the conv
    kernel.  Each operand is cut into vectors of 4 elements (16-byte loads, 8-byte stores;
    narrower only where its element count is not a multiple of 4), a block's CAST_THREADS
    threads take one vector each, and block b converts the b-th run of CAST_THREADS vectors
    of data and the b-th of weight (the two loops are merged under one blockIdx.x).  The
    grid is what the larger operand needs: every element is read and written once, with
    enough blocks to fill any GPU for a real conv."""
    per_vector = CAST_VECTOR_BYTES * 8 // tvm.DataType(view.dtype).bits
    loops = []
    for operand in view.inputs:
        block = sch.get_sblock(operand.tensor)
        size = math.prod(operand.shape)
        vec = math.gcd(size, per_vector)
        vectors, lanes = sch.split(sch.fuse(*sch.get_loops(block)), [None, vec])
        sch.vectorize(lanes)
        loops.append((vectors, size // vec))
    grid = max(-(-count // CAST_THREADS) for _, count in loops)
    # grid * CAST_THREADS may exceed an operand's vector count: its predicate is on whole
    # vectors (blockIdx, threadIdx), so the vector loop stays vectorised.
    splits = [sch.split(vectors, [grid, CAST_THREADS]) for vectors, _ in loops]
    sch.bind(sch.merge(*(bx for bx, _ in splits)), "blockIdx.x")
    for _, tx in splits:
        sch.bind(tx, "threadIdx.x")


def _tile_block(sch, loops, config: TcGemmConfig, tile_mnk):
    """m -> [bx, ty, warp_row_tiles, tm], n -> [by, tz, warp_col_tiles, tn], k -> [ko, chunk, tk]
    (tile loops outermost to innermost), bound to blocks and warps."""
    i, j, kk = loops
    tm, tn, tk = tile_mnk
    bx, ty, i_t, i_w = sch.split(i, [None, config.block_row_warps, config.warp_row_tiles, tm])
    by, tz, j_t, j_w = sch.split(j, [None, config.block_col_warps, config.warp_col_tiles, tn])
    ko, ki, k_w = sch.split(kk, [None, config.chunk, tk])
    sch.reorder(bx, by, ty, tz, ko, ki, i_t, j_t, i_w, j_w, k_w)
    sch.bind(bx, "blockIdx.x")
    sch.bind(by, "blockIdx.y")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tz, "threadIdx.z")
    return by, tz, ko, ki, i_w


def _stage_output(sch, gemm, by, tz, acc_scope: str, inline_out: str | None):
    """Accumulators (per warp) -> shared C tile (per block) -> global.  Returns (c_frag, c_shared)."""
    c_shared = sch.cache_write(gemm, 0, SMEM)
    c_frag = sch.cache_write(gemm, 0, acc_scope)
    sch.reverse_compute_at(c_frag, tz, preserve_unit_loops=True)
    sch.reverse_compute_at(c_shared, by, preserve_unit_loops=True)
    if inline_out is not None:  # the output block (else split-K's sum kernel writes the output)
        sch.reverse_compute_inline(sch.get_sblock(inline_out))
    return c_frag, c_shared


def _stage_operands(sch, gemm, by, tz, ko, ki, config: TcGemmConfig, frag_scopes, inline_out: str | None):
    """Accumulators -> shared C tile (per block) -> global; global -> shared A/B tiles (per
    ko) -> fragments (per chunk step, unless ``frag_scopes`` has None for A and B: wgmma
    reads shared memory itself); cooperative vector copies.  Returns the blocks:
    (c_frag, a_shared, b_shared, a_frag, b_frag), the fragments None when not staged."""
    c_frag, c_shared = _stage_output(sch, gemm, by, tz, frag_scopes[2], inline_out)
    a_shared = sch.cache_read(gemm, 0, SMEM)
    b_shared = sch.cache_read(gemm, 1, SMEM)
    a_frag = b_frag = None
    if frag_scopes[0] is not None:
        a_frag = sch.cache_read(gemm, 0, frag_scopes[0])
        b_frag = sch.cache_read(gemm, 1, frag_scopes[1])
        sch.compute_at(a_frag, ki, preserve_unit_loops=True)
        sch.compute_at(b_frag, ki, preserve_unit_loops=True)
    sch.compute_at(a_shared, ko, preserve_unit_loops=True)
    sch.compute_at(b_shared, ko, preserve_unit_loops=True)
    sch.compute_inline(sch.get_sblock("A"))
    sch.compute_inline(sch.get_sblock("B"))
    _cooperative_copy(sch, a_shared, config, config.vec_a)
    _cooperative_copy(sch, b_shared, config, config.vec_b)
    _cooperative_copy(sch, c_shared, config, config.vec_c)
    return c_frag, a_shared, b_shared, a_frag, b_frag


def _fragment_tiles(sch, block, rows: int, cols: int):
    """Split a block's last two loops into (rows x cols) fragment tiles, tile loops outside;
    returns the inner row loop, where a fragment load or store intrinsic is tensorized."""
    r, c = sch.get_loops(block)[-2:]
    r_o, r_i = sch.split(r, [None, rows])
    c_o, c_i = sch.split(c, [None, cols])
    sch.reorder(r_o, c_o, r_i, c_i)
    return r_i


def _align_c_tile(sch, store_name: str, config: TcGemmConfig) -> None:
    if config.offset_c:
        # After tensorize: the tensorized store block is the C tile's writer now.
        sch.storage_align(sch.get_sblock(store_name + "_o"), 0, axis=-2,
                          factor=config.block_n + config.offset_c, offset=0)


@schedules("wmma")
def _schedule_wmma(sch, gemm, loops, config: TcGemmConfig, inline_out: str | None, b_layout: str):
    """WMMA fragments on padded shared tiles (a col_major B: [n][k] rows, padded along K,
    loaded as col_major matrix_b fragments); returns the (ko, ki) loops."""
    wm, wn, wk = config.wmma_mnk
    names = wmma_intrinsics(config.wmma_mnk, SMEM, b_layout)
    by, tz, ko, ki, i_w = _tile_block(sch, loops, config, config.wmma_mnk)
    scopes = ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator")
    c_frag, a_shared, b_shared, a_frag, b_frag = _stage_operands(
        sch, gemm, by, tz, ko, ki, config, scopes, inline_out)
    if config.offset_a:
        sch.storage_align(a_shared, 0, axis=-2, factor=config.block_k + config.offset_a, offset=0)
    if config.offset_b:
        b_row = config.block_k if b_layout == COL_MAJOR else config.block_n
        sch.storage_align(b_shared, 0, axis=-2, factor=b_row + config.offset_b, offset=0)

    # Fragment loads: split into wmma tiles and tensorize.
    a_rows, a_cols = sch.get_loops(a_frag)[-2:]
    a_ro, a_ri = sch.split(a_rows, [None, wm])
    sch.reorder(a_ro, a_ri, a_cols)
    if b_layout == COL_MAJOR:  # [n][k]: fragments along the rows
        b_load = _fragment_tiles(sch, b_frag, wn, wk)
    else:
        b_load, b_cols = sch.get_loops(b_frag)[-2:]
        b_co, b_ci = sch.split(b_cols, [None, wn])
        sch.reorder(b_co, b_load, b_ci)
    sch.tensorize(a_ri, names.load_a)
    sch.tensorize(b_load, names.load_b)

    # Accumulator store: per warp tile, fragment by fragment.
    store_name = sch.get(c_frag).name_hint
    sch.tensorize(_fragment_tiles(sch, c_frag, wm, wn), names.store)

    init = sch.decompose_reduction(gemm, ko)
    sch.tensorize(sch.get_loops(init)[-2], names.fill)
    sch.tensorize(i_w, names.mma)
    _align_c_tile(sch, store_name, config)
    return ko, ki


def _fragment_layout_map(ndim: int, transposed: bool = False):
    """A warp-scope buffer [..., rows, cols] -> [..., row tile, col tile, lane, slot]
    (16x16 fragments; a split-K accumulator has its slice index in front).  ``transposed``:
    the buffer holds the operand's transpose (a col_major B, [n][k]), whose element [i, j]
    goes where the operand's [j, i] would."""

    def to_fragments(*idx):
        i, j = idx[-2:]
        row, col = (j, i) if transposed else (i, j)  # of the operand
        return (*idx[:-2], i // MMA_TILE, j // MMA_TILE, *mma_fragment_layout(row % MMA_TILE, col % MMA_TILE))

    return tvm.tirx.IndexMap.from_func(to_fragments, ndim=ndim, index_dtype="int32")


@schedules("mma")
def _schedule_mma(sch, gemm, loops, config: TcGemmConfig, inline_out: str | None, b_layout: str):
    """ldmatrix + mma.sync on XOR-swizzled shared tiles (TVM's permuted layout: 16-byte
    chunk c of row r is stored at chunk c ^ (r % 8), so the cp.async writes of whole rows
    and the ldmatrix reads of 8 rows both hit 8 distinct bank groups; a col_major B's rows
    are along K); returns (ko, ki)."""
    names = mma_intrinsics(SMEM, b_layout)
    # The 16x16x16 MMA is the innermost block; the tile loops above it are scheduled.
    i, j, kk = loops
    i, i_mma = sch.split(i, [None, MMA_TILE])
    j, j_mma = sch.split(j, [None, MMA_TILE])
    kk, k_mma = sch.split(kk, [None, MMA_TILE])
    sch.reorder(i, j, kk, i_mma, j_mma, k_mma)
    tile = sch.blockize(i_mma)
    by, tz, ko, ki, _ = _tile_block(sch, (i, j, kk), config, (1, 1, 1))
    c_frag, a_shared, b_shared, a_frag, b_frag = _stage_operands(
        sch, tile, by, tz, ko, ki, config, ("warp", "warp", "warp"), inline_out)
    sch.annotate(a_shared, "permuted_layout", 1)
    sch.annotate(b_shared, "permuted_layout", 1)

    load_a, load_b = (_fragment_tiles(sch, frag, MMA_TILE, MMA_TILE) for frag in (a_frag, b_frag))
    sch.transform_layout(a_frag, ("write", 0), _fragment_layout_map(2))
    sch.transform_layout(b_frag, ("write", 0), _fragment_layout_map(2, transposed=b_layout == COL_MAJOR))
    sch.transform_layout(c_frag, ("read", 0), _fragment_layout_map(3 if config.split_k > 1 else 2))
    store = _fragment_tiles(sch, c_frag, MMA_TILE, MMA_TILE)
    frag_names = [sch.get(b).name_hint for b in (a_frag, b_frag)]
    store_name = sch.get(c_frag).name_hint

    init = sch.decompose_reduction(tile, ko)
    sch.tensorize(load_a, names.load_a)
    sch.tensorize(load_b, names.load_b)
    for name in frag_names:  # ldmatrix addresses follow the swizzle of the tiles they read
        sch.annotate(sch.get_sblock(name + "_o"), "permuted_layout", 1)
    sch.tensorize(sch.get_loops(gemm)[-3], names.mma)
    sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], names.fill)
    sch.tensorize(store, names.store)
    _align_c_tile(sch, store_name, config)
    return ko, ki


@schedules("wgmma")
def _schedule_wgmma(sch, gemm, loops, config: TcGemmConfig, inline_out: str | None, b_layout: str):
    """wgmma on 128-byte-swizzled shared tiles (see ``intrinsics``).  The four warps along M
    (threadIdx.y) are a warpgroup and each warpgroup (threadIdx.z) owns warp_col_tiles * 16
    columns.  A warp keeps its rows contiguous (its accumulators and the epilogue are the
    WMMA path's), while one wgmma takes 16 rows of each warp: the A tile's rows are permuted
    in shared memory so that slab s of the four warps is one 64-row block.  A col_major B
    stays [n][64 k], K-major rows like A's (wgmma's native B).  Returns (ko, None)."""
    n_wg = config.warp_col_tiles * MMA_TILE
    names = wmma_intrinsics((MMA_TILE, MMA_TILE, MMA_TILE), SMEM)  # fill and store
    i, j, kk = loops
    bx, ty, slab, i_w = sch.split(i, [None, config.block_row_warps, config.warp_row_tiles, MMA_TILE])
    by, tz, j_w = sch.split(j, [None, config.block_col_warps, n_wg])
    ko, k_w = sch.split(kk, [None, WGMMA_K])
    sch.reorder(bx, by, ty, tz, ko, slab, i_w, j_w, k_w)
    sch.bind(bx, "blockIdx.x")
    sch.bind(by, "blockIdx.y")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tz, "threadIdx.z")
    c_frag, a_shared, b_shared, _, _ = _stage_operands(
        sch, gemm, by, tz, ko, None, config, (None, None, "wmma.accumulator"), inline_out)
    # A rows (block, warp, slab, row) -> (block, slab, warp, row); a row_major B in 64-column
    # atoms, (N / 64, K, 64).  Both swizzled by TVM's permuted layout (last two dims: 64-wide rows).
    bm, per_warp = config.block_m, config.warp_row_tiles * MMA_TILE
    sch.transform_layout(a_shared, ("write", 0), lambda m, k: (
        m // bm, m % per_warp // MMA_TILE, m % bm // per_warp, m % MMA_TILE, k))
    if b_layout == ROW_MAJOR:
        sch.transform_layout(b_shared, ("write", 0), lambda k, n: (n // WGMMA_ATOM, k, n % WGMMA_ATOM))
    sch.annotate(a_shared, "permuted_layout", 1)
    sch.annotate(b_shared, "permuted_layout", 1)

    store_name = sch.get(c_frag).name_hint
    sch.tensorize(_fragment_tiles(sch, c_frag, MMA_TILE, MMA_TILE), names.store)
    init = sch.decompose_reduction(gemm, ko)
    fill_rows, fill_cols = sch.get_loops(init)[-2:]
    fill_o, fill_i = sch.split(fill_cols, [None, MMA_TILE])
    sch.reorder(fill_o, fill_rows, fill_i)
    sch.tensorize(fill_rows, names.fill)
    sch.tensorize(i_w, wgmma_intrinsic(n_wg, SMEM, b_layout, in_flight=bool(config.wgmma_in_flight)))
    _align_c_tile(sch, store_name, config)
    if config.wgmma_in_flight:
        _copies_for_groups_in_flight(sch, ko, (a_shared, b_shared))
    return ko, None


# ---- wgmma groups in flight across k-steps (wgmma_in_flight=1) ---------------------------
# A k-step's wgmma call returns with its group still running and waits only for the previous
# call's.  The pipelined ko body is [copies, compute] with the compute first (``schedule_gemm``):
# wait for step ko's cp.async group, barrier, issue wgmma(ko), wait for wgmma(ko - 1), barrier
# (every warpgroup is done with ko - 1), then the copies of step ko + stages - 1 into the
# buffers step ko - 1 read.  After the loop, ``_drain_after`` waits for the last groups.
def _copies_for_groups_in_flight(sch, ko, copies) -> None:
    """Put the copies' loop nests under ``ko`` into one loop of one iteration, so the software
    pipeline sees a single producer.  (With the compute first and the A and B copies apart,
    TVM 0.27 counts them as two cp.async groups per k-step but commits them as one, and its
    cp.async wait lets one group too many run.)  With two stages TVM would keep one buffer
    per tile, as the copy comes after the compute that reads it; the group in flight still
    reads it, so each copy is double-buffered."""
    tops = []
    for block in copies:
        loops = sch.get_loops(block)
        depth = next(d for d, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(ko)))
        tops.append(sch.add_unit_loop(loops[depth + 1]))
        sch.annotate(block, "double_buffer_scope", 0)
    sch.merge(*tops)


def _drain_after(sch, ko, config: TcGemmConfig) -> tvm.IRModule:
    """The module with a block calling ``wgmma_drain`` right after the ko loop (so after the
    pipeline's last steps, which TVM unrolls after it) and before the barrier that precedes
    the accumulator store: no group still reads the A and B tiles when the C tile overwrites
    them.  The block declares this warp's accumulator tile (as ``_schedule_wgmma`` tiles M
    and N), which keeps the accumulator array compacted to one warp's fragments."""
    bound, sref = {}, sch.get_sref(ko).parent
    while sref is not None:  # the block, warp and K-slice indices around ko
        if isinstance(sref.stmt, tvm.tirx.For) and sref.stmt.thread_binding is not None:
            bound[sref.stmt.thread_binding.thread_tag] = sref.stmt.loop_var
        sref = sref.parent
    root = sch.get(sch.get_sblock("root"))
    accumulators = next(buf for buf in root.alloc_buffers if buf.scope() == "wmma.accumulator")
    rows, cols = config.warp_row_tiles * MMA_TILE, config.warp_col_tiles * MMA_TILE
    row = (bound["blockIdx.x"] * config.block_row_warps + bound["threadIdx.y"]) * rows
    col = (bound["blockIdx.y"] * config.block_col_warps + bound["threadIdx.z"]) * cols
    tile = (slice(row, row + rows), slice(col, col + cols))
    if config.split_k > 1:
        tile = (slice(bound["blockIdx.z"], bound["blockIdx.z"] + 1), *tile)
    region = accumulators[tile]
    call = wgmma_drain(accumulators.data, config.warp_row_tiles * config.warp_col_tiles)
    drain = tvm.s_tir.SBlockRealize([], True, tvm.s_tir.SBlock([], [region], [region], "wgmma_drain", call))
    loop = sch.get(ko)

    def insert(seq):  # the drain after ko in the sequence that holds it
        if not any(child.same_as(loop) for child in seq.seq):
            return seq
        return tvm.tirx.SeqStmt([stmt for child in seq.seq
                                 for stmt in ((child, drain) if child.same_as(loop) else (child,))])

    func = sch.mod["main"]
    return tvm.IRModule({"main": func.with_body(tvm_ffi.structural_map(func.body, (tvm.tirx.SeqStmt, insert)))})


# use_async_copy: copies inside a pipeline's async stage become cp.async (no effect elsewhere).
PASS_CONFIG = {"tirx.merge_static_smem": True, "tirx.use_async_copy": True}


@tasks.templates(tasks.CONV2D.name)
def lower_conv2d(workload: Conv2dWorkload, config: TcGemmConfig, target):
    """Schedule and compile to a TVM Executable (CUDA source inside, not yet nvcc-compiled)."""
    return lower_gemm(conv2d_view(workload), config, target)


@tasks.templates(tasks.DENSE.name)
def lower_dense(workload: DenseWorkload, config: TcGemmConfig, target):
    """``lower_conv2d`` of a dense workload: the same template on its view."""
    return lower_gemm(dense_view(workload), config, target)


def lower_gemm(view: GemmView, config: TcGemmConfig, target):
    """``lower_conv2d`` of any task's GEMM view: a task's template is this on its view."""
    mod = schedule_gemm(view, config)
    with tvm.transform.PassContext(opt_level=3, config=PASS_CONFIG):
        return tvm.compile(mod, target)
