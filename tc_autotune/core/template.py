"""The template protocol: what the space and the search need from a kernel template.

A template is a knob table with its config type plus a handful of pure functions of a
``ConfigSpace`` (one workload on one GPU) and knob-position rows (int64, one column per
knob, ``space.knobs`` order).  ``core.config_space``, ``search`` and ``database`` reach a
template only through this object, so a second template (or the toy one of
``tests/test_template.py``) plugs in by building one ``Template``: nothing in the search assumes
the Tensor Core GEMM's knobs.

It is a frozen dataclass of data and plain functions rather than an ABC: a template is one
literal, a missing part fails at construction, and the functions take the space (which
holds the template) explicitly, so they stay vectorised numpy code with no hidden state.
``eq=False``: a template hashes by identity, so it can key caches (``default_config``).

A template is light: its lowering (TVM's schedule of a config) is its *TVM side*, a module it
names (``lowering_module``) rather than imports.  ``lower`` loads that module the first time a
kernel is lowered (or scheduled: ``schedule``, what a Relax model's build compiles with the rest
of the model under the template's ``pass_config``), and its ``lowers`` and ``schedules``
decorators register the functions of each task as it loads.  So the rest of the package lowers
any template through this protocol and names none of their modules: a template is a plug-in, and
what builds kernels (``api.kernel``, ``relax.kernels``) sits on core, not on a template's TVM
side.  The import-graph test lists this load beside the package's few others
(``tests/test_import_graph.py``: ``BY_NAME``).

``source_hash`` keys the records of a template's kernels: the sha256 of the source files that
shape the code it generates and of the toolchain that compiles it (``sources``, ``toolchain``;
the template names both, and hashes them with ``hash_sources``).  It replaced a version number
bumped by hand: no edit to those files can reach a record without changing the key, and a
record whose key differs is re-checked by the code its config generates (``database.record``).

It imports only the space a template makes (``space``: a ``core.config_space.ConfigSpace``, which
is given its template and imports none): every template depends on this module, never the
reverse, and a task reaches its space through its template (``core.tasks.Task.space``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .config_space import ConfigSpace


def _none(space, config):
    return None


def _no_pins(space) -> frozenset:
    return frozenset()


def _no_starts(space) -> list:
    return []


def _no_sources() -> list:
    return []


def _no_toolchain() -> dict:
    return {}


def hash_sources(files: Iterable[tuple[str, Path]], toolchain: Mapping) -> str:
    """sha256 of the (name, path) files' names and bytes, in name order, then of ``toolchain``."""
    h = hashlib.sha256()
    for name, path in sorted(files):
        h.update(name.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    h.update(json.dumps(dict(toolchain), sort_keys=True).encode())
    return h.hexdigest()
def _no_workspaces(workload, config) -> list:
    return []


def _same_arch(config, arch: str) -> str:
    return arch


@dataclass(frozen=True, eq=False)
class Template:
    """One kernel template.  Functions named ``*(space, pos)`` take knob-position rows."""

    name: str
    # knob -> candidates in index order: part of the log format (a config's index is the
    # mixed-radix number of its positions, first knob fastest), so lists only grow at the end.
    knobs: Mapping[str, tuple]
    # what a record written before a knob existed implies for it
    knob_defaults: Mapping[str, Any]
    config_type: type  # Config(**{knob: value}); getattr(config, knob) reads a value back
    # (workload, gpu) -> (view, context): what validity, prior and features read; the view is
    # ``space.view`` (for tc_gemm the GEMM view), the context ``space.context``.
    problem: Callable
    valid_mask: Callable  # (space, pos) -> bool rows: the validity rules, vectorised
    why_invalid: Callable  # (space, config) -> None or the first broken rule's message
    prior: Callable  # (space, pos) -> float rows, higher = faster: scores before any measurement
    feature_names: tuple  # the columns of ``features``
    features: Callable  # (space, pos) -> (rows, len(feature_names)) float32, transferable
    tiles: Callable  # (space, pos) -> int rows: what sets a config apart (diverse prior picks)
    default_config: Callable  # (space) -> a valid config good enough to run untuned
    # Path requirements: {knob: {value: {other knob: value it requires}}}.  The annealing moves
    # onto a value with its requirements set, so one move reaches a valid twin on that path.
    requires: Mapping[str, Mapping[Any, Mapping[str, Any]]] = field(default_factory=dict)
    # (space) -> knobs whose random draws stay at their first candidate (values valid only in
    # a sliver of the space; the search reaches them by moves and starting configs), or a
    # mapping {knob: the value its draws stay at} (where a workload is valid only in a corner).
    draw_pinned: Callable = _no_pins
    # {knob: the candidates the zero-shot search keeps} (``search.held_knobs``): candidates no tuned
    # record holds yet, whose values the model cannot rank, stay out of its search; tuning measures
    # them (a new knob's home until records of it exist and the held-out sets have judged the
    # model's picks with it free).
    zero_shot_held: Mapping[str, tuple] = field(default_factory=dict)
    starting_configs: Callable = _no_starts  # (space) -> configs worth measuring first
    # () -> (name, path) of every file whose text shapes the generated code: the template's
    # own sources and those outside it that its code generation reads.
    sources: Callable[[], Iterable[tuple[str, Path]]] = _no_sources
    # () -> what else turns those sources into a cubin (TVM's and nvcc's releases, nvcc's flags)
    toolchain: Callable[[], Mapping] = _no_toolchain

    @functools.cached_property
    def source_hash(self) -> str:
        """The key of the code this template generates today (read once per process): a record
        stamped with it is current; one stamped with another is checked by its code hash."""
        return hash_sources(self.sources(), self.toolchain())
    # (workload, config) -> [(shape, dtype)]: buffers a kernel takes after its output, which its
    # caller allocates once; (config, arch) -> the arch a kernel is compiled for ("sm_90a").
    workspaces: Callable = _no_workspaces
    build_arch: Callable = _same_arch
    # The module of its TVM side, whose ``lowers`` (and ``schedules``) decorators register its
    # lowering of each task ("tc_autotune.templates.tc_gemm.schedule"): ``lower`` loads it when a
    # kernel is first lowered.  None: its lowerings are registered by whoever defines it (a test's
    # toy template).
    lowering_module: str | None = None
    # The TIR pass options its kernels are lowered with (``tvm.transform.PassContext(config=...)``):
    # what a build that lowers its scheduled kernels itself (relax.build of a model) must set too.
    pass_config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def knob_names(self) -> tuple:
        return tuple(self.knobs)

    def space(self, workload, gpu) -> ConfigSpace:
        """This template's knob space for one workload on ``gpu`` (a ``backends.cuda.gpu.GpuInfo``:
        the limits its rules read)."""
        return ConfigSpace(workload, gpu, template=self)

    def lower(self, task_name: str, workload, config, target, pdl: bool = False):
        """The TVM Executable of one (workload, config) of task ``task_name``: the lowering
        function registered for it with ``lowers``, which the template's TVM side
        (``lowering_module``, loaded here the first time) registers as it loads; so this module
        stays light.  ``pdl``: its kernels launched with Programmatic Dependent Launch (sm_90+),
        which a lowering takes as ``pdl=True``; off, it is called as before the option, so a
        template without PDL needs no change."""
        func = self._tvm_side(_LOWERINGS, task_name, "lowering")
        return func(workload, config, target, pdl=True) if pdl else func(workload, config, target)

    def lowers(self, task_name: str):
        """Decorator: ``func(workload, config, target[, pdl=True])`` lowers task ``task_name``'s
        configs (``lower``)."""
        return self._registers(_LOWERINGS, task_name)

    def schedule(self, task_name: str, workload, config):
        """The scheduled TensorIR module of one (workload, config) of task ``task_name``, not yet
        lowered: what ``lower`` compiles, for a build that compiles it with more (a Relax model,
        under ``pass_config``).  Registered with ``schedules`` by the TVM side, as ``lower``'s."""
        return self._tvm_side(_SCHEDULES, task_name, "schedule")(workload, config)

    def schedules(self, task_name: str):
        """Decorator: ``func(workload, config)`` schedules task ``task_name``'s configs (``schedule``)."""
        return self._registers(_SCHEDULES, task_name)

    def _tvm_side(self, registry: dict, task_name: str, what: str) -> Callable:
        """The function of ``registry`` for task ``task_name``, the TVM side (``lowering_module``)
        loaded the first time: its decorators fill the registries."""
        key = (self.name, task_name)
        if key not in registry and self.lowering_module is not None:
            importlib.import_module(self.lowering_module)
        try:
            return registry[key]
        except KeyError:
            raise KeyError(f"template {self.name!r} has no {what} for task {task_name!r} "
                           f"(its TVM side: {self.lowering_module})") from None

    def _registers(self, registry: dict, task_name: str):
        def register(func):
            registry[(self.name, task_name)] = func
            return func
        return register


# (template name, task name) -> lowering function, and -> scheduling function; kept outside the
# frozen dataclass because the TVM sides that fill them (``lowering_module``) load after the
# template object exists.
_LOWERINGS: dict[tuple[str, str], Callable] = {}
_SCHEDULES: dict[tuple[str, str], Callable] = {}
