"""The kernel of one GEMM view and config, composed of the emitters, which stand side by side (each
reads the block's layout and boxes, none another emitter: what one needs of another, this module
hands it): the device function's signature and shared memory (``pipeline.ring``), then the two
roles.  The producer warpgroup (threads 0-127) runs the stage ring's fill loop (``pipeline``) over
the block's tiles (``tile_scheduler``); each consumer warpgroup runs the main loop (``mainloop``)
over its tiles, waiting on and releasing the ring's stages, and stores them (``epilogue``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..gemm import GemmView
from ..operand_layout import COL_MAJOR
from ..knobs import PRODUCER_THREADS, WS_CONSUMER_REGS, WS_PRODUCER_REGS, TcGemmConfig
from . import epilogue, mainloop, pipeline, tile_scheduler, tvm_module
from .boxes import Im2colBox, TmaBox
from .layout import BlockLayout, block_layout

NAME = "tc_ws_gemm"  # the device function


@dataclass(frozen=True)
class KernelPlan:
    """What the TVM wrapper needs besides the source: the launch, the shared memory and the boxes
    of the tensor maps it encodes."""

    name: str
    source: str
    grid: tuple[int, int]  # persistent: (its tiles, 1), of which it launches ``launch_grid``'s
    threads: int
    smem_bytes: int
    a_box: TmaBox | Im2colBox | None  # the tensor maps' boxes (``tma_boxes``): A's, or None (gathered)
    b_box: TmaBox | None  # B's (each of a (K, N) B's atoms is such a box), or None (fp32: converted)
    cluster: int = 1  # blocks of a cluster along x (split-K)
    c_box: TmaBox | None = None  # tma_store: C's tensor map and box (``c_store_box``)
    persistent: bool = False  # warp_specialized=2: blocks walk the tiles (blockIdx.x, + gridDim.x, ...)
    swapped: bool = False  # swap_ab: a_box is the task's B's (the weight's), b_box its A's

    def launch_grid(self, sm_count: int) -> tuple[int, int]:
        """The grid launched on a GPU of ``sm_count`` SMs: a persistent kernel's is a block per SM
        (fewer where there are fewer tiles), which its host code reads of the device at launch
        (``tvm_module``); any other's is ``grid``.  The source is the same either way."""
        gx, gy = self.grid
        return (min(gx, sm_count), gy) if self.persistent else self.grid


def smem_bytes(config: TcGemmConfig) -> int:
    """Dynamic shared memory of a warp-specialized kernel (``knobs.warp_specialized_smem``: the
    stages' A and B tiles, a full and an empty mbarrier per stage, 1024 bytes of alignment slack:
    the swizzle pattern repeats every 8 rows, so the tiles start 1024-aligned; tma_store's staging
    buffers after the stages)."""
    return config.smem_bytes


@functools.lru_cache(maxsize=256)
def plan(view: GemmView, config: TcGemmConfig, pdl: bool = False) -> KernelPlan:
    """The kernel of one GEMM view and warp-specialized config, for any GPU of its arch: nothing
    of it depends on the GPU's SM count (a persistent kernel reads it when it launches).  ``pdl``:
    it waits for the kernels before it after initialising its barriers (``pipeline.init``)."""
    lay = block_layout(view, config)
    source = _head(lay)
    if not lay.persistent:
        source += tile_scheduler.block_tile(lay)
    consumer = _persistent_consumer(lay) if lay.persistent else _consumer(lay)
    source += pipeline.init(lay, pdl) + _producer(lay) + _consumer_start(lay) + consumer
    b_box = lay.b_boxes[0] if lay.b_boxes else None  # (none: fp32 input, converted)
    return KernelPlan(NAME, source, tile_scheduler.grid(lay), PRODUCER_THREADS * (1 + lay.warpgroups),
                      smem_bytes(config), lay.a_box, b_box, 2 if lay.multicast else lay.split, lay.c_box,
                      lay.persistent, lay.swapped)


def kernel_module(view: GemmView, config: TcGemmConfig, pdl: bool = False):
    """The IRModule TVM compiles for one GEMM view and warp-specialized config: ``plan``'s kernel
    launched by ``tvm_module``'s PrimFunc (``pdl``: the kernel that waits; its launch is tagged
    by the build, ``tc_gemm.pdl``)."""
    return tvm_module.ir_module(plan(view, config, pdl), view)


