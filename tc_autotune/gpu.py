"""The GPU a kernel is built for: its compute capability and the limits the space checks.

With a CUDA GPU present the facts come from the device; otherwise from a table
keyed by architecture (sm_90 by default) so configs can be checked and kernels
generated on machines without a GPU.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# Opt-in dynamic shared memory per block and SM counts of common parts, by arch.
_SMEM_OPTIN = {"sm_70": 96 * 1024, "sm_75": 64 * 1024, "sm_80": 163 * 1024, "sm_86": 99 * 1024,
               "sm_87": 163 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024}
_SM_COUNT = {"sm_70": 80, "sm_75": 40, "sm_80": 108, "sm_86": 84, "sm_89": 128, "sm_90": 132}


@dataclass(frozen=True)
class GpuInfo:
    """What the knob space and the cost model need to know about a GPU."""

    name: str
    arch: str  # "sm_90"
    sm_count: int
    max_threads_per_block: int = 1024
    max_smem_per_block: int = 227 * 1024

    @property
    def compute_capability(self) -> str:
        return f"{self.arch[3:-1]}.{self.arch[-1]}"


def gpu_for_arch(arch: str = "sm_90") -> GpuInfo:
    """Nominal limits of an architecture, for use without the device."""
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        raise ValueError(f"unknown CUDA architecture {arch!r} (expected e.g. sm_90)")
    return GpuInfo(
        name=f"generic {arch}",
        arch=arch,
        sm_count=_SM_COUNT.get(arch, 80),
        max_smem_per_block=_SMEM_OPTIN.get(arch, 48 * 1024),
    )


@functools.lru_cache(maxsize=None)
def local_gpu() -> GpuInfo | None:
    """The first CUDA device, or None when there is no usable CUDA GPU."""
    import tvm

    try:
        dev = tvm.cuda(0)
        if not dev.exist:
            return None
        return gpu_from_device(dev)
    except Exception:  # no driver, no runtime library: treat as no GPU
        return None


def gpu_from_device(dev) -> GpuInfo:
    """The ``GpuInfo`` of a TVM CUDA device, local or remote (an RPC session's ``cuda(0)``):
    the limits the space checks configs against, read from the device itself."""
    major, minor = dev.compute_version.split(".")
    arch = f"sm_{major}{minor}"
    return GpuInfo(
        name=dev.device_name,
        arch=arch,
        sm_count=dev.multi_processor_count,
        max_threads_per_block=dev.max_threads_per_block,
        max_smem_per_block=_SMEM_OPTIN.get(arch, dev.max_shared_memory_per_block),
    )


def gpu_log_name(gpu_name: str) -> str:
    """File name of a GPU's best log: 'NVIDIA H200' -> 'nvidia-h200.jsonl'."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") + ".jsonl"


def default_gpu() -> GpuInfo:
    """The local GPU if there is one, else nominal sm_90."""
    return local_gpu() or gpu_for_arch("sm_90")


def cuda_target(arch: str | None = None):
    """A TVM CUDA target for ``arch`` (default: the local GPU's, else sm_90)."""
    import tvm

    arch = arch or default_gpu().arch
    return tvm.target.Target({"kind": "cuda", "arch": arch})
