"""A CUDA GPU's facts, read from the CUDA driver (``libcuda.so.1`` through ctypes).

Why the driver and not TVM's device attributes: TVM reports the shared memory a block gets
without opting in (48 KB), not the opt-in limit a kernel with dynamic shared memory may take
(227 KB on Hopper), and no registers per block.  The driver has every attribute, needs no TVM
(the light modules can read it), and is loaded by every process that runs CUDA (the timer
calls it too: ``libcuda`` is its library).

No driver library, or a driver that finds no GPU (``CUDA_ERROR_NO_DEVICE``), is
``NoDriverError``: there is no GPU here, the normal state of a build-only machine or CI.  Any
other failure is a ``DriverError`` naming the call and CUDA's error.  Both say it in one line.

``lib`` is what the functions call: ``libcuda()`` unless given; the tests give a stand-in with
the same functions (``tests/fake_cuda.py``).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

LIBRARY = "libcuda.so.1"

# CUdevice_attribute values, as cuda.h (CUDA 13.0) numbers them
MAX_THREADS_PER_BLOCK = 1
MAX_REGISTERS_PER_BLOCK = 12
MULTIPROCESSOR_COUNT = 16
COMPUTE_CAPABILITY_MAJOR = 75
COMPUTE_CAPABILITY_MINOR = 76
MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
_NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE: a driver, but no GPU it may use
_NAME_BYTES = 256  # what cuDeviceGetName may write, its terminating NUL included


class DriverError(RuntimeError):
    """The CUDA driver failed: one line naming the call and CUDA's error."""


class NoDriverError(DriverError):
    """There is no GPU here: no CUDA driver library, or a driver that finds no device."""


@dataclass(frozen=True)
class DeviceFacts:
    """What the driver says of one device (its ordinal ``index`` among the visible ones)."""

    index: int
    name: str
    major: int
    minor: int
    sm_count: int
    max_threads_per_block: int
    max_registers_per_block: int
    max_smem_per_block_optin: int  # what a block may take by opting in (dynamic shared memory)
    max_smem_per_sm: int

    @property
    def arch(self) -> str:
        return f"sm_{self.major}{self.minor}"


def libcuda():
    """The CUDA driver library (ctypes); ``NoDriverError`` where it is not installed."""
    try:
        return ctypes.CDLL(LIBRARY)
    except OSError as err:
        raise NoDriverError(f"no CUDA driver here ({LIBRARY}: {err})") from None


def describe(lib, code: int) -> str:
    """CUDA's name and text of the error ``code`` ("CUDA_ERROR_NO_DEVICE: no CUDA-capable ...")."""
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    lib.cuGetErrorName(code, ctypes.byref(name))
    lib.cuGetErrorString(code, ctypes.byref(text))
    label = (name.value or b"").decode(errors="replace") or f"CUDA error {code}"
    return f"{label}: {(text.value or b'').decode(errors='replace')}".rstrip(": ")


def _call(lib, name: str, *args) -> None:
    code = getattr(lib, name)(*args)
    if code == _NO_DEVICE:
        raise NoDriverError(f"the CUDA driver finds no GPU ({name}: {describe(lib, code)})")
    if code != 0:
        raise DriverError(f"{name} failed: {describe(lib, code)}")


def _int(lib, name: str, *args) -> int:
    """The int a call writes through its first argument."""
    value = ctypes.c_int()
    _call(lib, name, ctypes.byref(value), *args)
    return value.value


def initialized(lib=None):
    """``lib`` (default ``libcuda()``) after ``cuInit``, which every other call needs."""
    lib = libcuda() if lib is None else lib
    _call(lib, "cuInit", 0)
    return lib


def device_count(lib=None) -> int:
    """How many GPUs this process may use: 0 where there is none (``NoDriverError``)."""
    try:
        return _int(initialized(lib), "cuDeviceGetCount")
    except NoDriverError:
        return 0


def device_facts(index: int = 0, lib=None) -> DeviceFacts:
    """The facts of GPU ``index`` of this process (as CUDA_VISIBLE_DEVICES numbers them)."""
    lib = initialized(lib)
    count = _int(lib, "cuDeviceGetCount")
    if not 0 <= index < count:
        raise NoDriverError(f"there is no CUDA GPU {index} here (the driver sees {count})")
    device = _int(lib, "cuDeviceGet", index)
    name = ctypes.create_string_buffer(_NAME_BYTES)
    _call(lib, "cuDeviceGetName", name, _NAME_BYTES, device)

    def attribute(number: int) -> int:
        return _int(lib, "cuDeviceGetAttribute", number, device)

    return DeviceFacts(
        index=index, name=name.value.decode(errors="replace"),
        major=attribute(COMPUTE_CAPABILITY_MAJOR), minor=attribute(COMPUTE_CAPABILITY_MINOR),
        sm_count=attribute(MULTIPROCESSOR_COUNT), max_threads_per_block=attribute(MAX_THREADS_PER_BLOCK),
        max_registers_per_block=attribute(MAX_REGISTERS_PER_BLOCK),
        max_smem_per_block_optin=attribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        max_smem_per_sm=attribute(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR))


__all__ = ["LIBRARY", "DriverError", "NoDriverError", "DeviceFacts", "libcuda", "describe", "initialized",
           "device_count", "device_facts"]
