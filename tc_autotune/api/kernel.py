"""A built kernel (``Kernel``) and its making (``compile_kernel``): a task's template applied to
one workload and config, ready to run.  One kernel class serves every task: its tensors are the
task's signature.  ``build`` chooses the config (``build_conv2d``, ``build_dense``).

Here the code a config generates is known, so here records are checked against it
(``verify_record``): a build that takes an unverified record (its template's sources changed
since it was stamped) hashes the code it lowered anyway, and uses the record only where that is
the code the record timed (``database.record``).  ``code_hashes`` does the same for
``tc-records --restamp``, many configs at once.

A kernel may be built with Programmatic Dependent Launch (``pdl``, sm_90+: ``tc_gemm.pdl``), so
that in a stream of kernels (a model) it starts while the one before it finishes.  Records are
always of the plain build: the tuner's runner times a kernel alone, where PDL has nothing to
overlap, and a PDL build of a record's config is the same main loop launched differently.  So
everything that checks or stamps records (``verify_record``, ``code_hash_of``, ``code_hashes``)
lowers the plain code, and a PDL build never notes its code hash for them.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import contextlib
import logging
import multiprocessing as mp
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi

from ..backends.cuda import code_hash as code_keys
from ..backends.cuda import nvcc, tensormap, tensormap_bf16, timer
from ..core import tasks
from ..backends.cuda.gpu import GpuInfo, NoGpuError, gpu_for_arch, has_pdl, probe_local_gpu
from ..workloads.names import get

log = logging.getLogger(__name__)


@dataclass
class Kernel:
    """A built kernel of any task: call it with the task's inputs (numpy, TVM or torch
    tensors): conv2d NHWC data and HWIO weights, dense A and weight, then a fused epilogue's
    (scale, bias, residual: ``tasks.Task.signature``)."""

    workload: object  # a workload of a task (conv2d, dense: ``tasks.of``)
    config: object  # a config of the task's template (``template.config_type``)
    target: tvm.target.Target
    executable: object  # tvm.runtime.Executable, or the runtime Module loaded from the build cache
    cubin: bytes
    source_path: str | None = None  # the CUDA source of a loaded module (its library keeps none)
    pdl: bool = False  # launched with Programmatic Dependent Launch (``compile_kernel``)
    _workspaces: tuple = field(default=(), repr=False, compare=False)
    _main: object = field(default=None, repr=False, compare=False)
    _torch_launches: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def module(self):
        """The runtime module (host code importing the CUDA module)."""
        return getattr(self.executable, "mod", self.executable)

    @property
    def workspace_shape(self) -> tuple[int, int, int] | None:
        """fp32 split-K partial sums (the first workspace, the only fp32 one), None without split-K."""
        return next((shape for shape, dtype in self.workspaces if dtype == "float32"), None)

    @property
    def workspaces(self) -> list[tuple[tuple[int, ...], str]]:
        """(shape, dtype) of each buffer the kernel takes after ``out`` (its template's: split-K
        partial sums, fp16 copies of fp32 data and weight).  Allocated on first use, reused by
        every call."""
        return tasks.of(self.workload).template.workspaces(self.workload, self.config)

    def _extra_args(self, dev) -> tuple:
        specs = self.workspaces
        if len(self._workspaces) != len(specs) or any(w.device != dev for w in self._workspaces):
            self._workspaces = tuple(tvm.runtime.empty(shape, dtype, device=dev) for shape, dtype in specs)
        return self._workspaces

    @property
    def cuda_source(self) -> str:
        if self.source_path is not None:
            with open(self.source_path) as f:
                return f.read()
        return self.module.imports[0].inspect_source()

    @property
    def arch(self) -> str:
        return str(self.target.attrs["arch"])

    @property
    def code_hash(self) -> str:
        """The key of this kernel's code (``backends.cuda.code_hash``): what its records carry
        (a PDL build's is its own code's, which no record carries: records time plain builds)."""
        return kernel_code_hash(self.workload, self.config, self.arch, self.cuda_source)

    def _function(self):
        """The kernel's host function, looked up once (loading compiles: our callback serves
        the cached cubin for this kernel's arch, sm_90a for wgmma)."""
        if self._main is None:
            nvcc.install_compile_callback()
            tensormap_bf16.register()  # what TMA im2col kernels' host code calls (a loaded module too)
            with self.target:
                self._main = self.module["main"]
        return self._main

    def torch_launch(self, device):
        """The kernel bound to torch's CUDA ``device`` (``pytorch.launch.TorchLaunch``): the
        fast path for torch tensors, made once per device."""
        launch = self._torch_launches.get(device)
        if launch is None:
            from ..pytorch.launch import TorchLaunch

            launch = self._torch_launches[device] = TorchLaunch(self, device)
        return launch

    def __call__(self, *args, out=None, device=None):
        """Run once on the task's inputs (``args``; the output may follow them) and return
        ``out``, allocated when not given.

        numpy arrays are copied to the GPU; TVM, torch and other DLPack tensors are used in
        place, so one that would need a copy (non-contiguous, misaligned, on another device,
        another dtype or shape) is a ValueError.  With a torch tensor among them the kernel
        runs on torch's current stream and returns a torch tensor (``out`` itself, else one
        torch allocates); numpy arrays do not mix with torch tensors (a hidden copy per call).
        """
        if device is None and args and getattr(args[0], "is_cuda", False) and _is_torch(args[0]):
            launch = self.torch_launch(args[0].device)  # the fast path: checks, then the call
            if len(args) == len(launch.shapes) + 1 and out is None:
                *args, out = args
            return launch(*args, out=out)
        *specs, (name, shape, dtype) = tasks.of(self.workload).signature(self.workload)
        if len(args) == len(specs) + 1 and out is None:
            *args, out = args
        if len(args) != len(specs):
            raise TypeError(f"the kernel of {self.workload} takes {', '.join(s[0] for s in specs)} "
                            f"[, out], got {len(args)} arrays")
        torch_in = next((a for a in (*args, out) if _is_torch(a)), None)
        if torch_in is not None:
            if any(isinstance(a, np.ndarray) for a in (*args, out)):
                raise ValueError("torch tensors and numpy arrays do not mix: pass every input as a torch "
                                 "tensor on the GPU (numpy arrays would be copied to it on every call)")
            if out is None:
                torch = sys.modules["torch"]
                out = torch.empty(shape, dtype=getattr(torch, dtype), device=torch_in.device)
        dev = require_gpu(device or _gpu_of(args) or tvm.cuda(0))
        inputs = [_as_tensor(value, *spec, dev) for value, spec in zip(args, specs)]
        result = tvm.runtime.empty(shape, dtype, device=dev) if out is None else out
        out_tensor = _as_tensor(result, name, shape, dtype, dev)
        with _torch_stream(dev) if torch_in is not None else contextlib.nullcontext():
            self._function()(*inputs, out_tensor, *self._extra_args(dev))
        return out_tensor if isinstance(result, np.ndarray) else result

    def time(self, *args, device=None, **options) -> list[float]:
        """Seconds per launch on ``args`` (TVM tensors on the GPU: the inputs, then out), one
        figure per repeat, by the package's timer (``timer.time_function``: CUDA-graph replays,
        the first repeat dropped), as the runners, the benchmark and the baselines time.
        ``options``: ``warmup``, ``number``, ``repeat``, ``min_repeat_ms``."""
        dev = require_gpu(device or tvm.cuda(0))
        return timer.time_function(self._function(), dev, [*args, *self._extra_args(dev)], **options)

    def time_evaluator(self, device=None, **kwargs):
        """TVM's own time_evaluator on the kernel (number/repeat/min_repeat_ms as TVM takes
        them): eager launches, their host cost included.  Nothing in the package times with it
        (``time`` does); it stays for comparing with TVM's figure."""
        dev = require_gpu(device or tvm.cuda(0))
        self._function()
        evaluator = self.module.time_evaluator("main", dev, **kwargs)
        extra = self._extra_args(dev)
        return lambda *args: evaluator(*args, *extra)  # args: the inputs, then out


