"""Tests of the JSONL tuning log (tc_autotune.records): format, robustness, selection."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tc_autotune import records as rec
from tc_autotune.gpu import gpu_for_arch
from tc_autotune.measure import MeasureErrorNo, MeasureResult
from tc_autotune.records import Record
from tc_autotune.space import conv2d_space
from tc_autotune.workloads import get

REPO = Path(__file__).resolve().parents[1]
LOGGER = "tc_autotune.records"

WL = get("tutorial")
OTHER_WL = get("rfc-1x1-b32")
SPACE = conv2d_space(WL, gpu_for_arch("sm_90"))
CONFIGS = SPACE.sample(5, seed=1)
PROV_H100 = {"gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "cuda": "12.4",
             "tc_autotune": "0.1.0"}
PROV_A100 = {"gpu": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "cuda": "12.4",
             "tc_autotune": "0.1.0"}


def make(config_i=0, costs=(1e-4,), error_no=MeasureErrorNo.NO_ERROR, workload=WL,
         arch="sm_90", provenance=PROV_H100, error_msg="", timestamp=1.7e9):
    space = conv2d_space(workload, gpu_for_arch(arch))
    config = space.to_entity(CONFIGS[config_i])
    result = MeasureResult(tuple(costs), MeasureErrorNo(error_no), error_msg, 2.5, timestamp)
    return Record(f"cuda -arch={arch}", workload, config, result, dict(provenance))


def warnings_of(caplog):
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


# ---- format -----------------------------------------------------------------
def test_space_sample_is_usable():
    assert len(CONFIGS) == 5
    assert len({SPACE.index(c) for c in CONFIGS}) == 5


@pytest.mark.parametrize("record", [
    make(0, costs=(1.1e-4, 1.0e-4, 1.2e-4)),
    make(1, costs=(), error_no=MeasureErrorNo.BUILD_ERROR,
         error_msg='nvcc failed:\n  line 3: "bad" {brace}\ttab'),
    make(2, costs=(3e-3,), error_no=MeasureErrorNo.WRONG_RESULT, workload=OTHER_WL, arch="sm_80",
         provenance=PROV_A100),
])
def test_round_trip(record):
    line = record.to_json()
    assert "\n" not in line and "\r" not in line
    back = Record.from_json(line)
    assert back == record
    assert isinstance(back.result.costs, tuple)
    assert type(back.result.error_no) is MeasureErrorNo
    assert back.result.error_msg == record.result.error_msg
    assert back.to_json() == line  # stable, tvm_version included


def test_json_shape():
    record = make(3, costs=(2e-4, 4e-4))
    obj = json.loads(record.to_json())
    assert obj["input"] == ["cuda -arch=sm_90", "conv2d_nhwc_tensorcore.cuda", [str(WL)], {}]
    assert obj["config"] == SPACE.to_entity(CONFIGS[3])
    assert obj["result"] == [[2e-4, 4e-4], 0, 2.5, 1.7e9]
    assert obj["version"] == rec.RECORD_VERSION == 1
    assert isinstance(obj["tvm_version"], str) and obj["tvm_version"]
    assert obj["provenance"] == PROV_H100
    assert obj["error_msg"] == ""


def test_properties():
    good = make(0, costs=(1e-3, 3e-3, 2e-3))
    assert good.seconds == pytest.approx(2e-3)
    assert good.tflops == pytest.approx(WL.flops / 2e-3 / 1e12)
    assert good.arch == "sm_90"
    assert good.gpu == PROV_H100["gpu"]
    bad = make(0, costs=(1e-3,), error_no=MeasureErrorNo.RUN_TIMEOUT, arch="sm_80")
    assert bad.seconds == float("inf")
    assert bad.tflops == 0.0
    assert bad.arch == "sm_80"
    assert Record("cuda", WL, bad.config, bad.result, {}).gpu is None


def test_from_measurement_accepts_tvm_target():
    tvm = pytest.importorskip("tvm")
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    result = MeasureResult((1e-4,), timestamp=1.0)
    record = Record.from_measurement(target, SPACE, CONFIGS[0], result, PROV_H100)
    assert record.target == "cuda -arch=sm_90"
    assert record.config == SPACE.to_entity(CONFIGS[0])
    assert Record.from_json(record.to_json()) == record


def _mutate(obj_fn):
    obj = json.loads(make(0).to_json())
    obj_fn(obj)
    return json.dumps(obj)


@pytest.mark.parametrize("line, match", [
    ("not json at all", "not valid JSON"),
    ('{"input": ["cuda -arch=sm_90", "conv2d_nhwc', "not valid JSON"),
    ("[1, 2, 3]", "JSON object"),
    (_mutate(lambda o: o.pop("result")), "missing field.*result"),
    (_mutate(lambda o: o.pop("version")), "missing field.*version"),
    (_mutate(lambda o: o["input"].__setitem__(1, "dense_tensorcore.cuda")), "wrong task name"),
    (_mutate(lambda o: o["input"].__setitem__(2, ["n=1,h=oops,c=3,k=4,r=1"])), "bad workload spec"),
    (_mutate(lambda o: o["input"].__setitem__(2, [])), "workload spec"),
    (_mutate(lambda o: o["input"].pop()), "input must be"),
    (_mutate(lambda o: o["config"].pop("entity")), "config must"),
    (_mutate(lambda o: o["config"].__setitem__("index", "7")), "index"),
    (_mutate(lambda o: o["config"].__setitem__("entity", [["chunk", 2]])), "entity"),
    (_mutate(lambda o: o["result"].__setitem__(0, ["fast"])), "costs"),
    (_mutate(lambda o: o["result"].__setitem__(1, 99)), "error_no"),
    (_mutate(lambda o: o["result"].__setitem__(1, 0.5)), "error_no"),
    (_mutate(lambda o: o["result"].__setitem__(3, None)), "timestamp"),
    (_mutate(lambda o: o["result"].pop()), "result must be"),
    (_mutate(lambda o: o.__setitem__("error_msg", 3)), "error_msg"),
    (_mutate(lambda o: o.__setitem__("provenance", "h100")), "provenance"),
    (_mutate(lambda o: o.__setitem__("version", 2)), "newer"),
])
def test_from_json_rejects_malformed(line, match):
    with pytest.raises(ValueError, match=match):
        Record.from_json(line)


# ---- reading and writing ---------------------------------------------------------
def test_append_and_load(tmp_path):
    log = tmp_path / "deep" / "dir" / "tune.jsonl"  # parents are created
    first = [make(i, costs=(1e-4 * (i + 1),)) for i in range(3)]
    second = [make(4, costs=(), error_no=MeasureErrorNo.RUN_ERROR, error_msg="boom")]
    assert rec.append(log, first) == 3
    assert rec.append(log, []) == 0
    assert rec.append(log, second) == 1
    assert list(rec.load(log)) == first + second
    assert log.read_text().count("\n") == 4


def test_corrupt_lines_are_skipped_with_a_warning(tmp_path, caplog):
    log = tmp_path / "tune.jsonl"
    good = [make(i, costs=(1e-4 * (i + 1),)) for i in range(4)]
    wrong_shape = json.loads(good[0].to_json())
    wrong_shape["input"][1] = "other_task.cuda"
    lines = [
        good[0].to_json(),
        "garbage }{ not json",                  # line 2
        "",                                     # blank: silent
        good[1].to_json(),
        json.dumps(wrong_shape),                # line 5
        "   ",
        good[2].to_json(),
        good[3].to_json()[:57],                 # line 8: truncated, no newline
    ]
    log.write_text("\n".join(lines))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        loaded = list(rec.load(log))
    assert loaded == good[:3]
    messages = [w.getMessage() for w in warnings_of(caplog)]
    assert len(messages) == 3, messages
    for lineno, reason in ((2, "not valid JSON"), (5, "wrong task name"), (8, "not valid JSON")):
        assert any(f"{log}:{lineno}:" in m and reason in m for m in messages), (lineno, messages)


def test_append_after_torn_line_keeps_new_records(tmp_path, caplog):
    log = tmp_path / "tune.jsonl"
    rec.append(log, [make(0)])
    with open(log, "a") as f:  # a writer died mid-line
        f.write(make(1).to_json()[:40])
    rec.append(log, [make(2), make(3)])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        loaded = list(rec.load(log))
    assert loaded == [make(0), make(2), make(3)]
    assert len(warnings_of(caplog)) == 1
    assert f"{log}:2:" in warnings_of(caplog)[0].getMessage()


def test_invalid_utf8_line_is_skipped(tmp_path, caplog):
    log = tmp_path / "tune.jsonl"
    log.write_bytes(make(0).to_json().encode() + b"\n\xff\xfe garbage\n" + make(1).to_json().encode() + b"\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert list(rec.load(log)) == [make(0), make(1)]
    assert [f"{log}:2:" in w.getMessage() for w in warnings_of(caplog)] == [True]


_WRITER = textwrap.dedent("""
    import os
    import sys
    import time
    from tc_autotune import records as rec
    from tc_autotune.gpu import gpu_for_arch
    from tc_autotune.measure import MeasureResult
    from tc_autotune.records import Record
    from tc_autotune.space import conv2d_space
    from tc_autotune.workloads import get

    path, tag = sys.argv[1], sys.argv[2]
    space = conv2d_space(get("tutorial"), gpu_for_arch("sm_90"))
    configs = space.sample(20, seed=int(tag))
    open(f"{path}.ready{tag}", "w").close()  # start together so the appends overlap
    deadline = time.time() + 30
    while not os.path.exists(path + ".go") and time.time() < deadline:
        time.sleep(0.001)
    pad = "x" * 3000  # long lines: torn or interleaved writes would show
    i = 0
    while i < 200:
        batch = []
        for _ in range(1 + i % 3):
            if i == 200:
                break
            result = MeasureResult((1e-4,), error_msg=f"{tag}:{i}:{pad}", timestamp=float(i))
            batch.append(Record("cuda -arch=sm_90", space.workload, space.to_entity(configs[i % 20]),
                                result, {"gpu": f"writer {tag}"}))
            i += 1
        rec.append(path, batch)
