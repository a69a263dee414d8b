"""The warp-specialized wgmma kernel (``warp_specialized=1``): a kernel the package writes as
CUDA and TVM launches.

Why not a TensorIR schedule: TVM 0.27's software pipeline synchronises every k-step with a
block barrier and issues the copies from the same warps that issue the wgmmas; on the H100
the tuned tutorial kernel spent a third of its stalls at those barriers and kept the tensor
pipe 65% busy, against 91% for cuDNN's warp-specialized kernel (ncu).  Here
the roles are split and meet only on mbarriers:

- the producer loads the A and B tiles of k-step kt into stage kt % stages: one thread issues
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
- each consumer warpgroup (``block_col_warps`` of them, ``warp_col_tiles * 16`` columns each,
  ``warp_row_tiles`` 64-row slabs; with ``consumers_along_m`` half the slabs and all
  ``block_n`` columns, one m64n256 for a 128 x 256 block) waits on *full*, issues the package's own wgmma calls
  (``intrinsics._wgmma_source``: same shared layouts, descriptors and accumulators as the
  ``wgmma`` path) and arrives on *empty*; with ``wgmma_in_flight`` a step's group runs on
  while the next step is waited for, and the stage of step kt - 1 is released after step kt
  is issued;
- the consumers store their accumulators straight from registers (two adjacent columns a
  store), bounds-checked at the matrix edges, after the task's fused epilogue (``fused_pair``:
  scale, bias, residual, activation, on the pair in registers); or with ``tma_store`` through shared memory:
  64-row x 128-byte chunks in two swizzled staging buffers a warpgroup, each stored by one
  thread with a TMA bulk store that runs on under the next chunk and the next tile;
- with ``multicast_b`` blocks pair up in clusters of 2 along M: each loads half of B's boxes
  into both blocks' stages (TMA multicast) and a stage is refilled once both blocks' consumer
  warps have released it (a remote mbarrier arrive);
- with ``ping_pong`` (persistent) two consumer warpgroups, each computing whole tiles, take the
  block's tiles in turn: one stores its tile while the other's wgmmas run, and a named barrier
  hands the main loop over, which also keeps each one's mbarrier phases in step.

A gathered A's addresses come from the task's ``GemmView`` index map evaluated on C
expressions (``CExpr``), so conv2d's im2col and dense are one generator.
Shared tiles use the 128-byte swizzle: 16-byte chunk c of 128-byte row r at c ^ (r % 8).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ...backends.cuda import tensormap
from ...workloads.epilogue import GELU_C, Epilogue
from ...workloads.epilogue import input_specs as epilogue_input_specs
from .gemm import (COL_MAJOR, OUT_BYTES, GemmView, Im2colWindow, RowMajor, RowTile, a_is_matrix, box_tile,
    im2col_window)
from .intrinsics import WGMMA_ATOM, WGMMA_K, WGMMA_M, _wgmma_name, _wgmma_source, wgmma_drain_source
from .knobs import (PRODUCER_THREADS, WS_CONSUMER_REGS, WS_MAX_CLUSTER, WS_MAX_WGMMA_N, WS_PRODUCER_REGS,
    WS_ROW_BYTES, WS_STAGING_BUFFERS, WS_STAGING_BYTES, WS_STAGING_ROWS, Conv2dConfig)

ROW_BYTES = WS_ROW_BYTES  # a 64-element fp16 row: the swizzle span
CHUNK = 8  # fp16 elements per 16-byte cp.async
PERSISTENT_BLOCKS = 132  # warp_specialized=2: one block per SM of an H100 SXM / H200
RASTER_GROUP = 8  # M tiles per group of the block order (L2 reuse, as CUTLASS's and Triton's swizzle)
WAIT_LIMIT_NS = 2_000_000_000  # an mbarrier wait that never completes traps instead of hanging


class CExpr:
    """An int C expression built with Python operators, so the view's index maps (plain
    ``+ - * // %`` and comparisons) write C.  ``//`` and ``%`` become C's ``/`` and ``%``:
    the maps apply them to non-negative values only (rows, columns, their quotients)."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    def _op(self, op: str, other, swap: bool = False) -> "CExpr":
        left, right = (other, self) if swap else (self, other)
        return CExpr(f"({left} {op} {right})")

    def __add__(self, o): return self._op("+", o)
    def __radd__(self, o): return self._op("+", o, True)
    def __sub__(self, o): return self._op("-", o)
    def __rsub__(self, o): return self._op("-", o, True)
    def __mul__(self, o): return self._op("*", o)
    def __rmul__(self, o): return self._op("*", o, True)
    def __floordiv__(self, o): return self._op("/", o)
    def __mod__(self, o): return self._op("%", o)
    def __lt__(self, o): return self._op("<", o)
    def __le__(self, o): return self._op("<=", o)
    def __gt__(self, o): return self._op(">", o)
    def __ge__(self, o): return self._op(">=", o)


def _flat_offset(index, shape) -> str:
    """The element offset of a tensor index (ints and CExprs) in a contiguous tensor."""
    terms, stride = [], 1
    for i, extent in reversed(list(zip(index, shape))):
        if not (isinstance(i, int) and i == 0):
            terms.append(f"(long long)({i}) * {stride}" if stride != 1 else f"(long long)({i})")
        stride *= extent
    return " + ".join(reversed(terms)) or "0"


def _element(operand, rows: int, cols: int, row: str, col: str) -> tuple[str, str]:
    """(C offset, C in-bounds condition) of matrix element [row, col] of an input operand."""
    index, inside = operand.map.element(CExpr(row), CExpr(col))
    conditions = [f"({row}) < {rows}", f"({col}) < {cols}", *map(str, inside)]
    return _flat_offset(index, operand.shape), " && ".join(conditions)


@dataclass(frozen=True)
class KernelPlan:
    """What the TVM wrapper needs besides the source: the launch, the shared memory and the boxes
    of the tensor maps it encodes."""

    name: str
    source: str
    grid: tuple[int, int]
    threads: int
    smem_bytes: int
    a_box: TmaBox | Im2colBox | None  # the tensor maps' boxes (``tma_boxes``): A's, or None (gathered)
    b_box: TmaBox  # B's (each of a (K, N) B's atoms is such a box)
    cluster: int = 1  # blocks of a cluster along x (split-K)
    c_box: TmaBox | None = None  # tma_store: C's tensor map and box (``c_store_box``)


