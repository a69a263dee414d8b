"""Where nvcc comes from on a machine without a CUDA toolkit: the test extra installs NVIDIA's
nvcc wheels, and ``toolkit.find_nvcc`` finds the nvcc inside them (after CUDA_HOME, PATH and
/usr/local/cuda, so a machine with a toolkit keeps using it).  Stand-in trees, no real nvcc."""

import configparser
import importlib
import os
import stat
from pathlib import Path

import pytest

from tc_autotune.backends.cuda import toolkit
from tc_autotune.backends.cuda.nvcc import CudaCompileError, compile_cubin

ROOT = Path(__file__).resolve().parent.parent


def _nvcc(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_toolkit(tmp_path, monkeypatch):
    """A machine without a CUDA toolkit: no CUDA_HOME, no nvcc on PATH or in /usr/local/cuda."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setattr(toolkit, "SYSTEM_NVCC", tmp_path / "no-cuda" / "bin" / "nvcc")
    return tmp_path


def _install_wheel(site: Path, monkeypatch) -> Path:
    """nvidia/cu13/bin/nvcc in a folder on sys.path, as pip installs nvidia-cuda-nvcc."""
    nvcc = _nvcc(site / "nvidia" / "cu13" / "bin" / "nvcc")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return nvcc


def test_without_a_toolkit_the_wheels_nvcc_is_found(no_toolkit, monkeypatch):
    if toolkit._wheel_nvcc() is not None:
        pytest.skip("this Python has the nvcc wheel installed: the stand-in would not be the one found")
    assert toolkit.find_nvcc() is None
    with pytest.raises(CudaCompileError, match=r'nvcc not found \(pip install -e "\.\[test\]"'):
        compile_cubin("// nothing cached under this text", "sm_90")
    nvcc = _install_wheel(no_toolkit / "site", monkeypatch)
    assert toolkit.find_nvcc() == str(nvcc)
    assert toolkit.nvcc_version() == "13.0"  # what records' provenance says


def test_a_toolkit_on_the_machine_comes_before_the_wheel(no_toolkit, monkeypatch):
    _install_wheel(no_toolkit / "site", monkeypatch)
    system = _nvcc(no_toolkit / "usr-local-cuda" / "bin" / "nvcc")
    monkeypatch.setattr(toolkit, "SYSTEM_NVCC", system)
    assert toolkit.find_nvcc() == str(system)
    on_path = _nvcc(no_toolkit / "bin" / "nvcc")
    assert toolkit.find_nvcc() == str(on_path)
    home = _nvcc(no_toolkit / "cuda-home" / "bin" / "nvcc")
    monkeypatch.setenv("CUDA_HOME", str(home.parent.parent))
    assert toolkit.find_nvcc() == str(home)


def test_the_test_extra_brings_nvcc_and_the_headers_on_linux():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extra = [line.strip() for line in config["options.extras_require"]["test"].splitlines()
             if line.strip() and not line.strip().startswith("#")]
    wheels = {line.split("==")[0]: line for line in extra if line.startswith("nvidia-")}
    # nvcc, cicc (nvvm), the crt and runtime headers (cuda_fp16.h, mma.h) and cccl (<nv/target>)
    assert set(wheels) == {"nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime",
                           "nvidia-cuda-cccl"}
    assert all("==13.0." in line and 'sys_platform == "linux"' in line for line in wheels.values())
