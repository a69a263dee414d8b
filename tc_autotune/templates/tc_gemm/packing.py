"""Group packing (the ``group_pack`` knob, issue #32): P consecutive groups of a grouped conv as one
GEMM of a block-diagonal B.

A grouped conv of G groups is G GEMMs of N = K/G columns and a reduction of R*S*C/G (``views``).
Where a group is narrow (ResNeXt's 4 and 8 channels) its GEMM pads a Tensor Core tile (16 or more
columns) with zeros, loads A a few channels at a time, and the grid is G tiny GEMMs.  Packed, P
consecutive groups are one GEMM of N' = P*K/G columns and a reduction K' = R*S*P*C/G, G/P such
GEMMs: A's runs are P*C/G contiguous NHWC channels (wider vector loads), and B is block diagonal:

    B'[k', n'] = W[tap, c, (g' P + p) K/G + n]  where k' = (tap, p, c) and n' = (p, n), else 0

(the input-channel group of row k' must be the output-channel group of column n'), which the TE
compute reads as an ``if_then_else`` of the weight and 0: a predicated copy (cp.async zero-fill, or
a select), whose zeros the Tensor Cores multiply.  C is the output's P*K/G channels of the packed
groups, contiguous in NHWC.  The packed view is an ordinary grouped view (G/P groups) with those
maps, so the rules, the TE compute and every path's schedule read it as they read any grouped one;
``group_pack=1`` is the view itself, today's kernel.  No TVM; nor an import of ``gemm``, whose
types it reads and writes as any view's (``rules`` imports this module: one level, not two).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from .operand_layout import COL_MAJOR

# Packing is for narrow groups only: both a group's input and output channels at most this many
# (ResNeXt-50 32x4d's 4-, 8- and 16-channel groups; its 32-channel ones already beat cuDNN 2x).
MAX_PACKED_CHANNELS = 16


@dataclass(frozen=True)
class BlockDiagonal:
    """B of P packed groups: ``inner`` (the unpacked B's map: ``RowMajor``, ``Transposed`` or
    ``ChannelsOuter`` with ``group_cols`` = K/G) read where row k' and column n' are of the same
    packed group, 0 elsewhere (an in-bounds condition that is false)."""

    inner: object  # the unpacked B's map
    pack: int  # P
    channels: int  # C/G: a group's input channels (rows per filter tap and group)
    columns: int  # K/G: a group's output channels

    def element(self, row, col, group):
        """(tensor index, conditions) of B'[row, col] of packed GEMM ``group``.  The inner map
        places column n of group g at g * K/G + n (``gemm._grouped``), so packed column col of
        group g' is the inner column col of group g' * P: no div/mod along N."""
        c, width = self.channels, self.pack * self.channels
        tap, within = row // width, row % width
        index, inside = self.inner.element(tap * c + within % c, col, group * self.pack)
        return index, (*inside, within // c == col // self.columns)


def packable(view) -> bool:
    """Whether the ``gemm.GemmView``'s groups may be packed at all: a grouped conv (its A an
    ``Im2col`` of a group's ``channels``) of narrow groups."""
    if view.groups == 1 or view.group_pack != 1:
        return False
    return max(view.a.map.channels, view.n) <= MAX_PACKED_CHANNELS


def pack_values(view, candidates) -> tuple[int, ...]:
    """The ``group_pack`` candidates valid for the view: 1, and where its groups are narrow each
    P > 1 that divides G into at least 2 GEMMs (the packed view stays a grouped one)."""
    return tuple(p for p in candidates if p == 1 or (packable(view) and view.groups % p == 0 and view.groups > p))


def why_not_packed(view, pack: int) -> str | None:
    """None where ``group_pack=pack`` is valid for the view, else why not (one line)."""
    if pack == 1 or pack in pack_values(view, (pack,)):
        return None
    if view.groups == 1:
        return f"group_pack={pack} packs the groups of a grouped conv: this GEMM has one group"
    if not packable(view):
        return (f"group_pack={pack} packs narrow groups only (at most {MAX_PACKED_CHANNELS} input and output "
                f"channels a group), not {view.a.map.channels} input and {view.n} output channels a group")
    return f"group_pack={pack} does not divide groups={view.groups} into 2 or more GEMMs"


@functools.lru_cache(maxsize=1024)
def pack_groups(view, pack: int):
    """The GEMM view of ``pack`` consecutive groups per GEMM: the view itself for 1 (or a view
    already packed ``pack``), else the block-diagonal GEMM (see the module).  ValueError where
    ``pack`` is not valid for the view."""
    if pack == view.group_pack:
        return view
    why = why_not_packed(view, pack)
    if why is not None:
        raise ValueError(why)
    a, b, c = view.a, view.b, view.c
    cg, kg = a.map.channels, view.n
    packed = f" of {pack} packed groups"
    a_op = replace(a, map=replace(a.map, channels=pack * cg), run=pack * a.run,
                   run_name=a.run_name.replace(" per group", "") + packed)
    # Along B's copy axis a vector must stay within one group's block: its output channels
    # (row-major), or its channels of one filter tap (column-major).
    run = math.gcd(b.run, cg if b.layout == COL_MAJOR else kg)
    b_op = replace(b, map=BlockDiagonal(b.map, pack, cg, kg), run=run,
                   run_name=b.run_name if run == b.run else "input channels of a group (a block of the packed B)")
    c_op = replace(c, map=replace(c.map, group_cols=pack * kg), run=pack * c.run,
                   run_name=c.run_name.replace(" per group", "") + packed)
    return replace(view, n=pack * view.n, k=pack * view.k, a=a_op, b=b_op, c=c_op, groups=view.groups // pack,
                   group_pack=pack)


def packed_or_view(view, pack: int):
    """``pack_groups`` where ``pack`` is valid for the view, else the view itself (what the rules
    read of a row whose group_pack a rule rejects anyway)."""
    return pack_groups(view, pack) if why_not_packed(view, pack) is None else view


# (name, function of a view) of what ``rules.derive`` reads per row of the packed view
PACKED_VALUES = (("gemm_n", lambda v: v.n), ("gemm_k", lambda v: v.k), ("gemm_groups", lambda v: v.groups),
                 ("run_a", lambda v: v.a.run), ("run_b", lambda v: v.b.run), ("run_c", lambda v: v.c.run))
