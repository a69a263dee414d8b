"""Boosted trees evaluated with numpy (tc_autotune.search.tree_ranker) against xgboost's own predictions."""

import json

import numpy as np
import pytest
import xgboost as xgb

from tc_autotune.templates.tc_gemm.features import FEATURE_NAMES
from tc_autotune.search.tree_ranker import TreeEnsemble


def _fit(objective: str, rng):
    x = rng.normal(size=(600, len(FEATURE_NAMES))).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    y = np.nan_to_num(x[:, 0] - x[:, 3] ** 2 + 0.5 * x[:, 7], nan=0.0)
    dtrain = xgb.DMatrix(x, label=y if objective.startswith("reg") else np.clip(y, 0, None) / max(y.max(), 1))
    if objective.startswith("rank"):
        dtrain.set_group([100] * 6)
        dtrain.set_base_margin(rng.normal(size=len(x)))
    return xgb.train({"objective": objective, "max_depth": 4, "eta": 0.2, "seed": 0, "nthread": 1},
                     dtrain, num_boost_round=40)


@pytest.mark.parametrize("objective", ["rank:pairwise", "reg:squarederror"])
def test_the_numpy_ranker_predicts_what_xgboost_predicts(objective):
    """Random features (with missing values, far outside the training range too) through trees
    fitted as the zero-shot model is (depth 4, on a base margin) or as a regressor (a base
    score), after a round trip through the stored JSON form."""
    rng = np.random.default_rng(3)
    booster = _fit(objective, rng)
    ranker = TreeEnsemble.from_dict(json.loads(json.dumps(TreeEnsemble.from_booster(booster).to_dict())))
    test = (rng.normal(size=(5000, len(FEATURE_NAMES))) * 4).astype(np.float32)
    test[rng.random(test.shape) < 0.05] = np.nan
    np.testing.assert_allclose(ranker.predict(test), booster.inplace_predict(test), rtol=0, atol=1e-5)
    assert ranker.depth == 4 and ranker.predict(test[:0]).shape == (0,)


def test_models_it_cannot_evaluate_are_refused():
    booster = _fit("reg:squarederror", np.random.default_rng(0))
    model = json.loads(bytes(booster.save_raw("json")))
    model["learner"]["objective"]["name"] = "binary:logistic"
    with pytest.raises(ValueError, match="transforms its predictions"):
        TreeEnsemble.from_xgboost_json(model)
    with pytest.raises(ValueError, match="expected"):
        TreeEnsemble.from_booster(booster).predict(np.zeros((3, 2), np.float32))


def _walk(tree: dict, row: np.ndarray) -> np.float32:
    """One tree's leaf for one row, node by node as xgboost's JSON describes it."""
    node = 0
    while tree["left_children"][node] >= 0:
        value = row[tree["split_indices"][node]]
        left = bool(tree["default_left"][node]) if np.isnan(value) else value < np.float32(tree["split_conditions"][node])
        node = tree["left_children"][node] if left else tree["right_children"][node]
    return np.float32(tree["split_conditions"][node])


@pytest.mark.parametrize("rows", [0, 1, 2, 3, 64, 154, 300, 3000])
def test_predictions_are_the_tree_by_tree_float32_sums_bit_for_bit(rows):
    """The vectorised traversal and sum (one reduction along the trees' axis) give exactly the
    float32 sum of each row's leaves, base score first, tree after tree: the order xgboost adds
    them in, on which a near tie between two candidates may turn."""
    rng = np.random.default_rng(5)
    ranker = TreeEnsemble.from_booster(_fit("rank:pairwise", rng))
    test = (rng.normal(size=(rows, len(FEATURE_NAMES))) * 3).astype(np.float32)
    test[rng.random(test.shape) < 0.05] = np.nan
    expected = np.empty(rows, dtype=np.float32)
    for i, row in enumerate(test):
        total = np.float32(ranker.base_score)
        for tree in ranker.trees:
            total = np.float32(total + _walk(tree, row))
        expected[i] = total
    got = ranker.predict(test)
    assert got.dtype == np.float32 and got.tobytes() == expected.tobytes()
    without_nan = np.nan_to_num(test)  # the traversal that never looks at the default directions
    assert ranker.predict(without_nan)[:1].tobytes() == ranker.predict(without_nan[:1]).tobytes()
