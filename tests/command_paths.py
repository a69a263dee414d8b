"""Where the tests find each command of a checkout: the product's in scripts/, the study's (a lab
harness, not part of the package) in lab/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def script_path(script: str) -> Path:
    return ROOT / "lab" / "run_study.py" if script == "study.py" else ROOT / "scripts" / script
