"""The tuning job without a GPU: a synthetic measurer stands in for the GPU; the log, resume,
transfer and the deadline are real."""

import pytest

from tc_autotune.database import records
from tc_autotune import workloads
from tc_autotune.tuning.autotune import tune_workload
from tc_autotune.backends.cuda.gpu import GpuInfo
from tc_autotune.measure.measurer import MeasureErrorNo, MeasureResult
from tc_autotune.core import tasks
from tc_autotune.templates.registry import conv2d_space

from synthetic import SyntheticMeasurer

GPU = GpuInfo(name="Synthetic GPU", arch="sm_90", sm_count=132)
WL = workloads.get("rfc-3x3-b32")


@pytest.fixture(autouse=True)
def clear_calls(monkeypatch):
    SyntheticMeasurer.calls = []
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", "")  # no shipped logs unless a test makes some


def tune(log, n, **kw):
    return tune_workload(kw.pop("workload", WL), n, log, gpu=GPU, compare_baseline=False,
                         measurer_factory=SyntheticMeasurer, batch_size=8, seed=kw.pop("seed", 0), **kw)


def test_every_measurement_is_a_record_and_resume_never_remeasures(tmp_path):
    log = tmp_path / "tune.jsonl"
    first = tune(log, 24)
    saved = list(records.load(log))
    assert len(saved) == 24 == first.trials
    assert all(r.gpu == "Synthetic GPU" and r.workload == WL for r in saved)
    assert records.load_best(log, WL)[1] == pytest.approx(first.best_seconds)

    second = tune(log, 24)
    saved = list(records.load(log))
    indices = [r.config["index"] for r in saved]
    assert len(saved) == 48 and len(set(indices)) == 48  # nothing measured twice
    assert second.best_seconds <= first.best_seconds  # the resumed history counts
    assert records.load_best(log, WL)[1] == pytest.approx(second.best_seconds)


def test_errors_are_logged_with_their_code(tmp_path):
    log = tmp_path / "tune.jsonl"
    summary = tune(log, 48, workload=WL, seed=3)
    errors = [r for r in records.load(log) if not r.ok]
    assert summary.errors == len(errors)
    assert all(r.result.error_no == MeasureErrorNo.RUN_ERROR and r.result.error_msg == "synthetic crash"
               for r in errors)


def test_deadline_stops_after_the_current_batch(tmp_path):
    log = tmp_path / "tune.jsonl"
    summary = tune(log, 64, deadline=0.0)  # already passed: one batch, then stop
    assert summary.trials == 8 and len(list(records.load(log))) == 8


def test_records_of_other_workloads_are_used_not_remeasured(tmp_path):
    log = tmp_path / "tune.jsonl"
    tune(log, 16, workload=workloads.get("rfc-3x3-b1"))
    SyntheticMeasurer.calls = []
    tune(log, 16)
    assert {w for w, _ in SyntheticMeasurer.calls} == {WL}
    assert len(list(records.load(log))) == 32


def test_another_gpu_of_the_same_arch_is_transfer_data_not_history(tmp_path):
    """An H100 log passed while tuning on an H200 (both sm_90): its configs are not taken as
    measured here (nothing resumed, so the default comes first) but are handed to the model
    as training data; the H200 log holds H200 measurements only."""
    from dataclasses import replace

    from tc_autotune.templates.registry import conv2d_space

    h100_log, h200_log = tmp_path / "h100.jsonl", tmp_path / "h200.jsonl"
    h100 = replace(GPU, name="Synthetic H100")
    h200 = replace(GPU, name="Synthetic H200")
    tune_workload(WL, 32, h100_log, gpu=h100, compare_baseline=False, measurer_factory=SyntheticMeasurer,
                  batch_size=8, seed=0)
    SyntheticMeasurer.calls = []
    summary = tune_workload(WL, 16, h200_log, gpu=h200, compare_baseline=False, transfer_logs=[h100_log],
                            measurer_factory=SyntheticMeasurer, batch_size=8, seed=0)
    space = conv2d_space(WL, h200)
    measured = [i for _, i in SyntheticMeasurer.calls]
    assert measured[0] == space.index(space.default_config())
    assert (summary.trials, summary.resumed, summary.other_records) == (16, 0, 32)
    assert {r.gpu for r in records.load(h200_log)} == {"Synthetic H200"}


def _record(workload, config, seconds, gpu=GPU, current=True):
    space = conv2d_space(workload, gpu)
    stamp = dict(source_hash=tasks.of(workload).template.source_hash) if current else {}  # else stale
    return records.Record(f"cuda -arch={gpu.arch}", workload, space.to_entity(config),
                          MeasureResult((seconds,), timestamp=1.7e9), {"gpu": gpu.name}, **stamp)


