"""Features of configs and a gradient-boosted cost model that ranks them.

Features describe *what a config does to this workload* (tile shapes, waves on
the GPU, padding waste, reuse, k-loop length, the problem size) rather than
only its raw knob values, so a model trained on the measurements of one
workload says something useful about another (transfer learning).

Configs are handled as integer arrays of knob positions (one column per knob,
``space.knobs`` order) so thousands of them are featurised and filtered with a
few numpy operations; that is what makes simulated annealing over millions of
configs cheap.
"""

from __future__ import annotations

import numpy as np

from .space import (KNOBS, MAX_ACCUMULATOR_FRAGMENTS, MMA_REQUIRES, WGMMA_REQUIRES, WMMA_SHAPES,
                    ConfigSpace, Conv2dConfig)

_WMMA_NAMES = tuple(WMMA_SHAPES)
_NAMED_KNOBS = {"wmma": _WMMA_NAMES, "intrinsic": KNOBS["intrinsic"]}  # values -> their position
_MMA = KNOBS["intrinsic"].index("mma")
_WGMMA = KNOBS["intrinsic"].index("wgmma")
_WMMA_MNK = np.array([WMMA_SHAPES[name] for name in _WMMA_NAMES], dtype=np.int64)  # (3, 3)
_LOG2_KNOBS = ("block_row_warps", "block_col_warps", "warp_row_tiles", "warp_col_tiles", "chunk")
_MAX_THREADS_PER_SM = 2048
_MAX_BLOCKS_PER_SM = 32


# ---- configs <-> knob-position arrays -------------------------------------------
def radices(space: ConfigSpace) -> np.ndarray:
    return np.array([len(c) for c in space.knobs.values()], dtype=np.int64)


def positions_from_indices(space: ConfigSpace, indices) -> np.ndarray:
    """Mixed-radix decode (first knob fastest, as ``ConfigSpace.get``): (n, knobs) int64."""
    rest = np.asarray(indices, dtype=np.int64).copy()
    rad = radices(space)
    pos = np.empty((rest.size, rad.size), dtype=np.int64)
    for j, r in enumerate(rad):
        pos[:, j] = rest % r
        rest //= r
    return pos


