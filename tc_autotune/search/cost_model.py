"""Features of configs (asked of the space's template) and a gradient-boosted cost model that
ranks them.

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

from ..core.config_space import (ConfigSpace, indices_from_positions, positions_from_configs,
    positions_from_indices, radices, valid_mask)

__all__ = ["XGBCostModel", "TransferCostModel", "features_from_positions", "config_features", "block_tiles",
           "normalise_per_group", "prior_score", "valid_mask", "radices", "positions_from_indices",
           "indices_from_positions", "positions_from_configs"]

# ---- what the search asks of the space's template ----------------------------------
def features_from_positions(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """(n, len(space.template.feature_names)) float32 features of knob-position rows on
    ``space``'s workload: the template's (tc_gemm: ``templates.tc_gemm.features``)."""
    return space.template.features(space, pos)


def block_tiles(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """Rows that set configs apart (tc_gemm: block M, N, K and warps): the diverse picks' key."""
    return space.template.tiles(space, pos)


def prior_score(space: ConfigSpace, pos: np.ndarray) -> np.ndarray:
    """The template's estimate of relative throughput before anything is measured."""
    return space.template.prior(space, pos)


def config_features(space: ConfigSpace, configs: list) -> np.ndarray:
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
