"""The GEMM view of a task: what the space, the rules, the prior, the cost model and the
template see of a workload.

Every task the package tunes is one Tensor Core GEMM, C[m, n] = sum_k A[m, k] B[k, n]
(fp16, bf16 or fp8 operands, fp32 accumulation), read from and written to the task's own tensors
through *index maps*, with a fused epilogue applied to C on its way out (``epilogue``).
A ``GemmView`` is that description as plain data: M, N, K, the dtypes, the epilogue, and
per operand the task's tensor (name, shape), its index map, the matrix axis it
is contiguous along (its ``layout``) and the length of its contiguous, aligned runs (which
vector widths can be loaded or stored without straddling a run).  Conv2d NHWC is an
implicit GEMM (``views.conv2d_view``): A is the im2col matrix of the input (``Im2col``), B the
HWIO weight seen as a (R*S*C, K) matrix and C the NHWC output seen as an (N*OH*OW, K)
matrix (both ``RowMajor``).  Dense (``dense_view``) has ``RowMajor`` maps of its tensors,
and ``Transposed`` for an (N, K) weight: a ``COL_MAJOR`` B (contiguous along K), which the
template keeps K-contiguous in shared memory and feeds to the Tensor Cores as such.

A grouped conv (``GemmView.groups`` > 1) is that many GEMMs of one shape (M, N and K are each
group's): the A and B maps take the group as a third argument, ``element(row, col, group)``,
and C's ``matrix_index`` gives (group, row, col).  A conv's weight may be HWIO (``RowMajor``),
OHWI (``Transposed``: nn.Conv2d's weight in channels_last memory, each output channel's
R*S*C/G filter contiguous) or OIHW (``ChannelsOuter``, nn.Conv2d's as PyTorch holds it:
contiguous along neither matrix axis where R*S > 1).

Index maps are frozen dataclasses (they key caches with the view) whose methods are plain
arithmetic (``+ - * // %`` and comparisons), so the same map runs on ints, on numpy arrays
(the tests check a view against the host reference) and on TVM expressions (the template
builds its TE compute from them).  The views of the tasks' workloads are in ``views``: this
module knows no workload type.  No TVM.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...workloads.epilogue import Epilogue
from .operand_layout import ROW_MAJOR


def _grouped(col, group, group_cols: int):
    """Column ``col`` of group ``group``'s matrix as the tensor's (groups side by side)."""
    return col if group is None else group * group_cols + col


@dataclass(frozen=True)
class RowMajor:
    """A tensor seen as a row-major matrix: its dims before the last are flattened into rows
    and the last is the column.  ``group_cols`` (a grouped conv's HWIO weight and NHWC
    output): the columns are groups of that many, each group's matrix its own."""

    shape: tuple[int, ...]  # the tensor's
    group_cols: int = 0

    def element(self, row, col, group=None):
        """(tensor index, in-bounds conditions) of matrix element [row, col] (row < rows):
        element [0, ..., 0, row, col] has the address of the unflattened one, and the index
        needs no div/mod (which the simplifier cannot fold out of the unflattened form)."""
        return (0,) * (len(self.shape) - 2) + (row, _grouped(col, group, self.group_cols)), ()

    def matrix_index(self, *index):
        """(row, col) of the tensor element at ``index``; (group, row, col) with groups."""
        row = index[0]
        for i, extent in zip(index[1:-1], self.shape[1:-1]):
            row = row * extent + i
        if self.group_cols:
            return index[-1] // self.group_cols, row, index[-1] % self.group_cols
        return row, index[-1]


@dataclass(frozen=True)
class Transposed:
    """A tensor whose first dim is the matrix's columns and whose other dims, flattened, are
    its rows, seen as that matrix: an nn.Linear (N, K) weight as the K x N matrix B, or a conv's
    OHWI weight [K, R, S, C/G] as the (R*S*C/G) x K one (``group_cols``: K/G columns a group).
    Contiguous along the matrix's rows (a ``COL_MAJOR`` operand)."""

    shape: tuple[int, ...]  # the tensor's
    group_cols: int = 0

    def element(self, row, col, group=None):
        """(tensor index, in-bounds conditions) of matrix element [row, col]: [col, 0, .., row]
        has the address of the unflattened index (as ``RowMajor``'s)."""
        return (_grouped(col, group, self.group_cols),) + (0,) * (len(self.shape) - 2) + (row,), ()


