"""No GPU here versus a GPU that fails (issue #33 item 3): ``gpu.probe_local_gpu`` tells them
apart and logs why a GPU that is here cannot be used; ``pytest -m gpu`` without a usable GPU
fails with one line instead of skipping every GPU test and passing, while a plain ``pytest``
still skips them.  Runs without a GPU: the broken GPU is simulated."""

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from command_paths import run_python

from tc_autotune.backends.cuda import gpu

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
BROKEN = "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: system has unsupported display driver / cuda driver combination"


@pytest.fixture
def fresh_probe():
    gpu.probe_local_gpu.cache_clear()
    yield
    gpu.probe_local_gpu.cache_clear()


class _FailingCuda:
    def __call__(self, index=0):
        raise RuntimeError(f"Check failed: cuInit(0) == CUDA_SUCCESS\n{BROKEN}")


def test_no_gpu_here_is_no_problem(monkeypatch, fresh_probe):
    import tvm

    monkeypatch.setattr(tvm, "cuda", _FailingCuda())
    monkeypatch.setattr(gpu, "gpu_hardware", lambda: None)
    probe = gpu.probe_local_gpu()
    assert probe == gpu.GpuProbe(None, None) and gpu.local_gpu() is None
    assert probe.no_gpu_message() == "no CUDA GPU found"


def test_a_gpu_that_fails_is_told_apart_and_logged(monkeypatch, fresh_probe, caplog):
    import tvm

    monkeypatch.setattr(tvm, "cuda", _FailingCuda())
    monkeypatch.setattr(gpu, "gpu_hardware", lambda: "GPU device node /dev/nvidia0 exists")
    with caplog.at_level(logging.WARNING, logger="tc_autotune.backends.cuda.gpu"):
        probe = gpu.probe_local_gpu()
    assert probe.gpu is None and gpu.local_gpu() is None
    assert probe.problem == f"GPU device node /dev/nvidia0 exists, but RuntimeError: {BROKEN}"
    assert probe.no_gpu_message() == f"no usable CUDA GPU: {probe.problem}"
    assert [r.getMessage() for r in caplog.records] == [f"a CUDA GPU is here but cannot be used: {probe.problem}"]


def test_a_gpu_the_runtime_does_not_see_is_a_problem_too(monkeypatch, fresh_probe):
    import tvm

    class Missing:
        exist = False

    monkeypatch.setattr(tvm, "cuda", lambda index=0: Missing())
    monkeypatch.setattr(gpu, "gpu_hardware", lambda: "the NVIDIA driver lists 8 GPU(s) in /proc/driver/nvidia/gpus")
    assert gpu.probe_local_gpu().problem == ("the NVIDIA driver lists 8 GPU(s) in /proc/driver/nvidia/gpus, but "
                                             "TVM's CUDA runtime finds no device (tvm.cuda(0).exist is False)")


@pytest.mark.parametrize("visible", ["", "-1"])
def test_cuda_visible_devices_set_to_nothing_hides_every_gpu(monkeypatch, visible):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu.gpu_hardware() is None


# ---- the test suite's skip, in a pytest of its own --------------------------------------
TINY = textwrap.dedent("""\
    import pytest

    @pytest.mark.gpu
    def test_on_the_gpu():
        pass

    def test_anywhere():
        pass
""")
# Loaded with -p before the repo's conftest: the host has a GPU whose driver fails.
BROKEN_PLUGIN = textwrap.dedent(f"""\
    import tvm
    from tc_autotune.backends.cuda import gpu

    def _cuda(index=0):
        raise RuntimeError({BROKEN!r})

    tvm.cuda = _cuda
    gpu.gpu_hardware = lambda: "GPU device node /dev/nvidia0 exists"
""")


def _pytest(tmp_path, *args, plugins=()):
    """pytest on a tiny test file with the repo's conftest (as a plugin), in one process."""
    (tmp_path / "test_tiny.py").write_text(TINY)
    (tmp_path / "brokengpu.py").write_text(BROKEN_PLUGIN)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a CUDA GPU\n")
    env = dict(PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT), str(TESTS)]),
               CUDA_VISIBLE_DEVICES="")  # no GPU here, even on a GPU machine
    plugin_args = [a for p in plugins for a in ("-p", p)]
    return run_python("-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", *plugin_args,
                      "-p", "conftest", "-rs", *args, "test_tiny.py", cwd=tmp_path, env=env, timeout=300)


def _error_lines(out, err):
    return [line for line in (out + err).splitlines() if line.startswith("ERROR")]


def test_pytest_m_gpu_without_a_gpu_fails_with_one_line(tmp_path):
    code, out, err = _pytest(tmp_path, "-m", "gpu")
    assert code == pytest.ExitCode.USAGE_ERROR, out + err
    assert _error_lines(out, err) == ["ERROR: pytest -m 'gpu' runs the GPU tests, but no CUDA GPU found"]
    assert "passed" not in out and "skipped" not in out


def test_pytest_m_gpu_on_a_broken_gpu_says_why(tmp_path):
    code, out, err = _pytest(tmp_path, "-m", "gpu and not slow", plugins=["brokengpu"])
    assert code == pytest.ExitCode.USAGE_ERROR, out + err
    assert _error_lines(out, err) == [f"ERROR: pytest -m 'gpu and not slow' runs the GPU tests, but no usable "
                                      f"CUDA GPU: GPU device node /dev/nvidia0 exists, but RuntimeError: {BROKEN}"]


def test_a_plain_pytest_without_a_gpu_skips_the_gpu_tests_and_passes(tmp_path):
    code, out, err = _pytest(tmp_path)
    assert code == pytest.ExitCode.OK, out + err
    assert "1 passed, 1 skipped" in out and "SKIPPED [1] test_tiny.py:3: needs a CUDA GPU" in out


def test_a_plain_pytest_on_a_broken_gpu_skips_with_the_reason(tmp_path):
    code, out, err = _pytest(tmp_path, plugins=["brokengpu"])
    assert code == pytest.ExitCode.OK, out + err
    assert f"needs a CUDA GPU (GPU device node /dev/nvidia0 exists, but RuntimeError: {BROKEN})" in out


def test_deselecting_the_gpu_tests_needs_no_gpu(tmp_path):
    code, out, err = _pytest(tmp_path, "-m", "not gpu")
    assert code == pytest.ExitCode.OK and "1 passed, 1 deselected" in out, out + err


def test_which_marker_expressions_ask_for_the_gpu_suite():
    from conftest import gpu_suite_requested

    assert [gpu_suite_requested(e) for e in ("gpu", "gpu and not slow", "gpu or slow", "not gpu", "slow", "")] == [
        True, True, True, False, False, False]
