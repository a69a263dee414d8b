"""Tuners and the cost model against a synthetic, GPU-free objective.

The synthetic kernel time has the structure real ones have (padding waste,
wave quantisation, tile reuse, a slow wmma shape, bank conflicts without
offsets, narrow vectors, unpipelined k-loops, split-K's second kernel, failures for too much shared memory) plus a little
seeded noise, so "the model-guided tuner beats random search" is a real claim.
"""

from __future__ import annotations

import functools
import logging
import math
import zlib
from dataclasses import dataclass, replace

import numpy as np
import pytest

from tc_autotune import workloads
from tc_autotune.templates.tc_gemm.features import FEATURE_NAMES
from tc_autotune.search.cost_model import (TransferCostModel, XGBCostModel, config_features,
    normalise_per_group, positions_from_indices, valid_mask)
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.measure.measurer import MeasureErrorNo, MeasureResult
from tc_autotune.templates.registry import ConfigSpace, conv2d_space
from tc_autotune.templates.tc_gemm.knobs import TcGemmConfig
from tc_autotune.search.progress import progress_logger
from tc_autotune.search.tuner import GridTuner, RandomTuner
from tc_autotune.search.xgb_tuner import XGBTuner

GPU = gpu_for_arch("sm_90")
TUNERS = (RandomTuner, GridTuner, XGBTuner)

_CHUNK_EFF = {1: 0.7, 2: 1.0, 4: 0.93, 8: 0.8}
_WMMA_EFF = {"m16n16k16": 1.0, "m32n8k16": 0.85, "m8n32k16": 0.6}
_STAGES_EFF = {1: 0.75, 2: 0.95, 3: 1.0, 4: 0.97}


def space_of(name: str) -> ConfigSpace:
    return conv2d_space(workloads.get(name), GPU)


def plain_space_of(name: str) -> ConfigSpace:
    """``space_of`` without warp-specialized configs: the synthetic objective has no model of that
    kernel, so they would time as their warp_specialized=0 twins (duplicates a GPU tells apart); and
    group_pack at 1, the only value an ungrouped conv takes (annealing moves onto the others are
    refused: free, they change which moves the chains make, not what they can find); nor swap_ab,
    that kernel's only."""
    from tc_autotune.templates.tc_gemm.knobs import KNOBS

    return ConfigSpace(workloads.get(name), GPU, {**KNOBS, "warp_specialized": (0,), "group_pack": (1,),
                                                   "swap_ab": (0,)})


