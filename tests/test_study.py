"""The held-out study without a GPU: synthetic measurements, real logs, resume and summary."""

import math

import pytest

from tc_autotune.database import records
from lab import study
from tc_autotune.backends.cuda.gpu import GpuInfo
from tc_autotune.templates.registry import conv2d_space
from tc_autotune.workloads.conv2d import Conv2dWorkload

from synthetic import SyntheticMeasurer

GPU = GpuInfo(name="Synthetic GPU", arch="sm_90", sm_count=132)
A = Conv2dWorkload.parse("n=2,h=8,c=64,k=64,r=3,pad=1")
B = Conv2dWorkload.parse("n=4,h=17,c=96,k=32,r=7,s=1,pad=3x0")


@pytest.fixture(autouse=True)
def no_shipped_logs(monkeypatch):
    SyntheticMeasurer.calls = []
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", "")


def tune(out, **kw):
    return study.run_tuning([A, B], out, gpu=GPU, trials=24, plain_trials=16, seed=0, batch_size=8,
                            measurer_factory=SyntheticMeasurer, **kw)


def test_each_workload_and_arm_has_its_own_log_and_runs_resume(tmp_path):
    assert tune(tmp_path) == []
    logs = sorted(p.name for p in tmp_path.iterdir())
    assert len(logs) == 4 and all(p.endswith((".transfer.jsonl", ".plain.jsonl")) for p in logs)
    for wl in (A, B):
        transfer, plain = study.arm_logs(tmp_path, wl)
        assert {r.workload for r in records.load(transfer)} == {wl} == {r.workload for r in records.load(plain)}
        assert len(list(records.load(transfer))) == 24 and len(list(records.load(plain))) == 16
    measured = len(SyntheticMeasurer.calls)
    assert measured == 2 * (24 + 16)
    assert tune(tmp_path) == [] and len(SyntheticMeasurer.calls) == measured  # complete: nothing re-measured


def test_a_budget_stops_before_the_next_workload_and_a_rerun_goes_on(tmp_path):
    assert tune(tmp_path, budget_s=1.0, estimate_s=10.0) == [A, B]  # the estimate says no room for one
    assert not any(tmp_path.iterdir())
    left = tune(tmp_path, budget_s=1e-9)  # no estimate: the first starts, its time then says no to the next
    assert left == [B] and study.complete(A, tmp_path, trials=24, plain_trials=16)
    assert tune(tmp_path) == []


def test_best_after_n_is_the_best_of_the_first_n_records(tmp_path):
    tune(tmp_path)
    recs = study.workload_records(study.arm_logs(tmp_path, A)[0], A)
    for n in (1, 8, 24):
        ok = [r.seconds for r in recs[:n] if r.ok]
        assert study.best_after(recs, n).seconds == min(ok)
    assert study.best_after([r for r in recs if not r.ok], 24) is None


def test_arm_configs_and_report_from_timed_rows(tmp_path, monkeypatch):
    import tc_autotune.search.zero_shot

    tune(tmp_path)
    space = conv2d_space(A, GPU)
    predicted = space.sample(1, seed=3)[0]
    monkeypatch.setattr(tc_autotune.search.zero_shot, "zero_shot_config", lambda w, gpu, logs=None: predicted)
    configs, logged = study.arm_configs(A, tmp_path, GPU, checkpoints=(8, 24), plain_trials=16)
    assert configs["zero-shot"] == predicted and configs["default"] == space.default_config()
    assert set(logged) == {"8 transfer", "24 transfer", "16 no transfer"}
    assert logged["24 transfer"] <= logged["8 transfer"]

    def timer(workload, configs, repeat):  # the synthetic measurer's time, cuDNN twice as fast as default
        seconds = {k: SyntheticMeasurer(conv2d_space(workload, GPU))([c])[0].seconds for k, c in configs.items()}
        return seconds, seconds["default"] / 2

    rows = study.retime([A, B], tmp_path, GPU, timer=timer, checkpoints=(8, 24), plain_trials=16)
    summary = study.summarize(rows, short="8 transfer", long="24 transfer", with_transfer="24 transfer",
                              without="16 no transfer")
    assert summary.cudnn_ratio["default"] == pytest.approx(0.5)
    expected = sorted(r.seconds["24 transfer"] / r.seconds["8 transfer"] for r in rows)
    assert summary.short_vs_long == pytest.approx(sum(expected) / 2)
    gains = [r.seconds["16 no transfer"] / r.seconds["24 transfer"] for r in rows]
    assert summary.transfer_gain == pytest.approx(math.sqrt(gains[0] * gains[1]))
    assert summary.transfer_wins == sum(g > 1 for g in gains) and summary.compared == 2
    table = study.markdown(rows)
    assert table.splitlines()[0].startswith("| workload | cuDNN ms | default | zero-shot |")
    assert len([line for line in table.splitlines() if line.startswith("| n=")]) == 2
    assert study.row_dict(rows[0])["configs"]["zero-shot"] == predicted.as_dict()


def test_another_tuner_gets_a_transfer_log_of_its_own_and_its_own_columns(tmp_path, monkeypatch):
    import tc_autotune.search.zero_shot

    monkeypatch.setattr(tc_autotune.search.zero_shot, "zero_shot_config", lambda w, gpu, logs=None: None)
    tune(tmp_path)
    tune(tmp_path, tuner="xgb-joint")
    joint, plain = study.arm_logs(tmp_path, A, "xgb-joint")
    assert joint.name.endswith(".transfer-xgb-joint.jsonl") and plain == study.arm_logs(tmp_path, A)[1]
    assert len(list(records.load(joint))) == 24 and len(list(records.load(plain))) == 16  # plain not re-run
    assert len(SyntheticMeasurer.calls) == 2 * (24 + 16) + 2 * 24
    configs, _ = study.arm_configs(A, tmp_path, GPU, checkpoints=(8, 24), plain_trials=16)
    assert {"8 transfer", "24 transfer", "8 transfer (xgb-joint)", "24 transfer (xgb-joint)"} <= set(configs)


@pytest.mark.parametrize("folder", ["heldout", "validation"])
def test_the_shipped_study_logs_are_read_by_nothing_that_learns(monkeypatch, folder):
    """The held-out and validation studies' logs (lab/heldout/, lab/validation/) must never
    become shipped logs: apply, transfer and the zero-shot model read only shipped_log_files()."""
    from pathlib import Path

    from tc_autotune.api.apply import shipped_log_files

    monkeypatch.delenv("TC_AUTOTUNE_SHIPPED_LOGS")
    root = Path(__file__).resolve().parent.parent
    study_dir = (root / "lab" / folder).resolve()
    files = [f.resolve() for f in shipped_log_files()]
    assert study_dir.is_dir() and files and (root / "tuning_logs").resolve() in [f.parent for f in files]
    assert not [f for f in files if study_dir in f.parents or "lab" in f.relative_to(root).parts]