@dataclass(frozen=True)
class TmaBox:
    """One operand's tensor map (innermost dimension first) and the box a k-step loads.
    ``coords``: the C expressions of the box's start (from k0, m0/n0 and the tile's image
    and output row), ``bytes``: what lands in shared memory per box."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, dims 1.. (dim 0 is contiguous)
    box: tuple[int, ...]
    coords: tuple[str, ...]
    traversal: tuple[int, ...] | None = None  # TMA's element strides (a strided conv's), 1s if None

    @property
    def element_strides(self) -> tuple[int, ...]:
        return self.traversal or (1,) * len(self.box)

    @property
    def bytes(self) -> int:
        """What lands in shared memory: every traversal-th element of the box, per dimension."""
        return math.prod(-(-b // t) for b, t in zip(self.box, self.element_strides)) * 2


@dataclass(frozen=True)
class Im2colBox:
    """A conv's A as a tensor map in TMA's im2col mode (``tma_im2col``): the data's (c, w, h, n)
    dims and byte strides, and a box of ``pixels`` consecutive output pixels x 64 channels of
    one filter tap.  ``coords``: the channel and the first pixel's first-tap input (w, h) and
    image; ``offsets``: the tap's (w, h) shift; ``window``: where TMA walks the pixels."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    pixels: int
    window: Im2colWindow
    coords: tuple[str, ...]
    offsets: tuple[str, str]

    @property
    def bytes(self) -> int:
        return self.pixels * WGMMA_K * 2

    def encode_args(self) -> tuple[int, ...]:
        """The integers ``tensormap.encode_im2col`` takes after the map and the data pointer."""
        return (*self.dims, *self.strides, *self.window.lower, *self.window.upper, WGMMA_K, self.pixels,
                *self.window.traversal)


def _matrix_box(operand, box_rows: int, col: str, row: str) -> TmaBox:
    """A 64-column box of an operand's tensor seen as a row-major matrix of its last dim."""
    rows, cols = math.prod(operand.shape[:-1]), operand.shape[-1]
    return TmaBox((cols, rows), (cols * 2,), (WGMMA_K, box_rows), (col, row))


