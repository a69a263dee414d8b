"""Installed, not only checked out: a wheel of the checkout carries the shipped logs (best records
per GPU, tuning histories, job files, the zero-shot model trained from them; never the studies'
logs) and the console commands, and an installed copy finds its logs and model inside itself.
No GPU; one wheel build per module."""

import configparser
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tc_autotune.database import records

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {f"tc-{name}": f"tc_autotune.cli.{name}:main"
            for name in ("tune", "nightly", "benchmark", "records")}
STUDY_FOLDERS = ("heldout", "validation")  # the studies' logs (lab/): 9 MB that nothing installed reads
# What a build of a fresh clone would not see (and what must not be copied back and forth).
NOT_SOURCES = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache")


def _shipped_in_checkout() -> list[str]:
    """The files the wheel must carry, relative to tuning_logs/."""
    logs = REPO / "tuning_logs"
    files = [*logs.glob("*.jsonl"), *logs.glob("*.toml"), *(logs / "history").glob("*.jsonl"),
             logs / "zero_shot_model.json"]
    return sorted(f.relative_to(logs).as_posix() for f in files)


def _pip(*args, cwd):
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout (the build writes build/ and *.egg-info beside
    its sources: in the copy, never in the repository)."""
    tmp = tmp_path_factory.mktemp("packaging")
    before = sorted(os.listdir(REPO))
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=NOT_SOURCES, symlinks=True)
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp / "dist"), str(src), cwd=tmp)
    assert sorted(os.listdir(REPO)) == before
    wheels = sorted((tmp / "dist").glob("tc_autotune-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def site(wheel) -> Path:
    """The wheel installed (not editable) into a folder of its own."""
    target = wheel.parent.parent / "site"
    _pip("install", "--no-deps", "--no-index", "--target", str(target), str(wheel), cwd=wheel.parent)
    return target


def _wheel_names(wheel) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def _dist_info_file(wheel, name: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        [path] = [n for n in zf.namelist() if n.endswith(f".dist-info/{name}")]
        return zf.read(path).decode()


def _run_installed(site: Path, code: str, **env) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter that imports the package from ``site`` only, run from a
    folder outside the repository."""
    cwd = site.parent / "elsewhere"
    cwd.mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TC_AUTOTUNE_SHIPPED_LOGS")}
    environ.update(PYTHONPATH=str(site), **env)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=300)


def test_a_checkout_finds_the_repositorys_logs(monkeypatch):
    monkeypatch.delenv("TC_AUTOTUNE_SHIPPED_LOGS", raising=False)
    assert records.packaged_logs_dir() == REPO / "tuning_logs"
    assert records.shipped_logs_dir() == REPO / "tuning_logs"
    assert not (REPO / "tc_autotune" / "tuning_logs").exists()  # else a checkout would read that copy


def test_the_wheel_carries_the_shipped_logs_and_not_the_studies(wheel):
    names = _wheel_names(wheel)
    shipped = _shipped_in_checkout()
    assert {"nvidia-h100-80gb-hbm3.jsonl", "nvidia-h200.jsonl", "nightly.toml", "zero_shot_model.json"} <= set(shipped)
    assert any(name.startswith("history/") for name in shipped)
    in_wheel = sorted(n.removeprefix("tc_autotune/tuning_logs/") for n in names
                      if n.startswith("tc_autotune/tuning_logs/"))
    assert in_wheel == shipped  # every shipped log and job file, nothing else (no study logs)
    assert not [n for n in names for folder in STUDY_FOLDERS if f"/{folder}/" in n]
    assert not [n for n in names if n.startswith(("tuning_logs/", "tests/", "scripts/", "lab/"))]


def test_the_wheel_holds_every_module(wheel):
    """setup.py finds the code packages and adds the mapped data package: a subpackage added
    later ships too."""
    names = _wheel_names(wheel)
    modules = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "tc_autotune").rglob("*.py"))
    assert modules and not [m for m in modules if m not in names]


def test_the_wheel_carries_the_cuda_that_kernels_include(wheel, site):
    """The fixed CUDA of the warp-specialized kernel (.cuh files beside its modules) is package
    data: in the wheel, and read from an installed copy."""
    names = _wheel_names(wheel)
    cuda = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "tc_autotune").rglob("*.cuh"))
    assert cuda and not [c for c in cuda if c not in names]
    code = """if True:
        import tc_autotune.templates.tc_gemm.warp_specialized as ws
        from tc_autotune.templates.tc_gemm.warp_specialized.layout import fixed_cuda
        print(ws.__file__, len(fixed_cuda("pipeline.cuh")))
    """
    proc = _run_installed(site, code)
    assert proc.returncode == 0, proc.stderr
    package, size = proc.stdout.split()
    assert Path(package).resolve().is_relative_to(site.resolve()) and int(size) > 0