def test_first_batch_measures_todays_pick_the_stale_best_and_the_default(tmp_path, monkeypatch):
    """So a tuned best can never lose to what apply picks today or to the untuned default,
    and a stale best (measured on another template version) is measured again."""
    space = conv2d_space(WL, GPU)
    default = space.default_config()
    shipped_pick, stale_pick, other = [c for c in space.sample(8, seed=5) if c != default][:3]
    shipped = tmp_path / "shipped"
    records.append(shipped / "synthetic-gpu.jsonl", [_record(WL, shipped_pick, 1e-4)])
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(shipped))
    log = tmp_path / "tune.jsonl"
    records.append(log, [_record(WL, stale_pick, 6e-6, current=False),   # stale: not history
                         _record(WL, other, 7e-6, current=False)])  # (the fastest a GPU allows: ~5e-6)
    summary = tune(log, 8)
    measured = [i for _, i in SyntheticMeasurer.calls]
    assert measured[:3] == [space.index(c) for c in (shipped_pick, stale_pick, default)]
    assert summary.resumed == 0 and summary.other_records >= 2
    assert summary.default_seconds is not None and summary.best_seconds <= summary.default_seconds
    fresh = [r for r in records.load(log) if not r.stale]
    assert {r.config["index"] for r in fresh} >= {space.index(stale_pick), space.index(default)}


def test_a_best_found_stale_in_the_best_log_is_measured_again_though_its_history_copy_is_not_marked(
        tmp_path, monkeypatch):
    """A restamp of the shipped best log found the best's code changed (stale there); the shipped
    history holds the same measurement unmarked (unverified: a history is not restamped).  The
    tuner reads both: one check that found the code changed holds for every copy, so the config
    is measured again in the first batch, before anything the search picks."""
    space = conv2d_space(WL, GPU)
    default = space.default_config()
    best = next(c for c in space.sample(8, seed=5) if c != default)
    today = tasks.of(WL).template.source_hash

    def copy(**stamp):
        return records.Record(f"cuda -arch={GPU.arch}", WL, space.to_entity(best),
                              MeasureResult((6e-6,), timestamp=1.7e9), {"gpu": GPU.name},
                              source_hash="0" * 64, code_hash="1" * 64, **stamp)

    shipped = tmp_path / "shipped"
    records.append(shipped / "synthetic-gpu.jsonl", [copy(stale_at=today)])
    records.append(shipped / "history" / "synthetic-gpu-run.jsonl", [copy()])
    assert [r.freshness for r in records.load(shipped / "synthetic-gpu.jsonl")] == [records.STALE]
    assert [r.freshness for r in records.load(shipped / "history")] == [records.UNVERIFIED]
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(shipped))
    tune(tmp_path / "tune.jsonl", 4)
    measured = [i for _, i in SyntheticMeasurer.calls]
    assert space.index(best) in measured[:2]  # after today's pick (zero-shot: its code changed)


def test_first_batch_on_hopper_measures_the_warp_specialized_starting_tilings(tmp_path):
    """After today's pick and the default: 128x256 (and persistent), 128x128, 64x256, 64x64 and
    64x128 split-K warp-specialized tilings, then 128x256 with the consumers along M (plain,
    persistent, with B multicast), 128x128 along M (also in 4 K slices), ping-pong at 128x128 and 64x256, and
    with A by TMA im2col 128x256 persistent along M and 128x128, which a short search rarely reaches; on an
    A100 none exist; split-K only where the tiles leave SMs idle; im2col only for a conv that takes it."""
    from tc_autotune.templates.tc_gemm.warp_specialized import starting_configs

    space = conv2d_space(WL, GPU)
    starts = starting_configs(space)
    assert [(c.block_m, c.block_n, c.warp_specialized, c.split_k, c.consumers_along_m, c.multicast_b,
             c.ping_pong, c.tma_im2col) for c in starts] == [
        (128, 256, 1, 1, 0, 0, 0, 0), (128, 256, 2, 1, 0, 0, 0, 0), (128, 128, 1, 1, 0, 0, 0, 0),
        (64, 256, 1, 1, 0, 0, 0, 0), (64, 64, 1, 1, 0, 0, 0, 0), (64, 128, 1, 4, 0, 0, 0, 0),
        (128, 256, 1, 1, 1, 0, 0, 0), (128, 256, 2, 1, 1, 0, 0, 0), (128, 256, 1, 1, 1, 1, 0, 0),
        (128, 128, 1, 1, 1, 0, 0, 0), (128, 128, 1, 4, 1, 0, 0, 0), (128, 128, 2, 1, 0, 0, 1, 0),
        (64, 256, 2, 1, 0, 0, 1, 0), (128, 256, 2, 1, 1, 0, 0, 1), (128, 128, 1, 1, 0, 0, 0, 1)]
    big = workloads.get("tutorial")  # 784 x 4 tiles of 64 x 128 fill the GPU: no split-K
    assert all(c.split_k == 1 for c in starting_configs(conv2d_space(big, GPU)))
    assert all(space.why_invalid(c) is None and c.wgmma_in_flight and c.stages == 4 for c in starts)
    tune(tmp_path / "tune.jsonl", 16, shipped_transfer=False)
    measured = [i for _, i in SyntheticMeasurer.calls]
    assert measured[:16] == [space.index(c) for c in [space.default_config(), *starts]]
    matrix_a = workloads.get("rfc-1x1-b32")  # a 1x1 stride-1 conv's A is a plain box: no im2col
    assert not any(c.tma_im2col for c in starting_configs(conv2d_space(matrix_a, GPU)))
    a100 = GpuInfo(name="Synthetic A100", arch="sm_80", sm_count=108)
    assert starting_configs(conv2d_space(WL, a100)) == []
    short_k = workloads.get("n=8,h=14,w=14,c=64,k=256,r=1,s=3,pad=1")  # 3 k-steps: 3 stages
    assert {c.stages for c in starting_configs(conv2d_space(short_k, GPU))} == {3}


