"""Local GPUs from ``nvidia-smi`` without a GPU: canned outputs (well-formed, malformed, a driver
that fails) through the parser, and stand-in ``nvidia-smi`` executables on PATH (one that lists
GPUs, one that fails, one that hangs) through ``local_devices``."""

import os
import stat

import pytest

from tc_autotune.measure import devices
from tc_autotune.measure.devices import LocalDevice, choose_local, local_devices, parse_smi

H200 = "NVIDIA H200"
TWO = "0, NVIDIA H200, GPU-8f3c0a\n1, NVIDIA H200, GPU-77aa01\n"


def test_well_formed_output_lists_every_gpu():
    assert parse_smi(TWO) == [LocalDevice(0, H200, "GPU-8f3c0a"), LocalDevice(1, H200, "GPU-77aa01")]
    assert parse_smi("0, NVIDIA H100 80GB HBM3, MIG-2f6e\r\n") == [LocalDevice(0, "NVIDIA H100 80GB HBM3", "MIG-2f6e")]


@pytest.mark.parametrize("text,expected", [
    ("", []),
    ("No devices were found\n", []),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", []),
    ("index, name, uuid\n" + TWO, [LocalDevice(0, H200, "GPU-8f3c0a"), LocalDevice(1, H200, "GPU-77aa01")]),
    ("0, NVIDIA H200\n1, NVIDIA H200, GPU-77aa01, extra\n", []),  # wrong field counts
    ("x, NVIDIA H200, GPU-1\n-1, NVIDIA H200, GPU-2\n", []),  # not an index
    ("0, NVIDIA H200, [N/A]\n", [LocalDevice(0, H200, None)]),  # no UUID: CUDA_VISIBLE_DEVICES by index
    ("0, [Unknown Error], GPU-1\n", [LocalDevice(0, None, "GPU-1")]),
    ("0, NVIDIA H200, \n", [LocalDevice(0, H200, None)]),
    ("0, NVIDIA H200, 8f3c0a\n", [LocalDevice(0, H200, None)]),  # not a UUID nvidia-smi gives
    ("WARNING: infoROM is corrupted at gpu 0000:41:00.0\n0, NVIDIA H200, GPU-1\n\n", [LocalDevice(0, H200, "GPU-1")]),
], ids=["empty", "no devices", "no driver", "header", "field count", "index", "uuid N/A", "name error",
        "uuid empty", "uuid junk", "warning line"])
def test_malformed_output_is_skipped_or_read_without_junk(text, expected):
    found = parse_smi(text)
    assert found == expected
    for device in found:  # what the runner process is given: a UUID or an index, never junk
        assert device.environment()["CUDA_VISIBLE_DEVICES"] in (device.uuid, str(device.index))


def _fake_smi(folder, body: str) -> None:
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def smi_dir(tmp_path, monkeypatch):
    """A folder that alone is on PATH (with the shell's tools), where a test puts its nvidia-smi."""
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path


def test_local_devices_reads_nvidia_smi_and_honours_cuda_visible_devices(smi_dir, monkeypatch):
    _fake_smi(smi_dir, 'test "$1" = --query-gpu=index,name,uuid || exit 2\n'
                       "printf '0, NVIDIA H200, GPU-a\\n1, NVIDIA H200, GPU-b\\n2, NVIDIA H100 80GB HBM3, GPU-c\\n'\n")
    assert [d.index for d in local_devices()] == [0, 1, 2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-c,0")
    assert [d.index for d in local_devices()] == [0, 2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert local_devices() == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert [d.index for d in choose_local(None, H200, local_devices())] == [0, 1]  # GPU 0's model only
    with pytest.raises(ValueError, match="GPUs of different models"):
        choose_local((1, 2), H200, local_devices())


@pytest.mark.parametrize("body", ["echo 'Failed to initialize NVML: Driver/library version mismatch'; exit 18\n",
                                  "exit 0\n", "printf '\\377\\376 garbage\\n'\n"],
                         ids=["fails", "prints nothing", "garbage"])
def test_an_nvidia_smi_that_fails_lists_no_gpu(smi_dir, body):
    _fake_smi(smi_dir, body)
    assert local_devices() == []
    assert choose_local((0,), None, local_devices()) == [LocalDevice(0, None)]  # taken as asked


def test_an_nvidia_smi_that_hangs_is_given_up_on(smi_dir, monkeypatch):
    """A wedged driver hangs nvidia-smi: after SMI_TIMEOUT it is killed and no GPU is listed (the
    stand-in never answers, so the result does not depend on the machine's load)."""
    monkeypatch.setattr(devices, "SMI_TIMEOUT", 1.0)
    pid_file = smi_dir / "pid"
    _fake_smi(smi_dir, f"echo $$ > {pid_file}\nexec sleep 3600\n")
    assert local_devices() == []
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left behind
        os.kill(pid, 0)


def test_no_nvidia_smi_lists_no_gpu(smi_dir):
    assert local_devices() == []