def require_gpu(dev=None):
    """``dev`` (default: CUDA GPU 0), when it is a CUDA device that exists; else NoGpuError with
    the package's message (TVM's own, "Device API cuda is not enabled", comes from deep inside
    its runtime, after the kernel was built for nothing)."""
    dev = tvm.cuda(0) if dev is None else dev
    if dev.dlpack_device_type() == tvm_ffi.DLDeviceType.kDLCUDA and not dev.exist:
        probe = probe_local_gpu()
        if probe.gpu is not None:
            raise NoGpuError(f"there is no CUDA GPU {dev.index} here (GPU 0 is a {probe.gpu.name})")
        raise NoGpuError(f"{probe.no_gpu_message()}: running a kernel needs one; building works without "
                         "(build_conv2d(workload, target='sm_90'))")
    return dev


def _is_torch(value) -> bool:
    torch = sys.modules.get("torch")  # a torch tensor means torch is imported: never import it here
    return torch is not None and isinstance(value, torch.Tensor)


def _gpu_of(values):
    """The GPU of the first DLPack tensor on one (a tensor on cuda:1 runs there), else None."""
    for value in values:
        kind, index = getattr(value, "__dlpack_device__", lambda: (None, None))()
        if kind == tvm_ffi.DLDeviceType.kDLCUDA:
            return tvm.cuda(index)
    return None