""")


def test_two_processes_append_concurrently(tmp_path):
    log = tmp_path / "shared.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(log), tag], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for tag in ("1", "2")]
    deadline = time.time() + 30
    while not all(Path(f"{log}.ready{t}").exists() for t in ("1", "2")) and time.time() < deadline:
        time.sleep(0.005)
    Path(f"{log}.go").touch()
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
    lines = log.read_text().splitlines()
    assert len(lines) == 400
    loaded = [Record.from_json(line) for line in lines]  # every line parses
    seen = {(r.gpu, r.result.error_msg.split(":")[1]) for r in loaded}
    assert seen == {(f"writer {t}", str(i)) for t in ("1", "2") for i in range(200)}
    for tag in ("1", "2"):  # each writer's lines stay in its own order
        order = [int(r.result.timestamp) for r in loaded if r.gpu == f"writer {tag}"]
        assert order == list(range(200))


def test_load_directory_and_lists(tmp_path):
    d = tmp_path / "logs"
    rec.append(d / "b.log", [make(1)])
    rec.append(d / "a.jsonl", [make(0)])
    rec.append(d / "c.jsonl", [make(2)])
    (d / "notes.txt").write_text("not a log\n")
    (d / "sub.jsonl").mkdir()  # a directory with a log-like name is not a file
    assert list(rec.load(d)) == [make(0), make(1), make(2)]
    assert list(rec.load(str(d))) == [make(0), make(1), make(2)]
    extra = tmp_path / "extra.jsonl"
    rec.append(extra, [make(3)])
    assert list(rec.load([extra, d])) == [make(3), make(0), make(1), make(2)]
    assert list(rec.load(tmp_path / "missing.jsonl")) == []
    assert list(rec.load([tmp_path / "missing", extra])) == [make(3)]


# ---- selection --------------------------------------------------------------------
@pytest.fixture
def mixed_log(tmp_path):
    log = tmp_path / "tune.jsonl"
    rec.append(log, [
        make(0, costs=(3e-4,)),
        make(1, costs=(1e-4, 1.1e-4, 0.9e-4)),                                 # best sm_90: 1e-4
        make(2, costs=(2e-4,)),
        make(3, costs=(1e-6,), error_no=MeasureErrorNo.WRONG_RESULT),          # error: ignored
        make(4, costs=(2e-6,), workload=OTHER_WL),                             # other workload
        make(3, costs=(5e-5,), arch="sm_80", provenance=PROV_A100),            # best sm_80
        make(4, costs=(6e-5,), arch="sm_80", provenance=PROV_A100),
    ])
    return log


def test_load_best_picks_fastest_successful(mixed_log):
    config, seconds = rec.load_best(mixed_log, WL, "sm_90")
    assert config == CONFIGS[1]
    assert seconds == pytest.approx(1e-4)
    assert rec.load_best(mixed_log, WL, "cuda -arch=sm_90") == (config, seconds)
    assert rec.load_best(mixed_log, str(WL), "sm_90") == (config, seconds)  # spec string works
    assert rec.load_best(mixed_log, WL, "sm_80") == (CONFIGS[3], pytest.approx(5e-5))
    assert rec.load_best(mixed_log, WL) == (CONFIGS[3], pytest.approx(5e-5))  # any arch
    assert rec.load_best(mixed_log, OTHER_WL) == (CONFIGS[4], pytest.approx(2e-6))
    assert rec.load_best(list(rec.load(mixed_log)), WL, "sm_90") == (config, seconds)  # Records


def test_load_best_with_tvm_target(mixed_log):
    tvm = pytest.importorskip("tvm")
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    assert rec.load_best(mixed_log, WL, target) == (CONFIGS[3], pytest.approx(5e-5))
    assert rec.load_best(mixed_log, WL, str(target))[0] == CONFIGS[3]
    with pytest.raises(ValueError, match="arch"):
        rec.load_best(mixed_log, WL, "cuda")


def test_load_best_none_when_nothing_matches(mixed_log, tmp_path):
    assert rec.load_best(mixed_log, get("rfc-3x3-b1")) is None
    assert rec.load_best(mixed_log, OTHER_WL, "sm_80") is None
    assert rec.load_best(mixed_log, WL, "sm_75") is None
    assert rec.load_best(tmp_path / "missing.jsonl", WL) is None
    only_errors = tmp_path / "errors.jsonl"
    rec.append(only_errors, [make(0, costs=(1e-4,), error_no=MeasureErrorNo.RUN_ERROR),
                             make(1, costs=(), error_no=MeasureErrorNo.BUILD_ERROR)])
    assert rec.load_best(only_errors, WL) is None


def test_load_best_skips_configs_outside_space(mixed_log, caplog):
    stale = make(0, costs=(1e-7,))
    entity = [[k, kind, 3 if k == "chunk" else v] for k, kind, v in stale.config["entity"]]
    rec.append(mixed_log, [Record(stale.target, WL, {"index": 0, "entity": entity}, stale.result,
                                  stale.provenance)])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert rec.load_best(mixed_log, WL, "sm_90") == (CONFIGS[1], pytest.approx(1e-4))
    messages = [w.getMessage() for w in warnings_of(caplog)]
    assert len(messages) == 1 and "outside the current space" in messages[0] and "chunk" in messages[0]


def test_best_records_top_k(mixed_log):
    best = rec.best_records(rec.load(mixed_log), top_k=2)
    assert set(best) == {(WL, "sm_90"), (OTHER_WL, "sm_90"), (WL, "sm_80")}
    assert [r.config["index"] for r in best[(WL, "sm_90")]] == [SPACE.index(CONFIGS[i]) for i in (1, 2)]
    assert [r.seconds for r in best[(WL, "sm_80")]] == [5e-5, 6e-5]
    assert len(best[(OTHER_WL, "sm_90")]) == 1
    doubled = rec.best_records(list(rec.load(mixed_log)) * 2, top_k=2)  # duplicates count once
    assert doubled == best
    with pytest.raises(ValueError):
        rec.best_records([], top_k=0)


def test_pick_best(mixed_log, tmp_path):
    out = tmp_path / "best" / "best.jsonl"
    out.parent.mkdir()
    out.write_text("old content that must disappear\n")
    assert rec.pick_best(mixed_log, out, top_k=2) == 5
    lines = out.read_text().splitlines()
    picked = [Record.from_json(line) for line in lines]
    assert all(r.ok for r in picked)
    keys = [(str(r.workload), r.seconds) for r in picked]
    assert keys == sorted(keys)
    assert [(r.workload, r.arch, r.seconds) for r in picked if r.workload == WL] == [
        (WL, "sm_80", 5e-5), (WL, "sm_80", 6e-5), (WL, "sm_90", pytest.approx(1e-4)), (WL, "sm_90", 2e-4)]
    assert os.listdir(out.parent) == ["best.jsonl"]  # no temp file left behind
    assert rec.load_best(out, WL, "sm_90") == rec.load_best(mixed_log, WL, "sm_90")

    assert rec.pick_best(mixed_log, out) == 3  # top_k=1 replaces the file
    assert len(out.read_text().splitlines()) == 3


def test_pick_best_into_its_own_log_directory(mixed_log):
    log_dir = mixed_log.parent
    out = log_dir / "best.jsonl"
    assert rec.pick_best(log_dir, out, top_k=2) == 5
    first = out.read_text()
    assert rec.pick_best(log_dir, out, top_k=2) == 5  # reads best.jsonl too; no duplicates
    assert out.read_text() == first


def test_measured_indices(mixed_log):
    records = list(rec.load(mixed_log))
    idx = [SPACE.index(c) for c in CONFIGS]
    assert rec.measured_indices(records, WL) == {idx[0], idx[1], idx[2], idx[3], idx[4]}
    assert rec.measured_indices(records, WL, PROV_H100["gpu"]) == {idx[0], idx[1], idx[2], idx[3]}
    assert rec.measured_indices(records, WL, PROV_A100["gpu"]) == {idx[3], idx[4]}
    assert rec.measured_indices(records, OTHER_WL) == {idx[4]}
    assert rec.measured_indices(records, WL, "some other GPU") == set()
    assert rec.measured_indices(mixed_log, WL, PROV_A100["gpu"]) == {idx[3], idx[4]}  # a path works


def test_records_written_before_the_newer_knobs_read_back_with_their_defaults():
    from dataclasses import replace

    from tc_autotune.space import KNOB_DEFAULTS

    config = replace(CONFIGS[0], **KNOB_DEFAULTS)
    entity = SPACE.to_entity(config)
    old = {"index": entity["index"], "entity": [e for e in entity["entity"] if e[0] not in KNOB_DEFAULTS]}
    assert len(old["entity"]) == 12
    back = SPACE.from_entity(old)
    assert back == config and SPACE.index(back) == old["index"]
    # The shipped log is such a log: every record still names a config of the space.
    shipped = rec.load(REPO / "tuning_logs" / "nvidia-h200.jsonl")
    assert shipped and all(conv2d_space(r.workload).from_entity(r.config) for r in shipped)
