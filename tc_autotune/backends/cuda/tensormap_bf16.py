"""TMA im2col tensor maps of bf16 data: ``tensormap``'s encoder with bf16 elements.

A bf16 kernel's host code calls ``ENCODE_IM2COL`` here with the arguments ``tensormap``'s takes;
the map differs only in its element type (``BFLOAT16``).  It is a module of its own, beside
``tensormap``, because that file's hash keys the records of every fp16 ``tma_im2col`` kernel
(``api.kernel.kernel_code_hash``: the host sources a kernel calls), so adding a parameter there
would have made them stale; a bf16 kernel's key takes both files.  ``register`` in every process
that runs bf16 im2col kernels, as ``tensormap.register``.
"""

from __future__ import annotations

import ctypes
import functools

from . import tensormap

ENCODE_IM2COL = "tc_autotune.encode_im2col_tensormap_bf16"
BFLOAT16 = 9  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 (FLOAT16 is 6)


@functools.lru_cache(maxsize=256)
def _im2col_map(data: int, args: tuple) -> bytes:
    """``tensormap._im2col_map`` with bf16 elements: a pure function of its arguments, cached as
    that one (a kernel's host code asks on every call)."""
    _, rank, dims, strides, lower, upper, channels, pixels, traversal, *modes = tensormap.im2col_arguments(*args)
    buffer = ctypes.create_string_buffer(tensormap.MAP_BYTES + tensormap.MAP_ALIGN)  # 64-byte aligned map
    slot = ctypes.addressof(buffer) + -ctypes.addressof(buffer) % tensormap.MAP_ALIGN
    status = tensormap._driver()(slot, BFLOAT16, rank, data, dims, strides, lower, upper, channels, pixels,
                                 traversal, *modes)
    if status != 0:
        raise RuntimeError(f"cuTensorMapEncodeIm2col failed (CUresult {status}) for bf16 dims {list(dims)}, "
                           f"corners {list(lower)} / {list(upper)}, {pixels} pixels")
    return ctypes.string_at(slot, tensormap.MAP_BYTES)


def encode_im2col(tmap, data, *args) -> int:
    """Fill the map's slot ``tmap`` for the bf16 data at ``data`` (``tensormap.encode_im2col``'s arguments)."""
    ctypes.memmove(tmap, _im2col_map(data.value or 0, tuple(args)), tensormap.MAP_BYTES)
    return 0


def register() -> None:
    """Make ``ENCODE_IM2COL`` and ``tensormap.ENCODE_IM2COL`` callable from this process's kernels
    (idempotent): what a process that runs im2col kernels of either dtype calls."""
    import tvm_ffi

    tensormap.register()
    if tvm_ffi.get_global_func(ENCODE_IM2COL, allow_missing=True) is None:
        tvm_ffi.register_global_func(ENCODE_IM2COL, encode_im2col)
