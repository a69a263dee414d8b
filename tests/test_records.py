"""Tests of the JSONL tuning log (tc_autotune.database.records): format, robustness, selection."""

from __future__ import annotations

import json
import logging
import math
import os
import textwrap
import time
from pathlib import Path

import pytest
from command_paths import start_python

from tc_autotune.database import compare, journal
from tc_autotune.backends.cuda import peaks
from tc_autotune.database import records as rec
from tc_autotune.core.builtin_tasks import CONV2D
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.measure.measurer import MeasureErrorNo, MeasureResult
from tc_autotune.database.records import Record
from tc_autotune.core.results import CUDA_GRAPH, CUDA_TIMER, TIME_EVALUATOR
from tc_autotune.templates.tc_gemm.knobs import KNOBS
from tc_autotune.templates.registry import conv2d_space
from tc_autotune.workloads import get

REPO = Path(__file__).resolve().parents[1]
LOGGER = "tc_autotune.database.records"

WL = get("tutorial")
OTHER_WL = get("rfc-1x1-b32")
SPACE = conv2d_space(WL, gpu_for_arch("sm_90"))
CONFIGS = SPACE.sample(5, seed=1)
PROV_H100 = {"gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "cuda": "12.4",
             "tc_autotune": "0.1.0"}
PROV_A100 = {"gpu": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "cuda": "12.4",
             "tc_autotune": "0.1.0"}


TODAY = CONV2D.template.source_hash  # the template's key today
OLD = "0" * 63 + "1"  # a source hash of other sources
CODE, OTHER_CODE = "c" * 64, "d" * 64
# How a test record is stamped: current; stamped under other sources (unverified); found changed
# under today's; format 2 without a version, and of a retired version (both stale).
STAMPS = {"fresh": dict(source_hash=TODAY, code_hash=CODE),
          "unverified": dict(source_hash=OLD, code_hash=CODE),
          "changed": dict(source_hash=OLD, code_hash=CODE, stale_at=TODAY),
          "unversioned": {},
          "old-version": dict(template_version=rec.LEGACY_VERSIONS[CONV2D.name] + 1)}


def make(config_i=0, costs=(1e-4,), error_no=MeasureErrorNo.NO_ERROR, workload=WL,
         arch="sm_90", provenance=PROV_H100, error_msg="", timestamp=1.7e9, stamp="fresh",
         timer=TIME_EVALUATOR):
    space = conv2d_space(workload, gpu_for_arch(arch))
    config = space.to_entity(CONFIGS[config_i])
    result = MeasureResult(tuple(costs), MeasureErrorNo(error_no), error_msg, 2.5, timestamp, timer=timer)
    return Record(f"cuda -arch={arch}", workload, config, result, dict(provenance), **STAMPS[stamp])


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
    assert obj["version"] == rec.RECORD_VERSION == 3
    assert (obj["source_hash"], obj["code_hash"]) == (TODAY, CODE) and "stale_at" not in obj
    assert "template_version" not in obj
    unversioned = json.loads(make(3, stamp="unversioned").to_json())  # stays so
    assert not {"template_version", "source_hash", "code_hash"} & set(unversioned)
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


def test_stamped_accepts_tvm_target():
    tvm = pytest.importorskip("tvm")
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    result = MeasureResult((1e-4,), timestamp=1.0)
    record = rec.stamped(target, SPACE, CONFIGS[0], result, PROV_H100)
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
    (_mutate(lambda o: o["input"].__setitem__(1, "matmul_simt.cuda")), "wrong task name"),
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
    (_mutate(lambda o: o.__setitem__("version", 4)), "newer"),
    # values that would let one bad line take over apply-best (issue 16, finding 4)
    (_mutate(lambda o: o["result"].__setitem__(0, [0.0])), "finite and positive"),
    (_mutate(lambda o: o["result"].__setitem__(0, [-1e-4])), "finite and positive"),
    ('{"x": NaN}'.replace('{"x": NaN}', _mutate(lambda o: None).replace("[0.0001]", "[NaN]")), "finite and positive"),
    (_mutate(lambda o: None).replace("[0.0001]", "[Infinity]"), "finite and positive"),
    (_mutate(lambda o: o["result"].__setitem__(0, [])), "at least one cost"),
    (_mutate(lambda o: o.__setitem__("version", -7)), "positive integer"),
    (_mutate(lambda o: o.__setitem__("version", 0)), "positive integer"),
    (_mutate(lambda o: o.__setitem__("version", True)), "positive integer"),
    (_mutate(lambda o: o.__setitem__("template_version", 0)), "template_version"),
    (_mutate(lambda o: o.__setitem__("template_version", "1")), "template_version"),
    (_mutate(lambda o: o.__setitem__("template_version", True)), "template_version"),
    (_mutate(lambda o: o.__setitem__("source_hash", "abc")), "source_hash"),
    (_mutate(lambda o: o.__setitem__("code_hash", CODE.upper())), "code_hash"),
    (_mutate(lambda o: o.__setitem__("stale_at", 7)), "stale_at"),
    (_mutate(lambda o: o["config"].__setitem__("index", True)), "index"),
    (_mutate(lambda o: o["config"]["entity"][0].__setitem__(2, True)), "entity"),
    (_mutate(lambda o: o["config"]["entity"][0].__setitem__(2, 2.0)), "entity"),
    (_mutate(lambda o: o["result"].__setitem__(3, -5)), "timestamp"),
    (_mutate(lambda o: o.__setitem__("timer", "stopwatch")), "unknown timer"),
    (_mutate(lambda o: o.__setitem__("timer", 1)), "unknown timer"),
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
        good[3].to_json()[:57],                 # line 8: unfinished (no newline): not an error
    ]
    log.write_text("\n".join(lines))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        loaded = list(rec.load(log))
    assert loaded == good[:3]
    messages = [w.getMessage() for w in warnings_of(caplog)]
    assert len(messages) == 2, messages
    for lineno, reason in ((2, "not valid JSON"), (5, "wrong task name")):
        assert any(f"{log}:{lineno}:" in m and reason in m for m in messages), (lineno, messages)
    assert any(f"{log}:8: ignoring an unfinished last line" in r.getMessage() for r in caplog.records)


