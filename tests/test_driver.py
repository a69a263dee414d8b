"""A GPU's facts from the CUDA driver (``backends.cuda.driver``, issue #32 item 5), on a simulated
``libcuda`` (``fake_cuda.FakeGpus``): each fact is read from its attribute, "no GPU here" (no
driver library, or a driver that finds no device) is one line and a normal state, a broken driver
is told apart, and the space's GPU (``gpu.GpuInfo``) and a persistent kernel's grid follow the
device's SM count.  No GPU needed; the same facts on a real GPU: test_gpu_driver.py."""

import json
import types
from dataclasses import replace

import pytest

import fake_cuda
from tc_autotune import workloads
from tc_autotune.backends.cuda import driver, gpu, timer
from tc_autotune.templates.tc_gemm import warp_specialized
from tc_autotune.templates.tc_gemm.views import view_of


@pytest.fixture
def fake_driver(monkeypatch):
    """Installs ``FakeGpus(*gpus, init=...)`` as the driver library and returns it."""
    def install(*gpus, init=0):
        lib = fake_cuda.FakeGpus(*gpus, init=init)
        monkeypatch.setattr(driver, "libcuda", lambda: lib)
        gpu.probe_local_gpu.cache_clear()
        return lib

    yield install
    gpu.probe_local_gpu.cache_clear()


@pytest.fixture
def tvm_sees_a_gpu(monkeypatch):
    """TVM's CUDA runtime sees a device (what ``probe_local_gpu`` asks before the driver)."""
    import tvm

    monkeypatch.setattr(tvm, "cuda", lambda index=0: types.SimpleNamespace(exist=True, index=index))


def test_each_fact_is_read_from_its_attribute(fake_driver):
    fake_driver(fake_cuda.H100_SXM, fake_cuda.A100)
    assert driver.device_count() == 2
    assert driver.device_facts(1) == driver.DeviceFacts(
        index=1, name="NVIDIA A100-SXM4-80GB", major=8, minor=0, sm_count=108, max_threads_per_block=1024,
        max_registers_per_block=65536, max_smem_per_block_optin=163 * 1024, max_smem_per_sm=164 * 1024)
    assert driver.device_facts(0).arch == "sm_90" and driver.device_facts(1).arch == "sm_80"


def test_the_attribute_numbers_are_cuda_hs():
    """The CUdevice_attribute values (cuda.h), which a typo would silently swap for another fact."""
    assert (driver.MAX_THREADS_PER_BLOCK, driver.MAX_REGISTERS_PER_BLOCK, driver.MULTIPROCESSOR_COUNT,
            driver.COMPUTE_CAPABILITY_MAJOR, driver.COMPUTE_CAPABILITY_MINOR,
            driver.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, driver.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) == (
        1, 12, 16, 75, 76, 81, 97)


def test_a_local_device_is_the_drivers_not_a_table(fake_driver):
    """The space's GPU has the driver's SM count and opt-in shared memory (TVM's own attribute is
    the 48 KB a block gets without opting in): an H100 PCIe is 114 SMs, not an sm_90's 132."""
    fake_driver(fake_cuda.H100_SXM, fake_cuda.H100_PCIE)
    pcie = gpu.gpu_from_device(types.SimpleNamespace(index=1))
    assert pcie == gpu.GpuInfo("NVIDIA H100 PCIe", "sm_90", 114, max_threads_per_block=1024,
                               max_smem_per_block=227 * 1024, max_registers_per_block=65536)
    assert not pcie.nominal and pcie.compute_capability == "9.0"


def test_the_local_probe_reads_the_driver(fake_driver, tvm_sees_a_gpu):
    fake_driver(fake_cuda.H100_PCIE)
    probe = gpu.probe_local_gpu()
    assert probe.problem is None and (probe.gpu.name, probe.gpu.sm_count) == ("NVIDIA H100 PCIe", 114)
    assert gpu.default_gpu() == probe.gpu


def test_a_persistent_kernels_grid_follows_the_devices_sm_count(fake_driver, tvm_sees_a_gpu):
    """warp_specialized=2 launches a block per SM of the device: 114 on an H100 PCIe, 132 on an
    SXM, from the same plan (the host code reads the count at launch: test_warp_specialized_package)."""
    view = view_of(workloads.get("rfc-1x1-b256"))  # 392 tiles of 128 x 256
    from test_warp_specialized import WS

    kp = warp_specialized.plan(view, replace(WS, warp_specialized=2))
    for device, blocks in ((fake_cuda.H100_PCIE, 114), (fake_cuda.H100_SXM, 132)):
        fake_driver(device)
        assert kp.launch_grid(gpu.local_gpu().sm_count) == (blocks, 1)