def _head(lay: BlockLayout) -> str:
    """The device functions the kernel calls, a comment that names its variant, its signature, and
    the stage ring's shared memory."""
    view, config = lay.view, lay.config
    m, n, k = view.shape
    fused = view.epilogue
    a_by = "cp.async" if lay.gather else "TMA"
    a_by += " (row boxes)" if lay.row_boxes else " (spatial tile)" if lay.tile else " (im2col)" if lay.im2col else ""
    variant = "".join(note for on, note in (
        (lay.in_flight, ", groups in flight"), (lay.persistent, ", persistent"),
        (lay.ping_pong, ", ping-pong (2 consumer warpgroups, whole tiles in turn)"),
        (lay.split > 1, f", split-K over a cluster of {lay.split}"), (lay.multicast, ", B multicast to a pair along M"),
        (lay.c_box, ", C by TMA stores"), (config.setmaxnreg, ", registers moved to the consumers (setmaxnreg)"),
        (lay.swapped, ", swap-AB: the task's C^T = B^T A^T, stored into C transposed"),
        (fused, f", epilogue {fused}")) if on)
    along = " along M" if lay.along_m else " along K (k-steps in turn)" if lay.along_k else ""
    shares = f"{lay.consumers} consumer warpgroup(s){along} of {lay.slabs} slab(s) x {lay.n_wg} columns"
    b_order = "[n][k]" if view.b.layout == COL_MAJOR else "[k][n] in 64-column atoms"
    map_c = ", unsigned long long map_c" if lay.c_box else ""
    a_t, b_t = (lay.b_t, lay.in_t) if lay.swapped else (lay.in_t, lay.b_t)  # the task's A and B (swapped: unread)
    if lay.convert:
        a_t = b_t = "float"
    functions = mainloop.device_functions(lay) + pipeline.helpers(lay) + epilogue.helpers(lay)
    start = tile_scheduler.k_steps(lay) + pipeline.ring(lay, epilogue.staging_bytes(lay))
    return f"""{functions}
// Warp-specialized wgmma GEMM (tc_autotune.warp_specialized): C[{m}, {n}] = A[{m}, {k}] B[{k}, {n}],
// {"A and B by fp32 loads converted to fp16" if lay.convert else f"A by {a_by}, B by TMA"}; block {lay.bm} x {lay.bn}, {shares},
// {lay.stages} stages, B {b_order}{variant}.
__device__ __forceinline__ void {NAME}(const {a_t}* __restrict__ A, const {b_t}* __restrict__ B,{epilogue.params(lay)}
                                        {lay.out_t}* __restrict__ C, unsigned char* smem_raw,
                                        unsigned long long map_a, unsigned long long map_b{map_c}) {{{start}
  const int tid = threadIdx.x;"""


def _producer(lay: BlockLayout) -> str:
    """The producer warpgroup: with setmaxnreg it hands registers back before its idle threads
    exit; the copying threads run the ring's fill loop over the block's tiles."""
    give_back = f"""
    asm volatile("setmaxnreg.dec.sync.aligned.u32 {WS_PRODUCER_REGS};" ::: "memory");  // registers to the consumers"""
    copying, why = pipeline.producers(lay)
    first_k = tile_scheduler.first_k(lay)
    if lay.persistent:
        tiles, coords = tile_scheduler.producer_tiles(lay), tile_scheduler.tile_coords(lay, "      ")
        loop = f"""
    int it = 0;
    {tiles}{coords}{pipeline.producer_loop(lay, "it", first_k, "      ")}
    }}"""
    else:
        loop = pipeline.producer_loop(lay, "kt", first_k, "    ")
    return f"""
  if (tid < {PRODUCER_THREADS}) {{{give_back if lay.config.setmaxnreg else ""}
    if (!({copying})) return;  // {why}{loop}{pipeline.producer_end(lay)}
    return;
  }}"""


def _consumer_start(lay: BlockLayout) -> str:
    """The consumer warpgroups' first lines: with setmaxnreg they take the producer's registers
    before their first instruction that could use them; wg: the warpgroup's number."""
    take = ""
    if lay.config.setmaxnreg:
        take = f"""  asm volatile("setmaxnreg.inc.sync.aligned.u32 {WS_CONSUMER_REGS};" ::: "memory");  // the producer's registers
"""
    return f"""
{take}  const int wg = tid / 128 - 1;"""


def _consumer(lay: BlockLayout) -> str:
    """A consumer warpgroup of a block that computes one tile (split-K: one K slice of it)."""
    store = (epilogue.k_sum(lay) + epilogue.split_partials(lay) + epilogue.store(lay, "  ") + epilogue.end(lay)
             + pipeline.cluster_end(lay))
    return f"""
  {mainloop.accumulators(lay)}{mainloop.zero(lay, "  ")}{epilogue.declare(lay)}{_k_loop(lay, "kt", "  ")}
{mainloop.drain(lay, "  ")}
  // Accumulator slot s of lane l in a 16x16 fragment: row 8 * (s % 4 / 2) + l / 4, column
  // 8 * (s / 4) + 2 * (l % 4) + s % 2 (the m16n8k16 layout wgmma writes).
  const int warp = tid / 32 % 4, lane = tid % 32;{store}
}}
"""


def _persistent_consumer(lay: BlockLayout) -> str:
    """A consumer warpgroup of a persistent block: the main loop and the store of each of its
    tiles, the ring's steps running on across them.  With groups in flight the tile's last stage is
    released after the drain.  (Without a drain its line stays, as two spaces: the code is
    fingerprinted.)"""
    sched, i = tile_scheduler, "    "
    last_stage = ""
    if lay.in_flight:
        last_stage = f"\n{i}{pipeline.release(lay, '(it - 1) % STAGES')}  // the tile's last stage"
    tile_start = sched.tile_coords(lay, i) + mainloop.zero(lay, i) + sched.wait_turn(lay)
    main_loop = _k_loop(lay, "it", i) + sched.hand_over(lay)
    return f"""
  const int warp = tid / 32 % 4, lane = tid % 32;
  {mainloop.accumulators(lay)}
  int it = {sched.consumer_first_step(lay)};{epilogue.declare(lay)}
  {sched.consumer_tiles(lay)}{tile_start}{main_loop}
  {mainloop.drain(lay, "  ")}{last_stage}{epilogue.store(lay, i)}{sched.skip_turn(lay)}
  }}{epilogue.end(lay)}
}}
"""


def _k_loop(lay: BlockLayout, step: str, indent: str) -> str:
    """The consumers' main loop on the stage ring: ``mainloop``'s k-loop, ``pipeline``'s waits and releases."""
    return mainloop.k_loop(lay, step, indent, pipeline.consumer_acquire, pipeline.release)
