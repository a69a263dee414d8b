"""The Tensor Core conv2d template: TE compute + TensorIR schedule driven by a config.

Implicit GEMM: M = N*OH*OW output pixels, N = output channels, K = R*S*C.
The im2col matrix A (M x K) and the reshaped weight B (K x N) are defined padded
to the block tile, so any batch and channel count works; both are inlined into
the shared-memory loads, so nothing is materialised.  The fp32 accumulator tile
is staged through shared memory and written out with vector stores.
"""

from __future__ import annotations

import tvm
from tvm import te

from .intrinsics import wmma_intrinsics
from .space import Conv2dConfig
from .workloads import Conv2dWorkload

SMEM = "shared.dyn"


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def conv2d_compute(workload: Conv2dWorkload, config: Conv2dConfig):
    """TE definition: (data, weight, out, split-K workspace or None), GEMM padded to the tile."""
    wl = workload
    m, n, k = wl.gemm_shape
    mp, np_ = _round_up(m, config.block_m), _round_up(n, config.block_n)
    kp = _round_up(k, config.block_k * config.split_k)
    oh, ow = wl.out_height, wl.out_width
    (sh, sw), (dh, dw) = wl.stride, wl.dilation
    pad_top, pad_left = wl.padding[0], wl.padding[1]
    c, s = wl.in_channels, wl.kernel_w

    data = te.placeholder(wl.data_shape, wl.dtype, name="data")
    weight = te.placeholder(wl.weight_shape, wl.dtype, name="weight")
    zero = tvm.tirx.const(0, "float16")

    def im2col(row, col):
        img, pix = row // (oh * ow), row % (oh * ow)
        y, x = pix // ow, pix % ow
        rs, ci = col // c, col % c
        h = y * sh + (rs // s) * dh - pad_top
        w = x * sw + (rs % s) * dw - pad_left
        inside = tvm.tirx.all(row < m, col < k, h >= 0, h < wl.in_height, w >= 0, w < wl.in_width)
        return tvm.tirx.if_then_else(inside, data[img, h, w, ci].astype("float16"), zero)

    def weight_matrix(row, col):
        # HWIO weight is a row-major (R*S*C, K) matrix: element [0, 0, row, col] has the
        # address of [r, s, ci, col] (row < K keeps it inside the buffer), and the copy
        # needs no div/mod, which the simplifier cannot fold out of the 4-D form.
        inside = tvm.tirx.all(row < k, col < n)
        value = weight[0, 0, row, col]
        return tvm.tirx.if_then_else(inside, value.astype("float16"), zero)

    a = te.compute((mp, kp), im2col, name="A")
    b = te.compute((kp, np_), weight_matrix, name="B")
    if config.split_k == 1:
        red = te.reduce_axis((0, kp), name="rk")
        gemm = te.compute(
            (mp, np_),
            lambda i, j: te.sum(a[i, red].astype("float32") * b[red, j].astype("float32"), axis=red),
            name="C",
        )
        out = te.compute(
            wl.out_shape,
            lambda bi, y, x, co: gemm[(bi * oh + y) * ow + x, co].astype(wl.out_dtype),
            name="out",
        )
        return data, weight, out, None
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
                               * b[k_of(z, red), j].astype("float32"), axis=red),
        name="C",
    )
    zk = te.reduce_axis((0, config.split_k), name="zk")
    total = te.compute(
        wl.out_shape, lambda bi, y, x, co: te.sum(gemm[zk, (bi * oh + y) * ow + x, co], axis=zk),
        name="total",
    )
    out = te.compute(wl.out_shape, lambda *idx: total[idx].astype(wl.out_dtype), name="out")
    return data, weight, out, gemm


def workspace_shape(workload: Conv2dWorkload, config: Conv2dConfig) -> tuple[int, int, int] | None:
    """Shape of the fp32 split-K partial sums passed after ``out`` (None: no such argument)."""
    if config.split_k == 1:
        return None
    m, n, _ = workload.gemm_shape
    return (config.split_k, _round_up(m, config.block_m), _round_up(n, config.block_n))


def _cooperative_copy(sch, block, config: Conv2dConfig, vec: int):
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


