"""The GPU a kernel is built for: its compute capability and the limits the space checks.

A GPU's facts come from its driver (``driver``: SM count, opt-in shared memory per block,
registers, compute capability), never from a table: a local device's through ``libcuda``, an
RPC server's through the function ``GPU_FACTS`` it registers (``register``).

A machine without a GPU (CI, a build host) still generates and compiles kernels for an arch:
``gpu_for_arch`` gives a nominal GPU of it (``GpuInfo.nominal``), an assumption said as one:
the arch's own limits, which every GPU of it has, and the SM count of a reference part (see
``_NOMINAL``).  No kernel's code or launch depends on the SM count: the persistent kernel reads
its device's when it launches (``warp_specialized.tvm_module``), so an assumed count costs a
build-only machine's picks their fit to the GPU, never a kernel its correctness.

"No GPU here" (no NVIDIA driver, no device node, none visible to this process) is a normal
state: build-only machines and CI have none.  "A GPU is here but fails" (the driver or TVM's
CUDA runtime cannot use it) is a broken host: ``probe_local_gpu`` tells the two apart and
logs the reason of the second, so neither a command nor the GPU test suite takes it for a
machine without a GPU.
"""

from __future__ import annotations

import functools
import glob
import json
import logging
import os
import re
from dataclasses import asdict, dataclass

from . import driver

log = logging.getLogger(__name__)

GPU_FACTS = "tc_autotune.gpu_facts"  # the global function ``register`` installs (RPC servers)


class NoGpuError(RuntimeError):
    """A CUDA GPU is needed (to measure, to run a kernel) and none can be used."""


# The nominal GPU of an arch, for machines without one: (opt-in shared memory per block, the
# SMs assumed).  The shared memory is the arch's own limit (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability"), the same on every GPU of it; the SM count
# is a reference part's, which only the search reads (the split-K rule, the prior, the
# features).  An arch not here gets the 48 KB every arch gives a block and 80 SMs.
_NOMINAL = {
    "sm_70": (96 * 1024, 80),  # V100
    "sm_75": (64 * 1024, 40),  # T4
    "sm_80": (163 * 1024, 108),  # A100
    "sm_86": (99 * 1024, 84),  # A40
    "sm_87": (163 * 1024, 80),  # Jetson Orin (16 SMs at most): the default count
    "sm_89": (99 * 1024, 128),  # RTX 4090
    "sm_90": (227 * 1024, 132),  # H100 SXM, H200
}
_OTHER_ARCH = (48 * 1024, 80)


@dataclass(frozen=True)
class GpuInfo:
    """What the knob space and the cost model need to know about a GPU.  ``nominal``: the facts
    are ``gpu_for_arch``'s assumptions, not read from a device."""

    name: str
    arch: str  # "sm_90"
    sm_count: int
    max_threads_per_block: int = 1024
    max_smem_per_block: int = 227 * 1024  # opt-in dynamic shared memory
    max_registers_per_block: int = 64 * 1024
    nominal: bool = False

    @property
    def compute_capability(self) -> str:
        return f"{self.arch[3:-1]}.{self.arch[-1]}"


def gpu_for_arch(arch: str = "sm_90") -> GpuInfo:
    """The nominal GPU of an architecture, for use without the device (see ``_NOMINAL``)."""
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        raise ValueError(f"unknown CUDA architecture {arch!r} (expected e.g. sm_90)")
    smem, sm_count = _NOMINAL.get(arch, _OTHER_ARCH)
    return GpuInfo(name=f"generic {arch}", arch=arch, sm_count=sm_count, max_smem_per_block=smem, nominal=True)


def has_pdl(arch: str) -> bool:
    """Whether ``arch`` ("sm_90", "sm_90a", "sm_100a") has Programmatic Dependent Launch: a kernel
    launched while its predecessor in the stream still runs, ordered by ``griddepcontrol``
    (PTX ISA 7.8, sm_90 and above)."""
    digits = arch.removeprefix("sm_").rstrip("af")
    return digits.isdigit() and int(digits) >= 90


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


def gpu_from_facts(facts: driver.DeviceFacts) -> GpuInfo:
    """The ``GpuInfo`` of a device the driver described."""
    return GpuInfo(name=facts.name, arch=facts.arch, sm_count=facts.sm_count,
                   max_threads_per_block=facts.max_threads_per_block,
                   max_smem_per_block=facts.max_smem_per_block_optin,
                   max_registers_per_block=facts.max_registers_per_block)


def gpu_from_device(dev) -> GpuInfo:
    """The ``GpuInfo`` of a local TVM CUDA device (``tvm.cuda(i)``), read from the driver."""
    return gpu_from_facts(driver.device_facts(dev.index))


def remote_gpu(session, dev) -> GpuInfo:
    """The ``GpuInfo`` of an RPC session's CUDA device ``dev``, read from the server's driver by
    its ``GPU_FACTS`` (a server started by ``measure.rpc_server`` has it)."""
    facts = json.loads(session.get_function(GPU_FACTS)(dev.index))
    return gpu_from_facts(driver.DeviceFacts(**facts))


def register() -> None:
    """Install ``GPU_FACTS`` in this process's TVM: device index -> the driver's facts of that
    GPU as JSON (an RPC server's process: ``measure.rpc_server``)."""
    import tvm_ffi

    tvm_ffi.register_global_func(GPU_FACTS, lambda index: json.dumps(asdict(driver.device_facts(int(index)))),
                                 override=True)


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
