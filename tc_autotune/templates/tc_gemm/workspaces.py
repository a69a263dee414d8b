"""The buffers a kernel of the template takes after its output, which its caller allocates once
(TVM would allocate an intermediate global buffer on every call): split-K's fp32 partial sums and
fp32 input's fp16 copies.  No TVM: the template's ``workspaces`` (``core.template.Template``), what
a kernel object and the measurer allocate."""

from __future__ import annotations

from .knobs import TcGemmConfig
from .rules import round_up as _round_up
from .packing import pack_groups
from .views import view_of


def workspace_shape(workload, config: TcGemmConfig) -> tuple[int, int, int] | None:
    """Shape of the fp32 split-K partial sums (None: no split, or the warp-specialized kernel's,
    whose K slices sum in their cluster's shared memory); the first of ``workspaces``.
    ``workload``: a task's workload or its GemmView."""
    if config.split_k == 1 or config.warp_specialized:
        return None
    view = pack_groups(view_of(workload), config.group_pack)  # a grouped view's slices are each GEMM's
    return (config.split_k * view.groups, _round_up(view.m, config.block_m), _round_up(view.n, config.block_n))


def workspaces(workload, config: TcGemmConfig) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of each buffer the kernel takes after its output, in order: the fp32
    split-K partial sums (split_k > 1), then for fp32 input the fp16 copies of the A and B
    tensors (conv2d: data and weight) that the cast kernel writes and the GEMM kernel reads (not
    the warp-specialized kernel's: its producer converts the fp32 tensors as it loads them).
    The caller allocates them (once; their contents need not survive between calls)."""
    view = view_of(workload)
    out = []
    split = workspace_shape(view, config)
    if split is not None:
        out.append((split, "float32"))
    if view.dtype != view.operand_dtype and not config.warp_specialized:  # fp32 input, cast by a kernel first
        out += [(operand.shape, view.operand_dtype) for operand in view.inputs]
    return out