def test_the_log_index_parses_a_line_when_its_key_is_asked_for_and_finds_what_load_reads(tmp_path, caplog):
    """``LogIndex`` keys a line by its head (target, task, workload spec) and parses it once its
    (workload, arch) is asked for: the successful records of every key, in file order, and the
    keys in the order of their first successful records, as indexing all ``load`` reads gives,
    whatever the lines: failed records, other workloads and archs, a bad record with a good head
    (warned of once asked for), a head with escapes (parsed at once), garbage, an unfinished tail."""
    from tc_autotune.database.logs import LogIndex

    log = tmp_path / "tune.jsonl"
    good = [make(i % 5, costs=(1e-4 * (i + 1),), workload=(WL, OTHER_WL)[i % 2], arch=("sm_90", "sm_80")[i % 3 == 0])
            for i in range(12)]
    failed = make(1, costs=(), error_no=MeasureErrorNo.RUN_ERROR, error_msg="boom")  # WL on sm_90: first in file
    escaped = json.loads(good[2].to_json())
    escaped["input"][0] = 'cuda -arch=sm_90 -note="x"'
    bad_body = json.loads(good[4].to_json())
    bad_body["version"] = rec.RECORD_VERSION + 1
    lines = [failed.to_json(), good[1].to_json(), json.dumps(bad_body, separators=(",", ":")), "garbage }{",
             *(g.to_json() for g in good),
             json.dumps(escaped, separators=(",", ":")), "", good[5].to_json()[:80]]
    log.write_text("\n".join(lines))
    eager = {}
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for record in rec.load(log):
            if record.ok:
                eager.setdefault((record.workload, record.arch), []).append(record)
    assert len(eager) == 4 and list(eager)[0] == (OTHER_WL, "sm_90")  # (WL, sm_90)'s first line failed
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        index = LogIndex(log)
        assert len(warnings_of(caplog)) == 1  # the garbage; the bad record only once its key is asked for
        assert index.items(lambda workload, arch: True) == list(eager.items())
        assert len(warnings_of(caplog)) == 2 and f"{log}:3:" in warnings_of(caplog)[1].getMessage()
    one_by_one = LogIndex(log)
    for (workload, arch), records in reversed(eager.items()):
        assert one_by_one.records(workload, arch) == records
    assert one_by_one.records(get("rfc-3x3-b1"), "sm_90") == [] and one_by_one.records(WL, "sm_75") == []
    on_sm80 = [item for item in eager.items() if item[0][1] == "sm_80"]
    assert index.items(lambda workload, arch: arch == "sm_80") == on_sm80


def test_append_fences_a_torn_line_left_by_a_dead_writer(tmp_path, caplog):
    log = tmp_path / "tune.jsonl"
    rec.append(log, [make(0)])
    torn = make(1).to_json()[:40]
    with open(log, "a") as f:  # a writer died mid-line
        f.write(torn)
    rec.append(log, [make(2), make(3)])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        loaded = list(rec.load(log))
    assert loaded == [make(0), make(2), make(3)]
    assert warnings_of(caplog) == []  # the torn bytes are no longer in the log ...
    assert len(log.read_text().splitlines()) == 3
    assert (tmp_path / "tune.jsonl.torn").read_text() == torn + "\n"  # ... but kept aside


def test_append_completes_a_whole_record_that_lost_only_its_newline(tmp_path):
    log = tmp_path / "tune.jsonl"
    log.write_text(make(0).to_json())  # killed between the record and its newline
    rec.append(log, [make(1)])
    assert list(rec.load(log)) == [make(0), make(1)]
    assert not (tmp_path / "tune.jsonl.torn").exists()


