"""Job files are checked whole against their schema (issue #33): a value that would silently
change what a run does (a NaN threshold turns regression detection off, 2.5 trials become 2,
a mistyped entry key is ignored) or crash it later (a non-string path, non-UTF-8 bytes, a
log that is a folder) is one line naming the file and the key, exit 2, in every command that
reads job files; every shipped job file passes."""

from pathlib import Path

import pytest

from tc_autotune.tuning import jobs
from command_paths import run_script as run

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = 'workloads = ["rfc-3x3-b1"]\n'



def write(tmp_path, text, name="job.toml"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


BAD = [
    ("regression_threshold = nan\n" + WORKLOADS, "regression_threshold must be a positive number (finite), got nan"),
    ("budget_minutes = nan\n" + WORKLOADS, "budget_minutes must be a positive number (finite), got nan"),
    ("budget_minutes = inf\n" + WORKLOADS, "budget_minutes must be a positive number (finite), got inf"),
    ("regression_threshold = 0\n" + WORKLOADS, "regression_threshold must be a positive number, got 0"),
    ('budget_minutes = "60"\n' + WORKLOADS, "budget_minutes must be a positive number, got '60'"),
    ("trials = 2.5\n" + WORKLOADS, "trials must be a positive integer, got 2.5"),
    ("trials = true\n" + WORKLOADS, "trials must be a positive integer, got True"),
    ("trials = 1000000000000\n" + WORKLOADS, "trials must be at most 1000000, got 1000000000000"),
    ('workloads = [{ name = "rfc-3x3-b1", trials = 2.5 }]\n',
     "trials of 'rfc-3x3-b1' must be a positive integer, got 2.5"),
    ('workloads = [{ name = "rfc-3x3-b1", trails = 5 }]\n', "workloads[0] ('rfc-3x3-b1'): unknown key(s) trails"),
    ("trails = 5\n" + WORKLOADS, "unknown key(s) trails"),
    ("log = 5\n" + WORKLOADS, "log must be a path (a non-empty string, relative to the job file), got 5"),
    ('log = ""\n' + WORKLOADS, "log must be a path"),
    ('report_dir = ["reports"]\n' + WORKLOADS, "report_dir must be a path"),
    ("best_log_dir = 1.5\n" + WORKLOADS, "best_log_dir must be a path"),
    ('log = "/tmp"\n' + WORKLOADS, "log: '/tmp' is a directory"),
    ('log = "."\n' + WORKLOADS, "log: '.' is a directory"),
    ('workloads = [{ name = "rfc-3x3-b99999999999999" }]\n', "the kernels index with 32-bit integers"),
    (b'log = "\xff\xfe.jsonl"\n' + WORKLOADS.encode(), "is not UTF-8 text"),
]


@pytest.mark.parametrize("text,needle", BAD)
def test_bad_values_are_job_errors_naming_the_key(tmp_path, text, needle):
    with pytest.raises(jobs.JobError) as err:
        jobs.load_job(write(tmp_path, text))
    assert needle in str(err.value) and str(write(tmp_path, text)) in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text,needle", [
    ('{"regression_threshold": NaN, "workloads": ["rfc-3x3-b1"]}', "regression_threshold must be a positive number"),
    ('{"log": null, "workloads": ["rfc-3x3-b1"]}', "log must be a path"),
    ('{"workloads": [{"name": "rfc-3x3-b1", "trails": 5}]}', "unknown key(s) trails"),
])
def test_json_job_files_are_checked_the_same(tmp_path, text, needle):
    with pytest.raises(jobs.JobError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        jobs.load_job(write(tmp_path, text, "job.json"))


@pytest.mark.parametrize("text,needle", [BAD[0], BAD[5], BAD[9], BAD[11], BAD[-1]])
@pytest.mark.parametrize("command", [["nightly.py", "{job}", "--report-only"], ["benchmark.py", "--job", "{job}"],
                                     ["study.py", "{job}"]])
def test_every_command_that_reads_jobs_exits_2_with_one_line(tmp_path, text, needle, command):
    job = write(tmp_path, text)
    code, out, err = run(*[str(job) if a == "{job}" else a for a in command])
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert needle in err and str(job) in err, err


def test_a_log_that_is_a_folder_creates_no_lock_beside_it(tmp_path):
    """log = "<folder>" used to put the lock at "<folder>.lock" (log = "/tmp": /tmp.lock)."""
    (tmp_path / "logs").mkdir()
    job = write(tmp_path, 'log = "logs"\n' + WORKLOADS)
    code, out, err = run("nightly.py", job, "--report-only")
    assert code == 2 and "log: 'logs' is a directory" in err, err
    assert not (tmp_path / "logs.lock").exists()


@pytest.mark.parametrize("job", sorted((ROOT / "tuning_logs").glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_job_file_validates(job):
    loaded = jobs.load_job(job)
    assert loaded.entries and all(0 < e.trials <= jobs.MAX_TRIALS for e in loaded.entries)
    assert 0 < loaded.regression_threshold < 1 and loaded.budget_s > 0
    assert not loaded.log.is_dir()