def tma_boxes(view: GemmView, config: Conv2dConfig) -> tuple[TmaBox | Im2colBox | None, list[TmaBox]]:
    """(A's box or None: A is gathered with cp.async, B's boxes per k-step).  B is always
    TMA-loaded ((N, K): one box of the tile; (K, N): one per 64-column atom); A is for dense
    and 1x1 unpadded stride-1 convs (a matrix box), for convs with ``tma_im2col`` (an im2col
    box of the block's pixels from ``a_img``, ``a_h``, ``a_w``) and for box-tiled convs
    (``gemm.box_tile``: a 4-D box per tap, or per tap and output row: its coords then name the
    row's image ``row_img`` and output row ``row_oh``)."""
    if view.b.layout == COL_MAJOR:
        b = [_matrix_box(view.b, config.block_n, "k0", "n0")]
    else:
        b = [_matrix_box(view.b, WGMMA_K, f"n0 + {j * WGMMA_ATOM}", "k0")
             for j in range(config.block_n // WGMMA_ATOM)]
    if config.multicast_b:  # each block of the pair loads half of each box's rows for both
        b = [_half_box(box) for box in b]
    if a_is_matrix(view):
        return _matrix_box(view.a, config.block_m, "k0", "m0"), b
    a = view.a.map
    n, h, w, c = view.a.shape
    (sh, sw), (dh, dw), (pad_top, pad_left) = a.stride, a.dilation, a.pad
    dims, strides = (c, w, h, n), (c * 2, w * c * 2, h * w * c * 2)
    if config.tma_im2col:
        window = im2col_window(view)
        if window is None:
            raise ValueError(f"TMA's im2col mode cannot load this conv's A: {view.shape}, {a}")
        step_w, step_h = window.offset_step
        offsets = (f"(k0 / {c}) % {a.kernel_w} * {step_w}", f"(k0 / {c}) / {a.kernel_w} * {step_h}")
        return Im2colBox(dims, strides, config.block_m, window, (f"k0 % {c}", "a_w", "a_h", "a_img"), offsets), b
    tile = box_tile(view, config.block_m)
    if tile is None:
        return None, b
    tap_w = f"(k0 / {c}) % {a.kernel_w} * {dw} - {pad_left}"
    tap_h = f"(k0 / {c}) / {a.kernel_w} * {dh} - {pad_top}"
    if isinstance(tile, RowTile):  # one output row: its input row, every sw-th column
        coords = (f"k0 % {c}", tap_w, f"row_oh * {sh} + {tap_h}", "row_img")
        return TmaBox(dims, strides, (WGMMA_K, tile.width * sw, 1, 1), coords, (1, sw, 1, 1)), b
    coords = (f"k0 % {c}", tap_w, f"oh0 + {tap_h}", "img0")
    return TmaBox(dims, strides, (WGMMA_K, tile.width, tile.rows, tile.images), coords), b


def _half_box(box: TmaBox) -> TmaBox:
    """Half of a 2-D box's rows: block ``cta_rank`` of a multicast pair loads half ``cta_rank``."""
    rows = box.box[1] // 2
    return TmaBox(box.dims, box.strides, (box.box[0], rows), (box.coords[0], f"{box.coords[1]} + cta_rank * {rows}"))


def smem_bytes(config: Conv2dConfig) -> int:
    """Dynamic shared memory of a warp-specialized kernel (``knobs.warp_specialized_smem``: the
    stages' A and B tiles, a full and an empty mbarrier per stage, 1024 bytes of alignment slack:
    the swizzle pattern repeats every 8 rows, so the tiles start 1024-aligned; tma_store's staging
    buffers after the stages)."""
    return config.smem_bytes


@functools.lru_cache(maxsize=256)
def plan(view: GemmView, config: Conv2dConfig) -> KernelPlan:
    """The kernel of one GEMM view and warp-specialized config."""
    m, n, k = view.shape
    bm, bn = config.block_m, config.block_n
    ping_pong = bool(config.ping_pong)  # two warpgroups, each computing whole tiles, take them in turn
    consumers = 1 if ping_pong else config.block_col_warps  # the warpgroups that read a stage
    warpgroups = 2 if ping_pong else consumers
    # Each consumer's share of the block: all its rows and a slice of its columns, or
    # (consumers_along_m) a slice of its rows and all its columns, so one wgmma spans block_n.
    along_m = bool(config.consumers_along_m)
    slabs = config.warp_row_tiles // consumers if along_m else config.warp_row_tiles
    n_wg = bn if along_m or ping_pong else config.warp_col_tiles * 16
    frags = n_wg // 16
    split = config.split_k  # > 1: a cluster of `split` blocks along K, summed in shared memory
    if (bm != config.warp_row_tiles * WGMMA_M or n_wg % WGMMA_ATOM or n_wg > WS_MAX_WGMMA_N
            or view.dtype != "float16" or (along_m and slabs * consumers != config.warp_row_tiles)
            or (split > 1 and (config.warp_specialized != 1 or split > WS_MAX_CLUSTER))
            or (config.multicast_b and (config.warp_specialized != 1 or split > 1))
            or (ping_pong and (config.warp_specialized != 2 or along_m or split > 1))
            or (config.setmaxnreg and warpgroups != 2)):
        raise ValueError(f"not a warp-specialized config for {view.shape}: {config}")
    b_col_major = view.b.layout == COL_MAJOR
    in_flight = bool(config.wgmma_in_flight)
    call = _wgmma_name(n_wg, view.b.layout, in_flight)
    drain_name, drain_source = wgmma_drain_source(slabs * frags)
    out_t = {"float32": "float", "float16": "half"}[view.out_dtype]
    pair_t = {"float32": "float2", "float16": "__half2"}[view.out_dtype]
    pair = "make_float2(v0, v1)" if out_t == "float" else "__floats2half2_rn(v0, v1)"
    if not isinstance(view.c.map, RowMajor):
        raise ValueError("the warp-specialized kernel writes a row-major C")

    a_box, b_boxes = tma_boxes(view, config)
    im2col = isinstance(a_box, Im2colBox)
    tile = box_tile(view, bm) if isinstance(a_box, TmaBox) and len(a_box.box) == 4 else None
    row_boxes = isinstance(tile, RowTile)
    c_box = c_store_box(view) if config.tma_store else None
    if c_box is not None and (tile is not None or split > 1):
        raise ValueError(f"tma_store=1 needs blocks of consecutive rows of C and no split-K: {config}")
    a_bytes, b_bytes = bm * ROW_BYTES, bn * ROW_BYTES
    atom_bytes = WGMMA_K * ROW_BYTES  # a (64 k, 64 n) atom of a (K, N) B
    # TMA: one thread posts the stage's bytes on its full barrier and issues the boxes; B's
    # land as [n][k] rows or 64-column atoms, A's as its K-major rows, all 128-byte swizzled.
    # multicast_b: a cluster of 2 blocks along M (M tiles 2i, 2i + 1, one N tile) shares B: each
    # block loads half of every B box into both blocks' stages, which count the whole B.
    multicast = bool(config.multicast_b)
    half = f" + cta_rank * {b_boxes[0].box[1] * ROW_BYTES}" if multicast else ""
    boxes = [("map_b", f"b_s + {j * atom_bytes}{half}", box) for j, box in enumerate(b_boxes)]
    if a_box is not None and not row_boxes:
        boxes.insert(0, ("map_a", "a_s", a_box))

    def tma_load(tmap: str, dst: str, box: TmaBox | Im2colBox) -> str:
        if isinstance(box, Im2colBox):
            return (f"tma_load_im2col_4d({dst}, {tmap}, &full[stage], {', '.join(box.coords)}, "
                    f"{', '.join(box.offsets)});")
        if multicast and tmap == "map_b":
            return f"tma_load_2d_multicast({dst}, {tmap}, &full[stage], {', '.join(box.coords)}, 0x3);"
        return f"tma_load_{len(box.box)}d({dst}, {tmap}, &full[stage], {', '.join(box.coords)});"

    stage_tx = (sum(box.bytes for _, _, box in boxes) + (tile.rows * a_box.bytes if row_boxes else 0)
                + (sum(box.bytes for box in b_boxes) if multicast else 0))  # the peer's half of B
    loads = "\n        ".join(tma_load(*box) for box in boxes)
    tma_issue = f"""
      if (tid == 0) {{
        mbar_arrive_expect_tx(&full[stage], {stage_tx});
        {loads}
      }}"""
    if row_boxes:  # the producer warp's lanes issue the output rows' boxes (a row past the last
        # image reads zeros; bytes landing before the expect_tx above are allowed, the phase
        # cannot complete until thread 0 has arrived)
        tma_issue += f"""
      for (int r = tid; r < {tile.rows}; r += 32) {{
        const int row_img = (m_tile * {tile.rows} + r) / {tile.height}, row_oh = (m_tile * {tile.rows} + r) % {tile.height};
        {tma_load("map_a", f"a_s + r * {tile.width * ROW_BYTES}", a_box)}
      }}"""
    # A gathered: the producer warpgroup's 16-byte cp.async, thread t copying chunks t, t + 128, ...
    gather = a_box is None
    a_off, a_ok = _element(view.a, m, k, "m", "k")
    a_copy = "" if not gather else f"""
      #pragma unroll
      for (int j = 0; j < {bm * CHUNK // PRODUCER_THREADS}; ++j) {{  // A rows, K-major
        const int r = tid / {CHUNK} + {PRODUCER_THREADS // CHUNK} * j, c = tid % {CHUNK};
        const int m = m0 + r, k = k0 + c * {CHUNK};
        copy16(a_s + r * {ROW_BYTES} + ((c ^ (r & 7)) << 4), A, {a_ok}, {a_off});
      }}
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(smem_u32(&full[stage])) : "memory");"""
    producer_end = """
    asm volatile("cp.async.wait_all;" ::: "memory");""" if gather else ""
    full_count = (PRODUCER_THREADS if gather else 0) + 1
    producers = "tid < " + (str(PRODUCER_THREADS) if gather else "32" if row_boxes else "1")
    producer_note = ("TMA only: a warp, its lanes issue the rows' boxes" if row_boxes
                     else "TMA only: one thread issues every copy")
    # The block's rows: m0.. (m_end: the last stored + 1); a spatial tile's are whole output
    # rows of one image (or whole images), from its image img0 and output row oh0; a row
    # tile's are C's rows m0 .. m0 + rows * width.
    if tile is None:
        block_rows = f"const int m0 = m_tile * {bm}, m_end = {m};"
        if im2col:  # the block's first output pixel: its image, and its first tap's input row and column
            im, (sh, sw), (pad_top, pad_left) = view.a.map, view.a.map.stride, view.a.map.pad
            hw = im.out_height * im.out_width
            block_rows += (f"\n  const int a_img = m0 / {hw}, a_h = m0 % {hw} / {im.out_width} * {sh} - {pad_top}, "
                           f"a_w = m0 % {im.out_width} * {sw} - {pad_left};")
    elif row_boxes:
        block_rows = f"const int m0 = m_tile * {tile.pixels}, m_end = min(m0 + {tile.pixels}, {m});"
    else:
        hw = tile.height * tile.width
        block_rows = (f"const int img0 = m_tile / {tile.tiles_per_image} * {tile.images}, "
                      f"oh0 = m_tile % {tile.tiles_per_image} * {tile.rows};\n"
                      f"  const int m0 = img0 * {hw} + oh0 * {tile.width};\n"
                      f"  const int m_end = min(img0 + {tile.images}, {tile.batch}) * {hw} < m0 + {tile.pixels} ? "
                      f"min(img0 + {tile.images}, {tile.batch}) * {hw} : m0 + {tile.pixels};")
    # The step's calls, one per slab, then the release of the stage its wgmma no longer reads:
    # with groups in flight, step kt - 1's (its groups are done once step kt's calls return).
    issue = f"""
      #pragma unroll
      for (int s = 0; s < {slabs}; ++s)
        {call}(acc, s * {frags}, a_s + s * {WGMMA_M * ROW_BYTES}, b_s, {atom_bytes});"""
    # A stage is free once the consumers are done with it; with multicast, those of both blocks
    # (the peer's producer fills it too): lane 0 of each warp arrives on both blocks' barriers.
    release_call = "release_stage_pair" if multicast else "mbar_arrive"
    if in_flight:
        issue += f"""
      if (kt > 0) {release_call}(&empty[(kt - 1) % STAGES]);  // step kt - 1's groups are done"""
        drain = f"  {drain_name}(acc);"
    else:
        issue += f"""
      {release_call}(&empty[stage]);"""
        drain = ""
    # two adjacent columns a store; with an odd N, element by element (pairs are misaligned)
    if n % 2 == 0:
        store = f"""
          *reinterpret_cast<{pair_t}*>(C + (long long)m * {n} + n) = {pair};"""
    else:
        store = f"""
          C[(long long)m * {n} + n] = ({out_t})v0;
          if (n + 1 < {n}) C[(long long)m * {n} + n + 1] = ({out_t})v1;"""
    # Consumer wg's tiles in the stage: its slabs of A and all of B, or all of A and its columns of B.
    if along_m:
        consumer_tiles = f"""const unsigned char* a_s = smem + stage * STAGE_BYTES + wg * {slabs * WGMMA_M * ROW_BYTES};
      const unsigned char* b_s = smem + stage * STAGE_BYTES + A_BYTES;"""
    elif ping_pong:  # each warpgroup reads the whole stage of its own tile
        consumer_tiles = """const unsigned char* a_s = smem + stage * STAGE_BYTES;
      const unsigned char* b_s = a_s + A_BYTES;"""
    else:
        b_wg_offset = n_wg * ROW_BYTES if b_col_major else n_wg // WGMMA_ATOM * atom_bytes
        consumer_tiles = f"""const unsigned char* a_s = smem + stage * STAGE_BYTES;
      const unsigned char* b_s = a_s + A_BYTES + wg * {b_wg_offset};"""
    name = "tc_ws_gemm"
    kt = math.ceil(k / WGMMA_K)
    persistent = config.warp_specialized == 2
    grid_m, grid_n = (tile.grid_m if tile else math.ceil(m / bm)), math.ceil(n / bn)
    if multicast:  # whole pairs: an odd last M tile gets a partner past M that loads and stores nothing
        grid_m += grid_m % 2
    # Blocks in groups of RASTER_GROUP M tiles, N fastest within a group: a wave of blocks shares
    # a few A row panels and B column panels in L2 instead of sweeping all of A for each N tile.
    linear, rows_m, cols_n = ("tile", grid_m, grid_n) if persistent else ("linear", "(int)gridDim.x", "gridDim.y")
    # The k-steps this block runs (split-K: its slice), its place in the block order, its
    # accumulator pair's value in the epilogue (split-K: summed over the cluster's blocks).
    fused = view.epilogue
    pair_float = "float" if fused else "const float"  # the fused epilogue updates the pair
    if split == 1:
        k_steps = f"constexpr int STAGES = {config.stages}, KT = {kt};"
        first_k, linear_of_block = "kt", "blockIdx.y * gridDim.x + blockIdx.x"
        pair_value = f"{pair_float} v0 = acc[s * {frags} + f].x[p], v1 = acc[s * {frags} + f].x[p + 1];"
        cluster_end = ("\n  cluster_sync();  // the peer may still arrive on this block's barriers until both are done"
                       if multicast else "")
    else:  # blockIdx.x: the M tile's cluster, then the block's K slice in it
        k_steps = (f"constexpr int STAGES = {config.stages}, SLICE = {-(-kt // split)};  // k-steps per K slice\n"
                   f"  const int split_rank = blockIdx.x % {split}, kt_begin = split_rank * SLICE, "
                   f"KT = min(SLICE, {kt} - kt_begin);")
        first_k, linear_of_block, rows_m = "(kt_begin + kt)", f"blockIdx.y * {grid_m} + blockIdx.x / {split}", grid_m
        pair_value = _split_sum(split, frags, consumers * 128)
        cluster_end = "\n  cluster_sync();  // the cluster's partials stay in shared memory until every block has summed"

    def coords(indent: str) -> str:
        """The block's tile (m_tile, n_tile) from its place in the block order, then its rows."""
        return f"""const int per_group = {RASTER_GROUP} * {cols_n};
  const int first_m = {linear} / per_group * {RASTER_GROUP};
  const int group_m = min({rows_m} - first_m, {RASTER_GROUP});
  const int m_tile = first_m + {linear} % per_group % group_m, n_tile = {linear} % per_group / group_m;
  {block_rows}
  const int n0 = n_tile * {bn};""".replace("\n  ", "\n  " + indent)
    head = f"""
#include <mma.h>
{_wgmma_source(n_wg, view.b.layout, in_flight)}
{drain_source if in_flight else ""}
{_HELPERS}{_CLUSTER_HELPERS if split > 1 or multicast else ""}{_MULTICAST_HELPERS if multicast else ""}{_IM2COL_HELPERS if im2col else ""}{_STORE_HELPERS if c_box else ""}
// Warp-specialized wgmma GEMM (tc_autotune.templates.tc_gemm.warp_specialized): C[{m}, {n}] = A[{m}, {k}] B[{k}, {n}],
// A by {"cp.async" if gather else "TMA"}{" (row boxes)" if row_boxes else " (spatial tile)" if tile else " (im2col)" if im2col else ""}, B by TMA; block {bm} x {bn}, {consumers} consumer warpgroup(s){" along M" if along_m else ""} of {slabs} slab(s) x {n_wg} columns,
// {config.stages} stages, B {"[n][k]" if b_col_major else "[k][n] in 64-column atoms"}{", groups in flight" if in_flight else ""}{", persistent" if persistent else ""}{", ping-pong (2 consumer warpgroups, whole tiles in turn)" if ping_pong else ""}{f", split-K over a cluster of {split}" if split > 1 else ""}{", B multicast to a pair along M" if multicast else ""}{", C by TMA stores" if c_box else ""}{", registers moved to the consumers (setmaxnreg)" if config.setmaxnreg else ""}{f", epilogue {fused}" if fused else ""}.
__device__ __forceinline__ void {name}(const half* __restrict__ A, const half* __restrict__ B,{_fused_params(fused, out_t)}
                                        {out_t}* __restrict__ C, unsigned char* smem_raw,
                                        unsigned long long map_a, unsigned long long map_b{", unsigned long long map_c" if c_box else ""}) {{
  {k_steps}{f"{chr(10)}  const unsigned cta_rank = blockIdx.x % 2;  // in the multicast pair" if multicast else ""}
  constexpr int A_BYTES = {a_bytes}, STAGE_BYTES = {a_bytes + b_bytes};
  unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + STAGES * STAGE_BYTES{f" + {warpgroups * WS_STAGING_BYTES}" if c_box else ""});
  unsigned long long* empty = full + STAGES;
  const int tid = threadIdx.x;"""
    init = f"""
  if (tid == 0) {{
    for (int s = 0; s < STAGES; ++s) {{
      mbar_init(&full[s], {full_count});
      mbar_init(&empty[s], {2 * consumers * 4 if multicast else consumers * 128});
    }}
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }}
  {"cluster_sync();  // both blocks' barriers are initialised before either multicasts into the other"
   if multicast else "__syncthreads();  // the only block-wide barrier: from here the roles meet on mbarriers"}"""
    # Accumulator slot s of lane l in a 16x16 fragment: row 8 * (s % 4 / 2) + l / 4, column
    # 8 * (s / 4) + 2 * (l % 4) + s % 2 (the m16n8k16 layout wgmma writes).
    epilogue = f"""
  #pragma unroll
  for (int s = 0; s < {slabs}; ++s) {{
    #pragma unroll
    for (int f = 0; f < {frags}; ++f) {{
      #pragma unroll
      for (int p = 0; p < 8; p += 2) {{
        const int m = m0 + {f"wg * {slabs * WGMMA_M} + " if along_m else ""}s * {WGMMA_M} + warp * 16 + 8 * (p % 4 / 2) + lane / 4;
        const int n = n0 + {"" if along_m or ping_pong else f"wg * {n_wg} + "}f * 16 + 8 * (p / 4) + 2 * (lane % 4);
        if (m < m_end && n < {n}) {{
          {pair_value}{fused_pair(fused, n, out_t, "          ")}{store}
        }}
      }}
    }}
  }}"""
    staged_decl = staged_end = ""
    if c_box is not None:
        rows_off = f"wg * {slabs * WGMMA_M} + " if along_m else ""
        cols_off = "" if along_m or ping_pong else f"wg * {n_wg} + "
        epilogue, staged_decl, staged_end = _staged_epilogue(slabs, frags, c_box, pair_t, pair, rows_off, cols_off,
                                                             fused_pair(fused, n, out_t, " " * 16))
    producer_step = f"""
      unsigned char* a_s = smem + stage * STAGE_BYTES;
      unsigned char* b_s = a_s + A_BYTES;
      const int k0 = {first_k} * {WGMMA_K};{tma_issue}{a_copy}"""
    # setmaxnreg: the whole producer warpgroup hands registers back before its idle threads exit; the
    # consumers take them before their first instruction that could use them.
    give_back = take = ""
    if config.setmaxnreg:
        give_back = f"""
    asm volatile("setmaxnreg.dec.sync.aligned.u32 {WS_PRODUCER_REGS};" ::: "memory");  // registers to the consumers"""
        take = f"""  asm volatile("setmaxnreg.inc.sync.aligned.u32 {WS_CONSUMER_REGS};" ::: "memory");  // the producer's registers
"""
    fill = f"""
  #pragma unroll
  for (int f = 0; f < {slabs * frags}; ++f) nvcuda::wmma::fill_fragment(acc[f], 0.0f);"""
    if not persistent:
        source = head + f"""
  // Blocks in groups of {RASTER_GROUP} M tiles, N fastest within a group: a wave of blocks shares
  // a few A row panels and B column panels in L2 instead of sweeping all of A for each N tile.
  const int linear = {linear_of_block}, {coords("").replace("const int per_group", "per_group", 1)}""" + init + f"""
  if (tid < {PRODUCER_THREADS}) {{{give_back}
    if (!({producers})) return;  // {producer_note}
    for (int kt = 0; kt < KT; ++kt) {{
      const int stage = kt % STAGES;
      if (kt >= STAGES) mbar_wait(&empty[stage], (kt / STAGES - 1) & 1);{producer_step}
    }}{producer_end}
    return;
  }}
{take}  const int wg = tid / 128 - 1;
  {_ACC} acc[{slabs * frags}];{fill}{staged_decl}
  for (int kt = 0; kt < KT; ++kt) {{
    const int stage = kt % STAGES;
    mbar_wait(&full[stage], (kt / STAGES) & 1);
    __syncwarp();  // wgmma is .aligned: converge the warp after the polling loop
    {{
      {consumer_tiles}{issue}
    }}
  }}
{drain}
  // Accumulator slot s of lane l in a 16x16 fragment: row 8 * (s % 4 / 2) + l / 4, column
  // 8 * (s / 4) + 2 * (l % 4) + s % 2 (the m16n8k16 layout wgmma writes).
  const int warp = tid / 32 % 4, lane = tid % 32;{_split_partials(split, slabs * frags, consumers * 128)}{epilogue}{staged_end}{cluster_end}
}}
"""
    else:
        # One block per SM walks tiles blockIdx.x, + gridDim.x, ...; the stage ring and its
        # phases run on across tiles (step it), so the producer loads the next tile while the
        # consumers store this one.
        tiles = grid_m * grid_n
        release = "\n    mbar_arrive(&empty[(it - 1) % STAGES]);  // the tile's last stage" if in_flight else ""
        # Ping-pong: warpgroup wg takes the block's tiles wg, wg + 2, ... (ring steps from wg * KT on)
        # and its main loop starts once the other's previous one has passed its last stage (named
        # barriers 2 + wg), so the ring's phases stay in step and one's epilogue runs under the
        # other's wgmmas.
        first_tile, tile_step, first_it, turn, hand_over, skip = "blockIdx.x", "gridDim.x", "0", "", "", ""
        if ping_pong:
            first_tile, tile_step, first_it = "blockIdx.x + wg * gridDim.x", "2 * gridDim.x", "wg * KT"
            turn = f"""
    if (tile >= (int)gridDim.x) asm volatile("bar.sync %0, {2 * PRODUCER_THREADS};" :: "r"(2 + wg) : "memory");  // the other's turn ends"""
            hand_over = f"""
    if (tile + (int)gridDim.x < {tiles}) asm volatile("bar.arrive %0, {2 * PRODUCER_THREADS};" :: "r"(3 - wg) : "memory");  // its turn"""
            skip = "\n    it += KT;  // the other warpgroup's tile"
        source = head + init + f"""
  if (tid < {PRODUCER_THREADS}) {{{give_back}
    if (!({producers})) return;  // {producer_note}
    int it = 0;
    for (int tile = blockIdx.x; tile < {tiles}; tile += gridDim.x) {{
      {coords("    ")}
      for (int kt = 0; kt < KT; ++kt, ++it) {{
        const int stage = it % STAGES;
        if (it >= STAGES) mbar_wait(&empty[stage], (it / STAGES - 1) & 1);{producer_step.replace(chr(10) + "      ", chr(10) + "        ")}
      }}
    }}{producer_end}
    return;
  }}
{take}  const int wg = tid / 128 - 1;
  const int warp = tid / 32 % 4, lane = tid % 32;
  {_ACC} acc[{slabs * frags}];
  int it = {first_it};{staged_decl}
  for (int tile = {first_tile}; tile < {tiles}; tile += {tile_step}) {{
    {coords("  ")}{fill.replace(chr(10) + "  ", chr(10) + "    ")}{turn}
    for (int kt = 0; kt < KT; ++kt, ++it) {{
      const int stage = it % STAGES;
      mbar_wait(&full[stage], (it / STAGES) & 1);
      __syncwarp();  // wgmma is .aligned: converge the warp after the polling loop
      {{
        {consumer_tiles.replace(chr(10) + "      ", chr(10) + "        ")}{issue.replace("(kt - 1) % STAGES", "(it - 1) % STAGES").replace(chr(10) + "      ", chr(10) + "        ")}
      }}
    }}{hand_over}
  {drain}{release}{epilogue.replace(chr(10) + "  ", chr(10) + "    ")}{skip}
  }}{staged_end}
}}
"""
    grid = (min(grid_m * grid_n, PERSISTENT_BLOCKS), 1) if persistent else (grid_m * split, grid_n)
    return KernelPlan(name, source, grid, PRODUCER_THREADS * (1 + warpgroups), smem_bytes(config), a_box, b_boxes[0],
                      2 if multicast else split, c_box)


def _fused_params(fused: Epilogue, out_t: str) -> str:
    """The device function's parameters for the epilogue's inputs, in the task's argument order
    (after A and B, before C): per-channel fp32 vectors, then the residual (C's shape and type)."""
    params = [f"const float* __restrict__ {name}" for name in fused.channel_inputs]
    params += [f"const {out_t}* __restrict__ residual"] * fused.residual
    return "".join(f"\n                                        {param}," for param in params)


def fused_pair(fused: Epilogue, n_cols: int, out_t: str, indent: str) -> str:
    """C statements that take the fp32 pair v0, v1 (C's row m, columns n and n + 1) through the
    fused epilogue (``Epilogue.apply``'s order: scale, bias, residual, activation), before the
    output cast; empty without one.  With an even N the pair's inputs are read as pairs (8-byte
    channel loads, a float2 / half2 residual); with an odd N one by one, column n + 1 only inside C."""
    if not fused:
        return ""
    lines = []
    paired = n_cols % 2 == 0
    for name, op in (("scale", "*="), ("bias", "+=")):
        if getattr(fused, name) and paired:
            lines += [f"const float2 {name}_n = __ldg(reinterpret_cast<const float2*>({name} + n));",
                      f"v0 {op} {name}_n.x; v1 {op} {name}_n.y;"]
        elif getattr(fused, name):
            lines += [f"v0 {op} __ldg({name} + n);", f"if (n + 1 < {n_cols}) v1 {op} __ldg({name} + n + 1);"]
    at = f"residual + (long long)m * {n_cols} + n"
    if fused.residual and paired:
        pair = (f"__ldg(reinterpret_cast<const float2*>({at}))" if out_t == "float"
                else f"__half22float2(*reinterpret_cast<const __half2*>({at}))")
        lines += [f"const float2 residual_mn = {pair};", "v0 += residual_mn.x; v1 += residual_mn.y;"]
    elif fused.residual:
        lines += [f"v0 += (float)({at})[0];", f"if (n + 1 < {n_cols}) v1 += (float)({at})[1];"]
    if fused.activation == "relu":
        lines.append("v0 = fmaxf(v0, 0.0f); v1 = fmaxf(v1, 0.0f);")
    elif fused.activation == "gelu":  # the tanh approximation, as Epilogue.apply
        gelu = "0.5f * {x} * (1.0f + tanhf({c}f * ({x} + 0.044715f * {x} * {x} * {x})))"
        lines += [f"v{i} = {gelu.format(x=f'v{i}', c=GELU_C)};" for i in (0, 1)]
    return "".join(f"\n{indent}{line}" for line in [f"// epilogue {fused}", *lines])


def c_store_box(view: GemmView) -> TmaBox:
    """tma_store's map of C (row-major, N innermost) and its box: 64 rows x 128 bytes, a staging
    chunk (32 fp32 or 64 fp16 columns), 128-byte swizzled like the stages; TMA clips the box at
    C's edges, so partial tiles need no bounds checks."""
    width = WS_ROW_BYTES // OUT_BYTES[view.out_dtype]
    return TmaBox((view.n, view.m), (view.n * OUT_BYTES[view.out_dtype],), (width, WS_STAGING_ROWS), ())


def _staged_epilogue(slabs: int, frags: int, c_box: TmaBox, pair_t: str, pair: str, rows_off: str,
                     cols_off: str, fused: str = "") -> tuple[str, str, str]:
    """tma_store's epilogue of one consumer warpgroup: (its code, the counter it declares before
    the tile loop, the wait for its last stores before the kernel ends).  Chunk after chunk of 64
    rows x 128 bytes (``c_box``) alternates between the warpgroup's two staging buffers (after the
    stages): wait until the store from that buffer two chunks ago has read it, write the chunk's
    accumulators (swizzled: conflict-free), fence them for the async proxy, then one thread stores
    the box and commits it as a bulk group; nothing waits for the global writes themselves.
    ``fused``: the fused epilogue's code (``fused_pair``), applied to each pair in C's bounds (TMA
    clips the rest)."""
    width = c_box.box[0]
    chunk_frags = width // 16
    chunks = frags // chunk_frags
    buffer_bytes = WS_STAGING_ROWS * WS_ROW_BYTES
    out_bytes = WS_ROW_BYTES // width
    epilogue = f"""
  {{  // C through this warpgroup's staging buffers, a TMA store a chunk of {WS_STAGING_ROWS} rows x {width} columns
    unsigned char* staging = smem + STAGES * STAGE_BYTES + wg * {WS_STAGING_BUFFERS * buffer_bytes};
    #pragma unroll
    for (int s = 0; s < {slabs}; ++s) {{
      #pragma unroll
      for (int j = 0; j < {chunks}; ++j, ++chunk) {{
        unsigned char* buf = staging + chunk % {WS_STAGING_BUFFERS} * {buffer_bytes};
        if (chunk >= {WS_STAGING_BUFFERS}) {{  // the store from this buffer {WS_STAGING_BUFFERS} chunks ago has read it
          if (tid % 128 == 0) asm volatile("cp.async.bulk.wait_group.read {WS_STAGING_BUFFERS - 1};" ::: "memory");
          asm volatile("bar.sync %0, 128;" :: "r"(4 + wg) : "memory");
        }}
        #pragma unroll
        for (int f = 0; f < {chunk_frags}; ++f) {{
          #pragma unroll
          for (int p = 0; p < 8; p += 2) {{
            const int r = warp * 16 + 8 * (p % 4 / 2) + lane / 4;
            const int byte = (f * 16 + 8 * (p / 4) + 2 * (lane % 4)) * {out_bytes};
            {"float" if fused else "const float"} v0 = acc[s * {frags} + j * {chunk_frags} + f].x[p], v1 = acc[s * {frags} + j * {chunk_frags} + f].x[p + 1];{_in_bounds(fused, rows_off, cols_off, width, c_box.dims[0])}
            *reinterpret_cast<{pair_t}*>(buf + r * {WS_ROW_BYTES} + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15)) = {pair};
          }}
        }}
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the writes, visible to TMA
        asm volatile("bar.sync %0, 128;" :: "r"(4 + wg) : "memory");
        if (tid % 128 == 0) {{
          tma_store_2d(map_c, buf, n0 + {cols_off}j * {width}, m0 + {rows_off}s * {WS_STAGING_ROWS});
          asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }}
      }}
    }}
  }}"""
    declare = "\n  int chunk = 0;  // C chunks this warpgroup has stored (tma_store)"
    end = """
  if (tid % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the stores have read the buffers"""
    return epilogue, declare, end


def _in_bounds(fused: str, rows_off: str, cols_off: str, width: int, n_cols: int) -> str:
    """tma_store: the fused epilogue (``fused``) of a staged pair, where its element (row m,
    column n) is inside C; TMA clips the rest, whose inputs are not read."""
    if not fused:
        return ""
    return f"""
            {{
              const int m = m0 + {rows_off}s * {WS_STAGING_ROWS} + r, n = n0 + {cols_off}j * {width} + f * 16 + 8 * (p / 4) + 2 * (lane % 4);
              if (m < m_end && n < {n_cols}) {{{fused}
              }}
            }}"""


def _split_partials(split: int, n_frags: int, threads: int) -> str:
    """Split-K: each consumer thread puts its accumulators in its block's shared memory (the
    stages, free once every consumer is done with them), slot-major so a warp's stores are
    contiguous; then the cluster waits until every block's partials are there."""
    if split == 1:
        return ""
    return f"""
  float* partial = reinterpret_cast<float*>(smem);  // [slot][consumer thread]
  asm volatile("bar.sync 1, {threads};" ::: "memory");  // every consumer is done reading the stages
  #pragma unroll
  for (int j = 0; j < {n_frags * 8}; ++j) partial[j * {threads} + tid - {PRODUCER_THREADS}] = acc[j / 8].x[j % 8];
  cluster_sync();"""


def _split_sum(split: int, frags: int, threads: int) -> str:
    """Split-K: the sum over the cluster's blocks of accumulator slots p, p + 1 of fragment
    (s, f); block r of the cluster sums and stores the fragments j with j % split == r."""
    return f"""const int j = (s * {frags} + f) * 8 + p;
          if ((s * {frags} + f) % {split} != split_rank) continue;
          float v0 = 0.0f, v1 = 0.0f;
          #pragma unroll
          for (int r = 0; r < {split}; ++r) {{  // every block's partial, this one's included
            v0 += peer_load(partial + j * {threads} + tid - {PRODUCER_THREADS}, r);
            v1 += peer_load(partial + (j + 1) * {threads} + tid - {PRODUCER_THREADS}, r);
          }}"""


# The tilings cuBLAS's and cuDNN's own Hopper kernels use (their profiles say which) and the ones
# that measured best on the H100, as knob changes: a first batch measures them
# (``starting_configs``), since the kernel's good region is too small for a short search to
# find (rfc-3x3-b32: 1.01 of cuDNN hand-picked, 0.87 after 64 trials without them).
_IN_FLIGHT_4_STAGES = dict(intrinsic="wgmma", wmma="m16n16k16", wgmma_in_flight=1, stages=4, vec_a=8, vec_b=8,
                           vec_c=1, offset_a=0, offset_b=0, offset_c=0, block_row_warps=4, chunk=4, split_k=1,
                           frag_buffers=1)
# The persistent ones store C with TMA (tma_store) where it applies: 1.02-1.09x on the H100
# (docs/BENCHMARKS.md, 'The knob on the shipped best configs and the starting tilings').
_STORED = dict(tma_store=1)
STARTING_TILINGS: tuple[dict, ...] = (
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=1),  # 128x256
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=2, **_STORED),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=1),  # 128x128
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=1, warp_col_tiles=8, warp_specialized=1),  # 64x256
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=1, warp_col_tiles=4, warp_specialized=1),  # 64x64
    # 64x128 in 4 K slices: where the tiles alone leave most SMs idle (small M, few channels)
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=1, warp_col_tiles=8, warp_specialized=1, split_k=4),
    # consumers along M (cuBLAS's cooperative 128x256: one m64n256 per consumer), persistent, with B
    # multicast to a pair of blocks; and 128x128 as two m64n128 consumers (both beat the column split)
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=1,
         consumers_along_m=1),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=2,
         consumers_along_m=1, **_STORED),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=1,
         consumers_along_m=1, multicast_b=1),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=4, warp_specialized=1,
         consumers_along_m=1),
    # the same in 4 K slices: a whole 128-row M of a weight-streaming dense (M = 128) on 4x the blocks
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=4, warp_specialized=1,
         consumers_along_m=1, split_k=4),
    # ping-pong at 128x128 and 64x256 (one m64n256 a warpgroup): the fastest kernels of those tiles
    # on the H100, best where 128x256 tiles are too few to fill the GPU; with the producer's
    # registers moved to the consumers (setmaxnreg: 1.02-1.05x on ping-pong)
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=2,
         ping_pong=1, setmaxnreg=1, **_STORED),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=1, warp_col_tiles=8, warp_specialized=2,
         ping_pong=1, setmaxnreg=1, **_STORED),
    # A by TMA im2col (convs only): no rows lost where whole output rows do not fill a block;
    # 1.15-1.2x the best earlier kernel on the 14x14 seeds at 128x256 (H100)
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=2,
         consumers_along_m=1, tma_im2col=1, **_STORED),
    dict(_IN_FLIGHT_4_STAGES, block_col_warps=1, warp_row_tiles=2, warp_col_tiles=8, warp_specialized=1,
         tma_im2col=1),
)