def synthetic_seconds(space: ConfigSpace, config: TcGemmConfig) -> float | None:
    """Deterministic kernel time of a config, or None where it 'fails to launch'."""
    m, n, k = space.workload.gemm_shape
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    split = config.split_k
    gm, gn, gk = -(-m // bm), -(-n // bn), -(-k // (bk * split))
    waves = gm * gn * split / space.gpu.sm_count
    eff = waves / math.ceil(waves)
    eff *= min(1.0, (bm * bn / (bm + bn)) / 64.0) ** 0.7
    eff *= min(1.0, config.threads / 128) ** 0.5
    eff *= _WMMA_EFF[config.wmma] * _CHUNK_EFF[config.chunk]
    eff *= _STAGES_EFF[config.stages] * (1.03 if config.frag_buffers == 2 else 1.0)
    if config.intrinsic == "mma":  # swizzled tiles: no padding needed, a little faster
        eff *= 1.1
    elif config.intrinsic == "wgmma":  # Hopper warpgroup MMA (H200: 1.1-1.4x over mma)
        eff *= 1.35
    else:
        eff *= (0.85 if config.offset_a == 0 else 1.0) * (0.9 if config.offset_b == 0 else 1.0)
    eff *= (config.vec_a / 8) ** 0.15 * (config.vec_b / 8) ** 0.15 * (config.vec_c / 4) ** 0.1
    index = space.index(config)
    if config.smem_bytes > 160 * 1024 or zlib.crc32(f"fail{index}".encode()) % 61 == 0:
        return None
    noise = 1.0 + 0.03 * (zlib.crc32(f"noise{index}".encode()) % 1000 / 1000 - 0.5)
    reduce = 0.0 if split == 1 else 2e-6 + split * m * n * 8 / 3e12  # second kernel: partials
    return 2.0 * gm * bm * gn * bn * gk * bk * split / (400e12 * eff) * noise + 3e-6 + reduce


@dataclass
class SyntheticMeasure:
    """A ``measure`` callable that also checks the tuner's contract and logs what it saw."""

    space: ConfigSpace
    seconds: object = synthetic_seconds

    def __post_init__(self):
        self.measured: list[int] = []

    def __call__(self, configs):
        results = []
        for config in configs:
            assert self.space.is_valid(config), self.space.why_invalid(config)
            index = self.space.index(config)
            assert index not in self.measured, f"config {index} measured twice"
            self.measured.append(index)
            t = self.seconds(self.space, config)
            if t is None:
                results.append(MeasureResult((), MeasureErrorNo.RUN_ERROR, "synthetic launch failure"))
            else:
                results.append(MeasureResult((t * 0.99, t, t * 1.01)))
        return results


@dataclass
class FakeRecord:
    """The duck-typed record ``load_history`` reads."""

    workload: object
    config: dict
    result: MeasureResult
    arch: str | None = None
    gpu: str | None = None


def records_of(space: ConfigSpace, n: int, seed: int) -> list[FakeRecord]:
    configs = space.sample(n, seed=seed)
    results = SyntheticMeasure(space)(configs)
    return [FakeRecord(space.workload, space.to_entity(c), r) for c, r in zip(configs, results)]


def small_space() -> ConfigSpace:
    """The template's space with most knobs pinned: small enough to exhaust."""
    knobs = {"block_row_warps": (1, 2, 4), "block_col_warps": (1, 2), "warp_row_tiles": (1, 2, 8),
             "warp_col_tiles": (2, 8), "chunk": (2, 8), "wmma": ("m16n16k16", "m8n32k16"),
             "offset_a": (8,), "offset_b": (8,), "offset_c": (4,), "vec_a": (8,), "vec_b": (8,),
             "vec_c": (4,)}
    return ConfigSpace(workloads.get("rfc-3x3-b32"), GPU, knobs)


def patch_valid_mask(monkeypatch, fake) -> None:
    """``fake`` as the pre-filter of every search module that calls it (the tuners' draws and
    scans, XGBTuner's annealing starts, the annealing walk)."""
    from tc_autotune.search import anneal, tuner, xgb_tuner

    for module in (tuner, xgb_tuner, anneal):
        monkeypatch.setattr(module, "valid_mask", fake)


# ---- cost model --------------------------------------------------------------------
def test_features_are_vectorised_finite_and_transferable(monkeypatch):
    """Featurising is cheap because it is vectorised: 10k configs go through the rule table's
    derivation once, as one block of rows (counted, not timed: CI machines are loaded)."""
    from tc_autotune.templates.tc_gemm import template as tc_features  # derives the rows it features

    space = space_of("tutorial")
    configs = [space.get(int(i)) for i in np.random.default_rng(0).integers(0, len(space), 10_000)]
    derived = []

    def counting_derive_rows(space, pos):
        derived.append(len(pos))
        return real_derive_rows(space, pos)

    real_derive_rows = tc_features.derive_rows
    monkeypatch.setattr(tc_features, "derive_rows", counting_derive_rows)
    x = config_features(space, configs)
    assert x.shape == (10_000, len(FEATURE_NAMES)) and x.dtype == np.float32
    assert np.isfinite(x).all()
    assert derived == [10_000], f"derive_rows called on row blocks {derived[:8]}... (one call expected)"
    # the same config on another workload gets other workload-dependent features
    other = config_features(space_of("rfc-1x1-b1"), configs[:1])[0]
    col = {name: i for i, name in enumerate(FEATURE_NAMES)}
    assert x[0, col["log2_M"]] == pytest.approx(math.log2(50176))
    assert other[col["log2_M"]] == pytest.approx(math.log2(196))
    assert other[col["log2_block_m"]] == x[0, col["log2_block_m"]]


@pytest.mark.parametrize("name", ["tutorial", "rfc-1x1-b1", "resnet50-conv1-b1"])
def test_vectorised_validity_agrees_with_the_space(name):
    space = space_of(name)
    indices = np.random.default_rng(1).integers(0, len(space), 3000)
    mask = valid_mask(space, positions_from_indices(space, indices))
    expected = np.array([space.is_valid(space.get(int(i))) for i in indices])
    assert (mask == expected).all()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("intrinsic", ["mma", "wgmma"])
def test_vectorised_validity_agrees_on_the_swizzled_paths(intrinsic, arch):
    """Near the mma and wgmma paths (16x16x16, unpadded; the warpgroup, chunk and fragment
    knobs left free), where uniform samples of the whole space rarely land."""
    from tc_autotune.templates.tc_gemm.knobs import KNOBS

    knobs = {**KNOBS, "intrinsic": (intrinsic,), "wmma": ("m16n16k16",), "offset_a": (0,), "offset_b": (0,),
             "consumers_along_m": (0,), "multicast_b": (0,), "ping_pong": (0,),
             "tma_im2col": (0,), "tma_store": (0,), "setmaxnreg": (0,), "swap_ab": (0,),  # the warp-specialized kernel's: below
             "consumer_n": (0,), "deep_ring": (0,),
             "group_pack": (1,)}  # a grouped conv's (test_group_pack.py)
    space = ConfigSpace(workloads.get("tutorial"), gpu_for_arch(arch), knobs)
    indices = np.random.default_rng(2).integers(0, len(space), 3000)
    mask = valid_mask(space, positions_from_indices(space, indices))
    expected = np.array([space.is_valid(space.get(int(i))) for i in indices])
    assert (mask == expected).all()
    assert expected.any() != (intrinsic == "wgmma" and arch == "sm_80")  # wgmma is Hopper-only
    assert not expected.all()


@pytest.mark.parametrize("name", ["tutorial", "dense:m=200,n=4096,k=4096,b=nk"])
def test_vectorised_validity_agrees_on_the_warp_specialized_kernels_knobs(name):
    """The warp-specialized kernel's own knobs (consumers along M, B multicast, ping-pong, TMA im2col,
    setmaxnreg, split-K, stages, tilings) free around its required values, where their rules interact."""
    from tc_autotune.templates.tc_gemm.knobs import KNOBS

    knobs = {**KNOBS, "intrinsic": ("wgmma",), "wmma": ("m16n16k16",), "offset_a": (0,), "offset_b": (0,),
             "block_row_warps": (4,), "chunk": (4,), "frag_buffers": (1,), "vec_a": (8,), "vec_b": (8,),
             "vec_c": (1,), "offset_c": (0,), "warp_specialized": (1, 2), "group_pack": (1,),
             "swap_ab": (0,),  # swap_ab: test_swap_ab
             "consumer_n": (0,), "deep_ring": (0,)}  # theirs: test_narrow_consumers_and_the_deep_ring_validity below
    valid, expected = _vectorised_agrees(ConfigSpace(workloads.get(name), gpu_for_arch("sm_90"), knobs), seed=3)
    assert any(c.consumers_along_m for c in valid) and any(c.multicast_b for c in valid)
    assert any(c.ping_pong for c in valid) and any(c.setmaxnreg for c in valid)
    assert any(c.tma_im2col for c in valid) == (name == "tutorial")  # a conv's A, not dense
    assert not expected.all()


@pytest.mark.parametrize("name", ["dense:m=128,n=11008,k=4096,b=nk", "dense:m=200,n=320,k=520,b=kn,out_dtype=float16"])
def test_narrow_consumers_and_the_deep_ring_validity(name):
    """consumer_n and deep_ring free around the warp-specialized kernel's values (with TMA stores,
    consumers along M, stages and output dtypes), where their rules and the others interact."""
    from tc_autotune.templates.tc_gemm.knobs import KNOBS

    knobs = {**KNOBS, "intrinsic": ("wgmma",), "wmma": ("m16n16k16",), "offset_a": (0,), "offset_b": (0,),
             "block_row_warps": (4,), "chunk": (4,), "frag_buffers": (1,), "vec_a": (8,), "vec_b": (8,),
             "vec_c": (1,), "offset_c": (0,), "warp_specialized": (0, 1, 2), "group_pack": (1,), "swap_ab": (0,),
             "multicast_b": (0,), "ping_pong": (0,), "tma_im2col": (0,), "setmaxnreg": (0,)}
    valid, expected = _vectorised_agrees(ConfigSpace(workloads.get(name), gpu_for_arch("sm_90"), knobs), seed=5)
    assert any(c.deep_ring for c in valid) and not expected.all()
    assert any(c.consumer_n for c in valid) == name.endswith("b=nk")  # a K-major B only


def _vectorised_agrees(space, seed: int, n: int = 3000):
    """(the valid configs, the validity of each) of ``n`` uniform samples of ``space``, after
    checking that the vectorised rules say what ``is_valid`` says of every one."""
    indices = np.random.default_rng(seed).integers(0, len(space), n)
    mask = valid_mask(space, positions_from_indices(space, indices))
    configs = [space.get(int(i)) for i in indices]
    expected = np.array([space.is_valid(c) for c in configs])
    assert (mask == expected).all()
    return [c for c, ok in zip(configs, expected) if ok], expected


def _dataset(space, n, seed):
    configs = space.sample(n, seed=seed)
    times = [synthetic_seconds(space, c) for c in configs]
    y = np.array([0.0 if t is None else space.workload.flops / t for t in times])
    return config_features(space, configs), y


def test_cost_model_ranks_held_out_configs_and_is_deterministic():
    space = space_of("rfc-3x3-b32")
    x, y = _dataset(space, 128, seed=1)
    xt, yt = _dataset(space, 2000, seed=2)
    p1 = XGBCostModel(seed=3).fit(x, y).predict(xt)
    p2 = XGBCostModel(seed=3).fit(x, y).predict(xt)
    np.testing.assert_array_equal(p1, p2)
    rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731
    assert np.corrcoef(rank(p1), rank(yt))[0, 1] > 0.6
    top = yt[np.argsort(-p1)[:20]]
    assert top.max() > np.quantile(yt, 0.99)


def test_cost_model_with_fewer_than_two_successes_predicts_zeros():
    space = space_of("tutorial")
    x, _ = _dataset(space, 8, seed=0)
    model = XGBCostModel().fit(x, [0, 0, 0, 5e12, 0, 0, 0, 0])
    assert not model.fitted
    np.testing.assert_array_equal(model.predict(x), np.zeros(8))
    assert XGBCostModel().fit(x, np.arange(8) * 1e12).fitted
    groups, weights = [0, 0, 0, 0, 1, 1, 1, 1], [4.0] * 4 + [1.0] * 4
    for objective in ("rank:pairwise", "reg:squarederror"):
        model = XGBCostModel(objective=objective).fit(x, np.arange(8) * 1e12, groups, weights)
        assert model.fitted and model.predict(x).shape == (8,)


def test_transfer_model_starts_from_other_workloads_and_gives_way_to_own_measurements():
    """Other workloads say bigger block tiles are faster; this workload says the opposite.
    Before any own measurement the base decides; after enough, the own data does."""
    space = space_of("rfc-3x3-b32")
    configs = space.sample(256, seed=4)
    x = config_features(space, configs)
    size = x[:, FEATURE_NAMES.index("log2_block_m")] + x[:, FEATURE_NAMES.index("log2_block_n")]
    model = TransferCostModel(seed=0, half_life=16)
    model.fit_base(x, np.exp(size), np.zeros(len(x)))
    rank = lambda v, ref=size: np.corrcoef(np.argsort(np.argsort(v)), np.argsort(np.argsort(ref)))[0, 1]  # noqa: E731
    assert model.fitted and rank(model.predict(x)) > 0.8
    np.testing.assert_array_equal(model.predict(x), model.base.predict(x))  # no own data: the base alone
    model.fit(x[:96], np.exp(-size[:96]))
    assert rank(model.predict(x[96:]), size[96:]) < -0.5


def test_throughput_is_normalised_per_group():
    y = normalise_per_group([1.0, 2.0, 0.0, 10.0, 30.0, np.inf], groups=[0, 0, 0, 1, 1, 1])
    np.testing.assert_allclose(y, [0.5, 1.0, 0.0, 1 / 3, 1.0, 0.0])


# ---- the tuning loop ------------------------------------------------------------------
@pytest.mark.parametrize("tuner_cls", TUNERS)
def test_tuners_measure_each_valid_config_once_within_budget(tuner_cls):
    space = space_of("rfc-3x3-b32")
    measure = SyntheticMeasure(space)
    tuner = tuner_cls(space, seed=0)
    best = tuner.tune(50, measure, batch_size=16)
    assert len(measure.measured) == tuner.trials == len(tuner.history) == 50
    assert len(set(measure.measured)) == 50
    ok = [(r.seconds, c) for c, r in tuner.history if r.ok]
    assert best == (tuner.best_config, tuner.best_cost) and best[1] == min(ok)[0]
    assert tuner.best_flops == pytest.approx(space.workload.flops / best[1])


@pytest.mark.parametrize("tuner_cls", TUNERS)
def test_tuners_stop_when_the_space_is_exhausted(tuner_cls):
    space = small_space()
    valid = {i for i in range(len(space)) if space.is_valid(space.get(i))}
    assert 5 < len(valid) < len(space)
    measure = SyntheticMeasure(space)
    tuner_cls(space, seed=0).tune(1000, measure, batch_size=8)
    assert sorted(measure.measured) == sorted(valid)


@pytest.mark.parametrize("tuner_cls", (RandomTuner, XGBTuner))
def test_early_stopping_after_n_trials_without_improvement(tuner_cls):
    space = space_of("tutorial")
    constant = SyntheticMeasure(space, seconds=lambda s, c: 1e-3)  # only the first trial improves
    tuner = tuner_cls(space, seed=0)
    tuner.tune(200, constant, batch_size=8, early_stopping=20)
    assert tuner.trials == 21


def test_a_callback_returning_true_stops_the_search():
    space = space_of("tutorial")
    seen = []
    stop_after_two = lambda tuner, configs, results: seen.append(len(configs)) or len(seen) == 2  # noqa: E731
    tuner = RandomTuner(space, seed=0)
    tuner.tune(100, SyntheticMeasure(space), batch_size=10, callbacks=[stop_after_two])
    assert tuner.trials == 20 and seen == [10, 10]


def test_grid_tuner_walks_valid_configs_in_index_order():
    space = space_of("resnet50-conv1-b1")  # many invalid configs to skip
    expected = [i for i in range(2000) if space.is_valid(space.get(i))][:40]
    measure = SyntheticMeasure(space)
    GridTuner(space).tune(40, measure, batch_size=7)
    assert measure.measured == expected


@pytest.mark.parametrize("tuner_cls", (RandomTuner, XGBTuner))
def test_same_seed_same_sequence(tuner_cls):
    space = space_of("rfc-3x3-b32")
    runs = []
    for seed in (7, 7, 8):
        measure = SyntheticMeasure(space)
        tuner_cls(space, seed=seed).tune(40, measure, batch_size=16)
        runs.append(measure.measured)
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_load_history_prevents_remeasuring_and_sets_the_best():
    space = space_of("rfc-3x3-b32")
    first = SyntheticMeasure(space)
    GridTuner(space).tune(30, first)
    grid_records = [FakeRecord(space.workload, space.to_entity(space.get(i)), r)
                    for i, r in zip(first.measured, SyntheticMeasure(space)([space.get(i) for i in first.measured]))]
    out_of_range = FakeRecord(space.workload, {"index": len(space) + 5, "entity": []}, grid_records[0].result)
    other_gpu = FakeRecord(space.workload, space.to_entity(space.get(10**6)), grid_records[0].result, "sm_80")

    tuner = GridTuner(space)
    assert tuner.load_history(grid_records + [out_of_range, other_gpu]) == 30
    best_known = min(r.result.seconds for r in grid_records)
    assert tuner.best_cost == best_known and tuner.trials == 0
    second = SyntheticMeasure(space)
    tuner.tune(20, second)
    assert not set(second.measured) & set(first.measured)
    assert second.measured[0] > max(first.measured)  # the grid resumes after the known ones

    for cls in (RandomTuner, XGBTuner):
        tuner = cls(space, seed=0)
        tuner.load_history(grid_records)
        third = SyntheticMeasure(space)
        tuner.tune(48, third)
        assert not set(third.measured) & set(first.measured)


def test_records_of_another_gpu_of_the_same_arch_only_train_the_model():
    """History is what this GPU measured (by name; by arch for nameless records): the same
    configs timed on another sm_90 part are training data and may be measured again."""
    space = space_of("rfc-3x3-b32")
    assert space.gpu.arch == "sm_90"
    measured = records_of(space, 24, seed=0)
    here = [replace(r, gpu=space.gpu.name) for r in measured]
    elsewhere = [replace(r, gpu="another sm_90 GPU", arch="sm_90") for r in measured]
    nameless = [replace(r, arch="sm_90") for r in measured]
    for batch, joined in ((here, 24), (nameless, 24), (elsewhere, 0)):
        tuner = XGBTuner(space, seed=0)
        assert tuner.load_history(batch) == joined
        assert len(tuner.history) == joined and tuner.other_records == 24 - joined
        assert tuner.model.fitted
    tuner = XGBTuner(space, seed=0)
    tuner.load_history(elsewhere)
    assert tuner.next_batch(16)[0] == space.default_config()  # nothing measured here yet


def test_measure_must_answer_every_config():
    space = space_of("tutorial")
    with pytest.raises(ValueError, match="results"):
        RandomTuner(space, seed=0).tune(8, lambda configs: SyntheticMeasure(space)(configs)[:-1])


# ---- search quality -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tutorial", "rfc-3x3-b32"])
def test_xgb_tuner_beats_random_search(name):
    space = space_of(name)
    xgb, rnd = [], []
    for seed in range(4):
        xgb.append(XGBTuner(space, seed=seed).tune(64, SyntheticMeasure(space))[1])
        rnd.append(RandomTuner(space, seed=seed).tune(64, SyntheticMeasure(space))[1])
    # seconds: lower is better; ask for a clear margin on the mean
    assert np.mean(xgb) < 0.9 * np.mean(rnd), (xgb, rnd)


def _best_cost_curve(tuner, space, trials=32) -> list[float]:
    """The best cost after each batch of ``tuner.tune(trials, ...)`` on the synthetic objective."""
    curve = []
    tuner.tune(trials, SyntheticMeasure(space), callbacks=[lambda t, c, r: curve.append(t.best_cost)])
    return curve


@functools.cache
def _transfer_records() -> tuple:
    """test_transfer_learning's transfer set: other workloads' random samples."""
    sources = ("tutorial", "rfc-1x1-b32", "resnet50-res4-3x3-256-256-b8")
    return tuple(r for i, name in enumerate(sources) for r in records_of(plain_space_of(name), 128, seed=i))


@functools.cache
def _cold_start(seed: int) -> tuple[float, float, float]:
    """test_transfer_learning's baselines for ``seed``: random search's best of one batch, and a
    cold XGBTuner's best after its first batch and after 32 trials.  The hedge acts only while
    the model knows other workloads' records alone (``XGBTuner.next_batch``), so a cold start is
    the same run with or without it: made once for both of the test's runs."""
    target = plain_space_of("rfc-3x3-b32")
    random_first = RandomTuner(target, seed=seed).tune(16, SyntheticMeasure(target))[1]
    curve = _best_cost_curve(XGBTuner(target, seed=seed), target)
    return random_first, curve[0], curve[-1]


@pytest.mark.parametrize("hedge", [False, True])
def test_transfer_learning_finds_good_configs_sooner(hedge):
    """The transfer model alone (no hedge) finds good configs sooner than a cold start.  The
    hedge spends half of the first batch on the prior's picks: on this objective, whose
    transfer records are uniform random samples, that costs a little (measured on real
    histories and GPUs it gained, on the validation and the held-out shapes), so hedged runs
    only have to stay close."""
    target = plain_space_of("rfc-3x3-b32")
    random_first, cold_first, cold = map(list, zip(*map(_cold_start, range(3))))
    warm, warm_first = [], []
    for seed in range(3):
        tuner = XGBTuner(target, seed=seed, hedge=hedge)
        assert tuner.load_history(_transfer_records()) == 0  # other workloads: training data only
        assert tuner.model.fitted and not tuner.history
        curve = _best_cost_curve(tuner, target)
        warm_first.append(curve[0])
        warm.append(curve[-1])
    # Without data the first batch follows the analytic prior; with transfer it follows a
    # model trained on other workloads: both must clearly beat an uninformed random batch.
    assert np.mean(warm_first) < 0.8 * np.mean(random_first), (warm_first, random_first)
    assert np.mean(cold_first) < 0.8 * np.mean(random_first), (cold_first, random_first)
    assert np.mean(warm) <= np.mean(cold) * (1.2 if hedge else 1.0), (warm, cold)


@pytest.mark.parametrize("hedge", [True, False])
def test_transfer_runs_hedge_with_the_prior_until_their_own_results_arrive(monkeypatch, hedge):
    """Before the first result of this workload, a hedged transfer run measures the prior's
    diverse picks beside the transfer model's (half each); afterwards only the model picks."""
    space = space_of("rfc-3x3-b32")
    tuner = XGBTuner(space, seed=0, hedge=hedge)
    tuner.load_history(records_of(space_of("tutorial"), 64, seed=1))
    calls = []
    real = XGBTuner._anneal

    def spy(self, n, taken, score=None, diverse=False):
        calls.append((n, "prior" if score == self._prior else "model", diverse))
        return real(self, n, taken, score, diverse)

    monkeypatch.setattr(XGBTuner, "_anneal", spy)
    first = tuner.next_batch(16)  # 1 default + 13 searched + 2 random
    assert len(set(first)) == 16 and first[0] == space.default_config()
    assert calls == ([(6, "prior", True), (7, "model", False)] if hedge else [(13, "model", False)])
    calls.clear()
    tuner.update(first, SyntheticMeasure(space)(first))
    assert len(tuner.next_batch(16)) == 16 and calls == [(14, "model", False)]


def test_tuner_names_build_their_variants():
    from tc_autotune.search.xgb_tuner import XGB_VARIANTS, make_tuner
    space = space_of("tutorial")
    made = {name: make_tuner(name, space, seed=0) for name in XGB_VARIANTS}
    assert made["xgb"].transfer == "residual" and made["xgb"].model.half_life == 64
    assert made["xgb-hedged"].hedge and not made["xgb-unhedged"].hedge and made["xgb-joint"].transfer == "joint"
    assert made["xgb-fast-fade"].hedge and made["xgb-fast-fade"].model.half_life == 16
    with pytest.raises(ValueError, match="unknown tuner"):
        make_tuner("xgb-nonsense", space)


def test_annealing_one_batch_costs_steps_times_chains_not_the_space(monkeypatch):
    """One batch on a 1.6G-config space is one annealing run: one vectorised prediction per
    step for all chains at once (n_steps + 1 calls of at most n_chains rows), and no full-space
    scan.  Counted, not timed (CI machines are loaded)."""
    from tc_autotune.search import tuner as tuner_module

    space = space_of("tutorial")
    assert len(space) > 2_000_000
    tuner = XGBTuner(space, seed=0)
    tuner.load_history(records_of(space, 64, seed=0))
    predicted, checked = [], []
    real_predict, real_mask = tuner.model.predict, tuner_module.valid_mask

    def counting_predict(x):
        predicted.append(len(x))
        return real_predict(x)

    def counting_mask(space, pos):
        checked.append(len(pos))
        return real_mask(space, pos)

    def no_scan(self):
        raise AssertionError("full-space scan")

    monkeypatch.setattr(tuner.model, "predict", counting_predict)
    patch_valid_mask(monkeypatch, counting_mask)
    monkeypatch.setattr(tuner_module.Tuner, "_valid_indices", no_scan)
    batch = tuner.next_batch(16)
    assert len(batch) == 16 and all(space.is_valid(c) for c in batch)
    assert len(predicted) == tuner.n_steps + 1 and max(predicted) <= tuner.n_chains, predicted
    # the starts' draws, the chains' steps and the explorers' draws: bounded by the tuner's
    # constants, a few hundred thousand rows, never a share of the space's 1.6G
    assert sum(checked) <= (tuner.n_steps + 1) * tuner.n_chains + 2 * tuner_module._DRAW_ROUNDS * tuner_module._CHUNK
    assert sum(checked) < len(space) / 1000


# ---- progress ---------------------------------------------------------------------------
def test_progress_logger_logs_one_line_per_batch(caplog):
    space = space_of("tutorial")
    log = logging.getLogger("tc_autotune.test_progress")
    failing = SyntheticMeasure(space, seconds=lambda s, c: None if s.index(c) % 3 == 0 else synthetic_seconds(s, c))
    with caplog.at_level(logging.INFO, logger=log.name):
        RandomTuner(space, seed=0).tune(32, failing, batch_size=16, callbacks=[progress_logger(32, log)])
    lines = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert len(lines) == 2
    assert "16/32 trials" in lines[0] and "32/32 trials" in lines[1]
    assert all("TFLOP/s" in line and "ETA" in line and "errors" in line for line in lines)
    errors = sum(failing.seconds(space, space.get(i)) is None for i in failing.measured)
    assert f"| {errors} errors" in lines[1]


def test_xgb_first_batch_starts_with_the_default_config():
    for name in ("tutorial", "rfc-1x1-b1"):
        space = space_of(name)
        batch = XGBTuner(space, seed=0).next_batch(16)
        assert batch[0] == space.default_config() and len(set(batch)) == 16


def test_a_move_onto_the_mma_or_wgmma_path_lands_on_a_valid_config():
    """Switching a good WMMA config (padded tiles) to intrinsic=mma or wgmma in one annealing
    step must give its twin on that path, not an invalid point the search would reject."""
    from dataclasses import replace

    from tc_autotune.search.cost_model import indices_from_positions, positions_from_configs
    from tc_autotune.core.config_space import with_requirements

    space = space_of("tutorial")
    wmma = replace(space.default_config(), wmma="m32n8k16", warp_row_tiles=4, warp_col_tiles=4,
                   chunk=2, offset_a=8, offset_b=16, split_k=1, frag_buffers=2, vec_a=8, vec_b=8)
    assert space.is_valid(wmma)
    to_mma, to_wgmma = replace(wmma, intrinsic="mma"), replace(wmma, intrinsic="wgmma")
    assert not space.is_valid(to_mma) and not space.is_valid(to_wgmma)
    pos = with_requirements(space, positions_from_configs(space, [wmma, to_mma, to_wgmma]))
    kept, mma, wgmma = (space.get(int(i)) for i in indices_from_positions(space, pos))
    assert kept == wmma  # WMMA rows are left alone
    assert mma == replace(to_mma, wmma="m16n16k16", offset_a=0, offset_b=0)
    assert wgmma == replace(to_wgmma, wmma="m16n16k16", offset_a=0, offset_b=0, block_row_warps=4,
                            chunk=4, frag_buffers=1)
    assert space.is_valid(mma) and space.is_valid(wgmma), space.why_invalid(wgmma)


@pytest.mark.parametrize("knobs", [dict(wgmma_in_flight=1), dict(warp_specialized=1),
                                   dict(wgmma_in_flight=1, warp_specialized=1)], ids=lambda k: "+".join(k))
def test_a_move_off_the_wgmma_path_leaves_its_knobs_behind(knobs):
    """wgmma_in_flight and warp_specialized belong to the wgmma path: a move off it resets them."""
    from dataclasses import replace

    from tc_autotune.search.cost_model import indices_from_positions, positions_from_configs
    from tc_autotune.core.config_space import with_requirements

    space = space_of("tutorial")
    wgmma = replace(space.default_config(), intrinsic="wgmma", wmma="m16n16k16", block_row_warps=4,
                    block_col_warps=2, warp_row_tiles=2, warp_col_tiles=4, chunk=4, offset_a=0, offset_b=0,
                    stages=3, frag_buffers=1, split_k=1, vec_a=8, vec_b=8, vec_c=1, offset_c=0, **knobs)
    assert space.is_valid(wgmma), space.why_invalid(wgmma)
    moved = [wgmma, replace(wgmma, intrinsic="mma"), replace(wgmma, intrinsic="wmma")]
    pos = with_requirements(space, positions_from_configs(space, moved))
    kept, mma, wmma = (space.get(int(i)) for i in indices_from_positions(space, pos))
    off = {knob: 0 for knob in knobs}
    assert kept == wgmma and (mma, wmma) == tuple(replace(c, **off) for c in moved[1:])
    assert space.is_valid(mma)


def test_fragment_load_conflict_features_rate_swizzled_and_padded_tiles():
    from dataclasses import replace

    space = space_of("tutorial")
    base = replace(space.default_config(), wmma="m16n16k16", chunk=4)  # block_k = 64
    rows = [replace(base, offset_a=o, offset_b=o) for o in (0, 8, 16)]
    rows.append(replace(base, offset_a=0, offset_b=0, intrinsic="mma"))
    x = config_features(space, rows)
    ways = x[:, [FEATURE_NAMES.index("a_conflict_ways"), FEATURE_NAMES.index("b_conflict_ways")]]
    # 128-byte rows: 8-way; 144-byte rows: conflict-free; 160-byte rows: 2-way; swizzled: free.
    assert ways[:, 0].tolist() == [8, 1, 2, 1]


def test_a_workload_with_few_valid_configs_is_sampled_never_scanned(monkeypatch):
    """ResNet-50's conv1 (3 input channels: vec_a=1 only) made the tuner scan all 268M
    configs when its draws came up short: two minutes per nightly workload on an H100."""
    from tc_autotune.search import tuner as tuner_module

    def no_scan(self):
        raise AssertionError("full-space scan")

    monkeypatch.setattr(tuner_module.Tuner, "_valid_indices", no_scan)
    space = conv2d_space(workloads.get("resnet50-conv1-b1"), GPU)
    picks = RandomTuner(space, seed=0).next_batch(16)
    assert len(picks) == 16 and all(space.is_valid(c) for c in picks)
    xgb = XGBTuner(space, seed=0)
    assert len(xgb._starts(128)) == 128


@pytest.mark.parametrize("picker", ["random draws", "annealing starts"])
def test_draws_that_come_up_short_scan_a_small_space_but_never_a_large_one(monkeypatch, picker):
    """The whole-space scan guard (``len(space) <= _SCAN_LIMIT``): when every random draw comes up
    empty, a small space is listed whole and picked from; a large one (1.6G configs) never is.
    Draws are made to come up empty (the mask rejects every drawn row), so each guard is reached."""
    from tc_autotune.search import tuner as tuner_module

    scans = []
    small, large = small_space(), space_of("tutorial")
    assert len(small) <= tuner_module._SCAN_LIMIT < len(large)
    small_valid = np.flatnonzero(tuner_module.valid_mask(small, tuner_module.positions_from_indices(
        small, np.arange(len(small)))))

    def listed(self):  # stands in for the scan (never run over 1.6G configs here)
        scans.append(len(self.space))
        return small_valid if self.space is small else np.arange(len(self.space) // 2, dtype=np.int64)

    patch_valid_mask(monkeypatch, lambda space, pos: np.zeros(len(pos), dtype=bool))
    from tc_autotune.search import xgb_tuner

    for module in (tuner_module, xgb_tuner):  # XGBTuner's starts draw as many rounds as the tuners' picks
        monkeypatch.setattr(module, "_DRAW_ROUNDS", 2)
    monkeypatch.setattr(tuner_module.Tuner, "_valid_indices", listed)

    def pick(space):
        if picker == "random draws":
            return RandomTuner(space, seed=0).next_batch(4)
        return XGBTuner(space, seed=0)._starts(8)

    assert len(pick(small)) > 0 and scans == [len(small)]  # short draws fall back to the list
    scans.clear()
    assert len(pick(large)) == 0 and scans == []  # nothing drawn, nothing scanned


# ---- cost bounds ----------------------------------------------------------------------
def test_default_config_is_cheap_and_small_uncached(monkeypatch):
    """The default config screens a grid of ~35k rows per intrinsic path, never the ~10M
    offset-fixed configs (let alone the space): rows counted, memory traced, no clock."""
    import tracemalloc

    from tc_autotune.core import config_space as space_module
    from tc_autotune.templates.tc_gemm import validity  # the template's default_config lives there

    space_module._default_config.cache_clear()
    space = space_of("tutorial")
    derived, confirmed = [], []
    real_derive_rows, real_is_valid = validity.derive_rows, space_module.ConfigSpace.is_valid

    def counting_derive_rows(space, pos):
        derived.append(len(pos))
        return real_derive_rows(space, pos)

    def counting_is_valid(self, config):
        confirmed.append(config)
        return real_is_valid(self, config)

    monkeypatch.setattr(validity, "derive_rows", counting_derive_rows)
    monkeypatch.setattr(space_module.ConfigSpace, "is_valid", counting_is_valid)
    tracemalloc.start()
    try:
        config = space.default_config()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        monkeypatch.undo()
    assert space.is_valid(config)
    assert 0 < sum(derived) < 1_000_000, f"default_config derived {sum(derived)} rows in {len(derived)} calls"
    assert len(confirmed) <= 64  # the prior's top rows, confirmed one by one
    assert peak < 300e6, f"default_config peaked at {peak / 1e6:.0f} MB"


def test_sampling_memory_is_bounded_whatever_the_valid_fraction():
    """``sample`` sizes its batches by the valid fraction it sees (~0.05% on a conv): 2000 picks
    once drew 4M configs in one batch and derived them at once, 2.4 GB (test_tuner.py peaked
    at 2.8 GB).  Batches are capped now; the picks are the same seeded stream's."""
    import tracemalloc

    space = space_of("rfc-3x3-b32")
    tracemalloc.start()
    try:
        picks = space.sample(2000, seed=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(picks) == 2000 and len(set(picks)) == 2000 and all(space.is_valid(c) for c in picks[:50])
    assert peak < 400e6, f"sample(2000) peaked at {peak / 1e6:.0f} MB"


@pytest.mark.parametrize("tuner_cls", [RandomTuner, XGBTuner])
@pytest.mark.parametrize("name", ["tutorial", "resnet50-conv1-b1"])
def test_tuning_32_trials_with_a_fake_runner_does_bounded_work(tuner_cls, name, monkeypatch):
    """32 trials are 2 batches of 16, each measured once, and the configs the search checks
    are bounded by its draw budget (a few rounds of _CHUNK draws a batch), never a scan of the
    space (268M configs for conv1, whose valid configs are rare).  Counted, not timed."""
    from tc_autotune.search import tuner as tuner_module

    space = space_of(name)
    checked, batches = [], []
    real_mask = tuner_module.valid_mask

    def counting_mask(space, pos):
        checked.append(len(pos))
        return real_mask(space, pos)

    def no_scan(self):
        raise AssertionError("full-space scan")

    patch_valid_mask(monkeypatch, counting_mask)
    monkeypatch.setattr(tuner_module.Tuner, "_valid_indices", no_scan)
    measure = SyntheticMeasure(space)
    best = tuner_cls(space, seed=0).tune(32, measure, callbacks=[lambda t, c, r: batches.append(len(c))])
    assert best is not None
    assert batches == [16, 16] and len(measure.measured) == 32
    per_batch = 8 * 4 * 128 + 2 * tuner_module._DRAW_ROUNDS * tuner_module._CHUNK + 101 * 128
    assert sum(checked) <= len(batches) * per_batch, f"{sum(checked)} configs checked for {len(batches)} batches"
