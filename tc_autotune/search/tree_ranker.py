"""Boosted regression trees evaluated with numpy: what ranks configs where xgboost is not loaded.

A kernel build that needs a zero-shot config must not import xgboost (~0.5 s) nor train.  The
tuning side trains with xgboost and stores the trees in a plain form (``TreeEnsemble.to_dict``,
the node arrays of xgboost's JSON model); this module reads them back and predicts.

Predictions equal xgboost's own, bit for bit where it matters: features are float32 and a node
sends a row left when ``value < threshold`` (a missing value, NaN, where the node's default
says), and the leaf values are summed in float32 one tree after the other, starting from the
base score, as xgboost's CPU predictor does.  A different summation order (numpy's pairwise
sum) differs in the last bits, which can reorder two near-equal candidates.
"""

from __future__ import annotations

import json

import numpy as np

__all__ = ["TreeEnsemble"]

# Objectives whose predictions are the raw sum of the trees (no link function to apply).
IDENTITY_OBJECTIVES = ("rank:pairwise", "rank:ndcg", "rank:map", "reg:squarederror")


def _float32_list(values) -> list[float]:
    """float32 values as the shortest decimals that read back to the same float32."""
    return [float(str(v)) for v in np.asarray(values, dtype=np.float32)]


class TreeEnsemble:
    """An ensemble of binary trees, all nodes in flat arrays (tree t's nodes at offsets[t]...).

    Leaves point at themselves, so every row descends ``depth`` times whatever its path."""

    def __init__(self, trees: list[dict], base_score: float = 0.0, num_features: int | None = None):
        self.trees = trees  # per tree: split_indices, split_conditions, left/right_children, default_left
        self.base_score = float(base_score)
        sizes = [len(t["left_children"]) for t in trees]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if trees else np.zeros(0, np.int64)
        # One numpy conversion per key of the joined lists, not one per tree (a stored model's
        # 360 trees are read on a build's first zero-shot pick).
        cat = (lambda key, dtype: np.array([x for t in trees for x in t[key]], dtype=dtype)
               if trees else np.zeros(0, dtype))
        left, right = cat("left_children", np.int64), cat("right_children", np.int64)
        leaf = left < 0
        base = np.repeat(self.offsets, sizes)
        own = np.arange(len(left), dtype=np.int64)
        # One gather per level: a node's children interleaved [right, left], indexed by
        # 2 * node + (went left).  Indices are intp: np.take with them is the fastest gather of
        # both the annealing's 64-row batches and the candidates' thousands of rows.
        self.children = np.stack([np.where(leaf, own, right + base), np.where(leaf, own, left + base)],
                                 axis=1).ravel().astype(np.intp)
        self.feature = np.where(leaf, 0, cat("split_indices", np.int64)).astype(np.intp)
        self.threshold = cat("split_conditions", np.float32)  # a leaf's value, at a leaf
        self.default_left = cat("default_left", bool)
        self.num_features = int(num_features) if num_features is not None else int(self.feature.max(initial=-1)) + 1
        self.depth = max((_depth(t) for t in trees), default=0)
        # The roots: every row's first split, read without a per-row node array.
        self._roots = self.offsets.astype(np.intp)

    # ---- reading and writing ----------------------------------------------------------------
    @classmethod
    def from_xgboost_json(cls, model: dict | str | bytes) -> "TreeEnsemble":
        """From xgboost's JSON model (``Booster.save_raw("json")``): one output, numerical splits,
        an objective whose prediction is the trees' plain sum (ranking, squared error)."""
        if isinstance(model, (str, bytes, bytearray)):
            model = json.loads(model)
        learner = model["learner"]
        objective = learner["objective"]["name"]
        if objective not in IDENTITY_OBJECTIVES:
            raise ValueError(f"objective {objective} transforms its predictions: not supported")
        param = learner["learner_model_param"]
        if int(param.get("num_class", 0)) > 1 or int(param.get("num_target", 1)) != 1:
            raise ValueError("one output per row only")
        booster = learner["gradient_booster"]
        if booster.get("name", "gbtree") != "gbtree":
            raise ValueError(f"booster {booster.get('name')} is not a tree ensemble")
        trees = []
        for tree in booster["model"]["trees"]:
            if any(tree.get("split_type", ())):
                raise ValueError("categorical splits are not supported")
            trees.append({key: tree[key] for key in
                          ("split_indices", "split_conditions", "left_children", "right_children", "default_left")})
        base = param.get("base_score", "0").strip("[]").split(",")
        if len(base) != 1:
            raise ValueError(f"one base score expected, got {param.get('base_score')}")
        return cls(trees, float(base[0]), int(param["num_feature"]))

    @classmethod
    def from_booster(cls, booster) -> "TreeEnsemble":
        """From a trained ``xgboost.Booster`` (the caller has xgboost loaded)."""
        return cls.from_xgboost_json(bytes(booster.save_raw("json")))

    def to_dict(self) -> dict:
        """A JSON-ready form: the node arrays of each tree, thresholds and leaf values as the
        shortest decimals that read back to the same float32."""
        trees = [{"split_indices": [int(i) for i in t["split_indices"]],
                  "split_conditions": _float32_list(t["split_conditions"]),
                  "left_children": [int(i) for i in t["left_children"]],
                  "right_children": [int(i) for i in t["right_children"]],
                  "default_left": [int(bool(d)) for d in t["default_left"]]} for t in self.trees]
        return {"base_score": _float32_list([self.base_score])[0], "num_features": self.num_features, "trees": trees}

    @classmethod
    def from_dict(cls, data: dict) -> "TreeEnsemble":
        return cls(list(data["trees"]), float(data["base_score"]), int(data["num_features"]))

    # ---- predicting ---------------------------------------------------------------------------
    def leaf_values(self, x: np.ndarray) -> np.ndarray:
        """(trees, rows) float32: each tree's leaf value for each row."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] < self.num_features:
            raise ValueError(f"expected (rows, {self.num_features}) features, got {x.shape}")
        rows, columns = x.shape
        flat = x.ravel()
        missing = bool(np.isnan(flat).any())  # rare: the default directions only then
        roots = self._roots
        if self.depth == 0 or rows == 0:
            return np.take(self.threshold, np.repeat(roots[:, None], rows, axis=1))
        # The first level: each tree's root splits on one column for all rows.
        value = np.take(x, np.take(self.feature, roots), axis=1).T
        go_left = value < np.take(self.threshold, roots)[:, None]
        if missing:
            go_left = np.where(np.isnan(value), np.take(self.default_left, roots)[:, None], go_left)
        node = np.take(self.children, 2 * roots[:, None] + go_left)
        row_start = (np.arange(rows, dtype=np.intp) * columns)[None, :]
        for _ in range(self.depth - 1):
            value = np.take(flat, row_start + np.take(self.feature, node))
            go_left = value < np.take(self.threshold, node)
            if missing:
                go_left = np.where(np.isnan(value), np.take(self.default_left, node), go_left)
            node = np.take(self.children, 2 * node + go_left)
        return np.take(self.threshold, node)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(rows,) float32 predictions: the base score plus every tree's leaf, summed in float32
        tree by tree (xgboost's order)."""
        if len(x) > _BLOCK_ROWS:  # a block's node arrays stay in cache (3,000 rows at once took twice as long)
            return np.concatenate([self.predict(x[i:i + _BLOCK_ROWS]) for i in range(0, len(x), _BLOCK_ROWS)])
        leaves = self.leaf_values(x)
        rows = leaves.shape[1]
        if rows >= 2:
            # One ufunc call instead of a Python loop over the trees: numpy sums along an axis
            # that is not the fast one in memory element by element, in order (pairwise only
            # along the fast axis: np.sum's notes), so base score, then tree after tree, as below.
            start = np.full((1, rows), self.base_score, dtype=np.float32)
            return np.add.reduce(np.concatenate([start, leaves]), axis=0)
        out = np.full(rows, self.base_score, dtype=np.float32)  # (one row: axis 0 would be the fast one)
        for values in leaves:
            out += values
        return out


# Rows predicted at once: every level's (trees, rows) index arrays of a block fit a core's cache.
_BLOCK_ROWS = 512


def _depth(tree: dict) -> int:
    """The number of splits on the longest root-to-leaf path."""
    left, right = tree["left_children"], tree["right_children"]
    depth, frontier = 0, [0]
    while True:
        frontier = [c for n in frontier if left[n] >= 0 for c in (left[n], right[n])]
        if not frontier:
            return depth
        depth += 1
        if depth > len(left):
            raise ValueError("a tree's children form a cycle")

