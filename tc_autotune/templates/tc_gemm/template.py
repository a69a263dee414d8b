"""``TC_GEMM``: the Tensor Core implicit-GEMM template as a ``core.template.Template``.

Only wiring: each part is the function that existed before the protocol (knobs, the rule table
through ``validity``, the prior, ``features``, the starting tilings, the workspaces, the build
arch of each intrinsic path), so the generated code, the config indices and the records are
unchanged.  Light: no TVM.  Its TVM side is ``schedule``, named here (``lowering_module``) and
loaded by ``Template.lower`` (or ``Template.schedule``) when a kernel is first lowered; its
lowering and scheduling functions register themselves through ``Template.lowers`` and
``Template.schedules``, and lower under ``PASS_CONFIG``.  Which tasks it serves is the package
face's choice (``core.tasks.use_template``).
"""

from __future__ import annotations

from pathlib import Path

from ...backends.cuda import code_hash
from ...core.template import Template
from . import validity
from .features import FEATURE_NAMES, block_tiles, features_of
from .intrinsic_paths import PATHS, build_arch
from .knobs import KNOB_DEFAULTS, KNOBS, TcGemmConfig
from .prior import prior_of, prior_score
from .rules import derive_rows
from .starting_tilings import starting_configs
from .workspaces import workspaces


_PACKAGE = Path(__file__).resolve().parents[2]  # tc_autotune/
# Modules outside the template package whose text shapes the code it generates: the workloads
# (shapes, layouts, the dtype names they store, the epilogue formula its TE compute evaluates) and
# the host-side encoder of the TMA im2col maps that its kernels call.
OUTSIDE_SOURCES = ("workloads/conv2d.py", "workloads/conv_weights.py", "workloads/dense.py", "workloads/epilogue.py",
                   "workloads/spec.py", "backends/cuda/tensormap.py", "backends/cuda/tensormap_bf16.py")


def source_files() -> list[tuple[str, Path]]:
    """(name under tc_autotune/, path) of every file that shapes the generated code: the whole
    template package (its Python and the warp-specialized kernel's .cuh files; search-only modules
    such as the prior are in it too, which costs a re-check of the records, never a wrong key)
    and ``OUTSIDE_SOURCES``."""
    here = Path(__file__).resolve().parent
    files = [p for p in here.rglob("*") if p.suffix in (".py", ".cuh") and p.is_file()
             and "__pycache__" not in p.parts]
    files += [_PACKAGE / name for name in OUTSIDE_SOURCES]
    return [(p.relative_to(_PACKAGE).as_posix(), p) for p in files]


# The TIR pass options its kernels are lowered with (``schedule.lower_gemm``, and a Relax model's
# build of its scheduled kernels): use_async_copy makes the copies inside a pipeline's async stage
# cp.async (no effect elsewhere); merged static shared memory.
PASS_CONFIG = {"tirx.merge_static_smem": True, "tirx.use_async_copy": True}


def features_from_positions(space, pos):
    """(n, len(FEATURE_NAMES)) float32 features of knob-position rows on ``space``'s workload:
    derived once, the prior a column (composed here so that ``features`` need not import it)."""
    return features_of(space, derive_rows(space, pos), prior_of)


TC_GEMM = Template(
    name="tc_gemm",
    knobs=KNOBS,
    knob_defaults=KNOB_DEFAULTS,
    config_type=TcGemmConfig,
    problem=validity.problem,
    valid_mask=validity.valid_mask,
    why_invalid=validity.why_invalid,
    prior=prior_score,
    feature_names=FEATURE_NAMES,
    features=features_from_positions,
    tiles=block_tiles,
    default_config=validity.default_config,
    # a move onto the mma or wgmma path sets offsets 0 and 16x16x16 (wgmma: also a 4-warp
    # warpgroup, chunk 4, one fragment buffer); off wgmma, wgmma_in_flight and warp_specialized 0
    requires={"intrinsic": {name: path.requires for name, path in PATHS.items()}},
    draw_pinned=validity.draw_pinned,
    # the knobs added 2026-12-02 (48/96-column consumers, the doubled ring): no record holds them yet
    zero_shot_held={"consumer_n": (0,), "deep_ring": (0,)},
    # records stamp the hash of these (``Template.source_hash``) and of each kernel's code
    sources=source_files,
    toolchain=code_hash.toolchain,
    # the warp-specialized kernel's tilings (Hopper), whose good region a short search misses
    starting_configs=starting_configs,
    workspaces=workspaces,
    build_arch=build_arch,
    lowering_module=f"{__package__}.schedule",  # its TVM side: the TE compute and TensorIR schedules
    pass_config=PASS_CONFIG,
)
