"""Zero-shot configs for untuned workloads (tc_autotune.search.zero_shot): CPU only, shipped logs.

Validity, determinism (repeat calls, cold vs warm cache), the GPU -> arch fallback, no data,
the disk cache (reused, invalidated by a log's content), the held-out shapes kept out of
training and out of every shipped log, and a leave-one-workload-out sanity check of the
model's ranking against the H100 history.
"""

from __future__ import annotations

import dataclasses
import math
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from tc_autotune.database import records
from tc_autotune.search import zero_shot
from tc_autotune.database.apply import packaged_logs_dir
from tc_autotune.backends.cuda.gpu import GpuInfo
from tc_autotune.tuning.nightly import load_job
from tc_autotune.core.space import conv2d_space
from tc_autotune.workloads.conv2d import Conv2dWorkload, get

H100 = GpuInfo("NVIDIA H100 80GB HBM3", "sm_90", 132)
H200_NAME = "NVIDIA H200"
SHIPPED = packaged_logs_dir()
NVCC_H100 = SHIPPED / "history" / "nvidia-h100-20261122-nvcc.jsonl"


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("zero_shot_cache")


@pytest.fixture(autouse=True)
def isolated(monkeypatch, module_cache):
    """The shipped logs of this checkout, a cache shared by this module, nothing in memory."""
    monkeypatch.delenv("TC_AUTOTUNE_SHIPPED_LOGS", raising=False)
    monkeypatch.setenv("TC_AUTOTUNE_CACHE_DIR", str(module_cache))
    zero_shot.clear_memory_cache()
    yield
    zero_shot.clear_memory_cache()


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("TC_AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def count_training(monkeypatch) -> list:
    """Calls of train_model (still training)."""
    calls = []
    real = zero_shot.train_model

    def spy(data):
        calls.append(data)
        return real(data)

    monkeypatch.setattr(zero_shot, "train_model", spy)
    return calls


def random_workloads(n: int, seed: int = 11) -> list[Conv2dWorkload]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        r = rng.choice([1, 1, 3, 3, 5, 7])
        stride = rng.choice([1, 1, 2])
        h = rng.randint(max(r, 4), 64)
        c = rng.choice([3, 16, 32, 64, 96, 100, 128, 192, 255, 256, 384, 512, 1024, 2048,
                        rng.randint(1, 700)])
        k = rng.choice([8, 32, 64, 65, 128, 160, 255, 256, 512, 1000, 1024, 2048, rng.randint(1, 700)])
        out.append(Conv2dWorkload(rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256]), h, h, c, k, r, r,
                                  stride=stride, padding=r // 2,
                                  out_dtype=rng.choice(["float32", "float16"])))
    return out


def copy_logs(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    for name in names:
        shutil.copy(SHIPPED / name, folder / Path(name).name)
    return folder


# ---- picks ----------------------------------------------------------------------------------------
def test_picks_valid_configs_for_random_workloads():
    for workload in random_workloads(20):
        space = conv2d_space(workload, H100)
        picks = zero_shot.zero_shot_configs(workload, H100, k=4)
        assert picks, workload
        assert len(picks) <= 4 and len({space.index(c) for c in picks}) == len(picks)
        for config in picks:
            assert space.why_invalid(config) is None, (workload, config)
        assert zero_shot.zero_shot_config(workload, H100) == picks[0]


def test_deterministic_across_calls_and_cold_vs_warm_cache(fresh_cache, count_training):
    specs = ["n=3,h=20,c=100,k=200,r=3,pad=1", "n=64,h=28,c=256,k=256,r=3,pad=1",
             "n=1,h=9,c=17,k=33,r=5,pad=2,out_dtype=float16"]
    cold = [zero_shot.zero_shot_configs(s, H100) for s in specs]
    assert len(count_training) == 1  # one model for every workload
    again = [zero_shot.zero_shot_configs(s, H100) for s in specs]
    zero_shot.clear_memory_cache()
    warm = [zero_shot.zero_shot_configs(s, H100) for s in specs]  # from the disk cache
    assert len(count_training) == 1
    assert cold == again == warm
    assert all(len(p) == 8 for p in cold)


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="k must be"):
        zero_shot.zero_shot_configs("tutorial", H100, k=0)


