"""Where the tests find each command of a checkout (the product's in scripts/, the study's, a lab
harness outside the package, in lab/), and running one as a user does: a fresh process."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def script_path(script: str) -> Path:
    return ROOT / "lab" / "run_study.py" if script == "study.py" else ROOT / "scripts" / script


def run_script(script: str, *args, cwd=None, env=None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python <script> args`` (``env`` added to this one's)."""
    proc = subprocess.run([sys.executable, str(script_path(script)), *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=None if env is None else {**os.environ, **env})
    return proc.returncode, proc.stdout, proc.stderr