def test_no_driver_library_is_one_line_and_no_gpu(monkeypatch):
    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(driver.ctypes, "CDLL", no_library)
    with pytest.raises(driver.NoDriverError) as err:
        driver.device_facts()
    assert str(err.value) == ("no CUDA driver here (libcuda.so.1: libcuda.so.1: cannot open shared object file: "
                              "No such file or directory)")
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no chained traceback
    assert driver.device_count() == 0


def test_a_driver_without_a_gpu_is_no_gpu_here(fake_driver):
    fake_driver(init=100)
    with pytest.raises(driver.NoDriverError, match=r"^the CUDA driver finds no GPU \(cuInit: CUDA_ERROR_NO_DEVICE: "
                                                   r"no CUDA-capable device is detected\)$"):
        driver.device_facts()
    assert driver.device_count() == 0


def test_a_broken_driver_is_a_driver_error_not_no_gpu(fake_driver):
    fake_driver(fake_cuda.H100_SXM, init=803)
    with pytest.raises(driver.DriverError) as err:
        driver.device_count()
    assert not isinstance(err.value, driver.NoDriverError)
    assert str(err.value) == ("cuInit failed: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: system has unsupported display "
                              "driver / cuda driver combination")


def test_a_gpu_the_process_does_not_have_is_said(fake_driver):
    fake_driver(fake_cuda.H100_SXM)
    with pytest.raises(driver.NoDriverError, match=r"^there is no CUDA GPU 2 here \(the driver sees 1\)$"):
        driver.device_facts(2)


def test_a_gpu_the_probe_cannot_read_is_a_problem_not_no_gpu(fake_driver, tvm_sees_a_gpu, monkeypatch):
    """TVM sees a device but the driver fails on it: a broken host, said, not a machine without a GPU."""
    fake_driver(fake_cuda.H100_SXM, init=803)
    monkeypatch.setattr(gpu, "gpu_hardware", lambda: "GPU device node /dev/nvidia0 exists")
    probe = gpu.probe_local_gpu()
    assert probe.gpu is None and probe.problem == (
        "GPU device node /dev/nvidia0 exists, but DriverError: cuInit failed: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: "
        "system has unsupported display driver / cuda driver combination")


def test_an_rpc_servers_gpu_is_its_drivers(fake_driver):
    """The server's GPU_FACTS (``gpu.register``) answers with its driver's facts; the runner's
    ``remote_gpu`` makes them the space's GPU."""
    import tvm_ffi

    fake_driver(fake_cuda.A100)
    gpu.register()
    facts = tvm_ffi.get_global_func(gpu.GPU_FACTS)

    class Session:
        def get_function(self, name):
            return tvm_ffi.get_global_func(name)

    assert json.loads(facts(0))["sm_count"] == 108
    assert gpu.remote_gpu(Session(), types.SimpleNamespace(index=0)) == gpu.GpuInfo(
        "NVIDIA A100-SXM4-80GB", "sm_80", 108, 1024, 163 * 1024, 65536)


def test_a_build_only_machine_generates_for_a_nominal_gpu_said_to_be_one():
    """No GPU: the arch's own limits and an assumed SM count, marked nominal (not a device's)."""
    ampere, hopper, other = gpu.gpu_for_arch("sm_80"), gpu.gpu_for_arch("sm_90"), gpu.gpu_for_arch("sm_100")
    assert ampere.nominal and (ampere.sm_count, ampere.max_smem_per_block) == (108, 163 * 1024)
    assert (hopper.name, hopper.sm_count, hopper.max_smem_per_block) == ("generic sm_90", 132, 227 * 1024)
    assert (other.sm_count, other.max_smem_per_block) == (80, 48 * 1024)
    with pytest.raises(ValueError, match="unknown CUDA architecture"):
        gpu.gpu_for_arch("ampere")


def test_the_timer_loads_the_library_the_driver_module_does(monkeypatch):
    """One loader (``driver.libcuda``): the timer's "no driver" is its message."""
    monkeypatch.setattr(driver, "libcuda", lambda: (_ for _ in ()).throw(driver.NoDriverError("no CUDA driver here (x)")))
    timer._cuda_driver.cache_clear()
    try:
        with pytest.raises(timer.TimerError, match=r"^no CUDA driver here \(x\)$"):
            timer.driver()
    finally:
        timer._cuda_driver.cache_clear()