def test_the_wheel_declares_the_console_commands_and_no_torch(wheel):
    entry_points = configparser.ConfigParser(delimiters=("=",))
    entry_points.read_string(_dist_info_file(wheel, "entry_points.txt"))
    assert dict(entry_points["console_scripts"]) == COMMANDS
    requires = [line for line in _dist_info_file(wheel, "METADATA").splitlines() if line.startswith("Requires-Dist:")]
    torch_requires = [r for r in requires if "torch" in r.lower()]
    assert requires and torch_requires  # PyTorch stays optional: only the "torch" extra asks for it
    assert all('extra == "torch"' in r for r in torch_requires), torch_requires


def test_an_installed_copy_finds_its_logs_inside_itself(site):
    code = """if True:
        import json, os, sys
        import tc_autotune
        from tc_autotune import workloads
        from tc_autotune.database import records
        from tc_autotune.search import zero_shot
        from tc_autotune.tuning import zero_shot_train
        from tc_autotune.backends.cuda.gpu import gpu_for_arch
        model, why = zero_shot.stored_model(gpu_for_arch("sm_90"))
        found = dict(package=tc_autotune.__file__, packaged=str(records.packaged_logs_dir()),
                     shipped=str(records.shipped_logs_dir()),
                     files=[str(f) for f in records.shipped_log_files()],
                     heldout=str(zero_shot_train.HELDOUT_JOB), heldout_workloads=len(zero_shot_train.heldout_workloads()),
                     model=str(zero_shot.model_path()), model_rows=model.rows if model else why,
                     pick=bool(zero_shot.zero_shot_config(workloads.get("n=3,h=20,c=96,k=160,r=3,pad=1"),
                                                       gpu_for_arch("sm_90"))),
                     xgboost=any(m.startswith("xgboost") for m in sys.modules))
        os.environ["TC_AUTOTUNE_SHIPPED_LOGS"] = ""  # still means: no shipped logs
        found["overridden"] = [records.shipped_logs_dir(), records.shipped_log_files()]
        print(json.dumps(found))
    """
    proc = _run_installed(site, code)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    logs = (site / "tc_autotune" / "tuning_logs").resolve()
    assert Path(found["package"]).resolve().is_relative_to(site.resolve())
    assert Path(found["packaged"]) == logs and Path(found["shipped"]) == logs
    files = sorted(Path(f).relative_to(logs).as_posix() for f in found["files"])
    assert files == [f for f in _shipped_in_checkout() if f.endswith(".jsonl")]
    assert "nvidia-h100-80gb-hbm3.jsonl" in files and any(f.startswith("history/") for f in files)
    # the held-out shapes are the lab's (a checkout's): an installed copy has none to skip
    assert not Path(found["heldout"]).exists() and found["heldout_workloads"] == 0
    assert Path(found["model"]) == logs / "zero_shot_model.json" and found["model_rows"] > 1000
    assert found["pick"] and not found["xgboost"]  # a zero-shot pick, read from the installed model
    assert found["overridden"] == [None, []]


def test_the_installed_commands_print_their_help_without_tvm_or_torch(site):
    code = """if True:
        import configparser, glob, importlib, json, sys
        sys.modules["torch"] = None  # PyTorch is optional: importing it here would fail
        entry_points = configparser.ConfigParser(delimiters=("=",))
        entry_points.read(glob.glob(SITE + "/tc_autotune-*.dist-info/entry_points.txt"))
        done = {}
        for command, target in entry_points["console_scripts"].items():
            module, _, func = target.partition(":")
            module = importlib.import_module(module)
            try:
                getattr(module, func)(["--help"])
            except SystemExit as exit:
                done[command] = [exit.code, module.__file__]
        done["tvm loaded"] = "tvm" in sys.modules
        print(json.dumps(done))
    """.replace("SITE", repr(str(site)))
    proc = _run_installed(site, code)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    done = json.loads(lines[-1])
    assert done.pop("tvm loaded") is False
    assert sorted(done) == sorted(COMMANDS)
    for command, (code, path) in done.items():
        assert code == 0 and Path(path).resolve().is_relative_to(site.resolve()), (command, code, path)
        assert f"usage: {command} " in proc.stdout and "Exit codes" in proc.stdout
    # the console script pip wrote runs as one too
    script = site / "bin" / "tc-records"
    proc = subprocess.run([sys.executable, str(script), "--help"], cwd=site.parent,
                          env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: tc-records "), proc.stderr
