"""Staleness derived, not remembered (issue #30 step 5): records keyed by the hash of the code
their config generated and of the template's sources; builds check unverified records; the
restamp rewrites logs without losing a line; the code hash is deterministic across processes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from command_paths import run_python

from tc_autotune.backends.cuda import code_hash as code_keys
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.cli import records as records_command
from tc_autotune.core.results import MeasureErrorNo, MeasureResult
from tc_autotune.templates.registry import conv2d_space
from tc_autotune.core.builtin_tasks import CONV2D, DENSE
from tc_autotune.core.template import Template
from tc_autotune.database import journal, record as record_module, restamp
from tc_autotune.database import records as rec
from tc_autotune.database.records import Record
from tc_autotune.templates.tc_gemm import template as tc_gemm_template
from tc_autotune.workloads import get

ROOT = Path(__file__).resolve().parent.parent
LOGGER = "tc_autotune.database.records"
WL = get("tutorial")
SM90 = gpu_for_arch("sm_90")
SPACE = conv2d_space(WL, SM90)
CONFIGS = SPACE.sample(4, seed=3)
TODAY = CONV2D.template.source_hash
OLD, CODE, OTHER_CODE = "0" * 63 + "1", "c" * 64, "d" * 64
GPU = "NVIDIA H100 80GB HBM3"


def make(i=0, seconds=1e-4, **stamp) -> Record:
    result = MeasureResult((seconds,), timestamp=1.7e9 + i)
    return Record("cuda -arch=sm_90", WL, SPACE.to_entity(CONFIGS[i]), result, {"gpu": GPU}, **stamp)


# ---- the template's key ------------------------------------------------------------------------
def test_the_source_hash_covers_the_template_package_and_what_shapes_its_code():
    names = {name for name, _ in tc_gemm_template.source_files()}
    package = ROOT / "tc_autotune" / "templates" / "tc_gemm"
    expected = {p.relative_to(ROOT / "tc_autotune").as_posix() for p in package.rglob("*")
                if p.suffix in (".py", ".cuh") and "__pycache__" not in p.parts}
    assert expected <= names and any(n.endswith(".cuh") for n in names)
    assert {"workloads/epilogue.py", "workloads/conv2d.py", "backends/cuda/tensormap.py"} <= names
    assert CONV2D.template is DENSE.template and len(TODAY) == 64
    assert set(code_keys.toolchain()) == {"tvm", "tvm_ffi", "nvcc", "nvcc_flags"}


def test_any_edit_of_a_source_or_the_toolchain_moves_the_key(tmp_path):
    source = tmp_path / "schedule.py"
    source.write_text("x = 1\n")

    def template(chain):
        return replace(CONV2D.template, sources=lambda: [("schedule.py", source)], toolchain=lambda: chain)

    before = template({"nvcc": "13.0"}).source_hash
    assert template({"nvcc": "13.0"}).source_hash == before
    assert template({"nvcc": "12.8"}).source_hash != before  # another compiler: another cubin
    source.write_text("x = 1  # a comment\n")
    assert template({"nvcc": "13.0"}).source_hash != before  # no edit slips through


def test_a_template_without_sources_still_has_a_key():
    toy = Template("toy", {}, {}, dict, *([lambda *a: None] * 4), (), *([lambda *a: None] * 3))
    assert len(toy.source_hash) == 64


# ---- freshness ---------------------------------------------------------------------------------
@pytest.mark.parametrize("stamp, freshness", [
    (dict(source_hash=TODAY, code_hash=CODE), "fresh"),
    (dict(source_hash=TODAY), "fresh"),  # a failed build: nothing to hash, still today's
    (dict(source_hash=OLD, code_hash=CODE), "unverified"),
    (dict(source_hash=OLD, code_hash=CODE, stale_at=TODAY), "stale"),  # its code changed
    (dict(source_hash=OLD, code_hash=CODE, stale_at=OLD), "unverified"),  # found changed under other sources
    (dict(source_hash=OLD), "stale"),  # nothing can check it
    ({}, "stale"),  # format 2, unversioned
    (dict(template_version=2), "stale"),  # format 2, a retired version
])
def test_freshness_is_derived_from_the_hashes(stamp, freshness):
    record = make(**stamp)
    assert record.freshness == freshness and record.stale == (freshness == "stale")
    assert Record.from_json(record.to_json()).freshness == freshness


def test_records_of_the_last_int_version_are_current_under_the_sources_that_version_named(monkeypatch):
    legacy = make(template_version=rec.LEGACY_VERSIONS[CONV2D.name])
    monkeypatch.setitem(record_module.LEGACY_SOURCE_HASHES, "tc_gemm", TODAY)
    assert legacy.freshness == "fresh" and make(template_version=2).stale
    monkeypatch.setitem(record_module.LEGACY_SOURCE_HASHES, "tc_gemm", OLD)
    assert legacy.stale  # no code hash to check it by once the sources moved on


def test_a_measurement_stamps_its_record_with_both_keys():
    stamped = rec.stamped("sm_90", SPACE, CONFIGS[0], MeasureResult((1e-4,), code_hash=CODE))
    assert (stamped.source_hash, stamped.code_hash, stamped.freshness) == (TODAY, CODE, "fresh")
    code_keys.remember(WL, CONFIGS[1], "sm_90", OTHER_CODE)  # built in this process (nightly's re-times)
    assert rec.stamped("sm_90", SPACE, CONFIGS[1], MeasureResult((1e-4,))).code_hash == OTHER_CODE
    assert rec.stamped("sm_90", SPACE, CONFIGS[2], MeasureResult((1e-4,))).code_hash is None


# ---- selection: a build checks an unverified record ----------------------------------------------
def test_a_build_skips_an_unverified_best_whose_code_changed_for_the_next(tmp_path, caplog):
    log = tmp_path / "tune.jsonl"
    rec.append(log, [make(0, 1e-4, source_hash=OLD, code_hash=CODE),        # best, but its code changed
                     make(1, 2e-4, source_hash=OLD, code_hash=OTHER_CODE),  # unverified, same code
                     make(2, 3e-4, source_hash=TODAY, code_hash=CODE)])
    asked = []

    def verify(record, config):
        asked.append(config)
        return record.code_hash == OTHER_CODE

    assert rec.load_best(log, WL, "sm_90") == (CONFIGS[0], 1e-4)  # no build: presumed current
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert rec.load_best(log, WL, "sm_90", verify=verify) == (CONFIGS[1], 2e-4)
        assert rec.load_best(log, WL, "sm_90", verify=verify) == (CONFIGS[1], 2e-4)
    assert asked == [CONFIGS[0], CONFIGS[1]] * 2
    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(said) == 1 and "code its config generates changed" in said[0]  # once per process
    assert rec.load_best(log, WL, "sm_90", verify=lambda r, c: False) == (CONFIGS[2], 3e-4)  # fresh: not asked


def test_apply_passes_the_check_to_the_records(tmp_path):
    from tc_autotune.api import apply

    log = tmp_path / "tune.jsonl"
    rec.append(log, [make(0, 1e-4, source_hash=OLD, code_hash=CODE), make(1, 2e-4, source_hash=TODAY)])
    logs = ((str(log), False),)
    assert apply.choose_config(WL, SM90, warn=False, logs=logs).config == CONFIGS[0]
    assert apply.choose_config(WL, SM90, warn=False, logs=logs, verify=lambda r, c: False).config == CONFIGS[1]


# ---- restamping ----------------------------------------------------------------------------------
def _fake_hashes(table):
    """hash_codes for restamp: config i's code hash from ``table`` (None: cannot be generated)."""
    def hash_codes(keys):
        out = {}
        for key in keys:
            config = SPACE.from_dict(dict(key.knobs))
            out[key] = table.get(CONFIGS.index(config))
        return out
    return hash_codes


