"""The Tensor Core GEMM template's TensorIR schedule, driven by a config, and the lowering of
each task: the TE compute of the task's GEMM view (``compute``), the block tiled and bound, the
operands staged through shared memory and the intrinsic path's part (``path_schedules``), the
k-loop software-pipelined, split-K's sum kernel and fp32 input's cast kernel.  A
warp-specialized config's kernel is written as CUDA instead (``warp_specialized``).

The kernel's arguments are (A's tensor, B's tensor, *epilogue inputs, C's tensor,
*workspaces) (conv2d: data, weight, [scale, bias, residual,] out): the workspaces
(``workspaces``) are buffers the caller allocates once.  fp32 input (``dtype=float32``) is
first cast to fp16 copies of the inputs (workspaces) by one vectorised kernel; the GEMM kernel
then reads those copies and is the fp16 workload's kernel, instruction for instruction.
"""

from __future__ import annotations

import math

import tvm

from ...core import builtin_tasks
from ...workloads.dense import DenseWorkload
from .compute import gemm_compute, gemm_schedule  # noqa: F401 (gemm_compute: the CPU twins' compute)
from .gemm import GemmView
from .intrinsic_paths import get as intrinsic_path
from .knobs import TcGemmConfig
from .packing import pack_groups
from .path_schedules import drain_after
from .pdl import compile_with_pdl
from .template import PASS_CONFIG, TC_GEMM
from .views import conv2d_view, dense_view
from .warp_specialized.kernel import kernel_module
from ...workloads.conv2d import Conv2dWorkload


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


@TC_GEMM.schedules(builtin_tasks.CONV2D.name)
def schedule_conv2d(workload: Conv2dWorkload, config: TcGemmConfig) -> tvm.IRModule:
    """The scheduled TensorIR module of one (workload, config)."""
    return schedule_gemm(conv2d_view(workload), config)


@TC_GEMM.schedules(builtin_tasks.DENSE.name)
def schedule_dense(workload: DenseWorkload, config: TcGemmConfig) -> tvm.IRModule:
    """``schedule_conv2d`` of a dense workload."""
    return schedule_gemm(dense_view(workload), config)


def schedule_gemm(view: GemmView, config: TcGemmConfig, pdl: bool = False) -> tvm.IRModule:
    """The scheduled TensorIR module of one GEMM view and config: everything below reads
    the GEMM (blocks "A", "B", "C" and the output's) and the view, never the task's workload.
    A warp-specialized config's kernel is written as CUDA instead (``warp_specialized``; with
    ``pdl``, its variant that waits for the kernels before it: ``tc_gemm.pdl``).  group_pack > 1:
    the GEMMs of the view's packed groups (``packing``)."""
    view = pack_groups(view, config.group_pack)
    if config.warp_specialized:
        return kernel_module(view, config, pdl)
    sch = gemm_schedule(view, config)
    gemm = sch.get_sblock("C")
    out_block = sch.get_sblock(view.c.tensor)
    if config.split_k == 1 and view.groups > 1:
        # The output block iterates (group, row, col) already; a group's GEMM per blockIdx.z.
        z, i, j, kk = sch.get_loops(gemm)
        sch.bind(z, "blockIdx.z")
    elif config.split_k == 1:
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
    ko, ki = path.schedule(sch, gemm, (i, j, kk), config, inline_out=inline_out, b_layout=view.b.layout,
                           dtype=view.operand_dtype)

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
    if view.dtype != view.operand_dtype:
        _schedule_input_cast(sch, view)
    if config.wgmma_in_flight:
        return drain_after(sch, ko, config)
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


@TC_GEMM.lowers(builtin_tasks.CONV2D.name)
def lower_conv2d(workload: Conv2dWorkload, config: TcGemmConfig, target, pdl: bool = False):
    """Schedule and compile to a TVM Executable (CUDA source inside, not yet nvcc-compiled)."""
    return lower_gemm(conv2d_view(workload), config, target, pdl)


@TC_GEMM.lowers(builtin_tasks.DENSE.name)
def lower_dense(workload: DenseWorkload, config: TcGemmConfig, target, pdl: bool = False):
    """``lower_conv2d`` of a dense workload: the same template on its view."""
    return lower_gemm(dense_view(workload), config, target, pdl)


def lower_gemm(view: GemmView, config: TcGemmConfig, target, pdl: bool = False):
    """``lower_conv2d`` of any task's GEMM view: a task's template is this on its view.  ``pdl``
    (sm_90+): every kernel of the module launched with Programmatic Dependent Launch and waiting
    for the kernels before it (``tc_gemm.pdl``); off, the build is exactly what it was without the
    option."""
    mod = schedule_gemm(view, config, pdl)
    with tvm.transform.PassContext(opt_level=3, config=PASS_CONFIG):
        if pdl:  # a TIR kernel's waits come from the build's pass, the warp-specialized one's from its source
            return compile_with_pdl(mod, target, waits=not config.warp_specialized)
        return tvm.compile(mod, target)
