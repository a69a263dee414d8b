"""What the workload kinds (``conv2d``, ``dense``) share: the grammar of their spec strings and the
dtype and size rules both are checked by.

A spec body is comma-separated ``key=value`` items (``spec_items``), each distinct spec parsed
once per workload class (``cached_parse``).  The dtypes: fp8's names (NVIDIA's e4m3 is stored as
``float8_e4m3fn``, the name TVM, ml_dtypes and PyTorch give it; the issue's ``float8_e4m3`` is only
read), which output dtypes an operand dtype writes (``check_dtypes``), and the 32-bit index bound
of every tensor (``check_elements``).  Imports nothing of the package: both kinds stand on it, and
neither on the other.
"""

from __future__ import annotations

import functools
import math

E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"
FP8_DTYPES = (E4M3, E5M2)  # dense only: conv2d refuses them
# Spellings read as another dtype: the name of e4m3 (see the module).
DTYPE_ALIASES = {"float8_e4m3": E4M3}

# The kernels index every tensor with 32-bit ints (the template's index maps and loop variables
# are int32, and TVM emits `int` index arithmetic from them): a tensor of 2**31 elements or more
# would be read and written at wrapped-around addresses, so such a workload is refused when it
# is made, not when TVM or nvcc fails on it (or the kernel corrupts memory).
MAX_ELEMENTS = 2**31 - 1


def check_dtypes(dtype: str, out_dtype: str) -> None:
    """ValueError for an output dtype the operands' dtype does not write: bf16 operands write fp32 or
    bf16 (an fp16 output could not hold bf16's range: values past 65504 would become inf), and only
    they and fp8 ones write bf16 (fp16 and fp32 inputs have fp16 Tensor Core operands: their outputs
    are fp16's; fp8 ones write any of the three, as torch._scaled_mm).  Conv2d and dense workloads
    are checked with it."""
    if out_dtype == "bfloat16" and dtype not in ("bfloat16", *FP8_DTYPES):
        raise ValueError(f"out_dtype=bfloat16 needs dtype=bfloat16, not {dtype}")
    if dtype == "bfloat16" and out_dtype == "float16":
        raise ValueError("dtype=bfloat16 writes out_dtype float32 or bfloat16, not float16")


def check_elements(tensors: dict) -> None:
    """ValueError for the first of ``tensors`` (name -> shape) with more than MAX_ELEMENTS."""
    for name, shape in tensors.items():
        count = math.prod(shape)
        if count > MAX_ELEMENTS:
            raise ValueError(f"{name} {'x'.join(map(str, shape))} has {count:.3g} elements: the kernels index "
                             f"with 32-bit integers, at most {MAX_ELEMENTS} elements per tensor")


# One parse per distinct spec and workload class: a log names its workload in every record and a
# stored zero-shot model in each of its best lists (workloads are frozen: one object serves all).
@functools.lru_cache(maxsize=4096)
def cached_parse(cls, spec: str):
    """``cls._parse(spec)``, once per distinct (class, spec)."""
    return cls._parse(spec)


def spec_items(body: str, known, what: str) -> dict[str, str]:
    """The ``key=value`` items of a spec body (comma-separated, spaces ignored), raw values by
    key; ValueError for a malformed item, an unknown key or one given twice (``what``: the
    spec's name in messages)."""
    items: dict[str, str] = {}
    for item in body.replace(" ", "").split(","):
        if not item:
            continue
        key, eq, raw = item.partition("=")
        if not eq or not raw:
            raise ValueError(f"malformed item {item!r} in {what} (expected key=value)")
        if key not in known:
            raise ValueError(f"unknown key {key!r} in {what} (known: {', '.join(known)})")
        if key in items:
            raise ValueError(f"key {key!r} given twice in {what}")
        items[key] = raw
    return items


__all__ = ["E4M3", "E5M2", "FP8_DTYPES", "DTYPE_ALIASES", "MAX_ELEMENTS", "check_dtypes", "check_elements",
           "cached_parse", "spec_items"]
