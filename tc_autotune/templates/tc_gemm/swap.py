"""Swap-AB (``swap_ab``): a dense GEMM C = A B with few rows M computed as C^T = B^T A^T, as a
transformation of its ``GemmView``.  The weight's N rows become the kernel's M side (wgmma's 64-row
slabs), the activations' M rows its N side (a wgmma of n = 8 to 64), so a GEMV-like dense stops
padding its few rows to 64 and gets N / 64 blocks of weight rows instead.

The swapped view is what the warp-specialized kernel's layout, boxes, main loop and pipeline see:
A' is the (N, K) weight read as a row-major matrix, B' the (M, K) activations read as a K-major
(``COL_MAJOR``) B, both TMA boxes of 128-byte rows.  Only the epilogue knows (``GemmView.swapped``):
it stores tile element [n, m] into the task's C at [m, n], and the task's per-output-feature vectors
(bias, scale) are per row of the swapped tile.  No TVM."""

from __future__ import annotations

from dataclasses import replace

from .gemm import GemmView, Operand, RowMajor, Transposed, swappable
from .operand_layout import COL_MAJOR, ROW_MAJOR


def swapped(view: GemmView) -> GemmView:
    """The GEMM C^T[N, M] = B^T[N, K] A^T[K, M] of a ``swappable`` view: A' the weight as a row-major
    (N, K) matrix, B' the activations (all M = batch x m rows, flattened) as a K-major (M, K) B, C' the
    output seen transposed; the operand dtypes swap places (an e5m2 B becomes A')."""
    if not swappable(view):
        raise ValueError(f"swap_ab takes a dense with an (N, K) weight (b=nk), not this GEMM: {view.shape}")
    a, b, c = view.a, view.b, view.c
    flat_a, flat_c = (view.m, view.k), (view.m, view.n)
    return replace(
        view, m=view.n, n=view.m, dtype=view.b_operand_dtype, b_dtype=view.dtype if view.b_dtype else None,
        a=Operand(b.tensor, b.shape, RowMajor(b.shape), b.run, b.run_name, b.axes, ROW_MAJOR),
        b=Operand(a.tensor, flat_a, Transposed(flat_a), a.run, a.run_name, a.axes, COL_MAJOR),
        c=Operand(c.tensor, flat_c, Transposed(flat_c), c.run, c.run_name, c.axes, ROW_MAJOR),
        swapped=True)