def starting_configs(space) -> list[Conv2dConfig]:
    """``STARTING_TILINGS`` made of the space's default config, those valid in ``space`` (none
    off Hopper), each with fewer stages where the K loop is shorter than 4 steps, and with C
    stored from registers where the workload cannot take TMA stores (spatial boxes of A)."""
    base = space.default_config().as_dict()
    found = []
    for changes in STARTING_TILINGS:
        for store in sorted({changes.get("tma_store", 0), 0}, reverse=True):
            config = _first_valid(space, [Conv2dConfig(**{**base, **changes, "stages": stages, "tma_store": store})
                                          for stages in range(changes["stages"], 1, -1)])
            if config is not None:
                found += [config] if config not in found else []
                break
    return found


def _first_valid(space, configs: list[Conv2dConfig]) -> Conv2dConfig | None:
    return next((config for config in configs if space.why_invalid(config) is None), None)


_CLUSTER_HELPERS = """
#ifndef TC_WS_CLUSTER_HELPERS
#define TC_WS_CLUSTER_HELPERS
// Every non-exited thread of the cluster arrives, then waits for the others (release/acquire:
// shared-memory writes before it are visible to the cluster's blocks after it).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\\n barrier.cluster.wait.acquire;" ::: "memory");
}
// A float at the same shared-memory offset in block `rank` of the cluster (distributed shared memory).
__device__ __forceinline__ float peer_load(const float* p, unsigned rank) {
  unsigned addr;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(addr) : "r"(smem_u32(p)), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
#endif
"""

