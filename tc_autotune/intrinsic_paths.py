"""The Tensor Core instruction paths (the ``intrinsic`` knob) and what each one needs.

One entry per path says everything the rest of the package needs to know about it: the
knob values it requires (the tuner's moves onto the path set them), the GPUs it runs on,
the arch suffix its kernels are built for (wgmma: ``sm_90a``), its validity rules (checked
only for configs on the path), its weight in the analytic prior and whether its shared
tiles are swizzled.  The template registers each path's schedule function with
``schedules``.  Space, cost model, tuner, template and kernel look paths up here; an
``intrinsic`` value without an entry is an error, never another path's rules.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from .knobs import KNOBS
from .rules import Rule, requires_rule


@dataclass(frozen=True)
class IntrinsicPath:
    """One value of the ``intrinsic`` knob."""

    name: str
    requires: dict = field(default_factory=dict)  # knob -> the value configs on the path must have
    rules: tuple[Rule, ...] = ()  # in the order why_invalid reports them (see ``rules``)
    min_arch: int = 70  # sm_70
    arch_suffix: str = ""  # "a": built for the arch-specific target (sm_90a)
    swizzled: bool = False  # A/B shared tiles swizzled (no padding offsets, conflict-free)
    prior_weight: float = 1.0  # the prior's factor for a swizzled path (padded: its offsets')

    def build_arch(self, arch: str) -> str:
        """The arch a kernel of this path is compiled for ("sm_90" -> "sm_90a" for wgmma)."""
        return arch + self.arch_suffix

    def schedule(self, *args, **kwargs):
        """The template's schedule function of this path (registered by ``schedules``)."""
        return _SCHEDULES[self.name](*args, **kwargs)


def _path(name: str, rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    return tuple(Rule(r.name, r.ok, r.message, path=name) for r in rules)


# wgmma_in_flight belongs to the wgmma path: the others require its default.
_NO_WGMMA = {"wgmma_in_flight": 0}


def _no_wgmma_rule(name: str) -> Rule:
    return requires_rule(name, "wgmma_in_flight", 0,
                         lambda cfg, v, c: f"wgmma_in_flight={cfg.wgmma_in_flight} keeps wgmma groups in flight: "
                                           f"it needs intrinsic=wgmma, not {name}")


# mma: 16x16x16 tiles, sm_80's m16n8k16, and shared tiles whose rows the XOR swizzle can
# permute (multiples of 32 fp16; it replaces the padding offsets).
_MMA_REQUIRES = {"wmma": "m16n16k16", "offset_a": 0, "offset_b": 0}
MMA = IntrinsicPath(
    "mma", requires={**_MMA_REQUIRES, **_NO_WGMMA}, min_arch=80, swizzled=True,
    # H100: ~1.1x over WMMA on padded tiles
    prior_weight=1.1,
    rules=_path("mma", (
        requires_rule("mma", "wmma", "m16n16k16",
                      lambda cfg, v, c: f"intrinsic=mma computes 16x16x16 tiles, not wmma={cfg.wmma}"),
        Rule("mma_arch", lambda v, c: c.sm >= 80,
             lambda cfg, v, c: f"intrinsic=mma needs mma.sync.m16n8k16 (sm_80 or newer), not {c.gpu.arch}"),
        Rule("mma_offsets", lambda v, c: (v["offset_a"] == 0) & (v["offset_b"] == 0),
             lambda cfg, v, c: "intrinsic=mma swizzles the A and B tiles: offset_a and offset_b must be 0"),
        Rule("mma_swizzled_rows", lambda v, c: (v["bk"] % 32 == 0) & (v["bn"] % 32 == 0),
             lambda cfg, v, c: f"intrinsic=mma: block_k={v['bk']} and block_n={v['bn']} "
                               "must be multiples of 32 (swizzled rows)"),
        _no_wgmma_rule("mma"),
    )))

# wgmma: Hopper only; the four warps along M are one warpgroup; a k-step is one 128-byte
# swizzled row of 64 fp16 (chunk 4); the operands stay in shared memory (no fragments to
# double-buffer); warpgroup tiles are whole 64-column swizzle atoms (warp_col_tiles 4 or 8).
# wgmma_in_flight=1 overlaps a k-step's wgmma with the next one's wait for its data, so the
# copies that follow must fill another shared buffer: two stages at least.
_WGMMA_REQUIRES = {**_MMA_REQUIRES, "block_row_warps": 4, "chunk": 4, "frag_buffers": 1}
WGMMA = IntrinsicPath(
    "wgmma", requires=_WGMMA_REQUIRES, min_arch=90, arch_suffix="a", swizzled=True,
    # H200, tuned configs of the seed workloads: 1.1-1.4x faster than mma
    prior_weight=1.3,
    rules=_path("wgmma", (
        Rule("wgmma_arch", lambda v, c: c.gpu.arch == "sm_90",
             lambda cfg, v, c: f"intrinsic=wgmma is a Hopper instruction (sm_90), not {c.gpu.arch}"),
        *(requires_rule("wgmma", knob, value) for knob, value in _WGMMA_REQUIRES.items()),
        Rule("wgmma_atoms", lambda v, c: v["warp_col_tiles"] * 16 % 64 == 0,
             lambda cfg, v, c: f"intrinsic=wgmma: warp_col_tiles={cfg.warp_col_tiles} gives a warpgroup "
                               f"{cfg.warp_col_tiles * 16} columns, not a multiple of the 64-column "
                               "swizzle atom"),
        Rule("wgmma_in_flight_stages", lambda v, c: (v["wgmma_in_flight"] == 0) | (v["stages"] >= 2),
             lambda cfg, v, c: f"wgmma_in_flight=1 needs stages >= 2, not {cfg.stages}: the next k-step's "
                               "copy must fill another buffer than the one the wgmma in flight reads"),
    )))

# WMMA fragments on padded shared tiles: any shape, sm_70+
WMMA = IntrinsicPath("wmma", requires=_NO_WGMMA, rules=_path("wmma", (_no_wgmma_rule("wmma"),)))

PATHS: dict[str, IntrinsicPath] = {p.name: p for p in (WMMA, MMA, WGMMA)}
assert tuple(PATHS) == KNOBS["intrinsic"], "every intrinsic knob value needs exactly one entry"


def get(name: str) -> IntrinsicPath:
    """The entry of an ``intrinsic`` knob value; KeyError names the known ones."""
    try:
        return PATHS[name]
    except KeyError:
        raise KeyError(f"unknown intrinsic path {name!r} (known: {', '.join(PATHS)})") from None


# path name -> the template's schedule function, filled by ``schedules`` as template.py loads
_SCHEDULES: dict = {}


def schedules(name: str):
    """Decorator: the template's function that schedules the GEMM block on path ``name``."""
    return functools.partial(_set_schedule, get(name).name)


def _set_schedule(name: str, func):
    _SCHEDULES[name] = func
    return func
