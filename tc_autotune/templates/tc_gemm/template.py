"""``TC_GEMM``: the Tensor Core implicit-GEMM template as a ``core.template.Template``.

Only wiring: each part is the function that existed before the protocol (knobs, the rule table
through ``validity``, the prior, ``features``, the starting tilings, the workspaces, the build
arch of each intrinsic path), so the generated code, the config indices and the records are
unchanged.  Light: no TVM (the lowering functions register themselves from ``schedule``
through ``Template.lowers``).  Which tasks it serves is the package face's choice
(``core.tasks.use_template``).
"""

from __future__ import annotations

from ...core.template import Template
from . import validity
from .features import FEATURE_NAMES, block_tiles, features_of
from .intrinsic_paths import PATHS, build_arch
from .knobs import KNOB_DEFAULTS, KNOBS, TcGemmConfig
from .prior import prior_of, prior_score
from .rules import derive_rows
from .starting_tilings import starting_configs
from .workspaces import workspaces


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
    # the warp-specialized kernel's tilings (Hopper), whose good region a short search misses
    starting_configs=starting_configs,
    workspaces=workspaces,
    build_arch=build_arch,
    # records stamp these (generator.FINGERPRINTS, DENSE_FINGERPRINTS keep them honest)
    versions={"conv2d_nhwc_tensorcore.cuda": 1, "dense_tensorcore.cuda": 2},
)