_MULTICAST_HELPERS = """
#ifndef TC_WS_MULTICAST_HELPERS
#define TC_WS_MULTICAST_HELPERS
// One 2-D box into dst in both blocks of the cluster (ctaMask), each block's bar counting its bytes.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, unsigned long long map, unsigned long long* bar,
                                                      int x, int y, unsigned short mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(smem_u32(dst)), "l"(map), "r"(x), "r"(y), "r"(smem_u32(bar)), "h"(mask) : "memory");
}
// The warp is done with a stage: its lane 0 arrives on the stage's empty barrier in both blocks.
__device__ __forceinline__ void release_stage_pair(unsigned long long* bar) {
  __syncwarp();
  if (threadIdx.x % 32 == 0) {
    for (unsigned rank = 0; rank < 2; ++rank) {
      unsigned addr;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(addr) : "r"(smem_u32(bar)), "r"(rank));
      asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(addr) : "memory");
    }
  }
}
#endif
"""

_IM2COL_HELPERS = """
#ifndef TC_WS_IM2COL_HELPERS
#define TC_WS_IM2COL_HELPERS
// One im2col box of a 4-D (c, w, h, n) tensor map into dst: the map's pixels (output pixels,
// walked with the conv's stride from the one whose first tap reads (w, h) of image n) x its
// channels from c, each read at its pixel shifted by the tap's offset (ow, oh); reads outside
// the data (the padding) land as zeros.
__device__ __forceinline__ void tma_load_im2col_4d(void* dst, unsigned long long map, unsigned long long* bar,
                                                   int c, int w, int h, int n, unsigned short ow, unsigned short oh) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};"
               :: "r"(smem_u32(dst)), "l"(map), "r"(c), "r"(w), "r"(h), "r"(n), "r"(smem_u32(bar)),
                  "h"(ow), "h"(oh) : "memory");
}
#endif
"""

