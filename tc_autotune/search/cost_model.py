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

from ..templates.tc_gemm.intrinsic_paths import PATHS
from ..templates.tc_gemm.knobs import WMMA_SHAPES, Conv2dConfig, code
from ..templates.tc_gemm.prior import prior_of, prior_score
from ..templates.tc_gemm.rules import derive_rows
from ..core.space import (ConfigSpace, indices_from_positions, positions_from_configs, positions_from_indices,
    radices, valid_mask)

__all__ = ["FEATURE_NAMES", "XGBCostModel", "TransferCostModel", "features_from_positions", "config_features", "block_tiles",
           "normalise_per_group", "prior_score", "valid_mask", "radices", "positions_from_indices",
           "indices_from_positions", "positions_from_configs"]

_WMMA_NAMES = tuple(WMMA_SHAPES)
_LOG2_KNOBS = ("block_row_warps", "block_col_warps", "warp_row_tiles", "warp_col_tiles", "chunk")
_MAX_THREADS_PER_SM = 2048
_MAX_BLOCKS_PER_SM = 32
# One indicator feature per path besides WMMA, named after it; swizzled paths by code.
_OTHER_PATHS = tuple(name for name in PATHS if name != "wmma")
_SWIZZLED = np.array([p.swizzled for p in PATHS.values()])


def block_tiles(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """(n, 4) rows of block M, N, K and warps: what sets a config's tiling apart."""
    v = derive_rows(space, pos)
    return np.stack([v["bm"], v["bn"], v["bk"], v["warps"]], axis=1)


# ---- features -------------------------------------------------------------------
FEATURE_NAMES = (
    *(f"log2_{k}" for k in _LOG2_KNOBS),
    *(f"wmma_{w}" for w in _WMMA_NAMES),
    "a_conflict_ways", "b_conflict_ways", "offset_c", "log2_vec_a", "log2_vec_b", "log2_vec_c",
    "log2_block_m", "log2_block_n", "log2_block_k", "threads", "warps", "log2_smem_bytes",
    "acc_fragments", "tile_intensity", "log2_blocks", "waves", "last_wave_use",
    "resident_blocks", "occupancy_waves", "padding_efficiency", "log2_flops_per_block",
    "log2_k_trips", "log2_M", "log2_N", "log2_K", "stages", "frag_buffers", "log2_split_k", *_OTHER_PATHS,
    "wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b", "ping_pong", "tma_im2col", "tma_store",
    "setmaxnreg", "prior",
)


def _fragment_load_conflicts(v: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Shared-memory bank-conflict ways of the A and B fragment loads (8 rows of 16 bytes):
    a padded row stride of s 16-byte units puts the rows on 8 / gcd(s, 8) distinct bank
    groups; the swizzled tiles of the mma and wgmma paths are conflict-free.  Transferable where
    the raw offsets are not: offset 0 is bad for WMMA but the only choice for mma and wgmma."""
    swizzled = _SWIZZLED[v["intrinsic"]]
    ways = [np.where(swizzled, 1, np.gcd((v[size] + v[offset]) // 8, 8))
            for size, offset in (("bk", "offset_a"), ("b_row", "offset_b"))]
    return tuple(w.astype(np.float64) for w in ways)


def features_from_positions(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """(n, len(FEATURE_NAMES)) float32 features of knob-position rows on ``space``'s workload."""
    v = derive_rows(space, pos)
    m, n, k = space.view.shape
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
        f(v["stages"]), f(v["frag_buffers"]), np.log2(f(v["split_k"])),
        *(f(v["intrinsic"] == code("intrinsic", name)) for name in _OTHER_PATHS), f(v["wgmma_in_flight"]),
        f(v["warp_specialized"]), f(v["consumers_along_m"]), f(v["multicast_b"]), f(v["ping_pong"]), f(v["tma_im2col"]),
        f(v["tma_store"]), f(v["setmaxnreg"]),
        prior_of(space, v),
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

    def fit(self, features, throughputs, groups=None, weights=None, base_margin=None) -> "XGBCostModel":
        """Train on measured throughputs (FLOP/s or any per-workload scale; failed = 0).

        ``groups`` labels each row's workload; throughput is normalised within a group.
        ``weights`` (per row) lets the workload being tuned outweigh pooled transfer data;
        ranking objectives weight whole groups, so a group takes its rows' mean weight.
        ``base_margin`` (per row) is a score the trees only correct (residual learning);
        ``predict`` then needs the same kind of margin.
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
        if base_margin is not None:
            dtrain.set_base_margin(np.asarray(base_margin, dtype=np.float64)[order])
        w = None if weights is None else np.asarray(weights, dtype=np.float64)
        if self.objective.startswith("rank:"):
            dtrain.set_group(np.bincount(g[order]))
            if w is not None:
                dtrain.set_weight(np.bincount(g, weights=w) / np.bincount(g))
        elif w is not None:
            dtrain.set_weight(w[order])
        self._booster = xgb.train(self.params, dtrain, num_boost_round=self.num_rounds)
        return self

    def predict(self, features, base_margin=None) -> np.ndarray:
        """Scores, higher = faster; ``base_margin`` (or zeros) before the model could be fitted."""
        x = np.asarray(features, dtype=np.float32)
        base = np.zeros(len(x)) if base_margin is None else np.asarray(base_margin, dtype=np.float64)
        if self._booster is None or len(x) == 0:
            return base
        if base_margin is None:
            return np.asarray(self._booster.inplace_predict(x), dtype=np.float64)
        return np.asarray(self._booster.inplace_predict(x, base_margin=base), dtype=np.float64)


class TransferCostModel:
    """A model of other workloads' records (the base) that this workload's own measurements
    correct: the own model is fitted on residuals of the base's scores, and the base's share
    halves every ``half_life`` own measurements (AutoTVM's scheme).  Pooling both in one fit
    let ~4,000 transfer rows pull the ranking back towards what was fast elsewhere long after
    the workload's own data said otherwise.  ``fitted``/``fit_base``/``fit``/``predict``."""

    def __init__(self, seed: int | None = 0, half_life: float = 64.0, **params):
        self.base = XGBCostModel(seed=seed, **params)
        self.own = XGBCostModel(seed=seed, **params)
        self.half_life = half_life
        self._discount = 1.0

    @property
    def fitted(self) -> bool:
        return self.base.fitted or self.own.fitted

    def fit_base(self, features, throughputs, groups=None) -> None:
        """Train the base on other workloads' records (one group per workload and GPU)."""
        self.base.fit(features, throughputs, groups)

    def _margin(self, x) -> np.ndarray | None:
        return self._discount * self.base.predict(x) if self.base.fitted else None

    def fit(self, features, throughputs) -> None:
        """Train the own model on this workload's measurements, on top of the base."""
        x = np.asarray(features, dtype=np.float32)
        self._discount = 0.5 ** (len(x) / self.half_life)
        self.own.fit(x, throughputs, base_margin=self._margin(x))

    def predict(self, features) -> np.ndarray:
        x = np.asarray(features, dtype=np.float32)
        return self.own.predict(x, base_margin=self._margin(x))
