"""A path the user may not read or write (issue #33): one line on stderr and exit 9
(``cli.EXIT_IO_ERROR``) in every script, never a PermissionError traceback and exit 1, and
nothing written.

The chmod 000 tests need a process that chmod restricts: not root (CAP_DAC_OVERRIDE reads and
enters any folder), unless its capabilities were dropped (``setpriv --bounding-set=-dac_override,
-dac_read_search``); they skip otherwise.  The in-process tests make the same errors by hand
and run as anyone."""

import errno
import os
import tempfile
from pathlib import Path

import pytest

from tc_autotune.cli import common as cli
from tc_autotune.cli import records as records_command
from tc_autotune.cli import tune as tune_command
from command_paths import run_script as run

JOB = 'log = "logs/n.jsonl"\nreport_dir = "reports"\nbest_log_dir = "best"\nworkloads = ["rfc-3x3-b1"]\n'


def _chmod_restricts() -> bool:
    """Whether chmod 000 keeps this process out of a folder (as root it does not)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return True
    with tempfile.TemporaryDirectory() as scratch:
        locked = Path(scratch, "locked")
        locked.mkdir()
        locked.chmod(0)
        try:
            os.listdir(locked)
            return False
        except PermissionError:
            return True
        finally:
            locked.chmod(0o700)


needs_chmod = pytest.mark.skipif(not _chmod_restricts(), reason="root: chmod 000 does not restrict")



def assert_io_error(code, err, *needles):
    assert code == cli.EXIT_IO_ERROR, (code, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "permission denied" in err.lower(), err
    for needle in needles:
        assert needle in err, err


@pytest.fixture
def locked(tmp_path):
    """A folder nobody may enter (mode 000), with a job file and a log inside; opened again at
    teardown so pytest can remove it."""
    folder = tmp_path / "locked"
    folder.mkdir()
    (folder / "job.toml").write_text(JOB)
    (folder / "log.jsonl").write_text("")
    folder.chmod(0)
    yield folder
    folder.chmod(0o700)


# ---- chmod 000: every script, every kind of path ----------------------------------------
@needs_chmod
@pytest.mark.parametrize("script,args,needle", [
    ("tune.py", ["--workload", "rfc-3x3-b1", "--log", "{locked}/t.jsonl"], "argument --log"),
    ("tune.py", ["--workload", "rfc-3x3-b1", "--transfer-log", "{locked}/log.jsonl"], "argument --transfer-log"),
    ("benchmark.py", ["--log", "{locked}/log.jsonl"], "argument --log"),
    ("benchmark.py", ["--json", "{locked}/rows.json"], "argument --json"),
    ("benchmark.py", ["--plot-dir", "{locked}/plots"], "argument --plot-dir"),
    ("benchmark.py", ["--job", "{locked}/job.toml"], "argument --job"),
    ("nightly.py", ["{locked}/job.toml"], "argument job"),
    ("records.py", ["{locked}/log.jsonl"], "argument logs"),
    ("records.py", ["{locked}"], "argument logs"),
    ("study.py", ["{locked}/job.toml"], "argument job"),
    ("study.py", ["{tmp}/job.toml", "--report", "{locked}/study.md"], "argument --report"),
    ("study.py", ["{tmp}/job.toml", "--out", "{locked}/out"], "argument --out"),
    ("benchmark_models.py", ["--json", "{locked}/rows.json"], "argument --json"),
])
def test_a_path_in_a_folder_one_may_not_enter_is_exit_9(tmp_path, locked, script, args, needle):
    (tmp_path / "job.toml").write_text(JOB)
    args = [a.replace("{locked}", str(locked)).replace("{tmp}", str(tmp_path)) for a in args]
    code, out, err = run(script, *args)
    assert_io_error(code, err, needle, str(locked))


@needs_chmod
@pytest.mark.parametrize("key", ["log", "report_dir", "best_log_dir"])
def test_nightly_job_paths_in_a_locked_folder_are_exit_9_before_the_lock(tmp_path, locked, key):
    paths = {"log": "logs/n.jsonl", "report_dir": "reports", "best_log_dir": "best"}
    paths[key] = f"locked/{key}" + (".jsonl" if key == "log" else "")
    job = tmp_path / "job.toml"
    job.write_text("".join(f'{k} = "{v}"\n' for k, v in paths.items()) + 'workloads = ["rfc-3x3-b1"]\n')
    code, out, err = run("nightly.py", job)
    assert_io_error(code, err, str(job))
    assert not list(tmp_path.rglob("*.lock"))


@needs_chmod
def test_study_best_log_dir_in_a_locked_folder_is_exit_9(tmp_path, locked):
    job = tmp_path / "job.toml"
    job.write_text('best_log_dir = "locked/study"\nworkloads = ["rfc-3x3-b1"]\n')
    code, out, err = run("study.py", job)
    assert_io_error(code, err, "best_log_dir")


@needs_chmod
def test_an_unreadable_job_file_is_exit_9(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text(JOB)
    job.chmod(0)
    for script in ("nightly.py", "study.py"):
        code, out, err = run(script, job)
        assert_io_error(code, err, str(job))


# ---- in process: the same errors, made by hand (any user) --------------------------------
def test_the_parser_turns_a_permission_error_of_a_path_check_into_exit_9(monkeypatch, capsys):
    """What Path.exists raises for a path inside a folder one may not enter."""

    def denied(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(cli.Path, "is_dir", denied)
    monkeypatch.setattr(cli.Path, "exists", denied)
    with pytest.raises(SystemExit) as exit:
        tune_command.main(["--workload", "rfc-3x3-b1", "--log", "/srv/locked/t.jsonl"])
    err = capsys.readouterr().err
    assert_io_error(exit.value.code, err, "argument --log", "'/srv/locked/t.jsonl'")


def test_a_log_the_access_check_refuses_is_exit_9_not_2(tmp_path, monkeypatch, capsys):
    log = tmp_path / "t.jsonl"
    log.write_text("")
    monkeypatch.setattr(cli.os, "access", lambda path, mode: False)
    with pytest.raises(SystemExit) as exit:
        tune_command.main(["--workload", "rfc-3x3-b1", "--log", str(log)])
    assert_io_error(exit.value.code, capsys.readouterr().err, "argument --log", str(log))


def test_an_io_error_inside_a_command_is_one_line_and_exit_9(tmp_path, monkeypatch, capsys):
    """records.py on a folder with a log it may not read: raised while reading, after the checks."""
    from tc_autotune.database import records

    def unreadable(logs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "a.jsonl"))

    monkeypatch.setattr(records, "summarize", unreadable)
    with pytest.raises(SystemExit) as exit:
        records_command.main([str(tmp_path)])
    assert_io_error(exit.value.code, capsys.readouterr().err, "tc-records: ", "a.jsonl")


@pytest.mark.parametrize("error", [
    ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),  # not about a path
    FileNotFoundError(errno.ENOENT, "No such file or directory", "nvcc"),  # a missing program
])
def test_other_os_errors_are_not_taken_for_io_errors(error):
    with pytest.raises(type(error)):
        with cli.io_errors_exit("tc-x"):
            raise error


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.ENOSPC])
def test_io_errors_about_a_path_exit_9(code, capsys):
    with pytest.raises(SystemExit) as exit:
        with cli.io_errors_exit("tc-x"):
            raise OSError(code, os.strerror(code), "/data/report.md")
    assert exit.value.code == cli.EXIT_IO_ERROR
    err = capsys.readouterr().err
    assert err == f"tc-x: '/data/report.md': {os.strerror(code).lower()}\n"


def test_the_io_error_code_is_distinct():
    codes = [cli.EXIT_OK, cli.EXIT_BAD_INPUT, cli.EXIT_NO_GPU, cli.EXIT_NOTHING_VALID, cli.EXIT_LOCKED,
             cli.EXIT_REGRESSION, cli.EXIT_DEVICES_LOST, cli.EXIT_INTERRUPTED, 1, 7]  # 1: a traceback; 7: study
    assert cli.EXIT_IO_ERROR not in codes
