"""The warp-specialized wgmma kernel (``warp_specialized=1``): a kernel the package writes as
CUDA and TVM launches.

Why not a TensorIR schedule: TVM 0.27's software pipeline synchronises every k-step with a
block barrier and issues the copies from the same warps that issue the wgmmas; on the H100
the tuned tutorial kernel spent a third of its stalls at those barriers and kept the tensor
pipe 65% busy, against 91% for cuDNN's warp-specialized kernel (ncu).  Here
the roles are split and meet only on mbarriers:

- the producer (``pipeline``: the TMA / mbarrier stage ring) loads the A and B tiles of k-step
  kt into stage kt % stages: one thread issues
  TMA boxes (128-byte swizzle, bytes counted on the stage's *full* mbarrier) for B, and for A
  where its tile is a box of the data: dense, 1x1 unpadded stride-1 convs (a matrix box) and
  convs tiled by whole output rows (``gemm.box_tile``: one 4-D box per filter tap, or per
  tap and output row with the stride as TMA's traversal stride, the padding read as TMA's
  out-of-bounds zeros); with ``tma_im2col``, any conv whose k-steps stay within one tap: one
  box of block_m consecutive output pixels in TMA's im2col mode (map encoded by
  ``tensormap``).  Other convs' A is gathered by the whole
  producer warpgroup (threads 0-127) with 16-byte ``cp.async`` (zero-filled in the padding)
  and ``cp.async.mbarrier.arrive.noinc``.  A stage is refilled once its *empty* barrier says
  every consumer thread is done with it;
- each consumer warpgroup (``mainloop``; ``block_col_warps`` of them, ``warp_col_tiles * 16`` columns each,
  ``warp_row_tiles`` 64-row slabs; with ``consumers_along_m`` half the slabs and all
  ``block_n`` columns, one m64n256 for a 128 x 256 block) waits on *full*, issues the package's own wgmma calls
  (``wgmma_source``: same shared layouts, descriptors and accumulators as the
  ``wgmma`` path) and arrives on *empty*; with ``wgmma_in_flight`` a step's group runs on
  while the next step is waited for, and the stage of step kt - 1 is released after step kt
  is issued;
- the consumers (``epilogue``) store their accumulators straight from registers (two adjacent columns a
  store), bounds-checked at the matrix edges, after the task's fused epilogue (``fused_pair``:
  scale, bias, residual, activation, on the pair in registers); or with ``tma_store`` through shared memory:
  64-row x 128-byte chunks in two swizzled staging buffers a warpgroup, each stored by one
  thread with a TMA bulk store that runs on under the next chunk and the next tile;
- with ``multicast_b`` blocks pair up in clusters of 2 along M: each loads half of B's boxes
  into both blocks' stages (TMA multicast) and a stage is refilled once both blocks' consumer
  warps have released it (a remote mbarrier arrive);
- ``tile_scheduler``: which tiles a block computes, in groups of 8 M tiles for L2 reuse; with
  ``warp_specialized=2`` a persistent block per SM walks the tiles, the stage ring running on
  across them (the SM count is the device's, read by the host code at launch: ``tvm_module``); with ``ping_pong`` (persistent) two consumer warpgroups, each computing whole
  tiles, take the block's tiles in turn: one stores its tile while the other's wgmmas run, and a
  named barrier hands the main loop over, which also keeps each one's mbarrier phases in step.

- with ``swap_ab`` (a small-M dense with an (N, K) weight) the kernel is given the task's GEMM
  swapped, C^T = B^T A^T (``swap.swapped``: a ``GemmView`` transformation): the weight rows are
  the wgmma's M side, swap_ab tokens its n, on a ring 4 x stages deep; the layout, boxes, pipeline
  and main loop are the same code, the tensor maps are encoded from the task's tensors in the
  kernel's order (``tvm_module``), and only the epilogue's store knows (one lane exchange makes
  each pair two adjacent output features of one token, stored into C as unswapped).

A gathered A's addresses come from the task's ``GemmView`` index map evaluated on C
expressions (``boxes.CExpr``), so conv2d's im2col and dense are one generator.
Shared tiles use the 128-byte swizzle: 16-byte chunk c of 128-byte row r at c ^ (r % 8).

The modules: ``layout`` (what a config makes of a block, for every emitter), ``boxes`` (the
operands' addresses and tensor-map boxes), the emitters ``pipeline``, ``tile_scheduler``,
``mainloop`` and ``epilogue`` (side by side: none imports another), ``kernel`` (``plan``: the
emitters composed into the device function; ``kernel_module``: with ``tvm_module``'s PrimFunc,
what TVM compiles).  The starting tilings are the template's (``starting_tilings``).  The CUDA
that no config changes is in the ``.cuh`` files beside them.  This face only hands names on:
the package's own modules import the module that defines a name.
"""

from .boxes import CExpr, Im2colBox, TmaBox, _element, c_store_box, tma_boxes
from .epilogue import fused_pair
from .kernel import KernelPlan, kernel_module, plan, smem_bytes
from .layout import ROW_BYTES
from .pipeline import CHUNK, WAIT_LIMIT_NS
from .tile_scheduler import RASTER_GROUP
from ..starting_tilings import STARTING_TILINGS, starting_configs  # the package's names before they moved

__all__ = ["CExpr", "Im2colBox", "TmaBox", "c_store_box", "tma_boxes", "fused_pair", "KernelPlan", "plan", "smem_bytes",
           "ROW_BYTES", "CHUNK", "WAIT_LIMIT_NS", "RASTER_GROUP", "STARTING_TILINGS",
           "starting_configs", "kernel_module"]