_STORE_HELPERS = """
#ifndef TC_WS_STORE_HELPERS
#define TC_WS_STORE_HELPERS
// One 2-D box of src (shared memory) to the tensor map's (x: column, y: row), in this thread's
// current bulk group; rows and columns past the map's dims are not written.
__device__ __forceinline__ void tma_store_2d(unsigned long long map, const void* src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               :: "l"(map), "r"(x), "r"(y), "r"(smem_u32(src)) : "memory");
}
#endif
"""

_ACC = "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>"

_HELPERS = f"""
#ifndef TC_WS_HELPERS
#define TC_WS_HELPERS
__device__ __forceinline__ unsigned smem_u32(const void* p) {{
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {{
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_u32(bar)) : "memory");
}}
__device__ __forceinline__ unsigned long long global_ns() {{
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}}
// Until the barrier's phase of this parity has completed; a wait that outlives any kernel
// (a lost arrival) traps, so a broken kernel fails its measurement instead of hanging it.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {{
  unsigned long long start = 0;
  for (;;) {{
    unsigned done;
    asm volatile("{{\\n .reg .pred p;\\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n"
                 " selp.u32 %0, 1, 0, p;\\n}}\\n" : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
    if (done) return;
    if (start == 0) start = global_ns();
    else if (global_ns() - start > {WAIT_LIMIT_NS}ull) __trap();
  }}
}}
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {{
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}}
// One box of a 2-D tensor map (x: the column, innermost; y: the row) into dst, its bytes
// counted on bar.  map: the generic address of a __grid_constant__ CUtensorMap parameter.
__device__ __forceinline__ void tma_load_2d(void* dst, unsigned long long map, unsigned long long* bar, int x, int y) {{
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {{%2, %3}}], [%4];"
               :: "r"(smem_u32(dst)), "l"(map), "r"(x), "r"(y), "r"(smem_u32(bar)) : "memory");
}}
__device__ __forceinline__ void tma_load_4d(void* dst, unsigned long long map, unsigned long long* bar,
                                            int x, int y, int z, int w) {{
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {{%2, %3, %4, %5}}], [%6];"
               :: "r"(smem_u32(dst)), "l"(map), "r"(x), "r"(y), "r"(z), "r"(w), "r"(smem_u32(bar)) : "memory");
}}
// 16 bytes global -> shared, or 16 zero bytes where the element is outside the operand.
__device__ __forceinline__ void copy16(void* dst, const half* base, bool inside, long long offset) {{
  const half* src = base + (inside ? offset : 0);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(smem_u32(dst)), "l"(src), "r"(inside ? 16 : 0) : "memory");
}}
#endif
"""


