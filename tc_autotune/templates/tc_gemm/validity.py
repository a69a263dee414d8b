"""The template's validity and default config, as ``core.template.Template`` functions.

Moved from the space (``core.config_space``) so that it holds no knowledge of this template's
rules: the space asks its template (``TC_GEMM`` in ``template``) and this module answers from the rule
table (``rules`` and each intrinsic path's rules).  Nothing here imports ``core``: the space is
only ever an argument (its ``knobs``, ``context``, ``get``/``index``/``sample``), and the prior
is the space's template's, so this module sits beside ``prior`` in the import graph, not above.
"""

from __future__ import annotations

import functools

import numpy as np

from .gemm import im2col_window
from .intrinsic_paths import PATHS, WGMMA
from .intrinsic_paths import get as intrinsic_path
from .knobs import code
from .packing import packable, why_not_packed
from .rules import FRAG_BUFFERS, HEAD, TAIL, VECTOR_KNOBS, VECTOR_RULES, Context, derive, derive_rows, values_of_config
from .views import view_of

# The rules a config of each path must obey, in the order why_invalid reports them.
_RULES_OF_PATH = {name: HEAD + path.rules + TAIL for name, path in PATHS.items()}
# What each non-WMMA path requires of other knobs (the tuner's moves onto it set these).
INTRINSIC_REQUIRES = {name: path.requires for name, path in PATHS.items() if path.requires}


def problem(workload, gpu):
    """(view, context): the GEMM view is all that rules, prior and features read."""
    view = view_of(workload)
    return view, Context.of(view, gpu)


def draw_pinned(space) -> frozenset | dict:
    """Knobs whose random draws stay at 0, so they are no rarer in valid configs than before the
    knobs: tma_im2col where TMA's im2col mode cannot load A (dense, 1x1 stride-1 convs, channels
    not a multiple of 64) or the table has no warp-specialized kernel; tma_store and setmaxnreg
    always (their 1 is valid only on that kernel, a sliver of a uniform draw: free, tma_store
    halved a conv's valid draws again), swap_ab (valid only there, for a small-M dense), consumer_n and
    deep_ring (valid only there).  The tuner reaches their other values through the starting tilings
    (tma_store, swap_ab, consumer_n, deep_ring) and its annealing moves, which change any knob.
    group_pack stays at 1 where the view's groups cannot be packed (``packing.packable``: every task but a grouped conv of narrow
    groups), so those spaces' draws are what they were before the knob (a mapping then: its first
    value is 1).  An fp8 space's draws stay at the knob values of its only kernel too
    (``FP8_DRAWS``: a mapping, knob -> value)."""
    im2col = any(space.knobs["warp_specialized"]) and im2col_window(space.view) is not None
    pinned = frozenset({"tma_store", "setmaxnreg", "swap_ab", "consumer_n", "deep_ring"}
                       | (set() if im2col else {"tma_im2col"}))
    if packable(space.view):
        return pinned
    # as a mapping: the set's knobs where their first value is 0 (what a set pins), group_pack at 1
    pins = {knob: 0 for knob in pinned if space.knobs[knob][0] == 0}
    pins["group_pack"] = 1
    if space.view.fp8:  # draws stay in the warp-specialized kernel's corner: the only one fp8 takes
        return {**dict.fromkeys(pinned, 0), **FP8_DRAWS, "group_pack": 1}
    return pins


# fp8: the knob values of every fp8 config (the wgmma path's requirements and the warp-specialized
# kernel's: its 16-byte vectors, C from registers), at which random draws stay: of a uniform draw
# over the whole table about none is valid for fp8, of these 0.3-0.7% on the llm shapes (an fp16
# space's draws: ~0.1%).
FP8_DRAWS = {"intrinsic": WGMMA.name, **WGMMA.requires, "vec_a": 8, "vec_b": 8, "vec_c": 1, "offset_c": 0}


def rule_mask(v: dict, ctx: Context, rules=HEAD + TAIL) -> np.ndarray:
    """Rows obeying ``rules`` and the rules of their intrinsic path."""
    ok = np.ones(len(v["intrinsic"]), dtype=bool)
    for rule in rules:
        ok &= rule.ok(v, ctx)
    for name, path in PATHS.items():  # a path's rules bind only the configs on it
        off_path = v["intrinsic"] != code("intrinsic", name)
        for rule in path.rules:
            ok &= off_path | rule.ok(v, ctx)
    return ok