def _torch_stream(dev):
    """Launch on torch's current stream of GPU ``dev``: ordered with torch's work on it."""
    if dev.dlpack_device_type() != tvm_ffi.DLDeviceType.kDLCUDA:
        return contextlib.nullcontext()
    torch = sys.modules["torch"]
    return tvm_ffi.use_raw_stream(dev, torch.cuda.current_stream(dev.index).cuda_stream)


def _as_tensor(value, name, shape, dtype, dev):
    """``value`` as the TVM tensor the kernel takes: numpy copied to ``dev``, a DLPack tensor
    viewed in place; ValueError (naming the argument) for anything that does not fit."""
    if isinstance(value, np.ndarray):
        value = tvm.runtime.tensor(value, device=dev)
    elif not isinstance(value, tvm.runtime.Tensor):
        value = _from_dlpack(value, name)
    if tuple(value.shape) != tuple(shape) or str(value.dtype) != dtype:
        raise ValueError(f"{name} must be {dtype}{list(shape)}, got {value.dtype}{list(value.shape)}")
    if value.device != dev:
        raise ValueError(f"{name} is on {value.device} but the kernel runs on {dev}: move it there "
                         "(nothing is copied for you)")
    return value


def _from_dlpack(value, name):
    """A zero-copy TVM view of a torch (or other DLPack) tensor; ValueError where that is impossible."""
    if _is_torch(value) and value.requires_grad:
        value = value.detach()  # inference only: DLPack refuses tensors that require grad
    if not getattr(value, "is_contiguous", lambda: True)():
        raise ValueError(f"{name} is not contiguous (a permuted or sliced view): the kernel reads it in "
                         "place, call .contiguous() first")
    try:
        return tvm.runtime.from_dlpack(value)
    except (RuntimeError, ValueError, TypeError, BufferError) as err:
        raise ValueError(f"{name} cannot be read in place: {err}") from None


# The names of earlier releases: conv2d and dense kernels were always this one class.
Conv2dKernel = DenseKernel = Kernel


def build_arch(workload, config, gpu: GpuInfo) -> str:
    """The arch the kernel is compiled for, as its template says (tc_gemm: wgmma needs the
    arch-specific sm_90a)."""
    return tasks.of(workload).template.build_arch(config, gpu.arch)


def uses_pdl(pdl: bool, gpu: GpuInfo) -> bool:
    """Whether a build asked for ``pdl`` gets it on ``gpu``: sm_90 and above (``has_pdl``); on
    older GPUs there is no ``griddepcontrol`` and the option is ignored."""
    return bool(pdl) and has_pdl(gpu.arch)


def compile_kernel(workload, config, gpu: GpuInfo,
                   nvcc_timeout: float | None = None, pdl: bool = False) -> Kernel:
    """Lower a resolved config and compile its cubin (into the disk cache).  ``pdl``: launched
    with Programmatic Dependent Launch where the GPU has it (``uses_pdl``; the module docstring).

    Our nvcc callback is installed before building: where TVM has a CUDA runtime it compiles
    at build time through whatever callback is registered then (else NVRTC), and the binary
    must not depend on what the process happened to build or run before: NVRTC's ptxas makes
    other code than nvcc's, so one config would time differently by the process's history.
    """
    pdl = uses_pdl(pdl, gpu)
    target, executable = lower(workload, config, gpu, pdl)
    source = executable.mod.imports[0].inspect_source()
    arch = build_arch(workload, config, gpu)
    cubin = nvcc.compile_cubin(source, arch, nvcc_timeout)
    if not pdl:  # the code records key: a PDL build's is never theirs (the module docstring)
        code_keys.remember(workload, config, gpu.arch, kernel_code_hash(workload, config, arch, source))
    return Kernel(workload, config, target, executable, cubin, pdl=pdl)


