"""The output check on the device that runs the kernel: a small TVM kernel reduces a
candidate's output against the fp32 reference to two numbers, so only those come back to
the runner (over RPC too) instead of the whole output.

``check(out, reference, stats)`` writes ``stats[0]`` = sum of (out - reference)^2 and
``stats[1]`` = how many outputs are NaN or Inf, both in float64;
``results.relative_error_of_sums`` turns them into the relative L2 error the measurement
rule checks (inf when any output is not finite: a NaN left by the poisoned output is wrong).
The reference's own sum of squares is known on the host.  One checker is built per output
(shape, dtype) and device kind: on CUDA two kernels (``BLOCKS`` blocks of ``THREADS``
threads sum strided slices, one block sums their partial sums); on the CPU (tests) plain
loops.  A runner calls its module's function as it calls a kernel's, ``main``: it loads both
alike and needs nothing of this module.
"""

from __future__ import annotations

import math

import tvm
import tvm.s_tir
from tvm import te

from . import nvcc

BLOCKS, THREADS = 256, 256
FUNCTION = "main"  # the checker's function in its module, named as a kernel's (``measure.bench.Bench`` calls it)


def target_for(device_type: str, arch: str):
    """The TVM target of the checker for a device kind ("cuda" of ``arch``, or "cpu")."""
    if device_type == "cuda":
        return tvm.target.Target({"kind": "cuda", "arch": arch})
    if device_type == "cpu":
        return tvm.target.Target({"kind": "llvm"})
    raise ValueError(f"no checker for {device_type!r} devices")


def build(out_shape, out_dtype: str, target):
    """The checker of an output of ``out_shape`` and ``out_dtype`` for ``target`` (a TVM
    Executable whose function ``FUNCTION`` takes out, reference, stats)."""
    func = _prim_func(tuple(int(s) for s in out_shape), str(out_dtype))
    mod = tvm.IRModule({FUNCTION: func.with_attr("global_symbol", FUNCTION)})
    if target.kind.name == "cuda":
        mod = _schedule_cuda(mod)
        nvcc.install_compile_callback()  # nvcc, as for the kernels (kernel.compile_kernel)
    with target:  # the compile callback builds for this target's arch
        return tvm.compile(mod, target)


def export(path: str, out_shape, out_dtype: str, target) -> str:
    """``build`` exported to ``path``: a shared library any runner of that device kind loads."""
    build(out_shape, out_dtype, target).export_library(path)
    return path


def _prim_func(shape: tuple[int, ...], dtype: str):
    """stats[q] = sum over every output element of q=0: its squared error, q=1: whether it is
    not finite; partial sums per block first (flat element (k * BLOCKS + b) * THREADS + t)."""
    total = math.prod(shape)
    index = "int64" if total + BLOCKS * THREADS >= 2**31 else "int32"
    out = te.placeholder(shape, dtype, name="out")
    ref = te.placeholder(shape, "float32", name="ref")
    t = te.reduce_axis((tvm.tirx.const(0, index), tvm.tirx.const(THREADS, index)), name="t")
    per_thread = -(-total // (BLOCKS * THREADS))
    k = te.reduce_axis((tvm.tirx.const(0, index), tvm.tirx.const(per_thread, index)), name="k")
    zero, one = tvm.tirx.const(0, "float64"), tvm.tirx.const(1, "float64")

    def element(q, b):
        flat = (k * BLOCKS + b) * THREADS + t
        at = _unravel(flat, shape)
        x = out[at].astype("float32").astype("float64")  # half has no direct cast to double in CUDA
        error = x - ref[at].astype("float64")
        bad = tvm.tirx.if_then_else(tvm.tirx.isfinite(x), zero, one)
        return tvm.tirx.if_then_else(flat < total, tvm.tirx.if_then_else(q == 0, error * error, bad), zero)

    partial = te.compute((BLOCKS, 2), lambda b, q: te.sum(element(q, b), axis=[t, k]), name="partial")
    j = te.reduce_axis((0, BLOCKS), name="j")
    stats = te.compute((2,), lambda q: te.sum(partial[j, q], axis=j), name="stats")
    return te.create_prim_func([out, ref, stats])


def _unravel(flat, shape: tuple[int, ...]) -> tuple:
    """The N-d index of a flat (row-major) element index (valid for flat < the element count)."""
    at = []
    for extent in reversed(shape[1:]):
        at.append(flat % extent)
        flat = flat // extent
    return (flat, *reversed(at))


def _schedule_cuda(mod):
    """Blocks over the partial sums, threads over each block's slice (a cross-thread
    reduction), then one block of threads over the partial sums."""
    sch = tvm.s_tir.Schedule(mod)
    block, _q, thread, _k = sch.get_loops(sch.get_sblock("partial", func_name=FUNCTION))
    sch.bind(block, "blockIdx.x")
    sch.bind(thread, "threadIdx.x")
    _q, partial = sch.get_loops(sch.get_sblock("stats", func_name=FUNCTION))
    sch.bind(partial, "threadIdx.x")
    return sch.mod
