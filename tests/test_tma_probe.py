"""The TMA probe (tests/probes/tma_wgmma_probe.cu, issue #13) compiles and links for sm_90a
with the package's current wgmma device functions, ptxas keeps its wgmmas pipelined without
spills, and its numpy checker tells a right result from a wrong one; and TVM 0.27 hands a
tensor map encoded in the host code to the package's wgmma kernel as a ``__grid_constant__``
parameter.  On a Hopper GPU, tests/test_gpu_tma_probe.py runs the probe."""

import re

import numpy as np
import pytest

from probes import tma_wgmma_probe as probe
from tc_autotune.backends.cuda.toolkit import find_nvcc


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc (set CUDA_HOME or put nvcc on PATH)")
def test_probe_compiles_and_links_for_sm_90a_with_the_packages_wgmma(tmp_path):
    from tc_autotune.templates.tc_gemm.operand_layout import COL_MAJOR, ROW_MAJOR
    from tc_autotune.templates.tc_gemm.wgmma_source import wgmma_source

    binary, ptxas = probe.build(tmp_path, find_nvcc())
    assert binary.read_bytes()[:4] == b"\x7fELF"  # a linked host executable
    header = (tmp_path / probe.HEADER).read_text()
    for args in ((64, COL_MAJOR, False), (64, COL_MAJOR, True), (128, ROW_MAJOR, False)):
        assert wgmma_source(*args) in header  # the package's text, not a copy of it
    assert "void tc_wgmma_drain_4(" in header
    # every kernel, for sm_90a; nothing serialized (C7510: a call inside the k-loop), no spills
    kernels = re.findall(r"Compiling entry function '_Z\d+(\w+?)14CUtensorMap_st\w*' for 'sm_90a'", ptxas)
    assert sorted(kernels) == ["multi_stage", "single_stage", "single_stage_kn"], ptxas
    assert "(C75" not in ptxas and "serialized" not in ptxas, ptxas
    assert len(re.findall(r"0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", ptxas)) == 3, ptxas


def test_the_checker_passes_the_expected_result_and_names_each_wrong_one():
    mats = probe.inputs()
    want = probe.expected(mats)
    assert probe.mismatches(want, want) == []

    plain = mats["a"][probe.M0:probe.M0 + 64, probe.K0:probe.K0 + 64].tobytes()  # not swizzled
    found = probe.mismatches({**want, "tiles": plain + want["tiles"][8192:]}, want)
    assert len(found) == 1 and found[0].startswith("A tile")
    # rows 0, 8, 16, ... keep their chunks in place (c ^ 0), the swizzle moves every other row
    moved = np.frombuffer(plain, np.uint16) != np.frombuffer(want["tiles"][:8192], np.uint16)
    rows = moved.reshape(64, 64)
    assert np.array_equal(rows.any(axis=1), np.arange(64) % 8 != 0)

    found = probe.mismatches({**want, "multi": {**want["multi"], 4: want["multi"][4].T}}, want)
    assert len(found) == 1 and found[0].startswith("4-step pipelined C")
    swapped = want["tiles_kn"][8192:] + want["tiles_kn"][:8192]  # the atoms in the wrong order
    assert [m.split(":")[0] for m in probe.mismatches({**want, "tiles_kn": swapped}, want)] == [
        "B (K, N) atom 0", "B (K, N) atom 1"]
    unwritten = np.full((64, 64), np.nan, np.float32)
    assert "unwritten" in probe.mismatches({**want, "single": unwritten}, want)[0]


def test_tvm_passes_a_host_encoded_tensor_map_to_the_packages_wgmma_kernel():
    """The plumbing a TMA template needs, on the package's scheduled wgmma module (dense, an
    (N, K) weight): a tensor map bound and encoded in the host part of the PrimFunc (TVM 0.27's
    ``tirx.tensormap_encode_tiled``) and used in the kernel becomes a ``const __grid_constant__
    CUtensorMap`` kernel parameter, the host code encodes it (``runtime.cuTensorMapEncodeTiled``)
    on every call, and nvcc compiles the kernel.  Not run here: the launch with the map."""
    import tvm
    import tvm_ffi
    from tvm.backend.cuda.op import cuda_func_call
    from tvm.script import tirx as T

    from tc_autotune.backends.cuda import nvcc as cuda
    from tc_autotune.templates.tc_gemm.generator import DENSE_IN_FLIGHT_PROBES, probe_kernels
    from tc_autotune.templates.tc_gemm.views import dense_view
    from tc_autotune.templates.tc_gemm.schedule import PASS_CONFIG, schedule_gemm

    workload, config = next((w, c) for w, c in probe_kernels(DENSE_IN_FLIGHT_PROBES) if w.b_layout == "nk")
    func = schedule_gemm(dense_view(workload), config)["main"]
    weight = func.params[1]
    n, k = (int(extent) for extent in weight.shape)
    tmap = T.Var("weight_tensormap", ty=T.handle("tensormap").ty)
    host = [tvm.tirx.Bind(tmap, T.tvm_stack_alloca("tensormap", 1)),
            tvm.tirx.Evaluate(tvm.tirx.tensormap_encode_tiled(  # (k, n) innermost first, 64 x 64 boxes
                tmap, weight.data, k, n, k * 2, 64, 64, 1, 1, descriptor_dtype="float16", rank=2,
                swizzle=3))]  # CU_TENSOR_MAP_SWIZZLE_128B
    source = """
__device__ __forceinline__ void tc_tma_prefetch(unsigned long long map) {
  asm volatile("prefetch.tensormap [%0];" :: "l"(map) : "memory");
}
"""
    use = tvm.s_tir.SBlockRealize([], True, tvm.s_tir.SBlock([], [], [], "tma_prefetch", tvm.tirx.Evaluate(
        cuda_func_call("tc_tma_prefetch", T.address_of(tmap), source_code=source))))

    def in_kernel(loop):  # the use goes first under the innermost thread binding
        if loop.thread_binding is None or loop.thread_binding.thread_tag != "threadIdx.z":
            return loop
        return tvm.tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind,
                            tvm.tirx.SeqStmt([use, loop.body]), loop.thread_binding, loop.annotations)

    body = tvm.tirx.SeqStmt([*host, tvm_ffi.structural_map(func.body, (tvm.tirx.For, in_kernel))])
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    cuda.install_compile_callback()
    with target, tvm.transform.PassContext(opt_level=3, config=PASS_CONFIG):
        executable = tvm.compile(tvm.IRModule({"main": func.with_body(body)}), target)
    kernel_source = executable.mod.imports[0].inspect_source()
    signature = next(line for line in kernel_source.splitlines() if "__global__" in line)
    assert "const __grid_constant__ CUtensorMap weight_tensormap" in signature, signature
    assert "tc_tma_prefetch(((unsigned long long)(&(weight_tensormap))))" in kernel_source
    assert "runtime.cuTensorMapEncodeTiled" in executable.mod.inspect_source()
    if find_nvcc() is not None:
        assert cuda.compile_cubin(kernel_source, "sm_90a")[:4] == b"\x7fELF"
