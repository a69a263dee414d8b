"""scripts/tune.py: one clear line and a distinct exit code for bad input and for no GPU."""

import subprocess
import sys
from pathlib import Path

import pytest
from command_paths import run_completed

from tc_autotune.backends.cuda.gpu import local_gpu

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "tune.py"


def run(*args):
    proc = run_completed(str(SCRIPT), *args, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("args,needle", [
    (["--workload", "bogus"], "unknown workload preset 'bogus'"),
    (["--workload", "n=1,h=8,c=3,k=8,r=3,zz=1"], "unknown key 'zz'"),
    (["--workload", "n=1,h=2,c=3,k=8,r=5"], "larger than the padded input"),
    (["--workload", "dense:m=128,n=4096,k=4096,b=kk"], "unknown b_layout 'kk'"),
    (["--workload", "llm-4096x4097-m1"], "unknown dense preset 'llm-4096x4097-m1'"),
    (["--workload", "tutorial", "--trials", "0"], "'0' must be positive"),
    (["--workload", "tutorial", "--trials", "many"], "'many' is not an integer"),
    (["--workload", "tutorial", "--tuner", "genetic"], "invalid choice: 'genetic'"),
    (["--workload", "tutorial", "--target", "ampere"], "--target: 'ampere' is not a CUDA arch"),
    ([], "--workload"),
])
def test_bad_arguments_exit_2_with_one_line(args, needle):
    code, out, err = run(*args)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.skipif(local_gpu() is not None, reason="this machine has a GPU")
@pytest.mark.parametrize("workload", ["tutorial", "dense:m=128,n=4096,k=4096,b=nk"])
def test_no_gpu_exits_3_and_writes_no_log(tmp_path, workload):
    log = tmp_path / "t.jsonl"
    code, out, err = run("--workload", workload, "--trials", "4", "--log", str(log))
    assert code == 3
    assert "no CUDA GPU" in err and len(err.strip().splitlines()) == 1
    assert not log.exists()