def kernel_module(view: GemmView, config: Conv2dConfig):
    """The IRModule TVM compiles: a PrimFunc of the task's (A, B, epilogue inputs, C) tensors
    whose kernel is one call of the generated device function, with the launch and shared memory above.
    Each TMA operand's tensor map is encoded by the host code on every call (from the
    tensor's own pointer) and reaches the kernel as a ``__grid_constant__`` parameter."""
    import tvm
    from tvm.backend.cuda.op import cuda_func_call
    from tvm.script import tirx as T

    kp = plan(view, config)
    if isinstance(kp.a_box, Im2colBox):
        tensormap.register()
    (gx, gy), threads, smem = kp.grid, kp.threads, kp.smem_bytes
    a_shape, b_shape, c_shape, out_dtype = view.a.shape, view.b.shape, view.c.shape, view.out_dtype
    operand_boxes = [(view.a, kp.a_box), (view.b, kp.b_box)] + [(view.c, kp.c_box)] * (kp.c_box is not None)
    maps = [T.Var(f"{operand.tensor}_tensormap", ty=T.handle("tensormap").ty) if box else None
            for operand, box in operand_boxes]
    map_args = [T.address_of(tmap) if tmap is not None else T.uint64(0) for tmap in maps]
    map_dtypes = ["float16", "float16", out_dtype]  # what the maps' elements are
    # The epilogue's inputs (up to 3): the function takes 3 slots, the unused ones are dropped below.
    extra = [(shape, dtype) for _, shape, dtype in epilogue_input_specs(view.epilogue, view.n, c_shape, out_dtype)]
    used = len(extra)
    extra += [((1,), "float32")] * (3 - used)

    @T.prim_func(check_well_formed=False)  # the maps are bound below, in the host part
    def main(a: T.handle, b: T.handle, e0: T.handle, e1: T.handle, e2: T.handle, c: T.handle):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        A = T.match_buffer(a, a_shape, "float16", align=64)
        B = T.match_buffer(b, b_shape, "float16", align=64)
        E0 = T.match_buffer(e0, extra[0][0], extra[0][1], align=8)  # 8: the pairs' loads
        E1 = T.match_buffer(e1, extra[1][0], extra[1][1], align=8)
        E2 = T.match_buffer(e2, extra[2][0], extra[2][1], align=8)
        C = T.match_buffer(c, c_shape, out_dtype, align=64)
        if kp.cluster > 1:  # a cluster launch: `cluster` consecutive blocks along x
            T.launch_thread("clusterCtaIdx.x", kp.cluster)
        bx = T.launch_thread("blockIdx.x", gx)
        by = T.launch_thread("blockIdx.y", gy)
        tx = T.launch_thread("threadIdx.x", threads)
        buf = T.alloc_buffer((smem,), "uint8", scope="shared.dyn")
        T.evaluate(cuda_func_call(kp.name, A.data, B.data, *[E0.data, E1.data, E2.data][:used], C.data, buf.data,
                                  *map_args, source_code=kp.source))

    main = tvm.tirx.PrimFunc([*main.params[:2 + used], main.params[-1]], main.body, attrs=main.attrs)
    host = []
    operand_params = [main.params[0], main.params[1], main.params[-1]]
    for tmap, (_, box), param, dtype in zip(maps, operand_boxes, operand_params, map_dtypes):
        if tmap is None:
            continue
        host.append(tvm.tirx.Bind(tmap, T.tvm_stack_alloca("tensormap", 1)))
        if isinstance(box, Im2colBox):  # TVM's host encodes tiled maps only: ours, through the driver
            encode = T.call_packed(tensormap.ENCODE_IM2COL, tmap, param.data, *box.encode_args())
        else:
            encode = tvm.tirx.tensormap_encode_tiled(  # innermost dim first
                tmap, param.data, *box.dims, *box.strides, *box.box, *box.element_strides,
                descriptor_dtype=dtype, rank=len(box.box), swizzle=3)  # CU_TENSOR_MAP_SWIZZLE_128B
        host.append(tvm.tirx.Evaluate(encode))
    if host:
        main = main.with_body(tvm.tirx.SeqStmt([*host, main.body]))
    return tvm.IRModule({"main": main})