def test_no_transfer_measures_no_zero_shot_pick_first(tmp_path, monkeypatch):
    """--no-transfer means nothing learnt from other workloads: not even the zero-shot pick
    (trained on the shipped histories) is in the first batch; the default still is."""
    import tc_autotune.search.zero_shot

    space = conv2d_space(WL, GPU)
    default = space.default_config()
    predicted = next(c for c in space.sample(8, seed=7) if c != default)
    monkeypatch.setattr(tc_autotune.search.zero_shot, "zero_shot_config", lambda workload, gpu, logs=None: predicted)
    tune(tmp_path / "with.jsonl", 8)
    assert [i for _, i in SyntheticMeasurer.calls][:2] == [space.index(predicted), space.index(default)]
    SyntheticMeasurer.calls = []
    tune(tmp_path / "without.jsonl", 8, shipped_transfer=False)
    measured = [i for _, i in SyntheticMeasurer.calls]
    assert measured[0] == space.index(default) and space.index(predicted) not in measured[:1]


def test_transfer_from_the_shipped_histories_of_this_arch_by_default(tmp_path, monkeypatch):
    other_wl = workloads.get("rfc-1x1-b32")
    configs = conv2d_space(other_wl, GPU).sample(6, seed=1)
    sm80 = GpuInfo(name="Synthetic A100", arch="sm_80", sm_count=108)
    shipped = tmp_path / "shipped"
    records.append(shipped / "history" / "old.jsonl", [_record(other_wl, c, 1e-4 * (i + 1))
                                                       for i, c in enumerate(configs[:4])])
    records.append(shipped / "synthetic-gpu.jsonl", [_record(other_wl, configs[0], 1e-4)])  # duplicate
    records.append(shipped / "a100.jsonl", [_record(other_wl, c, 1e-4, gpu=sm80)
                                            for c in conv2d_space(other_wl, sm80).sample(2, seed=2)])
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(shipped))
    assert tune(tmp_path / "a.jsonl", 8).other_records == 4  # sm_90 only, the duplicate once
    assert tune(tmp_path / "b.jsonl", 8, shipped_transfer=False).other_records == 0  # --no-transfer
    assert {r.gpu for r in records.load(tmp_path / "a.jsonl")} == {GPU.name}  # nothing copied in


def test_the_best_is_compared_with_the_tasks_baseline_and_the_old_keyword_still_works(tmp_path, monkeypatch):
    from tc_autotune.tuning import autotune

    calls = []
    monkeypatch.setattr(autotune, "compare_with_baseline", lambda w, c: calls.append(c) or (1e-4, 2e-4))
    summary = tune_workload(WL, 8, tmp_path / "a.jsonl", gpu=GPU, measurer_factory=SyntheticMeasurer, batch_size=8)
    assert (summary.final_seconds, summary.baseline_seconds, summary.baseline_ratio) == (1e-4, 2e-4, 2.0)
    assert calls == [summary.best_config]
    text = summary.describe(GPU.name)
    assert "cuDNN (PyTorch, same run): 0.2000 ms" in text and "cuDNN/tuned time ratio 2.00" in text
    tune_workload(WL, 8, tmp_path / "b.jsonl", gpu=GPU, measurer_factory=SyntheticMeasurer, batch_size=8,
                  compare_cudnn=False)  # its earlier name
    assert len(calls) == 1