def valid_mask(space, pos: np.ndarray) -> np.ndarray:
    """Which knob-position rows of ``space`` are valid: ``why_invalid``'s rules, vectorised.

    A large batch is screened first: a row that lacks a knob value its intrinsic path requires
    breaks one of the path's rules (``test_every_requirement_of_a_path_is_a_rule``), and one
    comparison of the positions finds those rows without deriving them; the rules then run on
    the rest only (every rule reads its own row alone, so the mask is the same).  Of the
    zero-shot pick's ~60k random draws (its random starts), ~0.4% pass the screen."""
    if len(pos) < _SCREEN_ROWS:
        return rule_mask(derive_rows(space, pos), space.context)
    if len(pos) > _BLOCK_ROWS:
        return np.concatenate([valid_mask(space, pos[i:i + _BLOCK_ROWS]) for i in range(0, len(pos), _BLOCK_ROWS)])
    keep = meets_requirements(space, pos)
    if keep.all():  # (moves that land with their requirements: no row to drop)
        return rule_mask(derive_rows(space, pos), space.context)
    ok = np.zeros(len(pos), dtype=bool)
    keep = np.flatnonzero(keep)
    if len(keep):
        ok[keep] = rule_mask(derive_rows(space, pos[keep]), space.context)
    return ok


# Below this many rows valid_mask derives them all: the screen would cost about what it saves.
_SCREEN_ROWS = 256
# Rows valid_mask checks at once: each row derives ~60 columns and rule results, and the zero-shot
# neighbourhood's 10,000 rows at once first-touched ~10 MB (page faults: ~4 ms of a fresh process).
_BLOCK_ROWS = 4096


def meets_requirements(space, pos: np.ndarray) -> np.ndarray:
    """Rows whose knobs have every value their intrinsic path requires (``IntrinsicPath.requires``,
    where the space's table has that value): a necessary condition of validity, not sufficient."""
    columns, table = _requirements(tuple(space.knobs.items()))
    intrinsic = list(space.knobs).index("intrinsic")
    # one row per required knob, one column per config (the all() then runs along the rows)
    required = np.take(table, pos[:, intrinsic], axis=1)  # a position, or -1 for any
    return ((required < 0) | (required == pos.T[columns])).all(axis=0)


