"""A built kernel bound to one CUDA device for torch tensors: the launch path every call takes.

Everything that does not change between calls is done once, here: the kernel's function is
looked up, the argument plan (each tensor's shape and dtype) is made, and the workspaces
(split-K partial sums, fp16 copies of fp32 operands) are allocated by torch on the device.  A
call checks each tensor's alignment and calls the function with the torch tensors themselves
(TVM's function checks their shapes, dtypes, strides and device; a tensor it refuses is named in a
ValueError, as is a misaligned one): tvm-ffi reads them through DLPack's C exchange API
and launches on torch's current stream of their device (so CUDA graphs and
``torch.cuda.stream`` blocks capture and order it as they do torch's own kernels).
"""

from __future__ import annotations

import threading

import torch

from ..core import tasks

ALIGNMENT = 64  # bytes: what TVM's buffers assume of every pointer (torch's allocator gives 512)


def dtype_name(dtype) -> str:
    """A torch dtype's name without "torch." (a name given as a string stays as it is)."""
    return str(dtype).removeprefix("torch.")


class TorchLaunch:
    """``launch(*inputs, out=None)``: run the kernel on torch tensors of its signature (the
    task's inputs, then optionally ``out``) and return ``out`` (allocated when not given).  A
    tensor the kernel cannot read in place is a ValueError naming it; nothing is ever copied."""

    __slots__ = ("kernel", "device", "function", "names", "shapes", "dtypes", "out_shape", "out_dtype",
                 "workspaces", "unit_strides", "canonical_views")

    def __init__(self, kernel, device: torch.device):
        *inputs, (_, out_shape, out_dtype) = tasks.of(kernel.workload).signature(kernel.workload)
        self.kernel, self.device = kernel, torch.device(device)
        self.names = tuple(name for name, _, _ in inputs)
        self.shapes = tuple(torch.Size(shape) for _, shape, _ in inputs)
        self.dtypes = tuple(getattr(torch, dtype) for _, _, dtype in inputs)
        self.out_shape, self.out_dtype = torch.Size(out_shape), getattr(torch, out_dtype)
        self.function = kernel._function()
        self.workspaces = _allocated_outside_graph_pools(
            lambda: tuple(torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
                          for shape, dtype in kernel.workspaces)) if kernel.workspaces else ()
        # The canonical strides of inputs with a size-1 dimension (see ``__call__``).
        unit = tuple(_contiguous_strides(shape) if 1 in shape else None for shape in self.shapes)
        self.unit_strides = unit if any(strides is not None for strides in unit) else None
        self.canonical_views = False

    def __call__(self, *inputs, out=None):
        if len(inputs) != len(self.shapes):
            raise TypeError(f"the kernel of {self.kernel.workload} takes {', '.join(self.names)} [, out], "
                            f"got {len(inputs)} tensors")
        if out is None:
            out = torch.empty(self.out_shape, dtype=self.out_dtype, device=self.device)
        # TVM's function checks every tensor's shape, dtype, strides and device itself (raising
        # before anything runs); the one thing it assumes is the alignment, checked here.
        try:
            for tensor in inputs:
                if tensor.data_ptr() % ALIGNMENT:
                    self._refuse(inputs, out)
            if out.data_ptr() % ALIGNMENT:
                self._refuse(inputs, out)
        except AttributeError:  # not a torch tensor
            self._refuse(inputs, out)
            raise
        if self.canonical_views:
            inputs = self._canonical(inputs)
        try:
            self.function(*inputs, out, *self.workspaces)
        except Exception as err:  # noqa: BLE001 (TVM's argument checks; anything else is raised again)
            self._refuse(inputs, out)
            views = None if self.unit_strides is None else self._canonical(inputs)
            if views is None or all(view is tensor for view, tensor in zip(views, inputs)):
                raise err
            # A size-1 dimension's stride is arbitrary in a contiguous torch tensor (a batch-1
            # activation that torch.compile laid out); where a function checks it, such tensors
            # are passed from now on as views with the canonical strides (the same memory).
            self.canonical_views = True
            self.function(*views, out, *self.workspaces)
        return out

    def _canonical(self, inputs) -> list:
        """``inputs`` with each contiguous one that has a size-1 dimension as the view with the
        canonical strides (a non-contiguous one stays as it is, for the function to refuse)."""
        return [t if strides is None or t.stride() == strides or not t.is_contiguous()
                else t.as_strided(t.shape, strides) for t, strides in zip(inputs, self.unit_strides)]

    def _refuse(self, inputs, out):
        """Raise the ValueError that names the first tensor the kernel cannot take in place, if any."""
        named = zip((*self.names, "out"), (*inputs, out), (*self.shapes, self.out_shape),
                    (*self.dtypes, self.out_dtype))
        for name, tensor, shape, dtype in named:
            if tensor is None:
                continue
            if not isinstance(tensor, torch.Tensor):
                raise ValueError(f"{name} must be a torch tensor, got {type(tensor).__name__}")
            if tensor.shape != shape or tensor.dtype != dtype:
                raise ValueError(f"{name} must be {dtype_name(dtype)}{list(shape)}, "
                                 f"got {dtype_name(tensor.dtype)}{list(tensor.shape)}")
            if tensor.device != self.device:
                raise ValueError(f"{name} is on {tensor.device} but the kernel runs on {self.device}: move it "
                                 "there (nothing is copied for you)")
            if not tensor.is_contiguous():
                raise ValueError(f"{name} is not contiguous (a permuted or sliced view): the kernel reads it "
                                 "in place, call .contiguous() first")
            if tensor.data_ptr() % ALIGNMENT:
                raise ValueError(f"{name} cannot be read in place: its address is not {ALIGNMENT}-byte aligned "
                                 "(a view at an offset)")


def _allocated_outside_graph_pools(allocate):
    """``allocate()`` run on a thread of its own.  A launch is first bound where its first call
    happens, which under ``torch.compile(mode="reduce-overhead")`` is the CUDA graphs' warm-up
    run, while torch routes the calling thread's allocations to the graphs' private pool; kept
    there, the workspaces would be memory the graphs do not track (they refuse to record).
    Allocations of another thread go to the ordinary pool (per-call allocation would avoid this
    too, at several microseconds per workspace per call)."""
    result = []

    def run():
        try:
            result.append(allocate())
        except BaseException as err:  # noqa: BLE001 (raised again in the caller's thread)
            result.append(err)

    thread = threading.Thread(target=run, name="tc_autotune-workspaces")
    thread.start()
    thread.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))
