"""apply_history_best / build_conv2d(config=None) / the default fallback (CPU: no GPU needed)."""

import json
import warnings

import pytest

from tc_autotune import apply_history_best, build_conv2d, conv2d_space
from tc_autotune.database import records
from tc_autotune import workloads
from tc_autotune.api.apply import NoTunedConfigWarning, best_config
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.measure.measurer import MeasureErrorNo, MeasureResult

WL = workloads.get("n=2,h=10,c=32,k=32,r=3,pad=1")
GPU = gpu_for_arch("sm_90")


def write_log(path, entries, workload=WL):
    space = conv2d_space(workload, GPU)
    recs = [records.stamped("cuda -arch=sm_90", space, cfg, res) for cfg, res in entries]
    records.append(path, recs)


@pytest.fixture(autouse=True)
def no_shipped_logs(monkeypatch, tmp_path):
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(tmp_path / "none"))


def test_build_uses_best_record_of_the_log(tmp_path):
    space = conv2d_space(WL, GPU)
    fast, slow, broken = space.sample(3, seed=4)
    log = tmp_path / "tune.jsonl"
    write_log(log, [(slow, MeasureResult((2e-3, 2e-3))), (fast, MeasureResult((1e-3, 1.1e-3))),
                    (broken, MeasureResult((), MeasureErrorNo.RUN_ERROR, "boom"))])
    with apply_history_best(log):
        kernel = build_conv2d(WL, target="sm_90")
    assert kernel.config == fast
    with apply_history_best(tmp_path):  # a directory of logs works too
        assert build_conv2d(WL, target="sm_90").config == fast
    assert best_config(WL, GPU) is None  # outside the block the log is not active


def test_without_record_default_config_and_a_warning_naming_the_workload(tmp_path):
    with pytest.warns(NoTunedConfigWarning, match=str(WL).replace("(", r"\(")):
        kernel = build_conv2d(WL, target="sm_90")
    assert kernel.config == conv2d_space(WL, GPU).default_config()


def test_shipped_logs_are_consulted_after_the_given_ones(tmp_path, monkeypatch):
    space = conv2d_space(WL, GPU)
    shipped_cfg, given_cfg = space.sample(2, seed=8)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    write_log(shipped / "gpu.jsonl", [(shipped_cfg, MeasureResult((1e-4,)))])
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(shipped))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoTunedConfigWarning)
        assert build_conv2d(WL, target="sm_90").config == shipped_cfg
    given = tmp_path / "given.jsonl"
    write_log(given, [(given_cfg, MeasureResult((5e-4,)))])  # slower, but the user's log wins
    with apply_history_best(given):
        assert build_conv2d(WL, target="sm_90").config == given_cfg


def test_missing_log_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        with apply_history_best(tmp_path / "nowhere.jsonl"):
            pass


def test_conv2d_derives_the_workload_from_the_arrays():
    import numpy as np

    from tc_autotune.api.apply import workload_of

    data = np.zeros((2, 10, 12, 32), "float16")
    weight = np.zeros((3, 5, 32, 48), "float16")
    wl = workload_of(data, weight, stride=(1, 2), padding=(1, 2), dilation=1, out_dtype="float16")
    assert wl == workloads.get("n=2,h=10,w=12,c=32,k=48,r=3,s=5,stride=1x2,pad=1x2,out_dtype=float16")
    with pytest.raises(ValueError, match="weight has 16 input channels, data has 32"):
        workload_of(data, np.zeros((3, 3, 16, 8), "float16"))
    with pytest.raises(ValueError, match="data is float16 but weight is float32"):
        workload_of(data, np.zeros((3, 3, 32, 8), "float32"))


def test_conv2d_builds_once_per_workload_and_log_set(tmp_path):
    from tc_autotune.api.functional import _cached_kernel

    _cached_kernel.cache_clear()
    with pytest.warns(NoTunedConfigWarning):
        first = _cached_kernel(WL, ())
    assert _cached_kernel(WL, ()) is first and _cached_kernel.cache_info().hits == 1


def test_stale_records_are_not_applied_unless_asked_for(tmp_path):
    """A stale record timed another kernel (issue 11; stale by its hashes since issue 30)."""
    from dataclasses import replace

    space = conv2d_space(WL, GPU)
    current, old = space.sample(2, seed=11)
    log = tmp_path / "tune.jsonl"
    write_log(log, [(current, MeasureResult((2e-3,)))])
    stale = replace(records.stamped("cuda -arch=sm_90", space, old, MeasureResult((1e-6,))),
                    source_hash=None, code_hash=None)
    records.append(log, [stale])
    with apply_history_best(log):
        assert build_conv2d(WL, target="sm_90").config == current
    with apply_history_best(log, include_stale=True):
        assert build_conv2d(WL, target="sm_90").config == old


