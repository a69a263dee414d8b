"""The template protocol: a toy template (three knobs, its own config type, a fake timing) is
tuned by the random and the XGBoost tuner, which proves that the space and the search reach a
template only through ``core.template.Template`` and assume nothing of tc_gemm's knobs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.core.config_space import ConfigSpace, positions_from_indices, valid_mask
from tc_autotune.core.template import Template
from tc_autotune.measure.measurer import MeasureErrorNo, MeasureResult
from tc_autotune.search.tuner import RandomTuner
from tc_autotune.search.xgb_tuner import XGBTuner

GPU = gpu_for_arch("sm_90")
TOY_KNOBS = {"tile": (1, 2, 4, 8, 16, 32), "unroll": (1, 2, 4), "order": ("ij", "ji")}


@dataclass(frozen=True)
class ToyWorkload:
    size: int

    @property
    def flops(self) -> float:
        return 2.0 * self.size ** 3


@dataclass(frozen=True)
class ToyConfig:
    tile: int
    unroll: int
    order: str


def _values(space, pos):
    """Knob values of position rows (``order`` as its position: 0 = ij)."""
    tile = np.asarray(space.knobs["tile"])[pos[:, 0]]
    unroll = np.asarray(space.knobs["unroll"])[pos[:, 1]]
    return tile, unroll, pos[:, 2]


def _valid(space, pos):
    tile, unroll, _order = _values(space, pos)
    return tile * unroll <= space.view.size // 4  # the only rule: the unrolled tile fits


def _why(space, config):
    return None if config.tile * config.unroll <= space.view.size // 4 else "tile x unroll exceeds size / 4"


def _prior(space, pos):
    tile, unroll, order = _values(space, pos)
    return np.log2(tile) + 0.1 * unroll - 0.5 * order


def _features(space, pos):
    tile, unroll, order = _values(space, pos)
    return np.stack([np.log2(tile), unroll, order, np.full(len(pos), math.log2(space.view.size))],
                    axis=1).astype(np.float32)


def _default(space):
    return next(c for c in space if space.is_valid(c))


TOY = Template(
    name="toy", knobs=TOY_KNOBS, knob_defaults={}, config_type=ToyConfig,
    problem=lambda workload, gpu: (workload, None), valid_mask=_valid, why_invalid=_why, prior=_prior,
    feature_names=("log2_tile", "unroll", "order", "log2_size"), features=_features,
    tiles=lambda space, pos: pos[:, :1], default_config=_default,
    requires={"order": {"ji": {"unroll": 1}}},  # a move onto "ji" lands on unroll 1
)


def toy_seconds(config: ToyConfig) -> float:
    """Fastest at tile 8, unroll 4, order ij; unroll 2 'crashes' at tile 32."""
    return 1e-3 * (1 + abs(math.log2(config.tile) - 3)) / config.unroll * (1.5 if config.order == "ji" else 1)


class ToyMeasure:
    def __init__(self, space):
        self.space, self.measured = space, []

    def __call__(self, configs):
        out = []
        for config in configs:
            assert isinstance(config, ToyConfig) and self.space.is_valid(config)
            self.measured.append(self.space.index(config))
            if config.tile == 32 and config.unroll == 2:
                out.append(MeasureResult((), MeasureErrorNo.RUN_ERROR, "toy crash"))
            else:
                t = toy_seconds(config)
                out.append(MeasureResult((t, t, t)))
        return out


def toy_space(size=256):
    return ConfigSpace(ToyWorkload(size), GPU, template=TOY)


def test_the_space_is_the_toy_templates():
    space = toy_space()
    assert len(space) == 36 and list(space.knobs) == ["tile", "unroll", "order"]
    config = space.get(7)
    assert isinstance(config, ToyConfig) and space.from_entity(space.to_entity(config)) == config
    pos = positions_from_indices(space, np.arange(len(space)))
    assert list(valid_mask(space, pos)) == [space.is_valid(c) for c in space]
    assert space.default_config() == ToyConfig(1, 1, "ij")
    assert space.draw_bound == len(space)


@pytest.mark.parametrize("tuner_cls", [RandomTuner, XGBTuner])
def test_the_tuners_tune_a_toy_template(tuner_cls):
    space = toy_space()
    n_valid = sum(space.is_valid(c) for c in space)
    measure = ToyMeasure(space)
    tuner = tuner_cls(space, seed=0)
    best = tuner.tune(n_valid + 5, measure, batch_size=4)
    assert sorted(measure.measured) == sorted(set(measure.measured)) and len(measure.measured) == n_valid
    assert best is not None and best[0] == ToyConfig(8, 4, "ij")
    if tuner_cls is XGBTuner:
        assert tuner.model.fitted and tuner._history_x.shape == (n_valid, 4)


def test_xgb_tuner_on_a_toy_template_finds_the_best_before_exhausting_it():
    space = toy_space(1024)  # 33 valid configs
    tuner = XGBTuner(space, seed=1)
    tuner.tune(16, ToyMeasure(space), batch_size=4)
    assert tuner.best()[0] == ToyConfig(8, 4, "ij")


def test_the_search_modules_import_no_template():
    """The tuner and the cost model reach templates only through ``space.template``."""
    search = Path(__file__).parents[1] / "tc_autotune" / "search"
    for module in ("tuner.py", "xgb_tuner.py", "anneal.py", "cost_model.py"):
        assert not re.search(r"^from .*templates", (search / module).read_text(), re.M), module


def test_with_requirements_for_a_few_rows_is_the_value_by_value_assignment():
    """A few rows (an annealing step's) take their required knob values from one table lookup;
    many rows value by value: the same rows either way, for the toy template and the GEMM one
    (whose paths require up to twelve knob values each), in int64 and in compact positions."""
    from tc_autotune.core.config_space import _with_requirements_by_value, with_requirements
    from tc_autotune.templates.registry import ConfigSpace as GemmSpace
    from tc_autotune import workloads

    rng = np.random.default_rng(4)
    for space in (toy_space(), GemmSpace(workloads.get("tutorial"), gpu_for_arch("sm_90"))):
        for rows in (0, 1, 64, 1024):
            pos = positions_from_indices(space, rng.integers(0, len(space), rows))
            for dtype in (np.int64, np.int8):
                fast = with_requirements(space, pos.astype(dtype))
                assert fast.dtype == dtype and fast.tolist() == _with_requirements_by_value(space, pos.astype(dtype)).tolist()
        assert (with_requirements(space, pos.copy()) != pos).any()  # some rows were moved onto a path
