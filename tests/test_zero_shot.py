"""Zero-shot configs for untuned workloads (tc_autotune.search.zero_shot): the build side, CPU only.

Picks come from the model stored beside the shipped logs and are never trained here: valid,
deterministic, the GPU -> arch fallback, no data, a missing, unreadable or stale model (the
default config, one warning), the shipped model current for the shipped logs and blind to the
held-out shapes, and a build of a never-tuned shape that leaves xgboost unimported.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tc_autotune.database import records
from tc_autotune.search import zero_shot
from tc_autotune.tuning import zero_shot_train
from tc_autotune.api.apply import NoTunedConfigWarning, choose_config, packaged_logs_dir
from tc_autotune.search.cost_model import XGBCostModel
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.backends.cuda.gpu import GpuInfo, gpu_for_arch
from tc_autotune.tuning.nightly import load_job
from tc_autotune.templates.registry import conv2d_space
from tc_autotune.workloads import get
from tc_autotune.workloads.conv2d import Conv2dWorkload

REPO = Path(__file__).resolve().parent.parent
H100 = GpuInfo("NVIDIA H100 80GB HBM3", "sm_90", 132)
H200_NAME = "NVIDIA H200"
SHIPPED = packaged_logs_dir()
LAB = zero_shot_train.HELDOUT_JOB.parent  # the maintainers' studies: a checkout's lab/
UNTUNED = "n=8,h=52,w=52,c=256,k=255,r=1,s=1,stride=1,pad=0"  # a held-out shape: in no log


@pytest.fixture(autouse=True)
def never_trains(monkeypatch):
    """The shipped logs of this checkout; any training on the build side fails the test."""
    monkeypatch.delenv("TC_AUTOTUNE_SHIPPED_LOGS", raising=False)

    def no_training(*args, **kwargs):
        raise AssertionError("the build side trained a model")

    monkeypatch.setattr(XGBCostModel, "fit", no_training)
    monkeypatch.setattr(zero_shot_train, "train_booster", no_training)


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


def shipped_copy(tmp_path, monkeypatch, edit=None) -> Path:
    """The shipped logs' folder with the stored model only (``edit`` changes its document),
    made the shipped logs."""
    folder = tmp_path / "shipped"
    folder.mkdir(parents=True)
    doc = json.loads((SHIPPED / zero_shot.MODEL_FILE).read_bytes())
    if edit is not None:
        edit(doc)
    (folder / zero_shot.MODEL_FILE).write_text(json.dumps(doc))
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(folder))
    return folder


def default_with_one_warning(workload, gpu, match: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = choose_config(get(workload), gpu)
    assert choice.source == "default" and choice.config == conv2d_space(get(workload), gpu).default_config()
    assert len(caught) == 1 and caught[0].category is NoTunedConfigWarning, [str(c.message) for c in caught]
    assert "using the default config" in str(caught[0].message) and match in str(caught[0].message)
    return str(caught[0].message)


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


def test_deterministic_across_calls_and_reads():
    specs = ["n=3,h=20,c=100,k=200,r=3,pad=1", "n=64,h=28,c=256,k=256,r=3,pad=1",
             "n=1,h=9,c=17,k=33,r=5,pad=2,out_dtype=float16"]
    first = [zero_shot.zero_shot_configs(get(s), H100) for s in specs]
    again = [zero_shot.zero_shot_configs(get(s), H100) for s in specs]
    zero_shot._read.cache_clear()  # as a new process would: the file read again
    reread = [zero_shot.zero_shot_configs(get(s), H100) for s in specs]
    assert first == again == reread
    assert all(len(p) == 8 for p in first)


def test_the_search_holds_the_knobs_no_record_has_moved():
    """consumer_n and deep_ring are valid for a dense with an (N, K) weight, but no tuned record has
    them yet: the zero-shot search holds them at 0 (``Template.zero_shot_held``), even where its seeds
    have them (the tuner's starting tilings), and gives its candidates as the full table's indices."""
    from dataclasses import replace

    from tc_autotune.core import tasks
    from tc_autotune.search import held_knobs

    wl = get("dense:m=128,n=11008,k=4096,b=nk")
    space = tasks.of(wl).space(wl, H100)
    held = held_knobs.held_space(space)
    assert held.knobs["consumer_n"] == (0,) and held.knobs["deep_ring"] == (0,)
    assert {k: v for k, v in held.knobs.items() if k not in ("consumer_n", "deep_ring")} == {
        k: v for k, v in space.knobs.items() if k not in ("consumer_n", "deep_ring")}
    configs = space.sample(40, seed=3)
    moved = [replace(c, consumer_n=96, deep_ring=1) for c in configs]
    back = held_knobs.to_full(space, held, held_knobs.to_held(space, held, [space.index(c) for c in configs + moved]))
    assert [space.get(int(i)) for i in back] == configs + configs  # a held value becomes the kept one
    seeds = [space.index(c) for c in space.template.starting_configs(space) if c.consumer_n]
    assert seeds and all(space.is_valid(space.get(i)) for i in seeds)
    picks = zero_shot.zero_shot_configs(wl, H100, k=8, seeds=seeds, neighbours=[wl])
    assert picks and all(c.consumer_n == 0 and c.deep_ring == 0 and space.is_valid(c) for c in picks)


def test_a_record_of_a_held_knob_seeds_no_untuned_gemm():
    """The H200's M = 128 tune with consumer_n and deep_ring (lab/ab-20261202/m128b-run): its fastest
    records hold them, which the model cannot rank, so an untuned GEMM near it is seeded by the
    fastest records that hold neither (mapped onto the kept values, they were other kernels)."""
    from tc_autotune.api.apply import neighbour_seeds
    from tc_autotune.core import tasks

    history = REPO / "lab" / "ab-20261202" / "m128b-run" / "history.jsonl"
    if not history.exists():
        pytest.skip("the lab's tuning history is not in this checkout")
    h200 = GpuInfo(H200_NAME, "sm_90", 132, max_smem_per_block=227 * 1024)
    wl = get("dense:m=128,n=14336,k=4096,b=nk")
    space = tasks.of(wl).space(wl, h200)
    fastest = min((r for r in records.load(str(history)) if r.ok and "n=11008" in str(r.workload)),
                  key=lambda r: r.seconds)
    assert space.from_entity(fastest.config).consumer_n > 0  # the tune's winner is a 96-column kernel
    seeds, nearest = neighbour_seeds(wl, h200, logs=((str(history), False),))
    assert seeds and "n=11008" in str(nearest[0])
    assert all(space.get(i).consumer_n == 0 and space.get(i).deep_ring == 0 for i in seeds)


@pytest.mark.parametrize("steps", [80, 7, 1])
def test_the_walk_two_steps_a_batch_is_the_walk_step_by_step(steps):
    """The zero-shot walk checks and scores two steps' candidates per batch (``lookahead``): it must
    visit the same rows with the same scores, and leave the generator where the step-by-step walk
    does, from starts of which some are invalid (they take their first valid move)."""
    import numpy as np

    from tc_autotune.search.anneal import anneal_walk
    from tc_autotune.search.cost_model import positions_from_indices, prior_score

    space = conv2d_space(get("n=3,h=20,c=100,k=200,r=3,pad=1"), H100)
    model, _ = zero_shot.stored_model(H100)
    starts = np.concatenate([zero_shot._random_valid(space, np.random.default_rng(0), 40),
                             positions_from_indices(space, np.random.default_rng(1).integers(0, len(space), 24))])
    for score in (lambda p: model.score(space, p), lambda p: prior_score(space, p)):
        walks = []
        for lookahead in (False, True):
            rng = np.random.default_rng(2)
            pos, scores = anneal_walk(space, score, starts, rng, steps, min_scale=1e-3, lookahead=lookahead)
            walks.append((pos.tolist(), scores.tobytes(), rng.random()))
        assert walks[0] == walks[1] and len(walks[0][0]) > 40


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="k must be"):
        zero_shot.zero_shot_configs(get("tutorial"), H100, k=0)


def test_an_untuned_shape_gets_a_zero_shot_config_without_training():
    with pytest.warns(NoTunedConfigWarning, match="zero-shot config"):
        choice = choose_config(get(UNTUNED), gpu_for_arch("sm_90"))
    assert choice.source == "zero-shot" and choice.config == zero_shot.zero_shot_config(get(UNTUNED), gpu_for_arch("sm_90"))


# ---- which model ----------------------------------------------------------------------------------
def test_gpu_name_first_then_arch():
    named, why = zero_shot.stored_model(H100)
    assert why is None and named.scope == "gpu" and named.sources == [H100.name]
    other = GpuInfo("NVIDIA H800 PCIe", "sm_90", 114)
    model, _ = zero_shot.stored_model(other)
    assert model.scope == "arch" and set(model.sources) == {H100.name, H200_NAME}
    assert model.rows > named.rows  # the H200's records too
    assert zero_shot.stored_model(gpu_for_arch("sm_90"))[0] is model
    workload = get("n=8,h=30,c=96,k=160,r=3,pad=1")
    picks = zero_shot.zero_shot_configs(workload, other)
    assert picks and all(conv2d_space(workload, other).is_valid(c) for c in picks)


def test_a_gpus_own_model_only_where_it_knows_most_of_the_archs_workloads():
    """The shipped H200 model knows 51 of the arch model's 128 workloads: an H200 reads the arch's;
    the H100's knows them all and is read.  The rule is the workloads' share, not the name."""
    models = {(m.scope, m.gpu.name): m for m in zero_shot.stored_models()[0]}
    arch, h100, h200 = models["arch", "generic sm_90"], models["gpu", H100.name], models["gpu", H200_NAME]
    assert len(h200.best) < zero_shot.NAMED_MODEL_COVERAGE * len(arch.best) <= len(h100.best)
    h200_gpu = GpuInfo(H200_NAME, "sm_90", 132)
    assert zero_shot.stored_model(h200_gpu)[0] is arch and zero_shot.stored_model(H100)[0] is h100
    with pytest.MonkeyPatch.context() as patch:  # were the H200's to cover as much, it would be read
        patch.setattr(zero_shot, "NAMED_MODEL_COVERAGE", len(h200.best) / len(arch.best))
        assert zero_shot.stored_model(h200_gpu)[0] is h200


def test_no_data_gives_nothing_and_says_why(tmp_path, monkeypatch):
    a100 = GpuInfo("NVIDIA A100-SXM4-80GB", "sm_80", 108, max_smem_per_block=163 * 1024)
    assert zero_shot.zero_shot_configs(get("tutorial"), a100) == []
    assert zero_shot.zero_shot_config(get("tutorial"), a100) is None
    assert zero_shot.stored_model(a100) == (None, "the shipped histories have no record of sm_80")
    default_with_one_warning("n=3,h=20,c=96,k=160,r=3,pad=1", a100, "no record of sm_80")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(empty))
    assert zero_shot.zero_shot_configs(get("tutorial"), H100) == []
    default_with_one_warning(UNTUNED, H100, "there is no zero-shot model at")
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", "")
    default_with_one_warning(UNTUNED, H100, "there are no shipped logs")


@pytest.mark.parametrize("key,value,reason", [
    ("feature_names", ["log2_chunk"], "trained on other features"),
    ("knob_table", "0" * 16, "its knob table is"),
    ("format", 1, "its format is 1"),
])
def test_a_stale_model_means_the_default_config_and_one_warning(tmp_path, monkeypatch, key, value, reason):
    shipped_copy(tmp_path, monkeypatch, edit=lambda doc: doc.update({key: value}))
    assert zero_shot.stored_model(H100)[0] is None
    message = default_with_one_warning(UNTUNED, H100, reason)
    assert "tc-records --train-zero-shot" in message


def test_an_unreadable_model_means_the_default_config_and_one_warning(tmp_path, monkeypatch):
    folder = shipped_copy(tmp_path, monkeypatch)
    (folder / zero_shot.MODEL_FILE).write_text('{"format": 2, "models": [')
    default_with_one_warning(UNTUNED, H100, "cannot be read")
    shipped_copy(tmp_path / "b", monkeypatch, edit=lambda doc: doc["models"][0].pop("trees"))
    default_with_one_warning(UNTUNED, H100, "cannot be read")


def test_the_stored_file_is_read_once_per_version(tmp_path, monkeypatch):
    folder = shipped_copy(tmp_path, monkeypatch)
    first = zero_shot.stored_model(H100)[0]
    assert zero_shot.stored_model(H100)[0] is first
    path = folder / zero_shot.MODEL_FILE
    doc = json.loads(path.read_bytes())
    doc["knob_table"] = "0" * 16
    path.write_text(json.dumps(doc, indent=2))  # another size: read again, and found stale
    assert zero_shot.stored_model(H100)[0] is None


# ---- the shipped model --------------------------------------------------------------------------
def test_the_shipped_model_is_current_for_the_shipped_logs():
    """After adding or changing a shipped log: `python scripts/records.py --train-zero-shot`."""
    current, detail = zero_shot_train.stored_is_current()
    assert current, detail
    assert zero_shot.stored_models()[1] is None


def test_the_shipped_model_says_what_it_was_trained_from():
    doc = json.loads((SHIPPED / zero_shot.MODEL_FILE).read_bytes())
    assert {k: doc[k] for k in zero_shot.signature()} == zero_shot.signature()
    logs = sorted(f.relative_to(SHIPPED).as_posix() for f in records.shipped_log_files())
    assert [name for name, _ in doc["logs"]] == logs
    assert len(doc["logs_sha256"]) == 64 and doc["training"]["num_rounds"] > 0
    assert [(m["scope"], m["gpu"][0]) for m in doc["models"]] == [
        ("arch", "generic sm_90"), ("gpu", H100.name), ("gpu", H200_NAME)]


def test_the_shipped_model_never_saw_the_heldout_or_validation_shapes():
    excluded = zero_shot_train.excluded_workloads()
    validation = {e.workload for e in load_job(zero_shot_train.VALIDATION_JOB).entries}
    assert zero_shot_train.heldout_workloads() | validation == excluded and validation
    doc = json.loads((SHIPPED / zero_shot.MODEL_FILE).read_bytes())
    assert set(doc["excluded"]) == {str(w) for w in excluded}
    assert not [name for name, _ in doc["logs"] if name.startswith(("heldout/", "validation/"))]
    for model in zero_shot.stored_models()[0]:
        assert model.best and not set(model.best) & excluded


# ---- the held-out shapes --------------------------------------------------------------------------
def test_heldout_job_file_covers_the_brief():
    job = load_job(zero_shot_train.HELDOUT_JOB)
    workloads = [e.workload for e in job.entries]
    assert len(workloads) >= 10 and len(set(workloads)) == len(workloads)
    assert set(workloads) == zero_shot_train.heldout_workloads()
    assert all(w.dtype == "float16" for w in workloads)
    batches = {w.batch for w in workloads}
    assert min(batches) == 1 and max(batches) >= 128
    assert {1, 3, 5, 7} <= {w.kernel_h for w in workloads} | {w.kernel_w for w in workloads}
    assert any(w.stride == (2, 2) for w in workloads)
    assert any(w.in_channels % 2 or w.out_channels % 2 for w in workloads)
    assert any(max(w.in_channels, w.out_channels) >= 1024 for w in workloads)
    assert any(w.out_dtype == "float16" for w in workloads)
    assert job.entries[0].trials == 32 and job.budget_s == 3600
    assert LAB.name == "lab" and LAB.parent == SHIPPED.parent  # beside tuning_logs/, not in it
    assert job.log == (LAB / "heldout" / "heldout.jsonl").resolve()
    assert job.best_log_dir == (LAB / "heldout").resolve()
    assert job.report_dir == (LAB / "heldout" / "reports").resolve()


def test_heldout_and_validation_workloads_are_in_no_shipped_log():
    # the conv model's held-out and validation shapes, and the dense GEMMs that judge the dense pick
    dense = {e.workload for name in ("heldout-dense.toml", "validation-dense.toml")
             for e in load_job(LAB / name).entries}
    assert len(dense) == 20 and all(w.dtype == "float16" for w in dense)
    excluded = zero_shot_train.excluded_workloads() | dense
    logs = sorted(SHIPPED.rglob("*.jsonl"))  # the studies' logs are in lab/, none here
    assert logs and set(zero_shot.shipped_log_files()) <= set(logs)
    assert list((LAB / "heldout").rglob("*.jsonl"))  # where the studies' logs are
    assert not excluded & {r.workload for r in records.load(logs)}


def test_workload_distance():
    a, b = get("rfc-3x3-b32"), get("rfc-3x3-b256")
    assert zero_shot.workload_distance(a, a) == 0
    assert zero_shot.workload_distance(a, b) == zero_shot.workload_distance(b, a) > 0
    assert zero_shot.workload_distance(a, get("rfc-3x3-b64")) < zero_shot.workload_distance(a, b)
    assert zero_shot.workload_distance(a, get("rfc-3x3-b32").replace(out_dtype="float16")) > 0



def test_the_nearest_workloads_are_in_workload_distance_order():
    """``nearest`` takes every distance in one array: the same order (ties by name) as sorting by
    ``workload_distance`` one pair at a time, for the known workloads and random ones."""
    model, _ = zero_shot.stored_model(H100)
    for workload in [*list(model.best)[:20], *random_workloads(30, seed=5)]:
        one_by_one = sorted((w for w in model.best if w != workload),
                            key=lambda w: (zero_shot.workload_distance(workload, w), str(w)))
        assert model.nearest(workload, len(model.best)) == one_by_one

# ---- a build ----------------------------------------------------------------------------------------
@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
def test_building_a_never_tuned_shape_imports_no_xgboost(tmp_path):
    """A fresh interpreter (this one has xgboost loaded): the package, then build_conv2d of a
    shape no log holds, for sm_90 without a GPU; the zero-shot pick is made, nothing trained."""
    code = f"""if True:
        import json, sys, warnings
        import tc_autotune
        warnings.simplefilter("ignore")
        kernel = tc_autotune.build_conv2d({UNTUNED!r}, target="sm_90")
        from tc_autotune.api import apply
        from tc_autotune.backends.cuda import gpu
        choice = apply.choose_config(kernel.workload, gpu.gpu_for_arch("sm_90"), warn=False)
        print(json.dumps(dict(source=choice.source, same=choice.config == kernel.config,
                              loaded=sorted(m for m in sys.modules if m.split(".")[0] == "xgboost"
                                            or m == "tc_autotune.tuning.zero_shot_train"))))
    """
    env = {k: v for k, v in os.environ.items() if k != "TC_AUTOTUNE_SHIPPED_LOGS"}
    env.update(PYTHONPATH=str(REPO), TC_AUTOTUNE_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == {"source": "zero-shot", "same": True, "loaded": []}
    assert not (tmp_path / "cache" / "zero_shot").exists()  # no model trained and cached either
