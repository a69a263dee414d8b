"""The scripts' input checks (issue #16): every bad path or number is one line on stderr and
exit 2 before the GPU is touched or a kernel is built; no GPU is exit 3; every flag is
documented (README.md and docs/)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tc_autotune.cli import common as cli
from tc_autotune.tuning import nightly
from tc_autotune.backends.cuda.gpu import local_gpu
from command_paths import run_script as run

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # root writes read-only files



def built_nothing(cache: Path) -> bool:
    """Nothing was compiled with ``TC_AUTOTUNE_CACHE_DIR=cache``: every cubin and built module
    lands there (behaviour, where a wall-clock limit flaked on loaded CI machines)."""
    return not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))


def assert_one_line(err, *needles):
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


# ---- tune.py ------------------------------------------------------------------------
def _directory(tmp_path):
    (tmp_path / "logs").mkdir()
    return tmp_path / "logs", "is a directory", cli.EXIT_BAD_INPUT


def _read_only(tmp_path):
    log = tmp_path / "ro.jsonl"
    log.write_text("")
    log.chmod(0o444)
    return log, "permission denied", cli.EXIT_IO_ERROR


def _parent_is_a_file(tmp_path):
    (tmp_path / "plain").write_text("not a folder")
    return tmp_path / "plain" / "sub" / "t.jsonl", "is not a directory", cli.EXIT_BAD_INPUT


@pytest.mark.parametrize("make_log", [
    _directory,
    pytest.param(_read_only, marks=pytest.mark.skipif(AS_ROOT, reason="root can write read-only files")),
    _parent_is_a_file,
])
def test_tune_refuses_a_log_it_cannot_append_to_before_measuring(tmp_path, make_log):
    log, needle, expected = make_log(tmp_path)
    before = sorted(tmp_path.rglob("*")), (log.read_text() if log.is_file() else None)
    code, out, err = run("tune.py", "--workload", "rfc-3x3-b1", "--log", log)
    assert code == expected
    assert_one_line(err, "--log", needle)
    assert (sorted(tmp_path.rglob("*")), (log.read_text() if log.is_file() else None)) == before


def test_read_only_log_and_folder_are_refused_by_the_access_check(tmp_path, monkeypatch):
    """What a non-root user sees for a read-only log or folder (root passes os.access): a
    permissions problem (exit 9), not a bad value (exit 2)."""
    (tmp_path / "ro.jsonl").write_text("")
    monkeypatch.setattr(cli.os, "access", lambda path, mode: False)
    with pytest.raises(cli.NoAccess, match="cannot be appended to: permission denied"):
        cli.appendable_log(str(tmp_path / "ro.jsonl"))
    with pytest.raises(cli.NoAccess, match="is not writable"):
        cli.appendable_log(str(tmp_path / "sub" / "new.jsonl"))


def test_tune_accepts_a_log_in_a_folder_that_appends_will_create(tmp_path):
    log = tmp_path / "new" / "deeper" / "t.jsonl"
    assert cli.appendable_log(str(log)) == str(log)
    assert not (tmp_path / "new").exists()  # checked, not created


@pytest.mark.parametrize("args,needle", [
    (["--transfer-log", "{tmp}/typo.jsonl"], "typo.jsonl' does not exist"),
    (["--timeout", "nan"], "'nan' must be a finite number"),
    (["--timeout", "inf"], "'inf' must be a finite number"),
    (["--timeout", "-1"], "'-1' must be positive"),
    (["--seed", "-1"], "'-1' must not be negative"),
    (["--seed", "1.5"], "'1.5' is not an integer"),
    (["--batch-size", "0"], "'0' must be positive"),
    (["--early-stopping", "-3"], "'-3' must be positive"),
    (["--build-workers", "0"], "'0' must be positive"),
])
def test_tune_bad_values_exit_2_and_create_no_log(tmp_path, args, needle):
    log = tmp_path / "t.jsonl"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code, out, err = run("tune.py", "--workload", "rfc-3x3-b1", "--log", log, *args)
    assert code == 2
    assert_one_line(err, args[0], needle)
    assert not log.exists()


def test_argument_errors_do_not_import_tvm(tmp_path):
    code = ("import runpy, sys\n"
            f"sys.argv = ['tune.py', '--workload', 'tutorial', '--log', {str(tmp_path)!r}]\n"
            f"try:\n    runpy.run_path({str(SCRIPTS / 'tune.py')!r}, run_name='__main__')\n"
            "except SystemExit as exit:\n    print(exit.code, 'tvm' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["2", "False"], proc.stderr


# ---- benchmark.py -------------------------------------------------------------------
@pytest.mark.parametrize("args,needle", [
    (["--workload", "bogus"], "unknown workload preset 'bogus'"),
    (["--workload", "n=1,h=8,c=3,k=8,r=3,zz=1"], "unknown key 'zz'"),
    (["--log", "{tmp}/missing.jsonl"], "missing.jsonl' does not exist"),
    (["--curve-log", "{tmp}/missing.jsonl"], "missing.jsonl' does not exist"),
    (["--job", "{tmp}/missing.toml"], "missing.toml' does not exist"),
    (["--job", "{tmp}/bad.toml"], "not valid TOML"),
    (["--repeat", "-1"], "'-1' must be positive"),
    (["--repeat", "0"], "'0' must be positive"),
    (["--min-repeat-ms", "nan"], "'nan' must be a finite number"),
    (["--min-repeat-ms", "-5"], "'-5' must not be negative"),
    (["--sweep", "stages=9"], "[9] not among its values"),
    (["--sweep", "colour=1"], "expected KNOB=V1,V2"),
    (["--sweep", "stages=1", "--sweep", "stages=2"], "stages given twice"),
    (["--pdl", "--sweep", "stages=1"], "--pdl: not with --sweep"),
    (["--json", "{tmp}"], "is a directory"),
    (["--plot-dir", "{tmp}/bad.toml"], "is not a directory"),
])
def test_benchmark_bad_input_exits_2_with_one_line(tmp_path, args, needle):
    (tmp_path / "bad.toml").write_text("workloads = [")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code, out, err = run("benchmark.py", *args, env={"TC_AUTOTUNE_CACHE_DIR": str(tmp_path / "cache")})
    assert code == 2
    assert_one_line(err, needle)
    assert built_nothing(tmp_path / "cache")


@pytest.mark.skipif(local_gpu() is not None, reason="this machine has a GPU")
def test_benchmark_without_gpu_exits_3_before_building(tmp_path):
    code, out, err = run("benchmark.py", "--workload", "rfc-3x3-b1", "--json", tmp_path / "rows.json",
                         env={"TC_AUTOTUNE_CACHE_DIR": str(tmp_path / "cache")})
    assert code == 3
    assert_one_line(err, "no CUDA GPU")
    assert built_nothing(tmp_path / "cache")  # no kernel was built first
    assert not (tmp_path / "rows.json").exists()


# ---- nightly.py ---------------------------------------------------------------------
def _job(tmp_path, log='logs/n.jsonl', extra=""):
    path = tmp_path / "job.toml"
    path.write_text(f'log = "{log}"\nbudget_minutes = 1\n{extra}workloads = ["rfc-3x3-b1"]\n')
    return path


@pytest.mark.parametrize("value,needle", [("nan", "must be a finite number"), ("inf", "must be a finite number"),
                                          ("-1", "must be positive"), ("0", "must be positive")])
def test_nightly_bad_budget_exits_2(tmp_path, value, needle):
    code, out, err = run("nightly.py", _job(tmp_path), "--budget-minutes", value)
    assert code == 2
    assert_one_line(err, "--budget-minutes", needle)


@pytest.mark.parametrize("setup,extra,needle", [
    (lambda t: (t / "logs" / "n.jsonl").mkdir(parents=True), "", "log: "),
    (lambda t: (t / "best").write_text(""), 'best_log_dir = "best"\n', "best_log_dir: "),
    (lambda t: (t / "reports").write_text(""), 'report_dir = "reports"\n', "report_dir: "),
])
def test_nightly_unwritable_job_paths_exit_2_before_the_lock(tmp_path, setup, extra, needle):
    setup(tmp_path)
    code, out, err = run("nightly.py", _job(tmp_path, extra=extra))
    assert code == 2
    assert_one_line(err, needle)
    assert not list(tmp_path.rglob("*.lock"))


def test_nightly_missing_job_exits_2(tmp_path):
    code, out, err = run("nightly.py", tmp_path / "nope.toml")
    assert code == 2
    assert_one_line(err, "nope.toml' does not exist")


# ---- shared pieces ------------------------------------------------------------------
def test_exit_codes_agree_with_the_nightly_module():
    assert (cli.EXIT_OK, cli.EXIT_BAD_INPUT, cli.EXIT_NO_GPU, cli.EXIT_LOCKED, cli.EXIT_REGRESSION) == (
        nightly.EXIT_OK, nightly.EXIT_BAD_JOB, nightly.EXIT_NO_GPU, nightly.EXIT_LOCKED, nightly.EXIT_REGRESSION)


def test_path_checks_create_and_change_nothing(tmp_path):
    log = tmp_path / "a.jsonl"
    log.write_text("x\n")
    mtime = log.stat().st_mtime_ns
    assert cli.appendable_log(str(log)) == str(log) and cli.writable_file(str(log)) == str(log)
    assert log.read_text() == "x\n" and log.stat().st_mtime_ns == mtime
    assert cli.writable_dir(str(tmp_path / "x" / "y")) and not (tmp_path / "x").exists()
    assert cli.existing_path(str(tmp_path)) == str(tmp_path)  # a folder of logs is fine
    with pytest.raises(cli.BadValue, match="does not exist"):
        cli.existing_path(str(tmp_path / "nope"))


# ---- the docs document every flag ----------------------------------------------------
HELP_ARGS = {}  # script name -> arguments that make it print its help, where --help alone does not


def _option_strings(help_text: str) -> set:
    """The option strings of an argparse help: each option line starts with two spaces and a dash."""
    options = set()
    for line in help_text.splitlines():
        match = re.match(r"  (-\S.*?)(?:\s{2,}|$)", line)
        if match:
            options.update(re.findall(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)", match.group(1)))
    return options - {"-h", "--help"}


def _documented_code() -> str:
    """The text of the code spans (`...`) of the README and the guides under docs/: where flags
    are documented (each command's table in docs/commands.md).  Not docs/BENCHMARKS.md, a dated
    log whose flags were the scripts' when measured."""
    docs = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "BENCHMARKS.md")]
    return "\n".join(span for path in docs for span in re.findall(r"`([^`\n]+)`", path.read_text()))