def _log_with_every_kind(path: Path) -> list[bytes]:
    lines = [make(0, source_hash=TODAY, code_hash=CODE).to_json().encode(),    # current
             make(1, source_hash=TODAY).to_json().encode(),                   # current, code hash to add
             make(2, source_hash=OLD, code_hash=CODE).to_json().encode(),     # unverified, same code
             make(3, source_hash=OLD, code_hash=CODE).to_json().encode(),     # unverified, code changed
             b"\xff\xfe not a record",                                        # kept byte for byte
             make(0, 5e-4, template_version=2).to_json().encode()]           # stale before
    path.write_bytes(b"\n".join(lines) + b"\n" + b'{"input": ["cuda')        # an unfinished last line
    return lines


def test_restamp_checks_unverified_records_and_loses_no_line(tmp_path):
    log = tmp_path / "tune.jsonl"
    lines = _log_with_every_kind(log)
    before = log.read_bytes()
    hashes = _fake_hashes({1: OTHER_CODE, 2: CODE, 3: OTHER_CODE})
    dry = restamp.restamp(log, hashes, dry_run=True)[0]
    assert log.read_bytes() == before and not dry.written
    (report,) = restamp.restamp(log, hashes)
    assert (report.records, report.current, report.stamped, report.verified, report.stale) == (5, 1, 1, 1, 1)
    assert [r.config["index"] for r in report.changed] == [SPACE.index(CONFIGS[3])]
    assert report.written and log.with_name("tune.jsonl.bak").read_bytes() == before
    after = log.read_bytes().split(b"\n")
    assert len(after) == len(lines) + 1 and after[-1] == b'{"input": ["cuda'
    assert [after[i] for i in (0, 4, 5)] == [lines[i] for i in (0, 4, 5)]
    for i, fields in ((1, {"code_hash": OTHER_CODE}), (2, {"source_hash": TODAY}), (3, {"stale_at": TODAY})):
        old, new = json.loads(lines[i]), json.loads(after[i])
        assert new == {**old, **fields}  # nothing else in the line changed
    got = [Record.from_json(line.decode()) for line in after[:4]]
    assert [r.freshness for r in got] == ["fresh", "fresh", "fresh", "stale"]
    (again,) = restamp.restamp(log, hashes)  # nothing left to do
    assert not again.written and (again.current, again.stale, again.changed) == (3, 2, [])


