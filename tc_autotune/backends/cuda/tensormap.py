"""TMA tensor maps TVM 0.27's host code cannot encode: the im2col mode (``tma_im2col``).

TVM's host code encodes tiled maps only (``cuTensorMapEncodeTiled``).  A kernel whose A is an
im2col map has its host code call the packed function ``ENCODE_IM2COL`` instead, on every call
(the map holds the data's address), with the map's stack slot, the data pointer and the
integers ``warp_specialized.Im2colBox.encode_args`` lists; it fills the slot through the CUDA
driver's ``cuTensorMapEncodeIm2col`` (ctypes, no context needed: encoding is host-only).

A process that runs such a kernel must have called ``register`` (building one does; the local
runner does at start).  A bare ``tvm.exec.rpc_server`` has not, so there those candidates
cannot run (TVM's function-not-found error, the candidate's error); a server started from a
Python that has called ``register`` can run them.
"""

from __future__ import annotations

import ctypes
import functools

ENCODE_IM2COL = "tc_autotune.encode_im2col_tensormap"
MAP_BYTES, MAP_ALIGN = 128, 64  # a CUtensorMap

_FLOAT16 = 6  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16
_SWIZZLE_128B = 3  # CU_TENSOR_MAP_SWIZZLE_128B: the wgmma tiles' swizzle
_ZERO_FILL = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements (padding) read 0


@functools.cache
def _driver():
    """The CUDA driver's cuTensorMapEncodeIm2col, typed."""
    encode = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeIm2col
    u64p, intp, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint32)
    encode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, intp, intp,
                       ctypes.c_uint32, ctypes.c_uint32, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    encode.restype = ctypes.c_int
    return encode


def im2col_arguments(c, w, h, n, stride_w, stride_h, stride_n, lower_w, lower_h, upper_w, upper_h,
                     channels, pixels, traversal_w, traversal_h) -> tuple:
    """cuTensorMapEncodeIm2col's arguments after the map and the data pointer, as ctypes arrays
    (every array innermost dimension first: c, w, h, n)."""
    return (_FLOAT16, 4, (ctypes.c_uint64 * 4)(c, w, h, n), (ctypes.c_uint64 * 3)(stride_w, stride_h, stride_n),
            (ctypes.c_int * 2)(lower_w, lower_h), (ctypes.c_int * 2)(upper_w, upper_h), channels, pixels,
            (ctypes.c_uint32 * 4)(1, traversal_w, traversal_h, 1), 0, _SWIZZLE_128B, 0, _ZERO_FILL)


@functools.lru_cache(maxsize=256)
def _im2col_map(data: int, args: tuple) -> bytes:
    """The 128-byte map of the data at address ``data``: a pure function of its arguments, cached
    because a kernel's host code asks for it on every call, and ctypes and the driver's encoding
    would add their microseconds to every launch."""
    dtype, rank, dims, strides, lower, upper, channels, pixels, traversal, *modes = im2col_arguments(*args)
    buffer = ctypes.create_string_buffer(MAP_BYTES + MAP_ALIGN)  # the map must be 64-byte aligned
    slot = ctypes.addressof(buffer) + -ctypes.addressof(buffer) % MAP_ALIGN
    status = _driver()(slot, dtype, rank, data, dims, strides, lower, upper, channels, pixels, traversal, *modes)
    if status != 0:
        raise RuntimeError(f"cuTensorMapEncodeIm2col failed (CUresult {status}) for dims {list(dims)}, "
                           f"corners {list(lower)} / {list(upper)}, {pixels} pixels")
    return ctypes.string_at(slot, MAP_BYTES)


def encode_im2col(tmap, data, *args) -> int:
    """Fill the map's slot ``tmap`` for the data at ``data`` (both ctypes pointers from the host code)."""
    ctypes.memmove(tmap, _im2col_map(data.value or 0, tuple(args)), MAP_BYTES)
    return 0


def register() -> None:
    """Make ``ENCODE_IM2COL`` callable from this process's kernels (idempotent)."""
    import tvm_ffi

    if tvm_ffi.get_global_func(ENCODE_IM2COL, allow_missing=True) is None:
        tvm_ffi.register_global_func(ENCODE_IM2COL, encode_im2col)