def test_option_strings_are_read_from_the_help():
    code, out, err = run("tune.py", "--help")
    assert {"--workload", "--no-baseline", "--no-cudnn", "-v", "--verbose", "--tuner"} <= _option_strings(out)
    assert "-h" not in _option_strings(out) and "-arch" not in _option_strings("  --x  pass -arch=sm_90")


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_every_flag_and_the_exit_codes_are_documented(script):
    code, out, err = run(script, *HELP_ARGS.get(script, ["--help"]))
    assert code == 0, err
    options = _option_strings(out)
    documented = _documented_code()
    missing = sorted(o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", documented))
    assert not missing, f"{script}: flags missing from README.md and docs/ (in `code`): {missing}"
    assert "Exit codes" in out, f"{script}: the docstring (its --help) should list the exit codes"


# ---- study.py -----------------------------------------------------------------------
def test_study_bad_job_exits_2(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text('workloads = ["n=1,h=8,c=3"]\n')  # no k
    code, out, err = run("study.py", job)
    assert code == 2
    assert_one_line(err, "run_study.py")


@pytest.mark.skipif(local_gpu() is not None, reason="needs a machine without a GPU")
def test_study_without_a_gpu_exits_3_and_writes_nothing(tmp_path):
    code, out, err = run("study.py", ROOT / "lab" / "heldout.toml", "--out", tmp_path / "s")
    assert code == 3
    assert_one_line(err, "no CUDA GPU")
    assert not (tmp_path / "s").exists()


def test_benchmark_a_timer_error_is_one_line_and_exit_10(monkeypatch, capsys):
    """The one timer's error (a kernel that faults when replayed, a capture CUDA refused) ends
    the benchmark with one line, not a traceback."""
    import types

    from tc_autotune.backends.cuda import gpu as gpu_module
    from tc_autotune.backends.cuda.gpu import gpu_for_arch
    from tc_autotune.backends.cuda.timer import TimerError
    from tc_autotune.cli import benchmark as command
    from tc_autotune.tuning import benchmark

    def fails(*args, **kwargs):
        raise TimerError("cuGraphLaunch failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")

    monkeypatch.setattr(gpu_module, "probe_local_gpu", lambda: types.SimpleNamespace(gpu=gpu_for_arch("sm_90")))
    monkeypatch.setattr(benchmark, "benchmark", fails)
    assert command.main(["--workload", "tutorial"]) == cli.EXIT_TIMER == 10
    assert capsys.readouterr().err.strip().splitlines() == [
        "tc-benchmark: cuGraphLaunch failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"]
