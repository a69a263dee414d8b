"""What a GPU can physically do: the floor under any honest timing of a workload.

A record is one line of JSON anybody can write (or a timer bug can produce); a time of
1e-12 s for a conv would take over ``load_best`` and be applied everywhere.  Costs of zero
or below are refused by the record parser; this module refuses the merely impossible: a
time below what the workload's FLOPs need at the GPU's dense fp16 Tensor Core peak, or
below what its minimum traffic (each input element it touches read once, the output written
once) needs at the memory's peak bandwidth.

The memory floor counts only the bytes that cannot stay in L2: a timer launches a kernel
back to back on the same buffers, so a workload that fits in L2 is served from it (a shipped
H100 record of a 32 MB dense layer moves 3.7 TB/s, above HBM's 3.35).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Datasheet dense (no sparsity) fp16 Tensor Core TFLOP/s, memory TB/s and L2 size.  Why a
# margin of 1.5x over them, not 1.0: the figures are rounded datasheet numbers at a nominal
# boost clock, a part may run above it, and L2 residency is only partly modelled (part of a
# working set larger than L2 still hits in it).  The shipped records reach at most 0.73 of
# the compute peak and 0.71 of the off-L2 bandwidth (0.49 of the floor drawn here); a corrupt
# or forged time is off by orders of magnitude, so the margin costs no protection.
MARGIN = 1.5


@dataclass(frozen=True)
class Peak:
    tflops: float  # dense fp16 Tensor Core TFLOP/s
    tb_per_s: float  # memory bandwidth, TB/s
    l2_mb: float  # L2 cache, MB (bytes up to this much may never leave the chip)


# Matched against the record's GPU name (provenance "gpu"), most specific first.
_BY_NAME = (
    ("H200", Peak(990, 4.8, 60)),  # 50 MB of L2; 60 and the margin cover GH200 parts too
    ("H100 NVL", Peak(835, 3.9, 50)),
    ("H100", Peak(990, 3.35, 50)),  # SXM, the fastest H100
    ("A100", Peak(312, 2.0, 40)),
)
# A GPU we do not name: its arch's fastest part.
_BY_ARCH = {"sm_90": Peak(990, 4.8, 60), "sm_80": Peak(312, 2.0, 40)}
# Neither known: above every part shipped so far (B200: ~2250 TFLOP/s, 8 TB/s, 126 MB), so an
# unknown GPU is never refused a real timing; only the absurd is.
GENERIC = Peak(5000, 20, 256)


def peak_of(gpu: str | None, arch: str | None) -> Peak:
    """The peaks of the GPU named ``gpu`` (a device name, e.g. "NVIDIA H100 80GB HBM3"),
    else of its ``arch`` ("sm_90"), else ``GENERIC``."""
    name = (gpu or "").upper()
    for key, peak in _BY_NAME:
        if key in name:
            return peak
    return _BY_ARCH.get(arch or "", GENERIC)


_BYTES = {"float16": 2, "float32": 4, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
# Tensor Core rate of an operand dtype over fp16's: fp8 runs at twice it (H100 SXM: 1979 dense
# TFLOP/s against 990), so an fp8 record may pass fp16's compute peak.
_RATE = {"float8_e4m3fn": 2}
_MAX_TAPS = 64


def _touched(size: int, out: int, taps: int, stride: int, dilation: int, pad: int) -> tuple[int, int]:
    """(a lower bound on the input positions read along one axis, how many taps read any):
    the positions one tap reads are distinct, so their number bounds the union from below.
    Only the first ``_MAX_TAPS`` taps are looked at (still a lower bound), so a forged
    kernel size cannot stall a reader."""
    most, used = 0, 0
    for tap in range(min(taps, _MAX_TAPS)):
        offset = tap * dilation - pad  # the input position output 0 reads through this tap
        first = max(0, -(offset // stride))  # the first output whose position is >= 0
        last = min(out - 1, (size - 1 - offset) // stride)  # the last one inside the input
        count = max(0, last - first + 1)
        most, used = max(most, count), used + (count > 0)
    return most, used


def min_bytes(workload) -> int:
    """Bytes a kernel must move at least: the input elements it reads (a lower bound where a
    stride skips some), the weights whose taps reach the input, and the output, once each.
    A fused epilogue's inputs are left out: fewer bytes only make the floor lower."""
    out_bytes = math.prod(workload.out_shape) * _BYTES.get(workload.out_dtype, 2)
    size = _BYTES.get(workload.dtype, 2)
    if hasattr(workload, "a_shape"):  # dense: A, B and C all touched whole
        return (math.prod(workload.a_shape) + math.prod(workload.b_shape)) * size + out_bytes
    top, left, _, _ = workload.padding
    rows, taps_h = _touched(workload.in_height, workload.out_height, workload.kernel_h,
                            workload.stride[0], workload.dilation[0], top)
    cols, taps_w = _touched(workload.in_width, workload.out_width, workload.kernel_w,
                            workload.stride[1], workload.dilation[1], left)
    data = workload.batch * rows * cols * workload.in_channels
    weights = taps_h * taps_w * workload.in_channels * workload.out_channels
    return (data + weights) * size + out_bytes


def floor_seconds(workload, gpu: str | None, arch: str | None) -> float:
    """The least time ``workload`` can take on that GPU, ``MARGIN`` included."""
    peak = peak_of(gpu, arch)
    compute = workload.flops / (peak.tflops * _RATE.get(workload.dtype, 1) * 1e12 * MARGIN)
    off_chip = max(0, min_bytes(workload) - peak.l2_mb * 1e6)
    memory = off_chip / (peak.tb_per_s * 1e12 * MARGIN)
    return max(compute, memory)


__all__ = ["MARGIN", "GENERIC", "Peak", "peak_of", "min_bytes", "floor_seconds"]