def test_restamp_migrates_the_last_int_version_while_its_sources_are_today(tmp_path, monkeypatch):
    log = tmp_path / "history.jsonl"
    legacy, retired = make(0, template_version=1), make(1, template_version=2)
    rec.append(log, [legacy, retired])
    monkeypatch.setitem(record_module.LEGACY_SOURCE_HASHES, "tc_gemm", TODAY)
    (report,) = restamp.restamp(log, _fake_hashes({0: CODE, 1: OTHER_CODE}))
    assert (report.stamped, report.stale) == (1, 1)
    first, second = rec.load(log)
    assert (first.source_hash, first.code_hash, first.template_version) == (TODAY, CODE, 1)
    assert (second.source_hash, second.stale) == (None, True)
    monkeypatch.setitem(record_module.LEGACY_SOURCE_HASHES, "tc_gemm", OLD)
    assert not next(rec.load(log)).stale  # stamped: it no longer depends on the retired versions


def test_a_rewrite_never_loses_an_append_made_meanwhile(tmp_path, monkeypatch):
    """An append that opened the log before a rewrite renamed the new file over it, and waited for
    the lock, goes to the new file (it would be lost in the old one)."""
    import fcntl

    log = tmp_path / "shared.jsonl"
    rec.append(log, [make(0, source_hash=OLD, code_hash=CODE)])
    reading, waiting, appended = threading.Event(), threading.Event(), []
    real_flock = fcntl.flock

    def flock(fd, operation):
        if threading.current_thread() is writer and operation == fcntl.LOCK_EX:
            waiting.set()  # the writer has the old file open and asks for its lock
        return real_flock(fd, operation)

    def transform(data):
        reading.set()
        waiting.wait()
        return data.replace(OLD.encode(), TODAY.encode())

    monkeypatch.setattr(fcntl, "flock", flock)
    writer = threading.Thread(target=lambda: reading.wait() and appended.append(rec.append(log, [make(1)])))
    writer.start()
    assert journal.rewrite(log, transform)
    writer.join()
    assert appended == [1] and [r.config["index"] for r in rec.load(log)] == [SPACE.index(c) for c in CONFIGS[:2]]
    assert next(rec.load(log)).source_hash == TODAY


@pytest.mark.parametrize("argv, message", [
    (["--restamp"], "required: logs"),
    (["--restamp", "missing.jsonl"], "missing.jsonl"),
    (["--dry-run", "{log}"], "--dry-run goes with --restamp"),
    (["--restamp", "--jobs", "0", "{log}"], "--jobs"),
    (["--restamp", "--stale-only", "{log}"], "--stale-only"),
    (["--restamp", "--train-zero-shot", "{log}"], "separate steps"),
])
def test_restamp_arguments_are_checked_in_one_line(tmp_path, capsys, argv, message):
    log = tmp_path / "log.jsonl"
    rec.append(log, [make(0)])
    with pytest.raises(SystemExit) as exit:
        records_command.main([a.format(log=log) for a in argv])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


# ---- with TVM: the code hash of what the template generates --------------------------------------
PROBES = (("tutorial", None), ("dense:m=200,n=136,k=264,b=nk", dict(intrinsic="mma", offset_a=0, offset_b=0,
                                                                       stages=3, frag_buffers=2)))
