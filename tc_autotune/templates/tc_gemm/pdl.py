"""Programmatic Dependent Launch (PDL, sm_90+): a build option of every kernel of the template.

A PDL kernel is launched with ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``: the GPU
may start it while the kernel before it in the stream still runs, once every block of that one
has executed ``griddepcontrol.launch_dependents`` (or exited).  Its blocks then run their
prologue (shared memory, mbarriers) under the predecessor's tail, and ``griddepcontrol.wait``
blocks until the predecessor has completed and its writes are visible.  So a PDL kernel must
wait before its first global access that could read what an earlier kernel wrote or write what
it reads; it signals its own dependents right after (the next kernel's wait still orders it
after this whole grid, so only its prologue overlaps).  In a chain of short kernels (ResNet-50
at batch 1: ~60 kernels of 3-6 us) that hides the launch gaps and the prologues.  Without a
prerequisite grid (a plain launch, or the first kernel) ``wait`` returns at once.

Two pieces, both only where the option is on (off, the generated code is byte-identical to a
build without the option: records key that code):

* the launch: TVM's CUDA runtime launches with the attribute where the kernel's launch tags hold
  ``TAG`` (TVM's spelling).  The pass ``ProgrammaticDependentLaunch`` adds it to every device
  kernel's ``tirx.kernel_launch_params``, before ``tirx.use_dyn_shared_memory`` (which TVM
  requires last; the PDL tag takes no launch argument, so the host code's call is unchanged);
* the waits: a TIR-scheduled kernel gets ``wait`` then ``launch_dependents`` as the first
  statements of its body (the same pass); the warp-specialized kernel's source has them after
  its barriers' initialisation (``warp_specialized.pipeline.init``), so the pass only tags it.

The pass runs after TVM's own device passes, in a TIR pipeline registered under the names of
``PIPELINES`` (``tvm.compile`` takes a pipeline by name): TVM's default lowering, then it.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script import tirx as T
from tvm.tirx import compilation_pipeline

TAG = "tirx.use_programtic_dependent_launch"  # sic: TVM's runtime matches this string
DYN_SMEM_TAG = "tirx.use_dyn_shared_memory"  # TVM checks that it is the last tag
LAUNCH_PARAMS = "tirx.kernel_launch_params"  # a device kernel's launch tags (set by SplitHostDevice)

# whether the pass also inserts the waits -> the pipeline's name
PIPELINES = {True: "tc_autotune.pdl", False: "tc_autotune.pdl_launch_only"}


def launch_tags(tags) -> list[str]:
    """``tags`` with ``TAG`` added: before the dynamic shared memory tag, else last."""
    tags = [str(tag) for tag in tags]
    if TAG in tags:
        return tags
    at = tags.index(DYN_SMEM_TAG) if DYN_SMEM_TAG in tags else len(tags)
    return [*tags[:at], TAG, *tags[at:]]


def grid_dependency() -> list:
    """``griddepcontrol.wait`` then ``griddepcontrol.launch_dependents``, as TIR statements."""
    return [tirx.Evaluate(T.ptx.griddepcontrol.wait()), tirx.Evaluate(T.ptx.griddepcontrol.launch_dependents())]


def _with_pdl(func, waits: bool):
    """A device kernel launched with PDL; ``waits``: its body starts with ``grid_dependency``
    (before anything else: TVM's kernels need no prologue before their first global access)."""
    func = func.with_attr(LAUNCH_PARAMS, launch_tags(func.attrs[LAUNCH_PARAMS]))
    return func.with_body(tirx.SeqStmt([*grid_dependency(), func.body])) if waits else func


def programmatic_dependent_launch(waits: bool) -> tvm.transform.Pass:
    """The pass: every device kernel (a function with launch tags) launched with PDL."""

    def transform(func, _mod, _ctx):
        if func.attrs is None or LAUNCH_PARAMS not in func.attrs:
            return func  # a host function
        return _with_pdl(func, waits)

    return tirx.transform.prim_func_pass(transform, opt_level=0, name="tc_autotune.ProgrammaticDependentLaunch")


def _pipeline(waits: bool):
    """A pipeline factory: TVM's default one (what ``tvm.compile`` runs without a pipeline), its
    device finalisation followed by the pass."""

    def factory():
        lower, finalize_host, finalize_device = compilation_pipeline.get_tir_pipeline("default")
        return lower, finalize_host, lambda: tvm.transform.Sequential(
            [finalize_device(), programmatic_dependent_launch(waits)])

    return factory


for _waits, _name in PIPELINES.items():
    compilation_pipeline.register_tir_pipeline(_name, _pipeline(_waits))


def compile_with_pdl(mod: tvm.IRModule, target, waits: bool):
    """``tvm.compile(mod, target)`` with every kernel launched with PDL (in the caller's
    PassContext); ``waits``: TIR kernels, whose waits the pass inserts (the warp-specialized
    kernel's source has its own)."""
    return tvm.compile(mod, target, tir_pipeline=PIPELINES[waits])