@functools.lru_cache(maxsize=64)
def _requirements(knob_items: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(the knobs any path requires a value of, as columns of the positions; a row per such knob
    of the position it must have on each ``intrinsic`` value, -1 where that path leaves it free)."""
    knobs = dict(knob_items)
    names = list(knobs)
    required = {}
    for i, intrinsic in enumerate(knobs["intrinsic"]):
        path = PATHS.get(intrinsic)
        for knob, value in (path.requires.items() if path is not None else ()):
            if knob in knobs and knobs[knob].count(value) == 1:  # (a value twice: the rule takes either)
                required.setdefault(knob, {})[i] = knobs[knob].index(value)
    columns = np.array([names.index(knob) for knob in required], dtype=np.intp)
    table = np.full((len(columns), len(knobs["intrinsic"])), -1, dtype=np.int64)
    for j, by_intrinsic in enumerate(required.values()):
        for i, position in by_intrinsic.items():
            table[j, i] = position
    return columns, table


def why_invalid(space, config) -> str | None:
    """None for a config that builds and runs on this workload and GPU, else the reason:
    the message of the first rule it breaks (``rules``, then its intrinsic path's)."""
    rules = _RULES_OF_PATH[intrinsic_path(config.intrinsic).name]
    v = derive(values_of_config(config), space.context)
    for rule in rules:
        if not rule.ok(v, space.context):
            return rule.message(config, v, space.context)
    return None


def _scales(space) -> np.ndarray:
    return np.cumprod([1] + [len(c) for c in space.knobs.values()][:-1])


def default_config(space, group_pack: int | None = None):
    """The valid config the prior rates highest among those with the usual shared-memory
    offsets (ties to the lowest index), without enumerating the ~10M offset-fixed configs
    (``group_pack``: among those of that value only).

    Only the vector rules involve the vector widths (besides a warp-specialized kernel's rule,
    which asks for the widest), each width's rules only itself and the tile, and the prior
    grows with each width; so the best config of every other-knob combination uses, per vec
    knob, its widest width that the vector rules allow: the grid screens the other rules with
    every width at its widest, then finds that width per row.  One grid per intrinsic path,
    with the knob values it requires (any other row breaks one of its rules); the usual
    offsets leave only WMMA's, ~35k rows to check and score (~0.05 s, ~40 MB).
    """
    names = list(space.knobs)
    fixed = {"offset_a": 8, "offset_b": 8, "offset_c": 4}
    # fp8 takes only the warp-specialized kernel (unpersistent: the one of the shipped dense records),
    # with its C from registers (vec_c=1, offset_c=0)
    fp8 = {**FP8_DRAWS, "warp_specialized": 1} if space.view.fp8 else {}
    fixed.update(fp8)
    vecs = [name for name in VECTOR_KNOBS if len(space.knobs[name]) > 1 and name not in fp8]
    grid = {name: [c.index(fixed[name])] if fixed.get(name) in c else
            [int(np.argmax(c))] if name in vecs else list(range(len(c))) for name, c in space.knobs.items()}
    # Never the warp-specialized kernel (but for fp8): a default must be a kernel measured across
    # many shapes.
    for knob in ("warp_specialized", "consumers_along_m", "multicast_b", "ping_pong", "tma_im2col", "tma_store",
                 "setmaxnreg", "swap_ab", "consumer_n", "deep_ring"):
        if knob in grid and 0 in space.knobs[knob] and knob not in fp8:
            grid[knob] = [space.knobs[knob].index(0)]
    # group_pack: the values valid for the view (1 alone but for narrow groups)
    grid["group_pack"] = [j for j, p in enumerate(space.knobs["group_pack"])
                          if why_not_packed(space.view, p) is None and group_pack in (None, p)]
    blocks = [np.zeros((0, len(names)), dtype=np.int64)]
    for i, intrinsic in enumerate(space.knobs["intrinsic"]):
        if fp8 and intrinsic != fp8["intrinsic"]:
            continue
        on_path = {**grid, "intrinsic": [i]}
        for knob, value in intrinsic_path(intrinsic).requires.items():
            on_path[knob] = [j for j in on_path[knob] if space.knobs[knob][j] == value]
        if all(on_path.values()):  # else the table has no value the path requires
            blocks.append(np.stack(np.meshgrid(*on_path.values(), indexing="ij"), axis=-1).reshape(-1, len(names)))
    pos = np.concatenate(blocks)
    ctx = space.context
    pos = pos[rule_mask(derive_rows(space, pos), ctx, HEAD + (FRAG_BUFFERS,))]  # no vector rule
    v = derive_rows(space, pos)
    widest = {}
    for name in vecs:  # widest width passing its vector rules (they read no other width)
        best = np.full(len(pos), -1, dtype=np.int64)
        for p, width in enumerate(space.knobs[name]):
            v[name] = np.full(len(pos), width, dtype=np.int64)
            ok = np.ones(len(pos), dtype=bool)
            for rule in VECTOR_RULES[name]:
                ok &= rule.ok(v, ctx)
            best[ok & ((best < 0) | (width > np.asarray(space.knobs[name])[best]))] = p
        widest[name] = best
    keep = np.ones(len(pos), dtype=bool)
    for best in widest.values():
        keep &= best >= 0
    pos = pos[keep]
    for name, best in widest.items():
        pos[:, names.index(name)] = best[keep]
    pos = pos[valid_mask(space, pos)]
    if len(pos) == 0:  # tiny or odd shapes: the prior's best of a large valid sample
        return _best_sampled(space)
    scales = _scales(space)
    order = np.lexsort((pos @ scales, -space.template.prior(space, pos)))
    for i in pos[order][:64] @ scales:
        config = space.get(int(i))
        if space.is_valid(config):
            return config
    return _best_sampled(space)


def _best_sampled(space):
    """The prior's favourite of up to 4096 valid configs drawn with a fixed seed."""
    configs = space.sample(4096, seed=0)
    if not configs:
        raise ValueError(f"no valid config found for {space.workload} on {space.gpu.arch}")
    indices = np.array([space.index(c) for c in configs], dtype=np.int64)
    pos = np.stack([np.asarray(indices // s % len(c)) for s, c in zip(_scales(space), space.knobs.values())], axis=1)
    order = np.lexsort((indices, -space.template.prior(space, pos)))
    return configs[int(order[0])]
