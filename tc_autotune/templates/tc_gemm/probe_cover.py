"""Probe configs that cover every pair of knob values, so the template-version check sees any
change of the generated code that is conditional on one knob value.

The hand-picked probe sets of ``generator`` cover every intrinsic path and feature, but not
every knob value in every context: swapping the fragment pipeline's order only at
``stages == 4`` changed no fingerprint (no probe had ``stages=4`` with ``frag_buffers=2``).
``COVER_PROBES`` (the template's kernels: wmma, mma and wgmma, ``warp_specialized=0``) and
``COVER_WS_PROBES`` (the warp-specialized kernel) are pairwise covers: for every two knobs,
each pair of their values that occurs in a valid config of a path (in a seeded sample of each
``COVER_WORKLOADS`` shape) occurs in some probe of that path.  A change conditional on a knob
value is then seen in every context one other knob's value makes for it.

The probe lists are literal (a change of the rules must not change them, and so the
fingerprints, behind the test's back); ``tests/test_generator.py`` checks that they still
cover the sample's pairs.  ``python -m tc_autotune.templates.tc_gemm.probe_cover`` prints a fresh greedy cover
when they do not (adding a knob or a value): give it a probe set of its own, with its
fingerprint, as the other sets.  No TVM here.
"""

from __future__ import annotations

import itertools

from ...backends.cuda.gpu import gpu_for_arch
from .intrinsic_paths import PATHS
from .knobs import KNOB_DEFAULTS, KNOB_NAMES, KNOBS
from ...core.config_space import ConfigSpace
from .template import TC_GEMM
from ...workloads.conv2d import get

# Shapes whose valid configs reach every value: a large and a small GEMM (split-K), a 1x1, and
# channel counts that need vec_a 1, 2 and 4 (3, 6 and 36 channels) and vec_b/vec_c 4 (20).
COVER_WORKLOADS = ("tutorial", "rfc-3x3-b1", "rfc-1x1-b32", "resnet50-conv1-b1",
                   "n=3,h=17,w=23,c=36,k=72,r=5,s=3,stride=2x1,pad=2x1,dilation=2", "n=2,h=9,w=11,c=6,k=20,r=3")
# The warp-specialized kernel's shapes (it needs channels in multiples of 8): 3x3, a small M
# (split-K clusters), a 1x1 (matrix A) and a strided 1x1 (gathered A, TMA im2col).
COVER_WS_WORKLOADS = ("tutorial", "rfc-3x3-b1", "rfc-1x1-b32", "resnet50-res3-1x1-256-512-s2-b1")
COVER_ARCH = "sm_90"
# Values the warp-specialized kernel requires (its rules refuse the others), pinned so that a
# sample of its configs is not one valid config in 10^4 draws.
_WS_REQUIRES = dict(vec_a=(8,), vec_b=(8,), vec_c=(1,), offset_c=(0,), block_col_warps=(1, 2), stages=(2, 3, 4))
# Random draws keep these at 0 (``ConfigSpace.drawn``): the warp-specialized family is sampled with
# each combination of them pinned, so their value 1 is reached too.
_DRAWN_AT_ZERO = ("tma_im2col", "tma_store", "setmaxnreg")
_WS_ONLY = ("warp_specialized", "consumers_along_m", "multicast_b", "ping_pong") + _DRAWN_AT_ZERO


def _path_table(path: str, **pinned) -> dict:
    table = {**KNOBS, "intrinsic": (path,), **{k: (v,) for k, v in PATHS[path].requires.items()}}
    return {**table, **{k: tuple(v) for k, v in pinned.items()}}


def family_tables(family: str) -> list[dict]:
    """The knob tables a family's configs are sampled from: "plain" is each intrinsic path's
    template kernel (warp_specialized=0), "ws" the warp-specialized kernel."""
    if family == "plain":
        return [_path_table(path, **{k: (0,) for k in _WS_ONLY}) for path in PATHS]
    if family == "ws":
        return [_path_table("wgmma", warp_specialized=(1, 2), **_WS_REQUIRES,
                            **dict(zip(_DRAWN_AT_ZERO, ((v,) for v in flags))))
                for flags in itertools.product((0, 1), repeat=len(_DRAWN_AT_ZERO))]
    raise ValueError(f"unknown probe family {family!r}")


# configs sampled per workload and table: enough to meet every feasible pair several times
SAMPLES = {"plain": 300, "ws": 60}


def sampled(family: str, n: int | None = None) -> list[tuple[str, object]]:
    """(workload name, config) of a seeded sample of valid configs of the family."""
    gpu = gpu_for_arch(COVER_ARCH)
    out = []
    for table in family_tables(family):
        for name in (COVER_WS_WORKLOADS if family == "ws" else COVER_WORKLOADS):
            space = ConfigSpace(get(name), gpu, table, template=TC_GEMM)
            out += [(name, c) for c in space.sample(n or SAMPLES[family], seed=0)]
    return out


def pairs(config) -> set:
    """The (knob, value) pairs of one config, for every two knobs (the path among them)."""
    values = [(name, getattr(config, name)) for name in KNOB_NAMES]
    return set(itertools.combinations(values, 2))


def path_of(config) -> tuple:
    """The code a config's kernel comes from: its intrinsic path, or the warp-specialized kernel."""
    return ("ws",) if config.warp_specialized else ("plain", config.intrinsic)


def uncovered(probes: list, candidates: list) -> set:
    """Pairs of ``candidates`` (configs) that no probe of the same path has: (path, pair)."""
    have = {(path_of(c), p) for c in probes for p in pairs(c)}
    return {(path_of(c), p) for c in candidates for p in pairs(c)} - have


def greedy_cover(family: str) -> list[tuple[str, object]]:
    """A small set of the family's sampled configs covering every pair the sample has."""
    pool = sampled(family)
    keyed = [{(path_of(c), p) for p in pairs(c)} for _, c in pool]
    left, chosen = set().union(*keyed), []
    while left:
        best = max(range(len(pool)), key=lambda i: len(keyed[i] & left))  # ties: the first
        chosen.append(pool[best])
        left -= keyed[best]
    return chosen


def as_changes(config) -> dict:
    """A probe's knob values as ``generator.probe_kernels`` takes them (later knobs only where
    not at their default)."""
    return {k: v for k, v in config.as_dict().items() if k not in KNOB_DEFAULTS or v != KNOB_DEFAULTS[k]}


if __name__ == "__main__":
    for family in ("plain", "ws"):
        print(f"# {family}")
        for name, config in greedy_cover(family):
            print(f"    ({name!r}, {as_changes(config)!r}),")
