"""Nightly jobs without a GPU: job files, the lock, the budget, --report-only, regressions."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from command_paths import run_completed

from tc_autotune.tuning import nightly
from tc_autotune.database import records
from tc_autotune import workloads
from tc_autotune.workloads import conv2d
from tc_autotune.tuning.autotune import Retimed
from tc_autotune.backends.cuda.gpu import GpuInfo
from tc_autotune.core.results import CUDA_GRAPH, CUDA_TIMER, TIME_EVALUATOR, TIMER

from synthetic import SyntheticMeasurer

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "nightly.py"
GPU = GpuInfo(name="Synthetic GPU", arch="sm_90", sm_count=132)


def write_job(tmp_path, budget_minutes=10, names=("rfc-3x3-b1", "rfc-1x1-b1"), trials=16, suffix=".toml"):
    path = tmp_path / f"job{suffix}"
    if suffix == ".toml":
        items = ", ".join(f'{{ name = "{n}" }}' for n in names)
        path.write_text(f'log = "logs/n.jsonl"\nreport_dir = "reports"\nbest_log_dir = "best"\n'
                        f"budget_minutes = {budget_minutes}\ntrials = {trials}\nworkloads = [{items}]\n")
    else:
        path.write_text(json.dumps({"log": "logs/n.jsonl", "report_dir": "reports", "best_log_dir": "best",
                                    "budget_minutes": budget_minutes, "trials": trials,
                                    "workloads": [{"name": n} for n in names]}))
    return path


def fixed_retime(seconds_by_spec, default_s=1e-3, timer=TIMER):
    def retime(workload, config):
        return Retimed(seconds_by_spec.get(str(workload), 1e-4), default_s, 5e-5, timer)
    return retime


@pytest.fixture(autouse=True)
def no_shipped_logs(monkeypatch):
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", "")  # tests make the logs they need


def run(job, **kw):
    kw.setdefault("retime", fixed_retime({}))
    return nightly.run_nightly(job, gpu=GPU, measurer_factory=SyntheticMeasurer, **kw)


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_job_file_forms(tmp_path, suffix):
    job = nightly.load_job(write_job(tmp_path, suffix=suffix))
    assert [e.workload for e in job.entries] == [workloads.get("rfc-3x3-b1"), workloads.get("rfc-1x1-b1")]
    assert job.budget_s == 600 and job.entries[0].trials == 16
    assert job.log == (tmp_path / "logs" / "n.jsonl").resolve()


def test_shipped_example_job_covers_seed_and_resnet50():
    job = nightly.load_job(Path(__file__).resolve().parent.parent / "tuning_logs" / "nightly.toml")
    names = {e.name: e.trials for e in job.entries}
    for seed in ["tutorial"] + [f"rfc-{k}-b{b}" for k in ("1x1", "3x3") for b in (1, 32, 256)]:
        assert names[seed] >= 64
    # every ResNet-50 layer's shape, two of them under their seed names (rfc-1x1-b1, rfc-3x3-b1)
    layers = {workloads.get(f"resnet50-{layer}-b1") for layer in conv2d.RESNET50_LAYERS}
    assert layers <= {e.workload for e in job.entries} and len(job.entries) == 28


SHIPPED_JOBS = sorted((Path(__file__).resolve().parent.parent / "tuning_logs").glob("*.toml"))


@pytest.mark.parametrize("path", SHIPPED_JOBS, ids=lambda p: p.name)
def test_every_shipped_job_names_each_workload_once(path):
    """A shape listed twice (under two preset names) was tuned, re-timed and reported twice a
    night: nightly.toml had rfc-1x1-b1 and resnet50-res4-1x1-1024-256-b1, one workload."""
    from tc_autotune.tuning.jobs import _toml

    items = _toml().loads(path.read_text())["workloads"]
    names = [item if isinstance(item, str) else item["name"] for item in items]
    by_workload = {}
    for name in names:
        by_workload.setdefault(workloads.get(name), []).append(name)
    repeated = [names for names in by_workload.values() if len(names) > 1]
    assert not repeated, f"{path.name} names one workload more than once: {repeated}"


def test_a_workload_named_twice_is_tuned_once_with_a_warning(tmp_path):
    from tc_autotune.tuning.duplicates import DuplicateWorkloadWarning

    path = tmp_path / "job.toml"
    path.write_text('log = "logs/n.jsonl"\nreport_dir = "reports"\nbest_log_dir = "best"\ntrials = 16\n'
                    'workloads = [{ name = "rfc-1x1-b1" }, { name = "rfc-3x3-b1" },\n'
                    '  { name = "resnet50-res4-1x1-1024-256-b1", trials = 32 },\n'
                    '  { name = "n=1,h=14,c=1024,k=256,r=1" }]\n')
    with pytest.warns(DuplicateWorkloadWarning) as warned:
        job = nightly.load_job(path)
    assert [(e.name, e.trials) for e in job.entries] == [("rfc-1x1-b1", 32), ("rfc-3x3-b1", 16)]
    assert len(warned) == 2 and all("tuned once, as 'rfc-1x1-b1'" in str(w.message) for w in warned)
    SyntheticMeasurer.calls.clear()
    report = run(job)
    assert [r.name for r in report.rows] == ["rfc-1x1-b1", "rfc-3x3-b1"]
    measured = [w for w, _ in SyntheticMeasurer.calls]
    assert measured.count(workloads.get("rfc-1x1-b1")) == 32  # one tune, of the most trials asked


def test_shipped_dense_job_lists_every_llm_shape_as_a_dense_task():
    from tc_autotune.workloads import dense as dense_workloads
    from tc_autotune.core import tasks

    job = nightly.load_job(Path(__file__).resolve().parent.parent / "tuning_logs" / "llm-dense.toml")
    names = [e.name for e in job.entries]
    expected = [f"llm-{n}x{k}-m{m}" for n, k in dense_workloads.LLM_SHAPES for m in dense_workloads.LLM_TOKENS]
    assert sorted(names) == sorted(expected)
    assert {tasks.of(e.workload).name for e in job.entries} == {"dense_tensorcore.cuda"}


@pytest.mark.parametrize("text,needle", [
    ("workloads = [", "not valid TOML"),
    ('workloads = [{ name = "nope" }]', "unknown workload preset 'nope'"),
    ('workloads = []', "non-empty list"),
    ('budget_minutes = -1\nworkloads = ["tutorial"]', "budget_minutes must be a positive number"),
    ('workloads = [{ name = "tutorial", trials = 0 }]', "trials of 'tutorial'"),
    ('colour = 1\nworkloads = ["tutorial"]', "unknown key(s) colour"),
])
def test_bad_job_files_exit_2_with_one_line(tmp_path, text, needle):
    path = tmp_path / "job.toml"
    path.write_text(text)
    with pytest.raises(nightly.JobError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        nightly.load_job(path)
    proc = run_completed(str(SCRIPT), str(path), timeout=120)
    assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_second_run_is_refused_with_code_5(tmp_path):
    job = nightly.load_job(write_job(tmp_path))
    with nightly.job_lock(job):
        with pytest.raises(nightly.LockedError):
            with nightly.job_lock(job):
                pass
        proc = run_completed(str(SCRIPT), str(job.path), "--report-only", timeout=120)
        assert proc.returncode == 5 and "another nightly run holds" in proc.stderr
    with nightly.job_lock(job):  # released: the next run gets it
        pass


def test_run_tunes_compacts_and_reports(tmp_path):
    job = nightly.load_job(write_job(tmp_path))
    report = run(job)
    assert [r.trials_run for r in report.rows] == [16, 16] and not report.failed
    saved = list(records.load(job.log))
    retimes = [r for r in saved if r.result.error_msg == "nightly re-time"]
    assert len(saved) - len(retimes) == 32 and len(retimes) == 4  # best and default of each, re-timed
    best_log = job.best_log_dir / "synthetic-gpu.jsonl"
    best = list(records.load(best_log))
    assert len(best) == 2 and {r.workload for r in best} == {e.workload for e in job.entries}
    for entry in job.entries:
        assert records.load_best(best_log, entry.workload)[1] == records.load_best(job.log, entry.workload)[1]
    reports = sorted(job.report_dir.glob("report-*.json"))
    data = json.loads(reports[-1].read_text())
    assert [row["baseline_ratio"] for row in data["rows"]] == [0.5, 0.5] and "cudnn_ratio" not in data["rows"][0]
    assert [(row["baseline"], row["baseline_s"], row["timer"]) for row in data["rows"]] == [("cuDNN", 5e-5, TIMER)] * 2
    markdown = reports[-1].with_suffix(".md").read_text()
    assert "| rfc-3x3-b1 | Synthetic GPU | 16 | 16 | 0 |" in markdown
    assert "- rfc-3x3-b1 (sm_90): added, - -> " in markdown


def test_the_stored_zero_shot_model_follows_the_best_logs_the_run_merged(tmp_path, monkeypatch):
    """A job whose best logs are the shipped logs (tuning_logs/nightly.toml's): after the merge,
    the zero-shot model stored beside them is retrained from them (builds only read it)."""
    from tc_autotune.search import zero_shot
    from tc_autotune.tuning import zero_shot_train

    job = nightly.load_job(write_job(tmp_path))
    job.best_log_dir.mkdir(parents=True)
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(job.best_log_dir))
    run(job)
    assert zero_shot_train.stored_is_current() == (True, str(job.best_log_dir / zero_shot.MODEL_FILE))
    models, why = zero_shot.stored_models()
    assert why is None and {(m.scope, m.gpu.name) for m in models} == {("arch", "generic sm_90"), ("gpu", GPU.name)}
    assert set(models[0].best) == {e.workload for e in job.entries}


def test_budget_stops_cleanly_after_the_current_batch(tmp_path):
    job = nightly.load_job(write_job(tmp_path, trials=64))
    clock = iter(range(0, 10_000, 400))  # each look at the clock: 400 s later; budget 600 s
    report = run(job, now=lambda: float(next(clock)))
    assert report.rows[0].trials_run < 64 and report.rows[1].status == "not reached"
    lines = job.log.read_text().splitlines()
    assert len(lines) == report.rows[0].trials_run + 2  # and the re-timed best and default
    assert all(records.Record.from_json(line) for line in lines)  # every record whole


def test_report_only_needs_no_gpu_and_shows_the_change(tmp_path):
    job = nightly.load_job(write_job(tmp_path))
    run(job, retime=fixed_retime({str(workloads.get("rfc-3x3-b1")): 2e-4}))
    proc = run_completed(str(SCRIPT), str(job.path), "--report-only", timeout=120)
    assert proc.returncode == 0, proc.stderr
    best = records.load_best(job.log, "rfc-3x3-b1")[1]
    assert f"{best * 1e3:.4f}" in proc.stdout and "report-only" in proc.stdout
    change = best / 2e-4 - 1
    assert f"{change:+.1%}" in proc.stdout


def test_regression_after_remeasuring_exits_6(tmp_path):
    job = nightly.load_job(write_job(tmp_path, names=("rfc-3x3-b1",)))
    spec = str(workloads.get("rfc-3x3-b1"))
    assert not run(job, retime=fixed_retime({spec: 1.0e-4})).failed
    assert not run(job, retime=fixed_retime({spec: 1.04e-4})).failed  # within the 5% noise
    calls = []

    def slower_once(workload, config):  # slow, but the confirmation run is fine: noise
        calls.append(1)
        return Retimed(1.5e-4 if len(calls) == 1 else 1.0e-4)

    assert not run(job, retime=slower_once).failed and len(calls) == 2
    report = run(job, retime=fixed_retime({spec: 1.5e-4}))
    assert [r.status for r in report.failed] == ["regression"]


def test_no_valid_record_is_a_failure(tmp_path, monkeypatch):
    job = nightly.load_job(write_job(tmp_path, names=("rfc-3x3-b1",)))

    class AllCrash(SyntheticMeasurer):
        def __call__(self, configs):
            from tc_autotune.measure.measurer import MeasureErrorNo, MeasureResult
            return [MeasureResult((), MeasureErrorNo.RUN_ERROR, "crash") for _ in configs]

    report = nightly.run_nightly(job, gpu=GPU, measurer_factory=AllCrash, retime=fixed_retime({}))
    assert [r.status for r in report.failed] == ["no valid record"]


def test_cli_exit_6_when_a_workload_has_no_valid_record(tmp_path):
    job = nightly.load_job(write_job(tmp_path, names=("rfc-3x3-b1", "rfc-1x1-b1")))
    run(job)
    for log in (job.log, job.best_log_dir / "synthetic-gpu.jsonl"):
        lines = log.read_text().splitlines()
        log.write_text("\n".join(l for l in lines if '"n=1,h=14,w=14,c=1024' not in l) + "\n")
    proc = run_completed(str(SCRIPT), str(job.path), "--report-only", timeout=120)
    assert proc.returncode == 6 and "rfc-1x1-b1 (no valid record)" in proc.stderr


# ---- never lose a record, never mislead (issue 16) and never slower than untuned (issue 11) ----
REPO = Path(__file__).resolve().parent.parent


def test_a_short_run_never_removes_the_best_logs_records(tmp_path):
    """Finding 1: with 'NVIDIA H200' and a budget that reaches one workload, compaction used
    to rewrite the shipped 28-record log from the nightly log alone (3 records left)."""
    h200 = GpuInfo(name="NVIDIA H200", arch="sm_90", sm_count=132)
    first = "resnet50-res2-3x3-64-64-b1"  # its shipped record is stale: any current one replaces it
    job = nightly.load_job(write_job(tmp_path, names=(first, "rfc-1x1-b1", "tutorial")))
    shipped = REPO / "tuning_logs" / "nvidia-h200.jsonl"
    best_log = job.best_log_dir / "nvidia-h200.jsonl"
    best_log.parent.mkdir(parents=True)
    from dataclasses import replace  # the first workload's record made stale: any current one wins

    held = [replace(r, template_version=None, source_hash=None, code_hash=None) if r.workload == workloads.get(first)
            else r for r in records.load(shipped)]
    records.append(best_log, held)
    before = best_log.read_bytes()
    clock = iter(range(0, 10_000, 400))  # budget 600 s: only the first workload is reached
    report = nightly.run_nightly(job, gpu=h200, measurer_factory=SyntheticMeasurer,
                                 retime=fixed_retime({}), now=lambda: float(next(clock)))
    assert [r.status for r in report.rows] == ["ok", "not reached", "not reached"]
    after = list(records.load(best_log))
    assert len(after) >= len(held) - 1  # at most the one workload's record was replaced
    kept = {records.identity(r) for r in after}
    lost = [r for r in held if records.identity(r) not in kept]
    assert len(lost) == 1 and lost[0].workload == workloads.get(first) and lost[0].stale
    assert best_log.with_name("nvidia-h200.jsonl.bak").read_bytes() == before
    assert any(line.startswith(f"{first} (sm_90): replaced stale") for line in report.best_log_changes)
    assert "Best log:" in report.to_markdown()


def test_report_only_on_a_fresh_clone_reports_from_the_shipped_logs(tmp_path):
    """Finding 6: no nightly log (it is git-ignored) used to give 30 empty rows and exit 6."""
    job_path = tmp_path / "nightly.toml"
    job_path.write_text((REPO / "tuning_logs" / "nightly.toml").read_text())
    for log in (REPO / "tuning_logs").glob("*.jsonl"):
        (tmp_path / log.name).write_bytes(log.read_bytes())
    from dataclasses import replace

    in_job = next(r for r in records.load(tmp_path / "nvidia-h200.jsonl") if r.workload == workloads.get("tutorial"))
    stale = replace(in_job, template_version=None, source_hash=None, code_hash=None)
    records.append(tmp_path / "nvidia-h200.jsonl", [stale])
    proc = run_completed(str(SCRIPT), str(job_path), "--report-only", timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "no nightly log" in line]
    assert len(said) == 1 and "reporting from the best logs" in said[0]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| tutorial |")]
    assert {row.split(" | ")[1] for row in rows} == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    h100 = next(row for row in rows if "H100" in row)  # the H100's current tuned record, as the log has it
    shipped = next(r for r in records.load(tmp_path / "nvidia-h100-80gb-hbm3.jsonl") if r.workload == workloads.get("tutorial"))
    assert " | ok |" in h100 and f" | {shipped.seconds * 1e3:.4f} | " in h100
    assert "Stale records" in proc.stdout  # a stale record is named, not applied


def test_a_best_that_loses_to_the_default_is_a_failure(tmp_path):
    job = nightly.load_job(write_job(tmp_path, names=("rfc-3x3-b1",)))
    calls = []

    def loses(workload, config):
        calls.append(1)
        return Retimed(2e-4, 1e-4, 5e-5)

    report = run(job, retime=loses)
    assert [r.status for r in report.failed] == ["slower than default"] and len(calls) == 2
    assert report.rows[0].default_ratio == pytest.approx(0.5)
    # the re-timings are records: the best log now holds the default, which won
    from tc_autotune.templates.registry import conv2d_space

    best_log = job.best_log_dir / "synthetic-gpu.jsonl"
    config, seconds = records.load_best(best_log, workloads.get("rfc-3x3-b1"))
    assert config == conv2d_space(workloads.get("rfc-3x3-b1"), GPU).default_config() and seconds == 1e-4
    assert run(job, retime=lambda w, c: Retimed(1.02e-4, 1e-4, 5e-5)).failed == []  # within noise


def test_stale_records_are_counted_and_listed(tmp_path):
    from dataclasses import replace

    job = nightly.load_job(write_job(tmp_path, names=("rfc-3x3-b1",)))
    run(job)
    first = next(records.load(job.log))
    records.append(job.log, [replace(first, template_version=None, source_hash=None, code_hash=None)])
    report = nightly.run_nightly(job, gpu=GPU, report_only=True)
    assert report.rows[0].stale == 1
    assert "Stale records (their kernel's code changed or cannot be checked" in report.to_markdown()


def test_toml_jobs_read_without_tomllib(tmp_path, monkeypatch):
    """Python 3.10 has no tomllib: the job file is read with tomli (a dependency there)."""
    import tomllib
    import types

    monkeypatch.setitem(sys.modules, "tomllib", None)  # import tomllib now fails, as on 3.10
    monkeypatch.setitem(sys.modules, "tomli", types.SimpleNamespace(loads=tomllib.loads))
    job = nightly.load_job(write_job(tmp_path))
    assert [e.name for e in job.entries] == ["rfc-3x3-b1", "rfc-1x1-b1"]
    setup = (REPO / "setup.cfg").read_text()
    assert 'tomli>=1.1; python_version < "3.11"' in setup and "python_requires = >=3.10" in setup


@pytest.mark.parametrize("names, label", [(("rfc-1x1-b1",), "cuDNN"), (("llm-4096x4096-m16",), "cuBLAS"),
                                          (("rfc-1x1-b1", "llm-4096x4096-m16"), "cuBLAS/cuDNN")])
def test_the_report_names_the_baseline_it_timed(tmp_path, names, label):
    report = run(nightly.load_job(write_job(tmp_path, names=names, trials=4)))
    assert [r.baseline for r in report.rows] == [("cuBLAS" if n.startswith("llm") else "cuDNN") for n in names]
    header = report.to_markdown().splitlines()[4]
    assert f"| {label} ms | {label} / ours |" in header


# ---- like with like, and a bad previous report (issue 33) -------------------------------------
def test_retimes_carry_their_timer_and_the_best_log_keeps_each_timers_figure(tmp_path):
    job = nightly.load_job(write_job(tmp_path, names=("rfc-3x3-b1",)))
    run(job)
    assert {r.timer for r in records.load(job.log)} == {CUDA_TIMER}  # the tuner's and the re-times': one timer
    (tmp_path / "other").mkdir()
    job = nightly.load_job(write_job(tmp_path / "other", names=("rfc-3x3-b1",)))
    run(job, retime=lambda w, c: Retimed(1e-4, 1e-3, 5e-5, timer=CUDA_GRAPH))  # a re-time by another timer
    retimes = [r for r in records.load(job.log) if r.result.error_msg == "nightly re-time"]
    assert [r.timer for r in retimes] == [CUDA_GRAPH, CUDA_GRAPH]
    assert all(r.timer == CUDA_TIMER for r in records.load(job.log) if r not in retimes)
    best = list(records.load(job.best_log_dir / "synthetic-gpu.jsonl"))  # the winner by each timer
    assert sorted(r.timer for r in best) == [CUDA_GRAPH, CUDA_TIMER] and len({r.config["index"] for r in best}) == 1


def _previous(job, rows, gpu=GPU.name, name="report-99990101-000000-000000.json"):
    job.report_dir.mkdir(parents=True, exist_ok=True)
    path = job.report_dir / name
    path.write_text(rows if isinstance(rows, str) else json.dumps({"gpu": gpu, "rows": rows}))
    return path


def test_no_regression_is_called_against_a_figure_of_another_timer(tmp_path):
    job = nightly.load_job(write_job(tmp_path, names=("rfc-3x3-b1",)))
    spec = str(workloads.get("rfc-3x3-b1"))
    _previous(job, [{"workload": spec, "retimed_s": 1e-4, "timer": "cuda_graph"}])  # graph-replayed by PyTorch
    report = run(job, retime=fixed_retime({spec: 1.5e-4}))  # today's timer: 50% more, unlike
    row = report.rows[0]
    assert not report.failed and row.previous_s == 1e-4 and row.change is None and row.timer == CUDA_TIMER
    _previous(job, [{"workload": spec, "retimed_s": 1e-4}], name="report-99990102-000000-000000.json")
    report = run(job, retime=fixed_retime({spec: 1.5e-4}))  # an old report (no timer): time_evaluator's
    assert not report.failed and report.rows[0].change is None  # not today's timer's either
    _previous(job, [{"workload": spec, "retimed_s": 1e-4}], name="report-99990103-000000-000000.json")
    report = run(job, retime=fixed_retime({spec: 1.5e-4}, timer=TIME_EVALUATOR))  # a time_evaluator re-time: alike
    assert [r.status for r in report.failed] == ["regression"]
    # a report of before the baseline's fields were renamed reads alike (nightly reads the last one)
    _previous(job, [{"workload": spec, "retimed_s": 1e-4, "timer": "cuda_timer", "cudnn_s": 5e-5, "cudnn_ratio": 0.5,
                     "baseline": "cuDNN"}], name="report-99990104-000000-000000.json")
    report = run(job, retime=fixed_retime({spec: 1.5e-4}))
    assert [r.status for r in report.failed] == ["regression"] and report.rows[0].previous_s == 1e-4


def test_ratios_take_the_retime_not_a_record_of_another_timer():
    row = nightly.ReportRow("w", "spec", 10**9, best_s=1e-4, timer="time_evaluator", default_s=9e-5, baseline_s=2e-4)
    assert row.default_ratio is None and row.baseline_ratio is None  # the re-time failed: nothing timed alike
    row.retimed_s, row.timer = 1.2e-4, "cuda_timer"
    assert row.default_ratio == pytest.approx(0.75) and row.baseline_ratio == pytest.approx(2e-4 / 1.2e-4)


@pytest.mark.parametrize("bad", [
    [{"workload": "SPEC", "retimed_s": "fast"}],
    [{"workload": "SPEC", "best_s": True}],
    [{"workload": "SPEC", "best_s": -1.0}],
    [{"workload": "SPEC", "retimed_s": 1e-4, "timer": ["cuda_graph"]}],
    [{"workload": "SPEC", "gpu": 7, "best_s": 1e-4}],
    [{"workload": ["SPEC"], "best_s": 1e-4}],
    "[" * 100_000,
    '{"gpu": "Synthetic GPU", "rows": {"workload": 1}}',
], ids=["str-seconds", "bool-seconds", "negative", "list-timer", "int-gpu", "list-workload", "nested", "rows-dict"])
def test_a_previous_report_with_a_wrong_typed_field_is_treated_as_absent(tmp_path, caplog, bad):
    job = nightly.load_job(write_job(tmp_path, names=("rfc-3x3-b1",)))
    spec = str(workloads.get("rfc-3x3-b1"))
    run(job, retime=fixed_retime({spec: 1e-4}))  # a good report first: the fallback
    path = _previous(job, json.loads(json.dumps(bad).replace("SPEC", spec)) if isinstance(bad, list) else bad)
    with caplog.at_level("WARNING", logger="tc_autotune.tuning.nightly"):
        report = run(job, retime=fixed_retime({spec: 1.5e-4}))
    warned = [r.getMessage() for r in caplog.records if r.name == "tc_autotune.tuning.nightly" and r.levelname == "WARNING"]
    assert len(warned) == 1 and f"skipping unreadable report {path}" in warned[0]
    assert report.rows[0].previous_s == 1e-4 and [r.status for r in report.failed] == ["regression"]


# ---- a best of an older timer, and tonight's tunes (issue 30: one timer) ---------------------
def _old_best(job, seconds, timer=TIME_EVALUATOR):
    """A best log holding one config of rfc-3x3-b1, measured by an older timer (``timer``)."""
    from tc_autotune.templates.registry import conv2d_space
    from tc_autotune.core.results import MeasureResult

    space = conv2d_space(workloads.get("rfc-3x3-b1"), GPU)
    config = space.sample(40, seed=9)[-1]
    best_log = job.best_log_dir / "synthetic-gpu.jsonl"
    records.append(best_log, [records.stamped(
        "cuda -arch=sm_90", space, config, MeasureResult((seconds,) * 3, timer=timer), records.make_provenance(GPU))])
    return config, best_log


def retime_by_config(seconds: dict, other: float = 1.6e-4):
    """A re-time of today's timer: ``seconds[config]`` for the configs given, ``other`` else; notes each config."""
    def retime(workload, config):
        retime.configs.append(config)
        return Retimed(seconds.get(config, other), 1e-2, 5e-5)

    retime.configs = []
    return retime


@pytest.mark.parametrize("old_s", [1e-3, 5e-5], ids=["new tune looks faster", "old best looks faster"])
def test_a_new_tune_displaces_a_best_only_an_older_timer_measured(tmp_path, old_s):
    """The best log's holder was measured by time_evaluator only; tonight's tune and re-times are
    today's timer's.  No figure in common would keep the holder whatever the tune found, so the
    holder is re-timed by today's timer (once): then the two are compared like with like, and the
    faster wins, whichever looked faster across timers."""
    job = nightly.load_job(write_job(tmp_path, names=("rfc-3x3-b1",)))
    old, best_log = _old_best(job, old_s)
    retime = retime_by_config({old: 5e-3})  # today's timer: the holder is slower than anything tuned tonight
    report = run(job, retime=retime)
    assert old in retime.configs and not report.failed
    (change,) = report.best_log_changes
    assert " faster, " in change and change.endswith("(cuda_timer)"), change
    held = list(records.load(best_log))
    assert {r.timer for r in held} == {CUDA_TIMER} and records.load_best(best_log, "rfc-3x3-b1")[0] != old


def test_a_best_of_an_older_timer_that_is_faster_stays_and_is_re_timed_once(tmp_path):
    job = nightly.load_job(write_job(tmp_path, names=("rfc-3x3-b1",)))
    old, best_log = _old_best(job, 1e-3)
    retime = retime_by_config({old: 1e-4})  # by today's timer the holder beats tonight's tune
    report = run(job, retime=retime)
    assert retime.configs.count(old) == 1 and report.best_log_changes == [
        f"rfc-3x3-b1 (sm_90): kept, 1.0000 ms -> 1.0000 ms"]
    assert records.load_best(best_log, "rfc-3x3-b1")[0] == old
    retime = retime_by_config({old: 1e-4})
    report = run(job, retime=retime)  # the next night it has a figure of today's timer: the best, re-timed as such
    assert retime.configs.count(old) == 1 and report.rows[0].retimed_s == 1e-4 and not report.failed
    assert records.load_best(best_log, "rfc-3x3-b1")[0] == old


def test_a_re_time_the_timer_cannot_make_is_a_failure_and_the_night_goes_on(tmp_path, caplog):
    """A kernel that faults when replayed (the timer's one error): that workload's row fails,
    the other is re-timed, and the merge still folds in what the night tuned."""
    from tc_autotune.backends.cuda.timer import TimerError

    job = nightly.load_job(write_job(tmp_path))
    spec = str(workloads.get("rfc-3x3-b1"))

    def retime(workload, config):
        if str(workload) == spec:
            raise TimerError("cuGraphLaunch failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")
        return Retimed(1e-4, 1e-3, 5e-5)

    with caplog.at_level("ERROR", logger="tc_autotune.tuning.nightly"):
        report = run(job, retime=retime)
    assert [(r.name, r.status) for r in report.failed] == [("rfc-3x3-b1", "re-time failed")]
    assert report.rows[1].status == "ok" and report.rows[1].retimed_s == 1e-4
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in caplog.text
    assert {r.workload for r in records.load(job.best_log_dir / "synthetic-gpu.jsonl")} == {
        e.workload for e in job.entries}  # both merged