def indices_from_positions(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    scales = np.cumprod(np.concatenate([[1], radices(space)[:-1]]))
    return pos @ scales


def positions_from_configs(space: ConfigSpace, configs) -> np.ndarray:
    lookups = [{v: i for i, v in enumerate(cands)} for cands in space.knobs.values()]
    names = list(space.knobs)
    pos = np.empty((len(configs), len(names)), dtype=np.int64)
    for row, config in enumerate(configs):
        for j, (name, lookup) in enumerate(zip(names, lookups)):
            pos[row, j] = lookup[getattr(config, name)]
    return pos


def _knob_values(space: ConfigSpace, pos: np.ndarray) -> dict[str, np.ndarray]:
    """Knob values per column (string knobs as their position in the full candidate list)."""
    out = {}
    for j, (name, cands) in enumerate(space.knobs.items()):
        if name in _NAMED_KNOBS:
            table = np.array([_NAMED_KNOBS[name].index(c) for c in cands], dtype=np.int64)
        else:
            table = np.array(cands, dtype=np.int64)
        out[name] = table[pos[:, j]]
    return out


def _derive(space: ConfigSpace, pos: np.ndarray) -> dict[str, np.ndarray]:
    """Knob values plus the quantities ``Conv2dConfig`` derives, vectorised."""
    v = _knob_values(space, pos)
    mnk = _WMMA_MNK[v["wmma"]]
    v["bm"] = v["block_row_warps"] * v["warp_row_tiles"] * mnk[:, 0]
    v["bn"] = v["block_col_warps"] * v["warp_col_tiles"] * mnk[:, 1]
    v["bk"] = v["chunk"] * mnk[:, 2]
    v["warps"] = v["block_row_warps"] * v["block_col_warps"]
    v["threads"] = v["warps"] * 32
    v["frags"] = v["warp_row_tiles"] * v["warp_col_tiles"]
    a = v["bm"] * (v["bk"] + v["offset_a"]) * 2
    b = v["bk"] * (v["bn"] + v["offset_b"]) * 2
    c = v["bm"] * (v["bn"] + v["offset_c"]) * 4
    v["smem"] = np.maximum(v["stages"] * (a + b), c)
    m, n, k = space.workload.gemm_shape
    # The grid: blocks along M and N, k-steps per K slice, and every block of every slice.
    v["gm"], v["gn"] = -(-m // v["bm"]), -(-n // v["bn"])
    v["gk"] = -(-k // (v["bk"] * v["split_k"]))
    v["blocks"] = v["gm"] * v["gn"] * v["split_k"]
    return v


def block_tiles(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """(n, 4) rows of block M, N, K and warps: what sets a config's tiling apart."""
    v = _derive(space, pos)
    return np.stack([v["bm"], v["bn"], v["bk"], v["warps"]], axis=1)


def _meets(v: dict[str, np.ndarray], requires: dict) -> np.ndarray:
    """Rows whose knobs hold the values an intrinsic requires (``space.MMA_REQUIRES`` ...)."""
    ok = np.ones(len(v["intrinsic"]), dtype=bool)
    for knob, value in requires.items():
        ok &= v[knob] == (_NAMED_KNOBS[knob].index(value) if knob in _NAMED_KNOBS else value)
    return ok


def valid_mask(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """Vectorised mirror of ``ConfigSpace.why_invalid``: a fast pre-filter for search.

    The space stays the authority: tuners confirm every pick with ``space.is_valid``,
    and a test checks that this mirror agrees with it.
    """
    v = _derive(space, pos)
    wl, gpu = space.workload, space.gpu
    m, n, k = wl.gemm_shape
    ok = (v["threads"] <= gpu.max_threads_per_block) & (v["smem"] <= gpu.max_smem_per_block)
    ok &= v["frags"] <= MAX_ACCUMULATOR_FRAGMENTS
    if int(gpu.arch[3:]) < 80:
        ok &= v["stages"] == 1
    ok &= v["stages"] <= v["gk"]
    split = v["split_k"] > 1
    ok &= ~split | ((v["split_k"] - 1) * v["gk"] * v["bk"] < k)
    ok &= ~split | (v["gm"] * v["gn"] < 2 * gpu.sm_count)
    mma = v["intrinsic"] == _MMA
    ok &= ~mma | (_meets(v, MMA_REQUIRES) & (int(gpu.arch[3:]) >= 80)
                  & (v["bk"] % 32 == 0) & (v["bn"] % 32 == 0))
    wgmma = v["intrinsic"] == _WGMMA
    ok &= ~wgmma | (_meets(v, WGMMA_REQUIRES) & (gpu.arch == "sm_90") & (v["warp_col_tiles"] * 16 % 64 == 0))
    ok &= v["frag_buffers"] <= v["chunk"]
    for tile, size in ((v["bm"], m), (v["bn"], n), (v["bk"], k)):
        ok &= tile <= 2 * (-(-size // 16) * 16)
    for vec, channels, tile in ((v["vec_a"], wl.in_channels, v["bm"] * v["bk"]),
                                (v["vec_b"], wl.out_channels, v["bk"] * v["bn"]),
                                (v["vec_c"], wl.out_channels, v["bm"] * v["bn"])):
        ok &= (channels % vec == 0) & (tile % (v["threads"] * vec) == 0)
    for offset, vec in (("offset_a", "vec_a"), ("offset_b", "vec_b"), ("offset_c", "vec_c")):
        ok &= v[offset] % v[vec] == 0
    return ok


# ---- an analytic prior ------------------------------------------------------------
def _lookup(table: dict, values: np.ndarray, default: float = 1.0) -> np.ndarray:
    out = np.full(values.shape, default, dtype=np.float64)
    for key, weight in table.items():
        out[values == key] = weight
    return out


def prior_score(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """A hand-made estimate of relative throughput, before anything is measured.

    Product of: padding waste, how well the grid fills the SMs (last-wave idle
    SMs), data reuse of the block tile (saturating near 128x128, falling off for
    huge tiles that spill or starve the grid), warps per block, and mild
    preferences for wide vector loads, a 32-64 deep k-tile, the square WMMA shape
    and padded shared-memory rows (or the swizzled mma path), a pipelined (multi-stage) k-loop, and a mild
    cost for split-K's second kernel.  It picks the default config and seeds the
    tuner's first batch; the cost model also sees it as a feature.
    """
    return _prior_of(space, _derive(space, pos))


def _prior_of(space: ConfigSpace, v: dict[str, np.ndarray]) -> np.ndarray:
    m, n, k = space.workload.gemm_shape
    bm, bn, bk, split, gm, gn, gk = (v[x].astype(np.float64)
                                     for x in ("bm", "bn", "bk", "split_k", "gm", "gn", "gk"))
    padding = (m * n * k) / (gm * bm * gn * bn * gk * bk * split)
    waves = gm * gn * split / space.gpu.sm_count
    wave_use = waves / np.ceil(waves)
    intensity = bm * bn / (bm + bn)
    reuse = np.minimum(1.0, intensity / 48.0) * np.where(bm * bn > 256 * 128, 0.6, 1.0)
    warps = _lookup({1: 0.5, 2: 0.8, 4: 1.0, 8: 0.9, 16: 0.7}, v["warps"])
    vec = (_lookup({1: 0.45, 2: 0.65, 4: 0.85}, v["vec_a"]) * _lookup({1: 0.8, 2: 0.9, 4: 0.95}, v["vec_b"])
           * _lookup({1: 0.9, 2: 0.95}, v["vec_c"]))
    chunk = _lookup({1: 0.85, 8: 0.75}, v["chunk"])
    shape = _lookup({0: 1.0}, v["wmma"], default=0.9)
    # Padded rows matter to WMMA; the mma path swizzles instead (H100: ~1.1x over WMMA), and
    # wgmma (Hopper) runs 1.1-1.4x faster than mma (H200, tuned configs of the seed workloads).
    swizzled = _lookup({_MMA: 1.1, _WGMMA: 1.3}, v["intrinsic"], default=0.0)
    offsets = np.where(swizzled > 0, swizzled,
                       _lookup({0: 0.85}, v["offset_a"]) * _lookup({0: 0.8}, v["offset_b"]))
    stages = _lookup({1: 0.8, 4: 0.85}, v["stages"])  # H100 sweep: 2-3 stages best, 4 costs occupancy
    # Split-K: a fuller grid (counted in wave_use) against a second kernel and fp32 partials.
    splitting = np.where(split > 1, 0.9, 1.0)
    return padding * wave_use * reuse * warps * vec * chunk * shape * offsets * stages * splitting


# ---- features -------------------------------------------------------------------
FEATURE_NAMES = (
    *(f"log2_{k}" for k in _LOG2_KNOBS),
    *(f"wmma_{w}" for w in _WMMA_NAMES),
    "a_conflict_ways", "b_conflict_ways", "offset_c", "log2_vec_a", "log2_vec_b", "log2_vec_c",
    "log2_block_m", "log2_block_n", "log2_block_k", "threads", "warps", "log2_smem_bytes",
    "acc_fragments", "tile_intensity", "log2_blocks", "waves", "last_wave_use",
    "resident_blocks", "occupancy_waves", "padding_efficiency", "log2_flops_per_block",
    "log2_k_trips", "log2_M", "log2_N", "log2_K", "stages", "frag_buffers", "log2_split_k", "mma", "wgmma",
    "prior",
)


def _fragment_load_conflicts(v: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Shared-memory bank-conflict ways of the A and B fragment loads (8 rows of 16 bytes):
    a padded row stride of s 16-byte units puts the rows on 8 / gcd(s, 8) distinct bank
    groups; the swizzled tiles of the mma and wgmma paths are conflict-free.  Transferable where
    the raw offsets are not: offset 0 is bad for WMMA but the only choice for mma and wgmma."""
    swizzled = v["intrinsic"] != _NAMED_KNOBS["intrinsic"].index("wmma")
    ways = [np.where(swizzled, 1, np.gcd((v[size] + v[offset]) // 8, 8))
            for size, offset in (("bk", "offset_a"), ("bn", "offset_b"))]
    return tuple(w.astype(np.float64) for w in ways)


def features_from_positions(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """(n, len(FEATURE_NAMES)) float32 features of knob-position rows on ``space``'s workload."""
    v = _derive(space, pos)
    m, n, k = space.workload.gemm_shape
    sm = space.gpu.sm_count
    f = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    gm, gn, gk, blocks = v["gm"], v["gn"], v["gk"], v["blocks"]
    waves = blocks / sm
    last_wave = waves / np.ceil(waves)
    resident = np.minimum.reduce([
        np.full(blocks.shape, _MAX_BLOCKS_PER_SM),
        _MAX_THREADS_PER_SM // v["threads"],
        np.maximum(1, space.gpu.max_smem_per_block // v["smem"]),
    ])
    padded = f(gm * v["bm"]) * f(gn * v["bn"]) * f(gk * v["bk"] * v["split_k"])
    bm, bn = f(v["bm"]), f(v["bn"])
    cols = [
        *(np.log2(f(v[name])) for name in _LOG2_KNOBS),
        *(f(v["wmma"] == i) for i in range(len(_WMMA_NAMES))),
        *_fragment_load_conflicts(v), f(v["offset_c"]),
        np.log2(f(v["vec_a"])), np.log2(f(v["vec_b"])), np.log2(f(v["vec_c"])),
        np.log2(bm), np.log2(bn), np.log2(f(v["bk"])),
        f(v["threads"]), f(v["warps"]), np.log2(f(v["smem"])),
        f(v["frags"]), bm * bn / (bm + bn), np.log2(f(blocks)), waves, last_wave,
        f(resident), blocks / (sm * resident), (m * n * k) / padded,
        np.log2(2.0 * bm * bn * f(gk * v["bk"])), np.log2(f(gk)),
        *(np.full(blocks.shape, np.log2(x)) for x in (m, n, k)),
        f(v["stages"]), f(v["frag_buffers"]), np.log2(f(v["split_k"])), f(v["intrinsic"] == _MMA),
        f(v["intrinsic"] == _WGMMA), _prior_of(space, v),
    ]
    return np.stack(cols, axis=1).astype(np.float32)


def config_features(space: ConfigSpace, configs: list[Conv2dConfig]) -> np.ndarray:
    """Transferable features of ``configs`` on ``space``'s workload and GPU (float32, one row each)."""
    return features_from_positions(space, positions_from_configs(space, configs))


# ---- the model ------------------------------------------------------------------
def normalise_per_group(throughputs, groups=None) -> np.ndarray:
    """Throughput / the best of its group (workload), so workloads of any size pool; failed = 0."""
    y = np.nan_to_num(np.asarray(throughputs, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    y = np.maximum(y, 0.0)
    g = np.zeros(y.size, dtype=np.int64) if groups is None else np.asarray(groups)
    out = np.zeros_like(y)
    for key in np.unique(g):
        sel = g == key
        best = y[sel].max()
        if best > 0:
            out[sel] = y[sel] / best
    return out


class XGBCostModel:
    """Gradient-boosted trees that score configs (higher = faster).

    Objective: ``rank:pairwise`` with one query group per workload, labels being
    throughput normalised by the group's best (failed = 0).  A tuner only needs the
    order of configs within a workload, and pairs never cross workloads, so pooled
    transfer data cannot be confused by workloads of different speeds.  On the
    synthetic objective of tests/test_tuner.py it beat ``reg:squarederror`` on what
    the tuner uses: best of the top-16 predictions was 0.95 vs 0.90 of the optimum
    when transferring between 5 workloads, 0.86 vs 0.86 from 16-48 own samples.
    ``objective="reg:squarederror"`` stays available.  One thread, fixed seed:
    deterministic.
    """

    def __init__(self, seed: int | None = 0, objective: str = "rank:pairwise", num_rounds: int = 120,
                 max_depth: int = 4, eta: float = 0.2, nthread: int = 1):
        self.seed = 0 if seed is None else int(seed)
        self.objective = objective
        self.num_rounds = num_rounds
        self.params = {
            "objective": objective, "max_depth": max_depth, "eta": eta, "min_child_weight": 1,
            "subsample": 1.0, "lambda": 1.0, "tree_method": "hist", "seed": self.seed,
            "verbosity": 0,
            # Tuning data is small (hundreds to a few thousand rows): one thread is fastest,
            # and OpenMP threads spinning on a busy machine made fits 20x slower.
            "nthread": nthread,
        }
        if objective.startswith("rank:"):
            self.params.update(lambdarank_pair_method="mean", lambdarank_num_pair_per_sample=8)
        self._booster = None

    @property
    def fitted(self) -> bool:
        return self._booster is not None

    def fit(self, features, throughputs, groups=None, weights=None) -> "XGBCostModel":
        """Train on measured throughputs (FLOP/s or any per-workload scale; failed = 0).

        ``groups`` labels each row's workload; throughput is normalised within a group.
        ``weights`` (per row) lets the workload being tuned outweigh pooled transfer data;
        ranking objectives weight whole groups, so a group takes its rows' mean weight.
        With fewer than two successful rows the model stays (or becomes) unfitted.
        """
        import xgboost as xgb

        x = np.asarray(features, dtype=np.float32)
        g = np.zeros(len(x), dtype=np.int64) if groups is None else np.asarray(groups)
        _, g = np.unique(g, return_inverse=True)
        y = normalise_per_group(throughputs, g)
        if int((y > 0).sum()) < 2:
            self._booster = None
            return self
        order = np.argsort(g, kind="stable")  # ranking objectives need rows grouped by query
        dtrain = xgb.DMatrix(x[order], label=y[order], nthread=self.params["nthread"])
        w = None if weights is None else np.asarray(weights, dtype=np.float64)
        if self.objective.startswith("rank:"):
            dtrain.set_group(np.bincount(g[order]))
            if w is not None:
                dtrain.set_weight(np.bincount(g, weights=w) / np.bincount(g))
        elif w is not None:
            dtrain.set_weight(w[order])
        self._booster = xgb.train(self.params, dtrain, num_boost_round=self.num_rounds)
        return self

    def predict(self, features) -> np.ndarray:
        """Scores, higher = faster; zeros before the model could be fitted."""
        x = np.asarray(features, dtype=np.float32)
        if self._booster is None or len(x) == 0:
            return np.zeros(len(x), dtype=np.float64)
        return np.asarray(self._booster.inplace_predict(x), dtype=np.float64)
