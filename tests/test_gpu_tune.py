"""End to end on the GPU: tune a small workload, then build from the log's best record."""

import pytest

from tc_autotune import apply_history_best
from tc_autotune.database import records
from tc_autotune import workloads
from tc_autotune.tuning.autotune import tune_workload
from tc_autotune.measure.measurer import MeasureOptions
from tc_autotune.workloads.reference import conv2d_reference, random_inputs
from tc_autotune.core.results import relative_l2_error

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("spec", ["n=8,h=14,c=128,k=128,r=3,pad=1", "dense:m=256,n=512,k=1024,b=nk"])
def test_tune_then_build_from_the_best_record(tmp_path, spec):
    from tc_autotune.core import tasks
    from tc_autotune.api.build import build

    wl = workloads.get(spec)
    task = tasks.of(wl)
    log = tmp_path / "tune.jsonl"
    summary = tune_workload(wl, 32, log, batch_size=16, seed=1, compare_baseline=False,
                            options=MeasureOptions(repeat=3, min_repeat_ms=5))
    saved = list(records.load(log))
    assert len(saved) == 32 and summary.best_config is not None
    assert all(r.gpu == summary_gpu_name() for r in saved)
    best_cfg, best_s = records.load_best(log, wl)
    assert best_s == pytest.approx(summary.best_seconds)
    assert f'"{task.name}"' in log.read_text()
    # every record that built is keyed by the code it timed and by today's sources (issue #30)
    assert all(r.freshness == "fresh" for r in saved)
    assert all(r.code_hash for r in saved if r.result.error_no not in (1, 2, 3))
    with apply_history_best(log):
        kernel = build(wl)  # build_conv2d or build_dense
    assert kernel.config == best_cfg
    best = records.best_record(log, wl)[1]
    assert kernel.code_hash == best.code_hash  # built here, hashed in the measuring worker: one kernel
    data, weight = task.inputs(wl, seed=9)
    err = relative_l2_error(kernel(data, weight).numpy(), task.reference(wl, data, weight))
    assert err < 1e-2


def summary_gpu_name():
    from tc_autotune.backends.cuda.gpu import local_gpu

    return local_gpu().name


def test_conv2d_entry_point_matches_reference():
    import tc_autotune as tc

    wl = workloads.get("n=2,h=9,w=11,c=24,k=40,r=3,s=3,stride=2,pad=1")
    data, weight = random_inputs(wl, seed=3)
    out = tc.conv2d(data, weight, stride=2, padding=1).numpy()
    assert out.shape == wl.out_shape
    assert relative_l2_error(out, conv2d_reference(wl, data, weight)) < 1e-2