def schedule_conv2d(workload: Conv2dWorkload, config: Conv2dConfig) -> tvm.IRModule:
    """The scheduled TensorIR module of one (workload, config)."""
    data, weight, out, workspace = conv2d_compute(workload, config)
    params = [data, weight, out] + ([workspace] if workspace is not None else [])
    sch = tvm.s_tir.Schedule(te.create_prim_func(params))
    wm, wn, wk = config.wmma_mnk
    names = wmma_intrinsics(config.wmma_mnk, SMEM)
    brw, bcw = config.block_row_warps, config.block_col_warps
    wrt, wct = config.warp_row_tiles, config.warp_col_tiles

    gemm = sch.get_sblock("C")
    out_block = sch.get_sblock("out")
    ow = workload.out_width
    if config.split_k == 1:
        sch.transform_block_layout(
            out_block,
            tvm.tirx.IndexMap.from_func(
                lambda bi, y, x, co: ((bi * workload.out_height + y) * ow + x, co), index_dtype="int32"
            ),
        )
        i, j, kk = sch.get_loops(gemm)
    else:
        _schedule_split_k_sum(sch, out_block)
        z, i, j, kk = sch.get_loops(gemm)
        sch.bind(z, "blockIdx.z")

    # Tile the GEMM: m -> [bx, ty, wrt, wm], n -> [by, tz, wct, wn], k -> [ko, chunk, wk].
    bx, ty, i_t, i_w = sch.split(i, [None, brw, wrt, wm])
    by, tz, j_t, j_w = sch.split(j, [None, bcw, wct, wn])
    ko, ki, k_w = sch.split(kk, [None, config.chunk, wk])
    sch.reorder(bx, by, ty, tz, ko, ki, i_t, j_t, i_w, j_w, k_w)
    sch.bind(bx, "blockIdx.x")
    sch.bind(by, "blockIdx.y")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tz, "threadIdx.z")

    # Output path: accumulator -> shared (block tile) -> global, with the fp16 cast fused.
    c_shared = sch.cache_write(gemm, 0, SMEM)
    c_frag = sch.cache_write(gemm, 0, "wmma.accumulator")
    sch.reverse_compute_at(c_frag, tz, preserve_unit_loops=True)
    sch.reverse_compute_at(c_shared, by, preserve_unit_loops=True)
    if config.split_k == 1:
        sch.reverse_compute_inline(out_block)

    # Input path: global -> shared (per ko) -> fragments (per chunk step).
    a_shared = sch.cache_read(gemm, 0, SMEM)
    b_shared = sch.cache_read(gemm, 1, SMEM)
    a_frag = sch.cache_read(gemm, 0, "wmma.matrix_a")
    b_frag = sch.cache_read(gemm, 1, "wmma.matrix_b")
    sch.compute_at(a_frag, ki, preserve_unit_loops=True)
    sch.compute_at(b_frag, ki, preserve_unit_loops=True)
    sch.compute_at(a_shared, ko, preserve_unit_loops=True)
    sch.compute_at(b_shared, ko, preserve_unit_loops=True)
    sch.compute_inline(sch.get_sblock("A"))
    sch.compute_inline(sch.get_sblock("B"))

    _cooperative_copy(sch, a_shared, config, config.vec_a)
    _cooperative_copy(sch, b_shared, config, config.vec_b)
    _cooperative_copy(sch, c_shared, config, config.vec_c)
    if config.offset_a:
        sch.storage_align(a_shared, 0, axis=-2, factor=config.block_k + config.offset_a, offset=0)
    if config.offset_b:
        sch.storage_align(b_shared, 0, axis=-2, factor=config.block_n + config.offset_b, offset=0)

    # Fragment loads: split into wmma tiles and tensorize.
    a_rows, a_cols = sch.get_loops(a_frag)[-2:]
    a_ro, a_ri = sch.split(a_rows, [None, wm])
    sch.reorder(a_ro, a_ri, a_cols)
    b_rows, b_cols = sch.get_loops(b_frag)[-2:]
    b_co, b_ci = sch.split(b_cols, [None, wn])
    sch.reorder(b_co, b_rows, b_ci)
    sch.tensorize(a_ri, names.load_a)
    sch.tensorize(b_rows, names.load_b)

    # Accumulator store: per warp tile, fragment by fragment.
    store_name = sch.get(c_frag).name_hint
    s_rows, s_cols = sch.get_loops(c_frag)[-2:]
    s_ro, s_ri = sch.split(s_rows, [None, wm])
    s_co, s_ci = sch.split(s_cols, [None, wn])
    sch.reorder(s_ro, s_co, s_ri, s_ci)
    sch.tensorize(s_ri, names.store)

    init = sch.decompose_reduction(gemm, ko)
    sch.tensorize(sch.get_loops(init)[-2], names.fill)
    sch.tensorize(i_w, names.mma)

    if config.frag_buffers > 1:
        # ki's body is [A fragments, B fragments, MMAs]: load slice ki + 1 during MMAs of ki.
        sch.annotate(ki, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(ki, "software_pipeline_order", [0, 1, 2])
    if config.stages > 1:
        # ko's body is [A copy, B copy, ki loop]: the copies of step ko + stages - 1 are
        # issued as cp.async (zero-fill where im2col pads) while step ko computes.  A
        # pipelined ki loop is rewritten first, into prologue, steady loop and epilogue.
        compute = 3 if config.frag_buffers > 1 else 1
        sch.annotate(ko, "software_pipeline_stage", [0, 0] + [config.stages - 1] * compute)
        sch.annotate(ko, "software_pipeline_order", list(range(2 + compute)))
        sch.annotate(ko, "software_pipeline_async_stages", [0])

    if config.offset_c:
        # After tensorize: the tensorized store block is the C tile's writer now.
        sch.storage_align(sch.get_sblock(store_name + "_o"), 0, axis=-2,
                          factor=config.block_n + config.offset_c, offset=0)
    return sch.mod


# use_async_copy: copies inside a pipeline's async stage become cp.async (no effect elsewhere).
PASS_CONFIG = {"tirx.merge_static_smem": True, "tirx.use_async_copy": True}


def lower_conv2d(workload: Conv2dWorkload, config: Conv2dConfig, target):
    """Schedule and compile to a TVM Executable (CUDA source inside, not yet nvcc-compiled)."""
    mod = schedule_conv2d(workload, config)
    with tvm.transform.PassContext(opt_level=3, config=PASS_CONFIG):
        return tvm.compile(mod, target)
