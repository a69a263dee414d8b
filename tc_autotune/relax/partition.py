"""The Relax dispatch: each conv2d / matmul chain the kernels take becomes one ``call_tir`` of
the tuned kernel of its workload (``partition``), and the workloads a model runs become a
nightly job (``extract_workloads``), as AutoTVM's ``extract_from_program`` did for Relay.

    mod = tcr.from_torch(model, (x,))                          # or any Relax IRModule
    tcr.extract_workloads(mod, job="model.toml")               # tune: tc-nightly model.toml
    fast = tcr.partition(mod, logs="model.jsonl")              # best records, else zero-shot
    ex = tcr.build(fast)                                       # relax.build, kernels and all
    vm = tvm.relax.VirtualMachine(ex, tvm.cuda())

A kernel is the package's PrimFunc (``kernels.prim_func``), added to the module once per
(workload, config) and called with ``R.call_tir``: its inputs (data, the weight as a constant
in the kernel's layout, the epilogue's fp32 scale / bias constants and the residual), then its
output and the workspaces it needs after it (split-K partial sums), which relax's memory
planner allocates like any other output.  Ops the kernels cannot take stay as they are; the
report (``partition_report``: ``report(mod)``) counts them by reason.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tvm import relax

from . import kernels, layout
from .match import Layer, find_layers, static_shape
from .partition_report import PartitionReport, with_report
from ..api.apply import apply_history_best
from ..workloads.dense import DenseWorkload
from ..tuning.jobs import write_job

log = logging.getLogger(__name__)
def _relax_functions(mod):
    return [(gv, f) for gv, f in mod.functions.items() if isinstance(f, relax.Function)]


def _check_module(mod):
    import tvm

    if not isinstance(mod, tvm.IRModule) or not _relax_functions(mod):
        raise ValueError(f"expected a Relax IRModule (tvm.IRModule with a Relax function), got {type(mod).__name__}")


def _layers(mod) -> list[tuple]:
    """(global var, function, its layers) of each Relax function, after the NHWC conversion."""
    return [(gv, func, find_layers(func)) for gv, func in _relax_functions(mod)]


def extract_workloads(mod, job: str | Path | None = None, trials: int = 64) -> list:
    """The workloads (``Conv2dWorkload`` / ``DenseWorkload``, each with the epilogue its chain
    fuses) of ``mod``, in order, each once; with ``job``, also written there as a nightly job file
    (``tc-nightly <job>`` tunes them, ``trials`` each), in the format of the PyTorch extraction."""
    _check_module(mod)
    mod = layout.to_nhwc(mod)
    workloads = [layer.workload for _, _, layers in _layers(mod) for layer in layers if layer.why_not is None]
    workloads = list(dict.fromkeys(workloads))
    if job is not None:
        write_job(job, workloads, trials, "a Relax module", source="tc_autotune.relax.extract_workloads")
    return workloads


def partition(mod, logs=None, target=None, im2col: bool = False):
    """``mod`` with every conv2d / matmul chain the kernels take (``match``) replaced by a call of
    its tuned kernel: the best record of ``logs`` (a log file, a folder or a list; default: the
    logs of the enclosing ``apply_history_best``), then of the shipped logs, else a zero-shot pick
    or the default config, as ``tc.build`` chooses.  ``target``: the GPU the kernels are for (an
    arch such as "sm_90" or a CUDA target; default: the local GPU, else sm_90).  NCHW convs are
    converted to NHWC once per model (``layout``).  ``im2col``: keep the records' TMA im2col
    kernels, whose host code calls Python on every call (``kernels.choose``); by default their
    tiling runs without it, so the VM runs no Python between kernels.  ``mod`` itself is not
    changed; what was done is ``report(result)``."""
    _check_module(mod)
    start = time.time()
    gpu = kernels.gpu_of(target)
    with apply_history_best(logs) if logs is not None else nullcontext():
        mod = layout.to_nhwc(mod)
        found = _layers(mod)
        taken = [layer for _, _, layers in found for layer in layers if layer.why_not is None]
        choices = kernels.choose([layer.workload for layer in taken], gpu, im2col)
    report = PartitionReport(kernels={str(w): c.source for w, c in choices.items()})
    report.left = dict(Counter(layer.why_not for _, _, layers in found for layer in layers if layer.why_not))
    # One arch for every kernel: sm_90a, where one uses wgmma, runs the others too, and the build's
    # compile callback then needs no per-module arch (TVM gives it only the source).
    arches = {kernels.arch_of(workload, choice.config, gpu) for workload, choice in choices.items()}
    report.arch = max(arches, key=lambda a: (a.rstrip("a"), a)) if arches else gpu.arch
    adder = _KernelAdder(relax.BlockBuilder(mod), choices, report.arch)
    for gv, func, layers in found:
        chosen = [layer for layer in layers if layer.why_not is None]
        if chosen:  # the weights' transposes are folded into constants: drop what is unused now
            adder.builder.update_func(gv, relax.analysis.remove_all_unused(_rewrite(func, chosen, adder)))
        report.layers += len(chosen)
        report.fused_ops += sum(len(layer.vars) - 1 for layer in chosen)
    mod = adder.builder.get()
    report.layout_conversions = layout.layout_conversions(mod)
    report.seconds = time.time() - start
    if report.left:
        log.warning("partition: %d ops stay Relax's: %s", sum(report.left.values()),
                    ", ".join(f"{n} x {why}" for why, n in report.left.items()))
    log.info("partition: %s (%.1f s)", report.summary(), report.seconds)
    return with_report(mod, report)


def _rewrite(func, layers: list[Layer], adder: "_KernelAdder"):
    """``func`` with each layer's chain replaced by one kernel call bound to its last var."""
    last = {layer.vars[-1]: layer for layer in layers}
    dropped = {var for layer in layers for var in layer.vars[:-1]}
    blocks = []
    for block in func.body.blocks:
        if not isinstance(block, relax.DataflowBlock):
            blocks.append(block)
            continue
        bindings = []
        for binding in block.bindings:
            if binding.var in last:
                bindings += _kernel_call(last[binding.var], adder)
            elif binding.var not in dropped:
                bindings.append(binding)
        blocks.append(relax.DataflowBlock(bindings))
    body = relax.SeqExpr(blocks, func.body.body)
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)