@dataclass(frozen=True)
class ChannelsOuter:
    """A conv's OIHW weight [K, C/G, R, S] (nn.Conv2d's, contiguous) as the (R*S*C/G) x K matrix
    B: row (tap, channel) as the im2col A orders them, so a row's next element is R*S elements
    further and a column's C/G*R*S further; a ``COL_MAJOR`` operand (copied along K) whose
    contiguous runs are single elements."""

    shape: tuple[int, int, int, int]  # the tensor's
    group_cols: int = 0

    def element(self, row, col, group=None):
        """(tensor index, in-bounds conditions) of B[row, col]: [n, channel, 0, tap] has the
        address of [n, channel, tap // S, tap % S]."""
        channels = self.shape[1]
        return (_grouped(col, group, self.group_cols), row % channels, 0, row // channels), ()


@dataclass(frozen=True)
class Im2col:
    """The implicit-GEMM A of an NHWC conv2d input: row m = (image, output row, output
    column), column k = (filter row, filter column, input channel); taps that fall into
    the padding read 0."""

    in_height: int
    in_width: int
    channels: int
    out_height: int
    out_width: int
    kernel_w: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad: tuple[int, int]  # top, left

    def element(self, row, col, group=None):
        """(tensor index, in-bounds conditions) of A[row, col]: data[img, h, w, ci], inside
        the input where all conditions hold.  ``channels``: a group's, which ``group``
        (a grouped conv's) offsets."""
        oh, ow = self.out_height, self.out_width
        (sh, sw), (dh, dw) = self.stride, self.dilation
        pad_top, pad_left = self.pad
        c, s = self.channels, self.kernel_w
        img, pix = row // (oh * ow), row % (oh * ow)
        y, x = pix // ow, pix % ow
        rs, ci = col // c, col % c
        h = y * sh + (rs // s) * dh - pad_top
        w = x * sw + (rs % s) * dw - pad_left
        return (img, h, w, _grouped(ci, group, c)), (h >= 0, h < self.in_height, w >= 0, w < self.in_width)


@dataclass(frozen=True)
class Operand:
    """One GEMM operand as the task's tensor holds it.

    ``map``: for A and B, ``map.element(row, col)`` gives the tensor index of a matrix
    element and the conditions under which it is inside the tensor (else it reads 0); for
    C, ``map.matrix_index(*index)`` gives the matrix element a tensor element holds.
    ``layout``: the matrix axis the tensor is contiguous along, ``ROW_MAJOR`` (the inner
    axis: A's K, B's and C's N) or ``COL_MAJOR`` (B only: K); the template copies the tile
    to shared memory along it.  ``run``: along that axis the tensor is contiguous in aligned
    runs of ``run`` elements, so a vector of v elements never straddles a run (nor is
    misaligned) iff v divides it; ``run_name`` is what a message calls those elements."""

    tensor: str  # the kernel argument's name
    shape: tuple[int, ...]
    map: RowMajor | Im2col | Transposed | ChannelsOuter
    run: int
    run_name: str
    axes: tuple[str, ...] = ()  # names of the tensor's dims in the TE compute (i0, i1, ... if empty)
    layout: str = ROW_MAJOR


@dataclass(frozen=True)
class GemmView:
    """A task's workload as the Tensor Core GEMM C[M, N] = A[M, K] B[K, N]."""

    m: int
    n: int
    k: int
    dtype: str  # of the input tensors (fp32 inputs are cast to fp16 copies first)
    out_dtype: str  # of the output tensor (accumulation is fp32)
    a: Operand  # M x K
    b: Operand  # K x N
    c: Operand  # M x N, the output
    epilogue: Epilogue = Epilogue()  # applied to C on its way to the output (none: a cast only)
    groups: int = 1  # GEMMs of this shape side by side (a grouped conv's), the maps take the group
    b_dtype: str | None = None  # B's tensor dtype where it is not ``dtype`` (fp8: an e5m2 B)
    group_pack: int = 1  # a grouped conv's groups in each of these GEMMs (``packing``: B block diagonal)
    swapped: bool = False  # the C^T = B^T A^T of a task's GEMM (``swap``): C is stored transposed

    @property
    def shape(self) -> tuple[int, int, int]:
        """M, N, K of one GEMM (of each group's)."""
        return self.m, self.n, self.k

    @property
    def operand_dtype(self) -> str:
        """What the Tensor Cores multiply (A's): bfloat16 for bf16 inputs, fp8 for fp8 ones, else
        float16 (fp32 inputs through their fp16 copies).  fp16 and bf16 are 2 bytes, so tiles,
        swizzles and shared memory are alike; only the instructions' and the shared tiles' types
        differ.  fp8 is 1 byte: its tiles are alike in bytes (``element_bytes``)."""
        if self.fp8:
            return self.dtype
        return "bfloat16" if self.dtype == "bfloat16" else "float16"

    @property
    def b_operand_dtype(self) -> str:
        """What the Tensor Cores multiply of B: A's, or an fp8 B of its own (``b_dtype``)."""
        return self.b_dtype or self.operand_dtype

    @property
    def fp8(self) -> bool:
        """fp8 operands: wgmma's e4m3 / e5m2 (sm_90a), scaled by the per-tensor scale_a * scale_b.  By
        the name (``workloads.spec.FP8_DTYPES`` are all float8_*), so this module stays off the
        workload modules' floor."""
        return self.dtype.startswith("float8_")

    @property
    def element_bytes(self) -> int:
        """Bytes of an operand element as the Tensor Cores read it: 1 for fp8, else 2."""
        return 1 if self.fp8 else 2

    @property
    def inputs(self) -> tuple[Operand, Operand]:
        return self.a, self.b

    @property
    def flops(self) -> int:
        """The task's: a packed view's block-diagonal zeros are not counted."""
        return 2 * self.m * self.n * self.k * self.groups // self.group_pack


# ---- A tiles as TMA boxes (the warp-specialized kernel, and the prior's view of it) -------------
TMA_BOX_K = 64  # columns of a box: one 128-byte swizzled row of fp16


@dataclass(frozen=True)
class SpatialTile:
    """A block's output pixels as a box of whole output rows: ``images`` images of ``rows``
    rows (``rows`` < the height: one image) of the full width.  A 3x3 conv's A tile for one
    filter tap and 64 channels is then one 4-D box of the data, shifted by the tap, with the
    padding read as TMA's out-of-bounds zeros.  The box fills the first images*rows*width
    rows of the block's A tile; the rest are never stored."""

    images: int
    rows: int
    height: int
    width: int
    batch: int

    @property
    def pixels(self) -> int:
        return self.images * self.rows * self.width

    @property
    def tiles_per_image(self) -> int:
        return -(-self.height // self.rows)

    @property
    def grid_m(self) -> int:
        return -(-self.batch // self.images) * self.tiles_per_image


MIN_SPATIAL_USE = 0.75  # a box tiling must fill this much of the block's rows, else gather A


def spatial_tile(view: GemmView, block_m: int) -> SpatialTile | None:
    """The spatial tiling of a stride-1 conv2d whose k-steps stay within one filter tap
    (64 | channels), if whole output rows fill at least MIN_SPATIAL_USE of ``block_m``."""
    a = view.a.map
    if (not isinstance(a, Im2col) or a.stride != (1, 1) or a.channels % TMA_BOX_K or a.out_width > block_m
            or view.groups > 1):
        return None
    oh, ow = a.out_height, a.out_width
    batch = view.m // (oh * ow)
    if oh * ow <= block_m:
        tile = SpatialTile(min(block_m // (oh * ow), batch), oh, oh, ow, batch)
    else:
        tile = SpatialTile(1, block_m // ow, oh, ow, batch)
    return tile if tile.pixels >= MIN_SPATIAL_USE * min(block_m, view.m) else None


MAX_TMA_STRIDE = 8  # TMA's traversal stride per dimension is 1..8
MAX_TMA_BOX = 256  # elements per box dimension
# Row boxes narrower than this cost more than they save: each TMA box has a fixed cost, and 9
# boxes of 14 pixels a k-step ran 4-50% slower than one spatial box, often slower than a gathered
# A (H100; docs/BENCHMARKS.md, 'A conv's A by TMA row boxes').  28-pixel rows: a 3x3 stride-2
# conv ran 15% faster than gathered at its best tiling, a 1x1 stride-2 conv 3-5% slower; the
# tuner weighs that against other configs.
MIN_ROW_BOX_PIXELS = 16


@dataclass(frozen=True)
class RowTile:
    """A block's output pixels as ``rows`` consecutive output rows counted across images
    (output row g is row g % height of image g // height), so the block's pixels are the
    contiguous output rows m0 .. m0 + rows * width of C.  Each output row's A tile for one
    filter tap and 64 channels is its own 4-D box (64 channels, width, 1 row, 1 image) of
    the data, shifted by the tap and read with the conv's stride as TMA's traversal stride;
    the padding (and rows past the last image) read as out-of-bounds zeros.  Unlike a
    ``SpatialTile`` it takes strided convs."""

    rows: int
    height: int  # output rows per image
    width: int  # output columns
    batch: int

    @property
    def pixels(self) -> int:
        return self.rows * self.width

    @property
    def grid_m(self) -> int:
        return -(-self.batch * self.height // self.rows)


def row_tile(view: GemmView, block_m: int) -> RowTile | None:
    """The row tiling of a conv2d whose k-steps stay within one filter tap (64 | channels),
    whose strides TMA can traverse and whose output rows are at least MIN_ROW_BOX_PIXELS
    wide, if whole output rows fill at least MIN_SPATIAL_USE of ``block_m``."""
    a = view.a.map
    if (not isinstance(a, Im2col) or a.channels % TMA_BOX_K or not MIN_ROW_BOX_PIXELS <= a.out_width <= block_m
            or view.groups > 1):
        return None
    if max(a.stride) > MAX_TMA_STRIDE or a.out_width * a.stride[1] > MAX_TMA_BOX:
        return None
    tile = RowTile(block_m // a.out_width, a.out_height, a.out_width, view.m // (a.out_height * a.out_width))
    return tile if tile.pixels >= MIN_SPATIAL_USE * min(block_m, view.m) else None


def box_tile(view: GemmView, block_m: int) -> SpatialTile | RowTile | None:
    """How a block's A tile is loaded as TMA boxes of a conv's data: a ``SpatialTile`` (one
    box a tap) where there is one, even where row boxes would need fewer blocks (their
    per-box cost outweighs the fuller blocks, see MIN_ROW_BOX_PIXELS), else a ``RowTile`` (one box
    per tap and output row); None: A is gathered."""
    return spatial_tile(view, block_m) or row_tile(view, block_m)


# TMA's im2col mode (a 4-D map): corners within a signed byte, 256 pixels a box at most, traversal
# strides 1..8 (MAX_TMA_STRIDE), 16-bit filter offsets.
MAX_IM2COL_CORNER = 127
MAX_IM2COL_PIXELS = 256
MAX_IM2COL_OFFSET = 2**15 - 1


@dataclass(frozen=True)
class Im2colWindow:
    """Where TMA's im2col mode finds a conv's A (one box: ``pixels`` consecutive output pixels
    x 64 channels of one filter tap, across output rows and images alike).  Per input dim
    (width, height): the first filter tap's input coordinate of output pixel 0 (``lower``, i.e.
    -padding) and of the last output pixel, counted from the input's last element (``upper``);
    TMA walks the output pixels between them with the conv's stride (``traversal``), each tap
    shifting both by its offset, and reads padding as out-of-bounds zeros."""

    lower: tuple[int, int]  # (w, h)
    upper: tuple[int, int]  # (w, h)
    traversal: tuple[int, int]  # (w, h): the conv's stride
    offset_step: tuple[int, int]  # (w, h): one filter tap further along: the dilation


OUT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}  # an output element's bytes, by the output dtypes


def c_rows_aligned(view: GemmView) -> bool:
    """C's rows are whole multiples of 16 bytes, as TMA's global strides must be (``tma_store``)."""
    return view.n * OUT_BYTES.get(view.out_dtype, 0) % 16 == 0


def im2col_window(view: GemmView) -> Im2colWindow | None:
    """The im2col window of a conv whose k-steps stay within one filter tap (64 | channels) and
    whose A is not a matrix (that one is a plain box), if TMA's limits take it; else None."""
    a = view.a.map
    if not isinstance(a, Im2col) or a.channels % TMA_BOX_K or a_is_matrix(view) or view.groups > 1:
        return None
    (sh, sw), (dh, dw), (pad_top, pad_left) = a.stride, a.dilation, a.pad
    kernel_h = view.k // (a.channels * a.kernel_w)
    lower = (-pad_left, -pad_top)
    upper = ((a.out_width - 1) * sw - pad_left - (a.in_width - 1),
             (a.out_height - 1) * sh - pad_top - (a.in_height - 1))
    if (max(sh, sw) > MAX_TMA_STRIDE or any(abs(x) > MAX_IM2COL_CORNER for x in (*lower, *upper))
            or max((a.kernel_w - 1) * dw, (kernel_h - 1) * dh) > MAX_IM2COL_OFFSET):
        return None
    return Im2colWindow(lower, upper, (sw, sh), (dw, dh))


def swappable(view: GemmView) -> bool:
    """``swap_ab`` takes it (``swap``): a dense (row-major A and C) with an (N, K) weight (``b=nk``:
    K-major, as wgmma's A must be), one GEMM, not already swapped."""
    return (view.groups == 1 and isinstance(view.a.map, RowMajor) and isinstance(view.c.map, RowMajor)
            and isinstance(view.b.map, Transposed) and len(view.b.shape) == 2 and view.b.layout != ROW_MAJOR
            and not view.swapped)


def a_is_matrix(view: GemmView) -> bool:
    """A is its tensor as a row-major matrix: dense, or a 1x1, stride-1, unpadded conv2d (not a
    grouped one: each group's A is a slice of the data's channels)."""
    a = view.a.map
    if view.groups > 1:
        return False
    return isinstance(a, RowMajor) or (
        isinstance(a, Im2col) and a.channels == view.k and a.stride == (1, 1) and a.pad == (0, 0)
        and (a.out_height, a.out_width) == (a.in_height, a.in_width))