def test_an_unseen_shape_gets_a_zero_shot_config_from_the_shipped_histories(monkeypatch):
    from pathlib import Path

    from tc_autotune.api.apply import choose_config

    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(Path(__file__).resolve().parents[1] / "tuning_logs"))
    unseen = workloads.get("n=3,h=20,c=96,k=160,r=3,pad=1,out_dtype=float16")
    with pytest.warns(NoTunedConfigWarning, match="zero-shot config"):
        choice = choose_config(unseen, GPU)
    assert choice.source == "zero-shot" and conv2d_space(unseen, GPU).is_valid(choice.config)
    assert choose_config(unseen, GPU, warn=False) == choice  # deterministic
    assert choice.config != conv2d_space(unseen, GPU).default_config()


def test_benchmark_table_reports_geomeans_and_losses_to_the_default():
    from tc_autotune.tuning.benchmark import BenchRow, markdown_table

    rows = [BenchRow("a", 10**12, default_s=2e-4, tuned_s=1e-4, tuned_source="record", baseline_s=1e-4),
            BenchRow("b", 10**12, default_s=1e-4, tuned_s=1.1e-4, tuned_source="zero-shot", baseline_s=0.5e-4)]
    table = markdown_table(rows)
    assert "| a | 0.2000 | 5000.0 | 0.1000 | 10000.0 | record | 0.1000 | 10000.0 | 0.50 | 1.00 |" in table
    assert "| zero-shot (slower than default) |" in table
    assert "Geomean cuDNN / ours over 2 workloads: applied 0.674, default 0.500." in table
    assert "Applied slower than default (>3%): 1 of 2." in table
    dense = BenchRow("dense:m=16,n=64,k=128", 10**9, default_s=1e-5, tuned_s=1e-5, baseline_s=1e-5, baseline="cuBLAS")
    assert "| cuBLAS ms |" in markdown_table([dense]) and "cuDNN" not in markdown_table([dense])
    assert "Geomean cuBLAS/cuDNN / ours over 3 workloads" in markdown_table(rows + [dense])
    assert "device time" not in table  # the profiler's view only where it was taken
    rows[0].tuned_device_s, rows[0].baseline_device_s = 0.8e-4, 1.0e-4
    profiled = markdown_table(rows)
    assert "| a | 0.0800 | 0.1000 | 1.25 |" in profiled and "| b | 0.1100 |" not in profiled.split("device time")[1]
    assert "Geomean cuDNN / applied by kernel device time over 1 workloads: 1.250." in profiled
    # JSON rows read back, those of before the baseline fields were renamed (and named no timer) too
    assert BenchRow.from_dict(json.loads(json.dumps(rows[0].as_dict()))) == rows[0] and rows[0].timer == "cuda_timer"
    old = {"workload": "a", "flops": 10**12, "default_s": 2e-4, "cudnn_s": 1e-4, "cudnn_err": 1e-3, "baseline": "cuDNN"}
    assert BenchRow.from_dict(old) == BenchRow("a", 10**12, default_s=2e-4, baseline_s=1e-4, baseline_err=1e-3,
                                               timer=None)


def test_a_log_is_indexed_once_until_it_changes(tmp_path, monkeypatch):
    from tc_autotune.api import apply

    space = conv2d_space(WL, GPU)
    first, second = space.sample(2, seed=21)
    log = tmp_path / "indexed.jsonl"
    write_log(log, [(first, MeasureResult((2e-3,)))])
    reads = []
    real_index = apply.LogIndex  # logs.LogIndex, as apply reads a log file
    monkeypatch.setattr(apply, "LogIndex", lambda path: reads.append(path) or real_index(path))
    with apply_history_best(log):
        for _ in range(3):
            assert best_config(WL, GPU)[0] == first
        assert reads == [str(log)]  # parsed once for three look-ups
        write_log(log, [(second, MeasureResult((1e-3,)))])  # the file changed: indexed again
        assert best_config(WL, GPU)[0] == second and reads == [str(log)] * 2
    apply._log_index.cache_clear()
