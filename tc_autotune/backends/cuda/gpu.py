"""The GPU a kernel is built for: its compute capability and the limits the space checks.

With a CUDA GPU present the facts come from the device; otherwise from a table
keyed by architecture (sm_90 by default) so configs can be checked and kernels
generated on machines without a GPU.

"No GPU here" (no NVIDIA driver, no device node, none visible to this process) is a normal
state: build-only machines and CI have none.  "A GPU is here but fails" (the driver or TVM's
CUDA runtime cannot use it) is a broken host: ``probe_local_gpu`` tells the two apart and
logs the reason of the second, so neither a command nor the GPU test suite takes it for a
machine without a GPU.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import re
from dataclasses import dataclass

log = logging.getLogger(__name__)


class NoGpuError(RuntimeError):
    """A CUDA GPU is needed (to measure, to run a kernel) and none can be used."""

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


@dataclass(frozen=True)
class GpuProbe:
    """What ``probe_local_gpu`` found: the GPU, or None with ``problem`` saying why a GPU
    that is here cannot be used (None: there is no GPU here, nothing is wrong)."""

    gpu: GpuInfo | None
    problem: str | None = None

    def no_gpu_message(self) -> str:
        """One line for a command that needs a GPU and has none."""
        if self.problem:
            return f"no usable CUDA GPU: {self.problem}"
        return "no CUDA GPU found"


@functools.lru_cache(maxsize=None)
def probe_local_gpu() -> GpuProbe:
    """The first CUDA device, or why there is none: no GPU here (``problem`` None), or a GPU
    whose driver or TVM CUDA runtime fails (``problem`` says how; logged as a warning)."""
    import tvm

    try:
        dev = tvm.cuda(0)
        if dev.exist:
            return GpuProbe(gpu_from_device(dev))
        failure = "TVM's CUDA runtime finds no device (tvm.cuda(0).exist is False)"
    except Exception as err:  # the driver or the runtime library fails: which, said below
        failure = f"{type(err).__name__}: {_last_line(err)}"
    present = gpu_hardware()
    if present is None:
        return GpuProbe(None)
    problem = f"{present}, but {failure}"
    log.warning("a CUDA GPU is here but cannot be used: %s", problem)
    return GpuProbe(None, problem)


def local_gpu() -> GpuInfo | None:
    """The first CUDA device, or None when there is no usable CUDA GPU (``probe_local_gpu``
    says whether there is none or it fails)."""
    return probe_local_gpu().gpu


def gpu_hardware() -> str | None:
    """What shows an NVIDIA GPU attached and visible to this process, in words, or None: the
    driver's list of GPUs (/proc/driver/nvidia/gpus) or a GPU device node (/dev/nvidiaN, what
    a container is given).  CUDA_VISIBLE_DEVICES set to nothing (or -1) hides every GPU."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() in ("", "-1"):
        return None
    listed = glob.glob("/proc/driver/nvidia/gpus/*")
    if listed:
        return f"the NVIDIA driver lists {len(listed)} GPU(s) in /proc/driver/nvidia/gpus"
    nodes = sorted(p for p in glob.glob("/dev/nvidia*") if p[len("/dev/nvidia"):].isdigit())
    if nodes:
        return f"GPU device node {nodes[0]} exists"
    return None


def _last_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


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