_HASHES = """
import json, sys
from tc_autotune.api.kernel import code_hash_of
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.core import tasks
from tc_autotune.templates.tc_gemm.warp_specialized import starting_configs
from tc_autotune.workloads import get

def configs():
    gpu = gpu_for_arch("sm_90")
    for name in ("tutorial", "dense:m=200,n=136,k=264,b=nk", "rfc-3x3-b256"):
        wl = get(name)
        space = tasks.of(wl).space(wl, gpu)
        yield wl, space.default_config(), gpu
    wl = get("tutorial")
    space = tasks.of(wl).space(wl, gpu)
    for config in starting_configs(space)[:2]:  # warp-specialized (TMA im2col among them)
        yield wl, config, gpu

# the hashes, and what this process's hash seed makes of a string (two seeds: two values)
print(json.dumps({"hashes": [code_hash_of(wl, c, gpu) for wl, c, gpu in configs()],
                  "seed_probe": hash("tc_autotune code hash")}))
"""


@pytest.mark.golden
def test_the_code_hash_is_deterministic_across_processes(tmp_path):
    """The golden check that replaced the fingerprints: the same config hashes alike in any
    process (hash seeds differ), so a record's key never moves by itself.  One process is a new
    interpreter (PYTHONHASHSEED=1); the other a fork of the tests' script server (``run_python``,
    with the hash seed that server started with: no second TVM import), or, should that seed
    make the same string hash, a second new interpreter (PYTHONHASHSEED=2)."""
    pytest.importorskip("tvm")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    script = tmp_path / "code_hashes.py"
    script.write_text(_HASHES)

    def new_interpreter(seed: str) -> dict:
        return json.loads(subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True,
                                         env={**env, "PYTHONHASHSEED": seed}).stdout)

    first = new_interpreter("1")
    code, out, err = run_python(script)
    assert code == 0, err
    second = json.loads(out)
    if second["seed_probe"] == first["seed_probe"]:
        second = new_interpreter("2")
    assert first["seed_probe"] != second["seed_probe"]  # two hash seeds: the check checks something
    runs = [first["hashes"], second["hashes"]]
    assert runs[0] == runs[1] and len(set(runs[0])) == len(runs[0]) == 5


def test_restamp_from_the_command_line_checks_the_real_code(tmp_path, capsys):
    pytest.importorskip("tvm")
    from tc_autotune.api.kernel import code_hash_of

    default = SPACE.default_config()
    today = code_hash_of(WL, default, SM90)
    entity = SPACE.to_entity(default)
    same = Record("cuda -arch=sm_90", WL, entity, MeasureResult((1e-4,)), {"gpu": GPU}, source_hash=OLD, code_hash=today)
    other = replace(same, config=SPACE.to_entity(CONFIGS[0]), result=MeasureResult((2e-4,)))  # CONFIGS[0]'s code differs
    failed = Record("cuda -arch=sm_90", WL, entity, MeasureResult((), MeasureErrorNo.BUILD_ERROR), {"gpu": GPU})
    log = tmp_path / "tune.jsonl"
    rec.append(log, [same, other, failed])
    assert records_command.main(["--restamp", str(log)]) == 0
    out = capsys.readouterr().out
    assert "3 records: 0 current, 0 stamped, 1 verified, 1 changed (now stale), 1 stale before" in out, out
    assert f"changed: {WL} config {SPACE.index(CONFIGS[0])}" in out
    assert [r.freshness for r in rec.load(log)] == ["fresh", "stale", "stale"]


def test_a_build_uses_an_unverified_record_only_where_its_code_is_todays(tmp_path, caplog):
    pytest.importorskip("tvm")
    import tc_autotune as tc
    from tc_autotune.api.kernel import code_hash_of

    default = SPACE.default_config()
    today = code_hash_of(WL, default, SM90)
    changed = Record("cuda -arch=sm_90", WL, SPACE.to_entity(CONFIGS[0]), MeasureResult((1e-4,)), {"gpu": GPU},
                     source_hash=OLD, code_hash=OTHER_CODE)
    same = Record("cuda -arch=sm_90", WL, SPACE.to_entity(default), MeasureResult((2e-4,)), {"gpu": GPU},
                  source_hash=OLD, code_hash=today)
    log = tmp_path / "tune.jsonl"
    rec.append(log, [changed, same])
    with caplog.at_level(logging.WARNING, logger=LOGGER), tc.apply_history_best(log):
        kernel = tc.build_conv2d(WL, target="sm_90")
    assert kernel.config == default and kernel.code_hash == today
    assert any("code its config generates changed" in r.getMessage() for r in caplog.records)
