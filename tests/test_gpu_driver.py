"""On the GPU: the driver's facts (``backends.cuda.driver``, issue #32 item 5) are the device's,
as PyTorch and TVM report them; the space's GPU is the driver's (opt-in shared memory, not TVM's
48 KB); and a persistent kernel launches one block per SM of this device (its grid read off a
CUDA graph that captured a launch), fewer where it has fewer tiles.  test_driver.py tests the
same code on a simulated driver, without a GPU."""

import ctypes
import struct

import numpy as np
import pytest

from tc_autotune import build_dense
from tc_autotune.backends.cuda import driver, gpu, timer
from tc_autotune.core import tasks
from tc_autotune import workloads

pytestmark = pytest.mark.gpu

_KERNEL_NODE = 0  # CU_GRAPH_NODE_TYPE_KERNEL
_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED, as the timer captures


def test_gpu_the_drivers_facts_are_tvms():
    import tvm

    dev, facts = tvm.cuda(0), driver.device_facts(0)
    assert facts.name == dev.device_name and f"{facts.major}.{facts.minor}" == dev.compute_version
    assert facts.sm_count == dev.multi_processor_count and facts.max_threads_per_block == dev.max_threads_per_block
    # TVM's shared memory is what a block gets without opting in; the driver's opt-in is more
    assert facts.max_smem_per_block_optin >= dev.max_shared_memory_per_block
    assert driver.device_count() >= 1


def test_gpu_the_drivers_facts_are_pytorchs(cuda_torch):
    props, facts = cuda_torch.cuda.get_device_properties(0), driver.device_facts(0)
    assert (facts.name, facts.major, facts.minor, facts.sm_count) == (
        props.name, props.major, props.minor, props.multi_processor_count)
    assert facts.max_smem_per_sm == props.shared_memory_per_multiprocessor
    optin = getattr(props, "shared_memory_per_block_optin", None)  # newer PyTorch only
    assert optin is None or facts.max_smem_per_block_optin == optin


def test_gpu_hopper_opts_in_to_more_than_48_kb():
    facts = driver.device_facts(0)
    if facts.arch != "sm_90":
        pytest.skip(f"a {facts.arch} GPU, not Hopper")
    assert facts.max_smem_per_block_optin == 227 * 1024 > 48 * 1024
    assert facts.max_registers_per_block == 65536 and facts.max_smem_per_sm == 228 * 1024


def test_gpu_the_local_gpu_is_the_drivers():
    local = gpu.local_gpu()
    assert local == gpu.gpu_from_facts(driver.device_facts(0)) and not local.nominal
    assert gpu.default_gpu() == local


def test_gpu_a_persistent_kernel_built_here_has_a_block_per_sm_of_this_gpu():
    from tc_autotune.templates.tc_gemm.warp_specialized import plan, tvm_module
    from tc_autotune.templates.tc_gemm.views import dense_view

    workload, config = _persistent("dense:m=4096,n=4096,k=1024,b=nk")
    kp = plan(dense_view(workload), config)
    assert kp.persistent and tvm_module.blocks_x(kp) == min(kp.grid[0], driver.device_facts(0).sm_count)


def _persistent(spec: str):
    """The first persistent starting tiling of a dense workload, on this GPU."""
    workload = workloads.get(spec)
    space = tasks.of(workload).space(workload, gpu.local_gpu())
    return workload, next(c for c in space.template.starting_configs(space) if c.warp_specialized == 2)


def _launched_grids(launch, dev) -> list[tuple[int, int, int]]:
    """The grid of each kernel ``launch()`` launches, read off a CUDA graph that captured it."""
    cuda = timer.driver()
    lib = cuda._lib
    get_params = getattr(lib, "cuGraphKernelNodeGetParams_v2", None) or lib.cuGraphKernelNodeGetParams

    def check(code):
        assert code == 0, driver.describe(lib, code)

    token = cuda.enter(dev.index)
    try:
        stream = cuda.create_stream()
        try:
            check(lib.cuStreamBeginCapture_v2(ctypes.c_void_p(stream), _RELAXED))
            graph = ctypes.c_void_p()
            try:
                with timer.tvm_stream(dev)(stream):
                    launch()
            finally:
                check(lib.cuStreamEndCapture(ctypes.c_void_p(stream), ctypes.byref(graph)))
            try:
                count = ctypes.c_size_t()
                check(lib.cuGraphGetNodes(graph, None, ctypes.byref(count)))
                nodes = (ctypes.c_void_p * count.value)()
                check(lib.cuGraphGetNodes(graph, nodes, ctypes.byref(count)))
                grids = []
                for node in nodes:
                    kind = ctypes.c_int()
                    check(lib.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)))
                    if kind.value == _KERNEL_NODE:
                        params = ctypes.create_string_buffer(256)  # CUDA_KERNEL_NODE_PARAMS(_v2), and room
                        check(get_params(ctypes.c_void_p(node), params))
                        grids.append(struct.unpack_from("<3I", params.raw, 8))  # after the CUfunction
                return grids
            finally:
                lib.cuGraphDestroy(graph)
        finally:
            cuda.destroy_stream(stream)
    finally:
        cuda.exit(token)


@pytest.mark.parametrize("spec,tiles", [("dense:m=4096,n=4096,k=256,b=nk", 512), ("dense:m=256,n=1024,k=256,b=nk", 8)])
def test_gpu_a_persistent_kernel_launches_a_block_per_sm_of_this_gpu(spec, tiles):
    """512 tiles of 128 x 256: a block per SM; 8 tiles: a block per tile.  The output is right."""
    import tvm

    from tc_autotune.core.results import relative_l2_error
    from tc_autotune.measure.checked_timing import task_arrays

    workload, config = _persistent(spec)
    kernel = build_dense(workload, config)
    dev = tvm.cuda(0)
    *inputs, reference = task_arrays(workload, 0)
    args = [*(tvm.runtime.tensor(a, device=dev) for a in inputs),
            tvm.runtime.tensor(np.full(workload.out_shape, np.nan, workload.out_dtype), device=dev)]
    kernel(*args)  # loads the module (not under capture), and is checked below
    assert relative_l2_error(args[-1].numpy(), reference) < 1e-2
    sm_count = driver.device_facts(0).sm_count
    assert _launched_grids(lambda: kernel(*args), dev) == [(min(tiles, sm_count), 1, 1)]