def test_target_workload_records_are_not_trained_on(monkeypatch, fresh_cache):
    seen = []
    real = zero_shot.training_set

    def spy(recs, gpu, exclude=()):
        seen.append(frozenset(exclude))
        return real(recs, gpu, exclude)

    monkeypatch.setattr(zero_shot, "training_set", spy)
    tutorial = get("tutorial")
    picks = zero_shot.zero_shot_configs(tutorial, H100)
    assert picks and all(conv2d_space(tutorial, H100).is_valid(c) for c in picks)
    model = zero_shot.load_model(H100, exclude=[tutorial])
    assert tutorial not in model.best
    assert len(seen) == 2 and tutorial not in seen[0] and tutorial in seen[1]
    assert tutorial in zero_shot.load_model(H100).best  # the shared model knows it


# ---- training data ------------------------------------------------------------------------------
def test_gpu_name_first_then_arch():
    named = zero_shot.load_model(H100)
    assert named.scope == "gpu" and named.sources == [H100.name]
    other = GpuInfo("NVIDIA H800 PCIe", "sm_90", 114)
    model = zero_shot.load_model(other)
    assert model.scope == "arch" and set(model.sources) == {H100.name, H200_NAME}
    assert model.rows > named.rows  # the H200's records too
    workload = get("n=8,h=30,c=96,k=160,r=3,pad=1")
    picks = zero_shot.zero_shot_configs(workload, other)
    assert picks and all(conv2d_space(workload, other).is_valid(c) for c in picks)


def test_no_data_gives_nothing(tmp_path):
    a100 = GpuInfo("NVIDIA A100-SXM4-80GB", "sm_80", 108, max_smem_per_block=163 * 1024)
    assert zero_shot.zero_shot_configs("tutorial", a100) == []
    assert zero_shot.zero_shot_config("tutorial", a100) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert zero_shot.zero_shot_configs("tutorial", H100, logs=empty) == []
    assert zero_shot.zero_shot_configs("tutorial", H100, logs=tmp_path / "missing") == []


def test_records_outside_the_space_are_skipped(tmp_path, caplog):
    record = next(iter(records.load(NVCC_H100)))
    bad_index = dataclasses.replace(record, config={**record.config, "index": record.config["index"] + 1})
    data = zero_shot.training_set([record, bad_index], H100)
    assert data.rows == 1
    assert "outside the current space" in caplog.text


# ---- the held-out shapes --------------------------------------------------------------------------
def test_heldout_job_file_covers_the_brief():
    job = load_job(zero_shot.HELDOUT_JOB)
    workloads = [e.workload for e in job.entries]
    assert len(workloads) >= 10 and len(set(workloads)) == len(workloads)
    assert set(workloads) == zero_shot.heldout_workloads()
    assert all(w.dtype == "float16" for w in workloads)
    batches = {w.batch for w in workloads}
    assert min(batches) == 1 and max(batches) >= 128
    assert {1, 3, 5, 7} <= {w.kernel_h for w in workloads} | {w.kernel_w for w in workloads}
    assert any(w.stride == (2, 2) for w in workloads)
    assert any(w.in_channels % 2 or w.out_channels % 2 for w in workloads)
    assert any(max(w.in_channels, w.out_channels) >= 1024 for w in workloads)
    assert any(w.out_dtype == "float16" for w in workloads)
    assert job.entries[0].trials == 32 and job.budget_s == 3600
    assert job.log == (SHIPPED / "heldout" / "heldout.jsonl").resolve()
    assert job.best_log_dir == (SHIPPED / "heldout").resolve()
    assert job.report_dir == (SHIPPED / "heldout" / "reports").resolve()


def test_heldout_workloads_are_in_no_shipped_log():
    heldout = zero_shot.heldout_workloads()
    own = (SHIPPED / "heldout").resolve()  # where measuring the held-out job itself writes
    logs = [p for p in sorted(SHIPPED.rglob("*.jsonl")) if own not in p.resolve().parents]
    assert set(zero_shot.shipped_log_files()) <= set(logs)
    assert not heldout & {r.workload for r in records.load(logs)}


def test_heldout_workloads_are_never_trained_on(tmp_path):
    heldout = sorted(zero_shot.heldout_workloads(), key=str)
    template = next(iter(records.load(NVCC_H100)))
    planted = [dataclasses.replace(template, workload=w) for w in heldout]
    folder = copy_logs(tmp_path, "history/nvidia-h100-20261122-nvcc.jsonl")
    records.append(folder / "planted.jsonl", planted)
    assert set(heldout) <= {r.workload for r in records.load(folder)}
    data = zero_shot.training_set(records.load(folder), H100, zero_shot.heldout_workloads())
    assert not set(data.best) & set(heldout)
    for logs in (folder, None):  # the API path, with planted records and with the shipped logs
        model = zero_shot.load_model(H100, logs)
        assert model is not None and not set(model.best) & set(heldout)
        arch_model = zero_shot.load_model(GpuInfo("NVIDIA H800 PCIe", "sm_90", 114), logs)
        assert not set(arch_model.best) & set(heldout)