# (str(workload), config, build arch) -> (target, executable) of the last few lowerings: a build
# that checked a record's code (``verify_record``) compiles the very lowering it hashed.
_LOWERED: collections.OrderedDict = collections.OrderedDict()
_LOWERED_MAX = 2


def lower(workload, config, gpu: GpuInfo, pdl: bool = False):
    """(target, TVM Executable) of a resolved config: the template's lowering, with our nvcc
    callback installed (see ``compile_kernel``); ``pdl``: the PDL build (``uses_pdl``), which
    never takes a lowering kept by ``code_hash_of`` (those are plain)."""
    pdl = uses_pdl(pdl, gpu)
    arch = build_arch(workload, config, gpu)
    key = (str(workload), config, arch)
    if not pdl and key in _LOWERED:
        return _LOWERED.pop(key)  # each lowering serves one build
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    nvcc.install_compile_callback()
    with target:  # the callback compiles for this target's arch
        executable = tasks.of(workload).lower(workload, config, target, pdl)
    return target, executable


def kernel_code_hash(workload, config, arch: str, source: str) -> str:
    """The code hash of a kernel of (``workload``, ``config``) compiled for ``arch`` from ``source``:
    with the TMA im2col encoder's source where its host code calls it (``tensormap``; a bf16
    workload's also ``tensormap_bf16``)."""
    host = []
    if getattr(config, "tma_im2col", 0):
        host.append(("backends/cuda/tensormap.py", Path(tensormap.__file__)))
        if workload.dtype == "bfloat16":
            host.append(("backends/cuda/tensormap_bf16.py", Path(tensormap_bf16.__file__)))
    return code_keys.code_hash(source, arch, host)


def code_hash_of(workload, config, gpu: GpuInfo) -> str:
    """The code hash of what the template generates today for (workload, config) on ``gpu``'s
    arch (lowered, not compiled; the lowering is kept for a build that follows).  Always the
    plain build's: what records time (the module docstring)."""
    arch = build_arch(workload, config, gpu)
    found = code_keys.recall(workload, config, gpu.arch)
    if found is not None:
        return found
    target, executable = lower(workload, config, gpu)
    digest = kernel_code_hash(workload, config, arch, executable.mod.imports[0].inspect_source())
    code_keys.remember(workload, config, gpu.arch, digest)
    _LOWERED[(str(workload), config, arch)] = (target, executable)
    while len(_LOWERED) > _LOWERED_MAX:
        _LOWERED.popitem(last=False)
    return digest


def verify_record(record, config) -> bool:
    """Whether ``config`` (``record``'s) generates today the code ``record`` timed: what a build
    passes ``apply`` to check an unverified record.  A config that no longer lowers has changed."""
    try:
        return code_hash_of(record.workload, config, gpu_for_arch(record.arch or "sm_90")) == record.code_hash
    except Exception as err:  # noqa: BLE001 (a TVM error lowering an old config: it cannot be that kernel)
        log.info("%s: config %s of a record no longer lowers: %s", record.workload, config, err)
        return False


def _key_code_hash(key) -> str | None:
    """The code hash of a ``database.restamp.CodeKey`` (workload spec, knobs, arch); None where
    the config no longer lowers."""
    try:
        workload = get(key[0])
        return code_hash_of(workload, tasks.of(workload).template.config_type(**dict(key[1])), gpu_for_arch(key[2]))
    except Exception:  # noqa: BLE001 (a config today's template cannot generate)
        return None


def code_hashes(keys, jobs: int = 1) -> dict:
    """``{key: code hash or None}`` of ``database.restamp.CodeKey``s, lowered by ``jobs``
    processes (each imports TVM once; ~0.5 s a config)."""
    keys = list(keys)
    if jobs <= 1 or len(keys) < 2:
        return {key: _key_code_hash(key) for key in keys}
    with cf.ProcessPoolExecutor(min(jobs, len(keys)), mp_context=mp.get_context("spawn")) as pool:
        return dict(zip(keys, pool.map(_key_code_hash, keys, chunksize=8)))
