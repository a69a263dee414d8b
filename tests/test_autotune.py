"""The tuning job without a GPU: a synthetic measurer stands in for the GPU; the log, resume,
transfer and the deadline are real."""

import pytest

from tc_autotune import records, workloads
from tc_autotune.autotune import tune_workload
from tc_autotune.gpu import GpuInfo
from tc_autotune.measure import MeasureErrorNo

from synthetic import SyntheticMeasurer

GPU = GpuInfo(name="Synthetic GPU", arch="sm_90", sm_count=132)
WL = workloads.get("rfc-3x3-b32")


@pytest.fixture(autouse=True)
def clear_calls():
    SyntheticMeasurer.calls = []


def tune(log, n, **kw):
    return tune_workload(kw.pop("workload", WL), n, log, gpu=GPU, compare_cudnn=False,
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

    from tc_autotune.space import conv2d_space

    h100_log, h200_log = tmp_path / "h100.jsonl", tmp_path / "h200.jsonl"
    h100 = replace(GPU, name="Synthetic H100")
    h200 = replace(GPU, name="Synthetic H200")
    tune_workload(WL, 32, h100_log, gpu=h100, compare_cudnn=False, measurer_factory=SyntheticMeasurer,
                  batch_size=8, seed=0)
    SyntheticMeasurer.calls = []
    summary = tune_workload(WL, 16, h200_log, gpu=h200, compare_cudnn=False, transfer_logs=[h100_log],
                            measurer_factory=SyntheticMeasurer, batch_size=8, seed=0)
    space = conv2d_space(WL, h200)
    measured = [i for _, i in SyntheticMeasurer.calls]
    assert measured[0] == space.index(space.default_config())
    assert (summary.trials, summary.resumed, summary.other_records) == (16, 0, 32)
    assert {r.gpu for r in records.load(h200_log)} == {"Synthetic H200"}