# ---- the cache ------------------------------------------------------------------------------------
def test_cache_is_reused_across_processes(fresh_cache, count_training, monkeypatch):
    first = zero_shot.zero_shot_configs("n=16,h=20,c=64,k=96,r=3,pad=1", H100)
    assert len(count_training) == 1
    assert len(list(fresh_cache.glob("zero_shot/*.ubj"))) == 1
    assert len(list(fresh_cache.glob("zero_shot/*.json"))) == 1
    assert not list(fresh_cache.glob("zero_shot/.*"))  # no temporary file left behind
    zero_shot.clear_memory_cache()  # as a new process would

    def no_training(data):
        raise AssertionError("trained although the cache holds the model")

    monkeypatch.setattr(zero_shot, "train_model", no_training)
    assert zero_shot.zero_shot_configs("n=16,h=20,c=64,k=96,r=3,pad=1", H100) == first


def test_cache_is_invalidated_by_a_log_change(fresh_cache, count_training, tmp_path):
    folder = copy_logs(tmp_path, "nvidia-h100-80gb-hbm3.jsonl", "history/nvidia-h100-20261122-nvcc.jsonl")
    zero_shot.zero_shot_configs("n=8,h=28,c=128,k=128,r=3,pad=1", H100, logs=folder)
    zero_shot.clear_memory_cache()
    zero_shot.zero_shot_configs("n=8,h=28,c=128,k=128,r=3,pad=1", H100, logs=folder)
    assert len(count_training) == 1
    record = next(iter(records.load(NVCC_H100)))
    records.append(folder / "nvidia-h100-80gb-hbm3.jsonl",
                   [dataclasses.replace(record, result=dataclasses.replace(record.result, timestamp=1.0))])
    zero_shot.zero_shot_configs("n=8,h=28,c=128,k=128,r=3,pad=1", H100, logs=folder)
    assert len(count_training) == 2
    # renaming a log changes nothing: the key is the logs' content
    (folder / "nvidia-h100-80gb-hbm3.jsonl").rename(folder / "renamed.jsonl")
    zero_shot.clear_memory_cache()
    zero_shot.zero_shot_configs("n=8,h=28,c=128,k=128,r=3,pad=1", H100, logs=folder)
    assert len(count_training) == 2


def test_unreadable_cache_entry_is_retrained(fresh_cache, count_training, caplog):
    zero_shot.load_model(H100)
    (model_file,) = fresh_cache.glob("zero_shot/*.ubj")
    model_file.write_bytes(b"not a model")
    zero_shot.clear_memory_cache()
    assert zero_shot.load_model(H100) is not None
    assert len(count_training) == 2 and "unreadable cache entry" in caplog.text


def test_shipped_logs_env_override(monkeypatch, tmp_path):
    folder = copy_logs(tmp_path, "history/nvidia-h100-20261122-nvcc.jsonl")
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(folder))
    assert zero_shot.shipped_log_files() == [folder / "nvidia-h100-20261122-nvcc.jsonl"]
    assert zero_shot.load_model(H100).rows == 480  # every record of the nvcc history fits


# ---- distance and quality -------------------------------------------------------------------------
def test_workload_distance():
    a, b = get("rfc-3x3-b32"), get("rfc-3x3-b256")
    assert zero_shot.workload_distance(a, a) == 0
    assert zero_shot.workload_distance(a, b) == zero_shot.workload_distance(b, a) > 0
    assert zero_shot.workload_distance(a, get("rfc-3x3-b64")) < zero_shot.workload_distance(a, b)
    assert zero_shot.workload_distance(a, get("rfc-3x3-b32").replace(out_dtype="float16")) > 0


def test_spearman():
    assert zero_shot.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert zero_shot.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(zero_shot.spearman([1, 1, 1], [1, 2, 3]))


def test_leave_one_workload_out_ranks_measured_configs():
    """Trained without a seed workload, the model still orders that workload's measured H100
    configs (a loose bound: the figures themselves are in the module's report)."""
    results = zero_shot.leave_one_out()
    assert [r.workload for r in results] == list(zero_shot.SEED_WORKLOADS)
    assert all(r.measured >= 32 for r in results)
    assert np.mean([r.spearman for r in results]) > 0.3
    assert np.median([r.top_ratio for r in results]) > 0.5