def test_bad_line_warnings_are_summarised_per_file(tmp_path, caplog):
    log = tmp_path / "tune.jsonl"
    log.write_text(make(0).to_json() + "\n" + "garbage\n" * 20_000 + make(1).to_json() + "\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert list(rec.load(log)) == [make(0), make(1)]
    messages = [w.getMessage() for w in warnings_of(caplog)]
    assert len(messages) == rec.BAD_LINE_WARNINGS + 1
    assert "skipped 19997 more bad record(s) (lines 5, 6," in messages[-1]


def test_an_oversized_line_is_skipped_without_reading_it_whole(tmp_path, caplog):
    import tracemalloc

    log = tmp_path / "tune.jsonl"
    huge = 50 * journal.MAX_LINE_BYTES  # 50 MB on one line
    with open(log, "wb") as f:
        f.write(make(0).to_json().encode() + b"\n" + b"{" + b"x" * huge + b"}\n" + make(1).to_json().encode() + b"\n")
    tracemalloc.start()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        loaded = list(rec.load(log))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert loaded == [make(0), make(1)]
    assert peak < 4 * journal.MAX_LINE_BYTES, peak
    assert [f"{log}:2:" in m and "longer than" in m for m in map(lambda w: w.getMessage(), warnings_of(caplog))] \
        == [True]


def test_one_impossible_record_cannot_take_over_load_best(tmp_path, caplog):
    log = tmp_path / "tune.jsonl"
    rec.append(log, [make(1, costs=(2e-4,))])
    good = json.loads(make(0).to_json())
    with open(log, "a") as f:
        for costs in ([0.0], [-1e-4], "[NaN]"):
            bad = dict(good, result=[costs if isinstance(costs, list) else [1.0], 0, 1.0, 1.7e9])
            line = json.dumps(bad)
            f.write((line.replace("[1.0]", costs) if isinstance(costs, str) else line) + "\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert rec.load_best(log, WL) == (CONFIGS[1], pytest.approx(2e-4))
    assert len(warnings_of(caplog)) == 3


def test_a_bool_is_not_a_knob_value():
    entity = SPACE.to_entity(CONFIGS[0])
    values = {k: v for k, _, v in entity["entity"]}
    if values["block_row_warps"] == 1:
        values["block_row_warps"] = True
    else:
        values["frag_buffers"] = True
    with pytest.raises(ValueError, match="not in the space"):
        SPACE.from_dict(values)


def test_invalid_utf8_line_is_skipped(tmp_path, caplog):
    log = tmp_path / "tune.jsonl"
    log.write_bytes(make(0).to_json().encode() + b"\n\xff\xfe garbage\n" + make(1).to_json().encode() + b"\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert list(rec.load(log)) == [make(0), make(1)]
    assert [f"{log}:2:" in w.getMessage() for w in warnings_of(caplog)] == [True]


# The writers import no module that imports tvm (tc_autotune.core.results, not .measure, holds
# MeasureResult; tasks holds the templates, whose source hash reads files): they start in a fraction
# of a second, and forked from the tests' script server (``_writer``) in a few milliseconds.
_WRITER = textwrap.dedent("""
    import os
    import sys
    import time
    from tc_autotune.database import records as rec
    from tc_autotune.backends.cuda.gpu import gpu_for_arch
    from tc_autotune.core.results import MeasureResult
    from tc_autotune.database.records import Record
    from tc_autotune.templates.registry import conv2d_space
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


def _writer(tmp_path, code: str) -> Path:
    """A writer's script (started by ``command_paths.start_python``: a process of its own, forked
    from the tests' script server, which has the package imported already)."""
    script = tmp_path / "writer.py"
    script.write_text(code)
    return script


def test_two_processes_append_concurrently(tmp_path):
    log = tmp_path / "shared.jsonl"
    writer = _writer(tmp_path, _WRITER)
    procs = [start_python(writer, log, tag, stderr=tmp_path / f"err{tag}") for tag in ("1", "2")]
    deadline = time.time() + 30
    while not all(Path(f"{log}.ready{t}").exists() for t in ("1", "2")) and time.time() < deadline:
        time.sleep(0.005)
    Path(f"{log}.go").touch()
    for p, tag in zip(procs, ("1", "2")):
        assert p.wait(timeout=60) == 0, (tmp_path / f"err{tag}").read_text()
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
        make(4, costs=(2e-5,), workload=OTHER_WL),                             # other workload
        make(3, costs=(5e-4,), arch="sm_80", provenance=PROV_A100),            # best sm_80
        make(4, costs=(6e-4,), arch="sm_80", provenance=PROV_A100),
    ])
    return log


def test_load_best_picks_fastest_successful(mixed_log):
    config, seconds = rec.load_best(mixed_log, WL, "sm_90")
    assert config == CONFIGS[1]
    assert seconds == pytest.approx(1e-4)
    assert rec.load_best(mixed_log, WL, "cuda -arch=sm_90") == (config, seconds)
    assert rec.load_best(mixed_log, str(WL), "sm_90") == (config, seconds)  # spec string works
    assert rec.load_best(mixed_log, WL, "sm_80") == (CONFIGS[3], pytest.approx(5e-4))
    assert rec.load_best(mixed_log, WL) == (config, seconds)  # any arch: sm_90's is faster
    assert rec.load_best(mixed_log, OTHER_WL) == (CONFIGS[4], pytest.approx(2e-5))
    assert rec.load_best(list(rec.load(mixed_log)), WL, "sm_90") == (config, seconds)  # Records


def test_load_best_with_tvm_target(mixed_log):
    tvm = pytest.importorskip("tvm")
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    assert rec.load_best(mixed_log, WL, target) == (CONFIGS[3], pytest.approx(5e-4))
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
    stale = make(0, costs=(8.5e-5,))
    entity = [[k, kind, 3 if k == "chunk" else v] for k, kind, v in stale.config["entity"]]
    rec.append(mixed_log, [Record(stale.target, WL, {"index": 0, "entity": entity}, stale.result,
                                  stale.provenance, **STAMPS["fresh"])])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert rec.load_best(mixed_log, WL, "sm_90") == (CONFIGS[1], pytest.approx(1e-4))
    messages = [w.getMessage() for w in warnings_of(caplog)]
    assert len(messages) == 1 and "outside the current space" in messages[0] and "chunk" in messages[0]


def test_best_records_top_k(mixed_log):
    best = rec.best_records(rec.load(mixed_log), top_k=2)
    assert set(best) == {(WL, "sm_90"), (OTHER_WL, "sm_90"), (WL, "sm_80")}
    assert [r.config["index"] for r in best[(WL, "sm_90")]] == [SPACE.index(CONFIGS[i]) for i in (1, 2)]
    assert [r.seconds for r in best[(WL, "sm_80")]] == [5e-4, 6e-4]
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
    keys = [(str(r.workload), r.arch, r.seconds) for r in picked]
    assert keys == sorted(keys)
    assert [(r.workload, r.arch, r.seconds) for r in picked if r.workload == WL] == [
        (WL, "sm_80", 5e-4), (WL, "sm_80", 6e-4), (WL, "sm_90", pytest.approx(1e-4)), (WL, "sm_90", 2e-4)]
    assert sorted(os.listdir(out.parent)) == ["best.jsonl", "best.jsonl.bak"]  # no temp file left behind
    assert out.with_name("best.jsonl.bak").read_text() == "old content that must disappear\n"  # but kept aside
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


# ---- stale records (issue 11; derived from hashes since issue 30) ---------------------------
def test_stale_records_are_skipped_unless_asked_for(mixed_log, caplog):
    rec.append(mixed_log, [make(0, costs=(8.5e-5,), stamp="unversioned"),  # nothing can check it
                           make(2, costs=(9e-5,), stamp="changed")])       # its code changed
    assert [r.stale for r in rec.load(mixed_log)][-2:] == [True, True]
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert rec.load_best(mixed_log, WL, "sm_90") == (CONFIGS[1], pytest.approx(1e-4))
    assert any("skipped 2 stale record(s)" in r.getMessage() for r in caplog.records)
    assert rec.load_best(mixed_log, WL, "sm_90", include_stale=True) == (CONFIGS[0], pytest.approx(8.5e-5))
    assert rec.best_records(rec.load(mixed_log))[(WL, "sm_90")][0].seconds == pytest.approx(1e-4)
    assert rec.best_records(rec.load(mixed_log), include_stale=True)[(WL, "sm_90")][0].seconds == 8.5e-5
    out = mixed_log.parent / "best.jsonl"
    rec.pick_best(mixed_log, out)
    assert not any(r.stale for r in rec.load(out))
    rec.pick_best(mixed_log, out, include_stale=True)
    assert rec.load_best(out, WL, "sm_90", include_stale=True)[1] == 8.5e-5


def test_summary_counts_unverified_and_stale_records(mixed_log):
    rec.append(mixed_log, [make(0, costs=(8.5e-5,), stamp="unversioned"), make(2, costs=(9.5e-5,), stamp="unverified")])
    rows = {(str(r.workload), r.gpu): r for r in rec.summarize(mixed_log)}
    row = rows[(str(WL), PROV_H100["gpu"])]
    assert (row.records, row.ok, row.unverified, row.stale) == (6, 5, 1, 1)
    assert row.best_s == pytest.approx(9.5e-5) and row.best_stale_s == 8.5e-5  # unverified counts as current
    table = rec.summary_table(rec.summarize(mixed_log))
    assert f"| tutorial | {PROV_H100['gpu']} | sm_90 | 6 | 5 | 1 | 1 | 0.0950 | 0.0850 |" in table
    assert f"template source hash today: tc_gemm {TODAY[:16]}" in table


def _best_log(tmp_path, *records_):
    path = tmp_path / "best" / "gpu.jsonl"
    rec.append(path, records_)
    return path


def test_merge_keeps_every_held_record_that_nothing_beat(tmp_path):
    other = make(4, costs=(5e-5,), workload=OTHER_WL)
    held = _best_log(tmp_path, make(1, costs=(1e-4,)), other)
    changes = rec.merge_best(held, [make(2, costs=(2e-4,))], PROV_H100["gpu"])  # slower: no change
    assert [(c.action, c.before_s, c.after_s) for c in changes] == [("kept", 1e-4, 1e-4)]
    assert list(rec.load(held)) == [make(1, costs=(1e-4,)), other]
    assert not held.with_name("gpu.jsonl.bak").exists()  # nothing written
    assert rec.merge_best(held, [], PROV_H100["gpu"]) == []  # a run that measured nothing
    assert len(list(rec.load(held))) == 2


def test_merge_replaces_only_with_a_faster_current_record_and_keeps_a_backup(tmp_path):
    other = make(4, costs=(5e-5,), workload=OTHER_WL)
    held = _best_log(tmp_path, make(1, costs=(1e-4,)), other)
    before = held.read_bytes()
    new = [make(2, costs=(9e-5,)),                                          # faster: replaces
           make(3, costs=(8.5e-5,), stamp="changed"),                       # stale: never chosen
           make(0, costs=(3e-4,), provenance=PROV_A100),                     # another GPU: ignored
           make(0, costs=(7e-5,), workload=get("rfc-3x3-b1"))]               # new workload: added
    changes = rec.merge_best(held, new, PROV_H100["gpu"])
    assert sorted((str(c.workload), c.action) for c in changes) == sorted(
        [(str(WL), "faster"), (str(get("rfc-3x3-b1")), "added")])
    after = list(rec.load(held))
    assert sorted(r.seconds for r in after) == [5e-5, 7e-5, 9e-5]
    assert held.with_name("gpu.jsonl.bak").read_bytes() == before


@pytest.mark.parametrize("order", ["best log first", "history first"])
def test_one_measurement_read_from_two_logs_is_stale_if_either_copy_was_found_changed(order):
    """A restamp rewrote one log (its copy: stale) and not the other (unverified): whichever is
    read first, the measurement is kept once, stale, and no compaction keeps it as a best."""
    changed, unmarked = make(1, costs=(5e-5,), stamp="changed"), make(1, costs=(5e-5,), stamp="unverified")
    runner_up = make(2, costs=(9e-5,))
    copies = [changed, unmarked] if order == "best log first" else [unmarked, changed]
    kept = rec.unique(copies + [runner_up])
    assert sorted((r.seconds, r.freshness) for r in kept) == [(5e-5, rec.STALE), (9e-5, rec.FRESH)]
    assert [r.seconds for group in rec.best_records(copies + [runner_up]).values() for r in group] == [9e-5]
    assert rec.best_record(copies + [runner_up], WL)[1].seconds == 9e-5


def test_merge_replaces_a_stale_record_with_any_current_one(tmp_path):
    held = _best_log(tmp_path, make(1, costs=(8.5e-5,), stamp="old-version"))  # fast, but another kernel
    changes = rec.merge_best(held, [make(2, costs=(3e-4,))], PROV_H100["gpu"])
    assert [(c.action, c.before_s, c.after_s) for c in changes] == [("replaced stale", 8.5e-5, 3e-4)]
    assert [(r.seconds, r.stale) for r in rec.load(held)] == [(3e-4, False)]


def test_records_written_before_the_newer_knobs_read_back_with_their_defaults():
    from dataclasses import replace

    from tc_autotune.templates.tc_gemm.knobs import KNOB_DEFAULTS

    config = replace(CONFIGS[0], **KNOB_DEFAULTS)
    entity = SPACE.to_entity(config)
    old = {"index": entity["index"], "entity": [e for e in entity["entity"] if e[0] not in KNOB_DEFAULTS]}
    assert len(old["entity"]) == 12
    back = SPACE.from_entity(old)
    assert back == config and SPACE.index(back) == old["index"]
    # The shipped log is such a log: every record still names a config of the space.
    shipped = rec.load(REPO / "tuning_logs" / "nvidia-h200.jsonl")
    assert shipped and all(conv2d_space(r.workload).from_entity(r.config) for r in shipped)


def test_a_wgmma_record_written_before_wgmma_in_flight_reads_back_as_the_kernel_it_timed():
    """Its config waits for each k-step's groups (wgmma_in_flight=0, the code it measured) and
    keeps its index: the knob is the last one and its default the first candidate."""
    from dataclasses import replace

    config = replace(CONFIGS[0], intrinsic="wgmma", wmma="m16n16k16", block_row_warps=4, chunk=4,
                     offset_a=0, offset_b=0, frag_buffers=1, stages=3, wgmma_in_flight=1)
    entity = SPACE.to_entity(replace(config, wgmma_in_flight=0))
    old = {"index": entity["index"], "entity": [e for e in entity["entity"] if e[0] != "wgmma_in_flight"]}
    assert SPACE.from_entity(old) == replace(config, wgmma_in_flight=0)
    # the new value: another index (one step of the knob, whose stride is the space over the
    # candidates of it and of the knobs appended after it)
    assert SPACE.index(config) == entity["index"] + _stride("wgmma_in_flight")


def test_a_wgmma_record_written_before_warp_specialized_reads_back_as_the_kernel_it_timed():
    """Its config is the kernel it measured (warp_specialized=0: no producer warpgroup) and keeps
    its index: the knob is the last one, its default the first candidate.  A record older still
    (no wgmma_in_flight either) reads back the same way."""
    from dataclasses import replace

    config = replace(CONFIGS[0], intrinsic="wgmma", wmma="m16n16k16", block_row_warps=4, block_col_warps=2,
                     warp_row_tiles=2, warp_col_tiles=4, chunk=4, offset_a=0, offset_b=0, frag_buffers=1,
                     stages=3, split_k=1, vec_a=8, vec_b=8, vec_c=1, offset_c=0, warp_specialized=1)
    assert SPACE.is_valid(config), SPACE.why_invalid(config)
    entity = SPACE.to_entity(replace(config, warp_specialized=0))
    for dropped in (("warp_specialized",), ("warp_specialized", "wgmma_in_flight")):
        old = {"index": entity["index"], "entity": [e for e in entity["entity"] if e[0] not in dropped]}
        assert SPACE.from_entity(old) == replace(config, warp_specialized=0)
    assert SPACE.index(config) == entity["index"] + _stride("warp_specialized")  # the new value: another index


def _stride(knob: str) -> int:
    """How far one step of ``knob`` moves a config's index: the first knob varies fastest."""
    later = list(KNOBS)[list(KNOBS).index(knob):]
    return len(SPACE) // math.prod(len(KNOBS[k]) for k in later)


_KILLABLE_WRITER = textwrap.dedent("""
    import os
    import sys
    from tc_autotune.database import records as rec
    from tc_autotune.backends.cuda.gpu import gpu_for_arch
    from tc_autotune.database.records import Record
    from tc_autotune.core.results import MeasureResult
    from tc_autotune.templates.registry import conv2d_space
    from tc_autotune.core.builtin_tasks import CONV2D
    from tc_autotune.workloads import get

    path, tag = sys.argv[1], sys.argv[2]
    space = conv2d_space(get("tutorial"), gpu_for_arch("sm_90"))
    entity = space.to_entity(space.sample(1, seed=0)[0])
    pad = "y" * 200_000  # 200 KB records, 2 MB per append: the kernel can stop a write part-way
    open(f"{path}.ready{tag}", "w").close()  # imported: the kills are timed from here
    with open(f"{path}.done{tag}", "a") as done:
        for i in range(10**6):
            batch = [Record("cuda -arch=sm_90", space.workload, entity,
                            MeasureResult((1e-4,), error_msg=f"{tag}:{i}:{j}:{pad}", timestamp=float(i)),
                            {"gpu": f"writer {tag}"}, source_hash="0" * 64) for j in range(10)]
            rec.append(path, batch)
            done.write(f"{i}\\n")  # only after append returned: these must never be lost
            done.flush()
""")


def _appends(log, tag) -> int:
    """Appends writer ``tag`` has completed (lines of its done file)."""
    done = Path(f"{log}.done{tag}")
    return len(done.read_text().split()) if done.exists() else 0


def test_kill_9_of_concurrent_writers_loses_no_record_and_leaves_no_torn_line(tmp_path, caplog):
    import random
    import signal

    log = tmp_path / "shared.jsonl"
    writer = _writer(tmp_path, _KILLABLE_WRITER)
    rng = random.Random(0)
    targets = {}  # tag -> appends it must have completed before it is killed
    for round_ in range(6):
        tags = [f"{round_}-{w}" for w in range(3)]
        procs = [start_python(writer, log, tag) for tag in tags]
        # Kill by counts, not seconds (a loaded CI machine may take seconds per append): once every
        # writer has completed 1-3 appends, each is killed a random moment into its next ones.
        targets.update({tag: 1 + rng.randrange(3) for tag in tags})
        deadline = time.time() + 600  # a stop for a writer that hangs, not a limit on a slow one
        while time.time() < deadline and any(p.poll() is None and _appends(log, tag) < targets[tag]
                                             for p, tag in zip(procs, tags)):
            time.sleep(0.005)
        for p in procs:
            time.sleep(rng.random() * 0.02)
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait(timeout=30)
    rec.append(log, [make(0)])  # the next writer fences whatever the last kill left
    completed = {(tag, int(i)) for f in tmp_path.glob("shared.jsonl.done*")
                 for tag, i in [(f.name.split("done")[1], line) for line in f.read_text().split()]}
    # every writer completed the appends it was given before the kills: the test tested something
    assert all(_appends(log, tag) >= target for tag, target in targets.items()), \
        {tag: (_appends(log, tag), target) for tag, target in targets.items()}
    lines = log.read_bytes().splitlines()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        loaded = list(rec.load(log))
    assert len(loaded) == len(lines)  # every line is a whole record: no torn line counted or left
    assert not warnings_of(caplog)
    found = {}
    for r in loaded[:-1]:
        tag, i, j = r.result.error_msg.split(":")[:3]
        found.setdefault((tag, int(i)), set()).add(int(j))
    missing = [key for key in completed if found.get(key) != set(range(10))]
    assert not missing, f"records of completed appends lost: {missing[:5]}"


# ---- nothing implausible applied, like compared with like (issue 33) ----------------------------
def test_every_shipped_record_is_physically_possible(caplog):
    """The peaks' floor (with its 1.5x margin) refuses none of the ~14,500 records measured so far
    (the shipped logs and the lab's studies)."""
    files = sorted([*(REPO / "tuning_logs").rglob("*.jsonl"), *(REPO / "lab").rglob("*.jsonl")])
    lines = sum(1 for f in files for line in f.read_text().splitlines() if line.strip())
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        loaded = list(rec.load(files))
    assert not warnings_of(caplog), warnings_of(caplog)[0].getMessage()
    assert len(loaded) == lines > 14_000


def test_an_impossibly_fast_record_is_refused_with_one_warning_and_never_applied(tmp_path, caplog):
    """1e-12 s for the tutorial conv is 1.2e11 TFLOP/s: a well-formed line, but a corrupt one."""
    log = tmp_path / "tune.jsonl"
    rec.append(log, [make(1, costs=(2e-4,)), make(0, costs=(1e-12,)), make(2, costs=(3e-4,))])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert rec.load_best(log, WL) == (CONFIGS[1], pytest.approx(2e-4))
    messages = [w.getMessage() for w in warnings_of(caplog)]
    assert len(messages) == 1 and messages[0].startswith(f"{log}:2: ") and "physically impossible" in messages[0]
    assert [r.seconds for r in rec.load(log)] == [2e-4, 3e-4]


@pytest.mark.parametrize("gpu, arch, tflops", [
    ("NVIDIA H100 80GB HBM3", "sm_90", 990), ("NVIDIA H200", "sm_90", 990),
    ("NVIDIA A100-SXM4-80GB", "sm_80", 312), ("generic sm_90", "sm_90", 990),
    ("Some Future GPU", "sm_120", peaks.GENERIC.tflops)])
def test_the_floor_is_the_gpus_compute_peak_with_the_margin(gpu, arch, tflops):
    floor = peaks.floor_seconds(WL, gpu, arch)  # the tutorial conv: compute-bound
    assert floor == pytest.approx(WL.flops / (tflops * 1e12 * peaks.MARGIN))
    ok = make(0, costs=(floor * 1.01,), arch=arch, provenance=dict(PROV_H100, gpu=gpu))
    assert Record.from_json(ok.to_json()) == ok
    with pytest.raises(ValueError, match="physically impossible"):
        Record.from_json(make(0, costs=(floor * 0.99,), arch=arch, provenance=dict(PROV_H100, gpu=gpu)).to_json())
    failed = make(0, costs=(1e-12,), error_no=MeasureErrorNo.WRONG_RESULT, arch=arch)  # its costs claim nothing
    assert Record.from_json(failed.to_json()) == failed


def test_a_memory_bound_workload_is_held_to_the_memory_peak_beyond_l2():
    wl = get("n=256,h=56,w=56,c=64,k=64,r=1")  # 103 MB in, 206 MB out (fp32), 6.6 GFLOP
    assert peaks.min_bytes(wl) == 256 * 56 * 56 * 64 * (2 + 4) + 64 * 64 * 2
    memory = (peaks.min_bytes(wl) - 50e6) / (3.35e12 * peaks.MARGIN)  # the H100's 50 MB of L2 aside
    assert memory > 5 * wl.flops / (990e12 * peaks.MARGIN)
    assert peaks.floor_seconds(wl, PROV_H100["gpu"], "sm_90") == pytest.approx(memory)
    strided = get("n=1,h=14,w=14,c=1024,k=2048,r=1,stride=2")  # a 1x1 stride-2 conv reads 1 pixel in 4
    assert peaks.min_bytes(strided) == 7 * 7 * 1024 * 2 + 1024 * 2048 * 2 + 7 * 7 * 2048 * 4


def test_records_name_their_timer_and_old_ones_are_inferred():
    graph = make(0, timer=CUDA_GRAPH)
    assert json.loads(graph.to_json())["timer"] == "cuda_graph" and Record.from_json(graph.to_json()) == graph
    assert json.loads(make(0).to_json())["timer"] == "time_evaluator"

    def old(**kw):  # a line written before records named their timer
        obj = json.loads(make(0, **kw).to_json())
        del obj["timer"]
        return Record.from_json(json.dumps(obj)).timer

    assert old() == TIME_EVALUATOR
    assert old(error_msg="nightly re-time", timestamp=1795476458.0 - 60) == TIME_EVALUATOR  # before graphs
    assert old(error_msg="nightly re-time", timestamp=1795476458.0 + 60) == CUDA_GRAPH


def test_todays_timer_round_trips_and_is_never_compared_with_the_old_ones(tmp_path):
    """The one timer's figures (``cuda_timer``) are a third kind: read back as they are, compared
    only with their own kind, and theirs decide where two configs have them."""
    ours = make(0, timer=CUDA_TIMER)
    assert json.loads(ours.to_json())["timer"] == "cuda_timer" and Record.from_json(ours.to_json()) == ours
    a_te, b_ct = make(1, costs=(1e-4,)), make(2, costs=(0.5e-4,), timer=CUDA_TIMER)  # 2x apart, unlike
    held = _best_log(tmp_path, a_te)
    assert [c.action for c in rec.merge_best(held, [b_ct], PROV_H100["gpu"])] == ["kept"]
    a_graph = make(1, costs=(0.4e-4,), timer=CUDA_GRAPH)  # a graph replay too, but PyTorch's: unlike as well
    assert [c.action for c in rec.merge_best(held, [b_ct, a_graph], PROV_H100["gpu"])] == ["kept"]
    a_ct = make(1, costs=(1e-4,), timer=CUDA_TIMER, error_msg="nightly re-time")  # the holder re-timed today
    changes = rec.merge_best(held, [b_ct, a_ct], PROV_H100["gpu"])
    assert [(c.action, c.timer) for c in changes] == [("faster", CUDA_TIMER)]
    # where both configs have figures of every timer, today's decide (here against the others)
    both = [make(1, costs=(1e-4,)), make(1, costs=(0.9e-4,), timer=CUDA_GRAPH),
            make(1, costs=(0.8e-4,), timer=CUDA_TIMER), make(2, costs=(0.9e-4,)),
            make(2, costs=(0.8e-4,), timer=CUDA_GRAPH), make(2, costs=(0.9e-4,), timer=CUDA_TIMER)]
    assert rec.load_best(both, WL)[0] == CONFIGS[1]


def _predating(record, knobs=("swap_ab", "consumer_n", "deep_ring")):
    """``record`` as a log line written before ``knobs`` existed (its entity lacks them)."""
    obj = json.loads(record.to_json())
    obj["config"]["entity"] = [e for e in obj["config"]["entity"] if e[0] not in knobs]
    return Record.from_json(json.dumps(obj))


def test_a_holder_written_before_a_knob_existed_is_the_config_measured_today(tmp_path):
    """The best log's holder, written before swap_ab/consumer_n/deep_ring existed, and today's
    re-time of the same config (the full entity) are one config: the re-time compares it like
    with like with tonight's configs, so a faster one takes over and a slower one does not."""
    assert (CONFIGS[1].swap_ab, CONFIGS[1].consumer_n, CONFIGS[1].deep_ring) == (0, 0, 0)  # their implied values
    old = _predating(make(1, costs=(1.2e-4,)))  # time_evaluator, before the knobs
    assert len(old.config["entity"]) == len(make(1).config["entity"]) - 3
    assert compare.config_key(old) == compare.config_key(make(1, timer=CUDA_TIMER))
    assert compare.config_key(old) != compare.config_key(make(2))
    retime = make(1, costs=(1.0e-4,), timer=CUDA_TIMER, error_msg="nightly re-time")
    held = _best_log(tmp_path, old)
    changes = rec.merge_best(held, [retime, make(2, costs=(0.9e-4,), timer=CUDA_TIMER)], PROV_H100["gpu"])
    assert [(c.action, c.before_s, c.after_s, c.timer) for c in changes] == [("faster", 1e-4, 0.9e-4, CUDA_TIMER)]
    assert rec.load_best(held, WL)[0] == CONFIGS[2]
    held = _best_log(tmp_path / "b", old)  # tonight's best within the holder's noise: the holder stays
    changes = rec.merge_best(held, [retime, make(2, costs=(0.99e-4,), timer=CUDA_TIMER)], PROV_H100["gpu"])
    assert [c.action for c in changes] == ["kept"] and rec.load_best(held, WL)[0] == CONFIGS[1]


def test_load_best_compares_configs_by_a_timer_that_measured_both():
    """A graph re-time of A is ~2 us faster for being graph-replayed: B, faster by
    time_evaluator (the timer both have), must still win."""
    a_te, a_graph = make(1, costs=(1.00e-4,)), make(1, costs=(0.95e-4,), timer=CUDA_GRAPH)
    b_te = make(2, costs=(0.97e-4,))
    assert rec.load_best([a_te, a_graph, b_te], WL) == (CONFIGS[2], pytest.approx(0.97e-4))
    # with graph figures of both, those decide (nightly's re-times of a best beside the default)
    b_graph = make(2, costs=(0.99e-4,), timer=CUDA_GRAPH)
    assert rec.load_best([a_te, a_graph, b_te, b_graph], WL)[0] == CONFIGS[1]


def _tight(seconds, spread=0.001):
    """Five repeats around ``seconds``, ``spread`` apart (relative) in the middle three."""
    return tuple(seconds * (1 + spread * f) for f in (-1, -0.5, 0, 0.5, 1))


def test_merge_never_takes_a_slower_record(tmp_path):
    held = _best_log(tmp_path, make(1, costs=_tight(1e-4)))
    before = held.read_bytes()
    changes = rec.merge_best(held, [make(2, costs=_tight(1.5e-4)), make(3, costs=(1.5e-4,))], PROV_H100["gpu"])
    assert [(c.action, c.before_s, c.after_s) for c in changes] == [("kept", 1e-4, 1e-4)]
    assert held.read_bytes() == before and not held.with_name("gpu.jsonl.bak").exists()
    assert rec.load_best(held, WL) == (CONFIGS[1], pytest.approx(1e-4))


@pytest.mark.parametrize("held_costs, new_costs, replaced", [
    ((1e-4,), (0.99e-4,), False),                        # 1% faster, one repeat each: within 2%
    ((1e-4,), (0.97e-4,), True),                         # 3%: faster
    (_tight(2e-4, 0.1), _tight(1.9e-4, 0.1), False),     # 5% faster, but the repeats spread 10%
    (_tight(2e-4, 0.1), _tight(1.7e-4, 0.1), True),      # 15%: beyond the spread
    (_tight(1e-4), _tight(0.99e-4), True),               # 1%, repeats 0.1% apart: beyond the 0.5% floor
    (_tight(1e-4), _tight(0.996e-4), False),             # 0.4%: under it
])
def test_merge_replaces_a_best_only_beyond_the_noise(tmp_path, held_costs, new_costs, replaced):
    held = _best_log(tmp_path, make(1, costs=held_costs))
    changes = rec.merge_best(held, [make(2, costs=new_costs)], PROV_H100["gpu"])
    assert [c.action for c in changes] == (["faster"] if replaced else ["kept"])
    assert rec.load_best(held, WL)[0] == (CONFIGS[2] if replaced else CONFIGS[1])


def test_merge_never_compares_a_graph_retime_with_a_time_evaluator_record(tmp_path):
    held = _best_log(tmp_path, make(1, costs=(1e-4,)))  # the tuner's best, by time_evaluator
    before = held.read_bytes()
    retime = make(2, costs=(0.98e-4,), timer=CUDA_GRAPH, error_msg="nightly re-time")  # 2 us of launches less
    assert [c.action for c in rec.merge_best(held, [retime], PROV_H100["gpu"])] == ["kept"]
    assert held.read_bytes() == before
    # graph re-times of both, one process: like with like, and 10% apart
    both = [make(1, costs=(1.0e-4,), timer=CUDA_GRAPH), make(2, costs=(0.9e-4,), timer=CUDA_GRAPH)]
    changes = rec.merge_best(held, both, PROV_H100["gpu"])
    assert [(c.action, c.before_s, c.after_s, c.timer) for c in changes] == [("faster", 1e-4, 0.9e-4, CUDA_GRAPH)]
    assert "(cuda_graph)" in changes[0].describe()
    assert [(r.config, r.timer) for r in rec.load(held)] == [(make(2).config, CUDA_GRAPH)]


# ---- pick_best never empties a log (issue 33, item 8) ---------------------------------------
def test_pick_best_refuses_a_missing_input_and_leaves_the_output(mixed_log, tmp_path):
    out = tmp_path / "best.jsonl"
    rec.pick_best(mixed_log, out)
    before = out.read_bytes()
    for typo in (tmp_path / "tune.jsnol", [mixed_log, tmp_path / "host-b.jsonl"]):
        with pytest.raises(FileNotFoundError, match="no such log"):
            rec.pick_best(typo, out)
        assert out.read_bytes() == before


def test_pick_best_refuses_to_compact_a_stale_history_to_nothing(tmp_path):
    history = tmp_path / "history.jsonl"
    rec.append(history, [make(i, costs=(1e-4 * (i + 1),), stamp="unversioned") for i in range(4)])
    before = history.read_bytes()
    with pytest.raises(ValueError, match="nothing to write from 4 record.*4 stale.*include_stale"):
        rec.pick_best(history, history)
    assert history.read_bytes() == before
    assert rec.pick_best(history, history, include_stale=True) == 1  # asked for: done, with a backup
    assert history.with_name("history.jsonl.bak").read_bytes() == before


def test_pick_best_says_what_it_left_out(mixed_log, caplog):
    rec.append(mixed_log, [make(0, costs=(9e-5,), stamp="unversioned")])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert rec.pick_best(mixed_log, mixed_log) == 3
    messages = [w.getMessage() for w in warnings_of(caplog)]
    assert len(messages) == 1 and "writing 3 of the 8 record(s)" in messages[0]
    assert "6 current record(s), 1 stale" in messages[0] and "1 failed" in messages[0]
    assert len(mixed_log.with_name("tune.jsonl.bak").read_text().splitlines()) == 8


# ---- a pathological line costs only itself (issue 33, item 8) ------------------------------
PATHOLOGICAL = ["[" * 100_000, make(0).to_json().replace("[0.0001]", "[1" + "0" * 400 + "]")]


@pytest.mark.parametrize("bad", PATHOLOGICAL, ids=["nested", "huge-int"])
def test_a_pathological_line_is_skipped_with_a_warning(tmp_path, caplog, bad):
    with pytest.raises(ValueError):
        Record.from_json(bad)
    log = tmp_path / "tune.jsonl"
    log.write_text(make(1).to_json() + "\n" + bad + "\n" + make(2).to_json() + "\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert list(rec.load(log)) == [make(1), make(2)]
        assert rec.load_best(log, WL)[0] in (CONFIGS[1], CONFIGS[2])
    assert [f"{log}:2:" in w.getMessage() for w in warnings_of(caplog)] == [True, True]


@pytest.mark.parametrize("bad", PATHOLOGICAL, ids=["nested", "huge-int"])
def test_a_pathological_unterminated_last_line_is_fenced_by_the_next_append(tmp_path, bad):
    log = tmp_path / "tune.jsonl"
    log.write_text(make(1).to_json() + "\n" + bad)  # no newline: a writer died, or is writing
    assert list(rec.load(log)) == [make(1)]
    assert rec.append(log, [make(2)]) == 1
    assert list(rec.load(log)) == [make(1), make(2)]
    assert (tmp_path / "tune.jsonl.torn").read_text() == bad + "\n"