@dataclass
class _KernelAdder:
    """Adds each (workload, config)'s kernel to the module once, all for one arch."""

    builder: relax.BlockBuilder
    choices: dict  # workload -> apply.ConfigChoice
    arch: str
    added: dict = field(default_factory=dict)  # (workload, config) -> GlobalVar

    def kernel(self, workload):
        """(GlobalVar of the workload's kernel, its workspaces' (shape, dtype))."""
        config = self.choices[workload].config
        key = (workload, config)
        if key not in self.added:
            kind = "dense" if isinstance(workload, DenseWorkload) else "conv2d"
            name = f"tc_{kind}_{len(self.added)}"
            self.added[key] = self.builder.add_func(kernels.prim_func(workload, config, name, self.arch), name)
        return self.added[key], kernels.workspaces(workload, config)


def _kernel_call(layer: Layer, adder: _KernelAdder) -> list:
    """The bindings that compute the layer's last var with its kernel."""
    bindings = []

    def bind(expr, var=None, name="tc"):
        expr = adder.builder.normalize(expr)
        var = var if var is not None else relax.DataflowVar(name, expr.ty)
        bindings.append(relax.VarBinding(var, expr))
        return var

    wl = layer.workload
    data, residual = layer.data, layer.residual
    if layer.kind == "dense" and len(static_shape(data.ty)) != 2:  # leading dims fold into M
        data = bind(relax.op.reshape(data, wl.a_shape), name="tc_a")
    if residual is not None and static_shape(residual.ty) != tuple(wl.out_shape):  # after a reshape
        residual = bind(relax.op.reshape(residual, wl.out_shape), name="tc_res")
    weight = relax.const(layer.weight) if isinstance(layer.weight, np.ndarray) else layer.weight
    args = [data, weight] + [relax.const(v.astype(np.float32)) for v in (layer.scale, layer.bias) if v is not None]
    args += [residual] * (residual is not None)
    gvar, spaces = adder.kernel(wl)
    outs = [relax.TensorType(wl.out_shape, wl.out_dtype)] + [relax.TensorType(s, d) for s, d in spaces]
    out_var = layer.vars[-1]
    call = relax.call_tir(gvar, args, outs if spaces else outs[0])
    if spaces:  # the workspaces are outputs nobody reads: only the first is the result
        call = relax.TupleGetItem(bind(call, name="tc_outs"), 0)
    if static_shape(out_var.ty) != tuple(wl.out_shape):
        call = relax.op.reshape(bind(call, name="tc_out"), static_shape(out_var.ty))
    bind(call, var=out_var)
    return bindings
