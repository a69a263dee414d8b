"""A conv2d's weight as ``conv2d.Conv2dWorkload`` holds it: its layout and its groups.

Kept apart from the spec parser (``conv2d``) so that the workload type gains two fields and two
spec keys, and everything else about them lives here.

Layouts name the weight tensor's dims, outermost first (G groups of C/G input channels each):

    HWIO  [R, S, C/G, K]  the kernels' own layout, and what every shipped record was tuned with
    OIHW  [K, C/G, R, S]  ``nn.Conv2d.weight`` as PyTorch holds it (contiguous)
    OHWI  [K, R, S, C/G]  ``nn.Conv2d.weight`` in channels_last memory: ``weight.permute(0, 2,
                          3, 1)`` is this tensor, the same memory

A grouped conv (``groups=G``) splits the C input and K output channels into G groups; the
outputs of group g read only its inputs (channels g*C/G ..), through their own filters: G
implicit GEMMs, each M = N*OH*OW, N = K/G, K = R*S*C/G.  With one input channel per group
(depthwise, G == C) a GEMM has a reduction of R*S: no Tensor Core case, so no workload.
No imports: plain data and arithmetic.
"""

from __future__ import annotations

WEIGHT_LAYOUTS = ("HWIO", "OIHW", "OHWI")
DEFAULT_LAYOUT = "HWIO"

# The axes ``numpy.transpose`` takes to make a layout's tensor HWIO (and their inverse).
TO_HWIO = {"HWIO": (0, 1, 2, 3), "OIHW": (2, 3, 1, 0), "OHWI": (1, 2, 3, 0)}
FROM_HWIO = {"HWIO": (0, 1, 2, 3), "OIHW": (3, 2, 0, 1), "OHWI": (3, 0, 1, 2)}

DEPTHWISE = ("a depthwise conv (one input channel per group) is no Tensor Core GEMM (its reduction is the "
             "R x S taps alone): run it with PyTorch's conv (the torch interface does)")


def canonical_layout(layout) -> str:
    """The layout's name as specs spell it (upper case); ValueError for an unknown one."""
    name = layout.upper() if isinstance(layout, str) else layout
    if name not in WEIGHT_LAYOUTS:
        raise ValueError(f"unknown weight_layout {layout!r}: expected one of {', '.join(WEIGHT_LAYOUTS)}")
    return name


def check_groups(groups, in_channels: int, out_channels: int) -> None:
    """ValueError, one line, unless ``groups`` divides both channel counts and leaves more than
    one input channel per group."""
    if not isinstance(groups, int) or isinstance(groups, bool) or groups <= 0:
        raise ValueError(f"groups must be a positive integer, got {groups!r}")
    if in_channels % groups or out_channels % groups:
        raise ValueError(f"groups={groups} does not divide the channels: {in_channels} in, {out_channels} out")
    if groups > 1 and in_channels == groups:
        raise ValueError(f"groups={groups} with {in_channels} input channels: {DEPTHWISE}")


def weight_shape(layout: str, kernel_h: int, kernel_w: int, group_channels: int, out_channels: int):
    """The weight tensor's shape in ``layout`` (``group_channels``: C/G)."""
    r, s, c, k = kernel_h, kernel_w, group_channels, out_channels
    return {"HWIO": (r, s, c, k), "OIHW": (k, c, r, s), "OHWI": (k, r, s, c)}[layout]


def filter_of(layout: str, shape) -> tuple[int, int, int, int]:
    """(R, S, C/G, K) of a weight tensor's ``shape`` in ``layout``."""
    dims = tuple(int(x) for x in shape)
    return tuple(dims[axis] for axis in TO_HWIO[layout])


def spec_items(groups: int, layout: str) -> str:
    """The spec's ``,groups=G`` and ``,weight_layout=L`` items, each only where it is not the
    default: the spec strings of ungrouped HWIO workloads, which records key on, stay as they were."""
    return (f",groups={groups}" if groups != 1 else "") + (f",weight_layout={layout}" if layout != DEFAULT_LAYOUT
                                                         else "")
