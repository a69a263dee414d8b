"""The operands' addresses and tensor maps: C expressions of a gathered element's offset (the
task's ``GemmView`` index map evaluated on ``CExpr``), and the TMA boxes a k-step loads (A and B)
or a TMA store writes (C)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..gemm import OUT_BYTES, GemmView, Im2colWindow, RowTile, Transposed, a_is_matrix, box_tile, im2col_window
from ..operand_layout import COL_MAJOR
from ..wgmma_source import WGMMA_ATOM, WGMMA_K
from ..knobs import WS_ROW_BYTES, WS_STAGING_ROWS, TcGemmConfig


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
class TmaBox:
    """One operand's tensor map (innermost dimension first) and the box a k-step loads.
    ``coords``: the C expressions of the box's start (from k0, m0/n0 and the tile's image
    and output row), ``bytes``: what lands in shared memory per box."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, dims 1.. (dim 0 is contiguous)
    box: tuple[int, ...]
    coords: tuple[str, ...]
    traversal: tuple[int, ...] | None = None  # TMA's element strides (a strided conv's), 1s if None
    element_bytes: int = 2  # of the tensor's elements: 1 for fp8

    @property
    def element_strides(self) -> tuple[int, ...]:
        return self.traversal or (1,) * len(self.box)

    @property
    def bytes(self) -> int:
        """What lands in shared memory: every traversal-th element of the box, per dimension."""
        return math.prod(-(-b // t) for b, t in zip(self.box, self.element_strides)) * self.element_bytes


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


def _matrix_box(operand, box_rows: int, col: str, row: str, element_bytes: int = 2) -> TmaBox:
    """A box of an operand's tensor seen as a row-major matrix of its last dim (a ``Transposed``
    one's: of all but its first, a conv's OHWI weight as (K, R*S*C)): one 128-byte row a box row
    (64 columns; 128 of fp8)."""
    if isinstance(operand.map, Transposed):
        rows, cols = operand.shape[0], math.prod(operand.shape[1:])
    else:
        rows, cols = math.prod(operand.shape[:-1]), operand.shape[-1]
    return TmaBox((cols, rows), (cols * element_bytes,), (WS_ROW_BYTES // element_bytes, box_rows), (col, row),
                  element_bytes=element_bytes)


def tma_boxes(view: GemmView, config: TcGemmConfig) -> tuple[TmaBox | Im2colBox | None, list[TmaBox]]:
    """(A's box or None: A is gathered by the producer's threads, B's boxes per k-step: none where
    the threads convert fp32 input, A's and B's, into the stages).  B is otherwise always
    TMA-loaded ((N, K): one box of the tile; (K, N): one per 64-column atom); A is for dense
    and 1x1 unpadded stride-1 convs (a matrix box), for convs with ``tma_im2col`` (an im2col
    box of the block's pixels from ``a_img``, ``a_h``, ``a_w``) and for box-tiled convs
    (``gemm.box_tile``: a 4-D box per tap, or per tap and output row: its coords then name the
    row's image ``row_img`` and output row ``row_oh``)."""
    if view.dtype != view.operand_dtype:  # fp32 input: the producer's threads load and convert both
        return None, []
    size = view.element_bytes  # fp8: 1-byte elements, k-steps of 128 (a (N, K) B only: K-major)
    if view.b.layout == COL_MAJOR:
        b = [_matrix_box(view.b, config.block_n, "k0", "n0", size)]
    else:
        b = [_matrix_box(view.b, WGMMA_K, f"n0 + {j * WGMMA_ATOM}", "k0")
             for j in range(config.block_n // WGMMA_ATOM)]
    if config.multicast_b:  # each block of the pair loads half of each box's rows for both
        b = [_half_box(box) for box in b]
    if a_is_matrix(view):
        return _matrix_box(view.a, config.block_m, "k0", "m0", size), b
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
    return TmaBox(box.dims, box.strides, (box.box[0], rows), (box.coords[0], f"{box.coords[1]} + cta_rank * {rows}"),
                  element_bytes=box.element_bytes)


def c_store_box(view: GemmView) -> TmaBox:
    """tma_store's map of C (row-major, N innermost) and its box: 64 rows x 128 bytes, a staging
    chunk (32 fp32 or 64 fp16 columns), 128-byte swizzled like the stages; TMA clips the box at
    C's edges, so partial tiles need no bounds checks."""
    width = WS_ROW_BYTES // OUT_BYTES[view.out_dtype]
    return TmaBox((view.n, view.m), (view.n * OUT_BYTES[view.out_dtype],), (width, WS_STAGING_ROWS), ())
