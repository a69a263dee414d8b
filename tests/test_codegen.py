"""CUDA code generation for the test matrix: WMMA calls of the right shape, ldmatrix +
mma.sync on swizzled tiles, or wgmma on swizzled slabs (sm_90a), and nvcc accepts it."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

from tc_autotune import build_conv2d
from tc_autotune import workloads
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.backends.cuda.gpu import gpu_for_arch

from generated import generated_source
from matrix import cases

pytestmark = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

# one sampled config per workload and variant: the GPU tests (test_gpu_conv2d) build three others
CASES = cases(configs_per_variant=1, seed=11)


@pytest.mark.parametrize("spec,config", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kernel_source_uses_its_intrinsic_and_compiles_for_sm90(spec, config):
    kernel = build_conv2d(spec, config, target="sm_90")
    m, n, k = config.wmma_mnk
    src = kernel.cuda_source
    if config.intrinsic == "wmma":
        assert "wmma::mma_sync" in src and "mma.sync" not in src
        frags = set(re.findall(r"fragment<nvcuda::wmma::(\w+), (\d+), (\d+), (\d+)", src))
        assert frags == {(kind, str(m), str(n), str(k)) for kind in ("matrix_a", "matrix_b", "accumulator")}
    elif config.intrinsic == "wgmma":
        # the warpgroup instruction of its tile width, straight from shared memory (no fragment
        # loads); WMMA accumulator fragments only (filled and stored by WMMA); built for sm_90a
        width = config.warp_col_tiles * 16
        assert f"wgmma.mma_async.sync.aligned.m64n{width}k16.f32.f16.f16" in src
        assert "wgmma.wait_group.sync.aligned 0" in src and "fence.proxy.async.shared::cta" in src
        assert "ldmatrix" not in src and "wmma::mma_sync" not in src and "load_matrix_sync" not in src
        # a call waits for the previous one's group (then a drain waits for all), or for its own
        in_flight = ("wgmma.wait_group.sync.aligned 1" in src, "tc_wgmma_drain_" in src)
        assert in_flight == (bool(config.wgmma_in_flight),) * 2
        assert set(re.findall(r"fragment<nvcuda::wmma::(\w+),", src)) == {"accumulator"}
        assert kernel.arch == "sm_90a"
    else:
        assert "nvcuda::wmma" not in src
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src  # A
        assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in src  # B (K x N, N contiguous)
    threads = re.search(r"__launch_bounds__\((\d+)\)", src)
    assert int(threads.group(1)) == config.threads
    # nvcc produced a real sm_90 cubin (ELF), not an empty file
    assert kernel.cubin[:4] == b"\x7fELF" and len(kernel.cubin) > 1000
    assert kernel.config == config and kernel.workload == workloads.get(spec)


def test_default_config_builds_for_every_preset_kind():
    for name in ("tutorial", "rfc-1x1-b1", "rfc-3x3-b512", "resnet50-res5-3x3-512-512-s2-b1"):
        kernel = build_conv2d(name, target="sm_90")  # a shipped log's best config where there is one
        tensor_core_op = {"wmma": "wmma::mma_sync", "mma": "mma.sync.aligned.m16n8k16",
                          "wgmma": "wgmma.mma_async"}
        assert tensor_core_op[kernel.config.intrinsic] in kernel.cuda_source


def test_fp16_output_and_fp32_input_are_cast_in_the_kernel():
    wl = workloads.get("n=2,h=8,c=16,k=32,r=3,pad=1,dtype=float32,out_dtype=float16")
    src = build_conv2d(wl, target="sm_90").cuda_source
    assert "float* __restrict__ data" in src and "half* __restrict__ out" in src
    assert "__float2half" in src


def test_invalid_config_is_refused_with_its_reason():
    from dataclasses import replace

    wl = workloads.get("n=1,h=8,c=3,k=16,r=1")
    config = replace(build_conv2d(wl, target="sm_90").config, vec_a=8)
    with pytest.raises(ValueError, match="vec_a=8 does not divide the 3 input channels"):
        build_conv2d(wl, config, target="sm_90")
    with pytest.raises(ValueError, match="not in the space"):
        build_conv2d(wl, replace(config, chunk=3), target="sm_90")


@pytest.mark.parametrize("stages,frag_buffers", [(2, 1), (3, 2), (4, 1)])
def test_pipelined_k_loop_uses_cp_async_in_stage_buffers(stages, frag_buffers):
    from dataclasses import replace

    from tc_autotune import conv2d_space

    wl = workloads.get("tutorial")
    config = replace(conv2d_space(wl).default_config(), stages=1, frag_buffers=1, vec_a=8, vec_b=8)
    plain = build_conv2d(wl, config, target="sm_90")
    piped = build_conv2d(wl, replace(config, stages=stages, frag_buffers=frag_buffers), target="sm_90")
    assert "cp.async" not in plain.cuda_source
    src = piped.cuda_source
    # Both operands go through cp.async (the im2col one predicated, zero-filling padding),
    # and the loop waits until only stages - 2 groups are still in flight.
    assert "cp_async_legacy_pred_cg_16" in src and "cp_async_legacy_cg_16" in src
    assert f"cp.async.wait_group {stages - 2};" in src
    assert piped.config.smem_bytes >= stages * (config.block_m * (config.block_k + config.offset_a) * 2)
    # Double-buffered fragments: the A fragment array holds two k-slices.
    sizes = {int(x) for x in re.findall(r"fragment<nvcuda::wmma::matrix_a[^;]*\[(\d+)\];", src)}
    assert max(sizes) == config.warp_row_tiles * frag_buffers
    assert piped.cubin[:4] == b"\x7fELF"


def test_pipeline_knobs_are_refused_where_they_cannot_work():
    from dataclasses import replace

    from tc_autotune import conv2d_space
    from tc_autotune.backends.cuda.gpu import gpu_for_arch

    wl = workloads.get("n=1,h=8,c=32,k=32,r=1")  # K = 32: two k-steps of 16 at most
    config = replace(conv2d_space(wl).default_config(), chunk=1, wmma="m16n16k16", split_k=1)
    assert conv2d_space(wl).why_invalid(replace(config, stages=2)) is None
    assert "exceed the 2 k-steps" in conv2d_space(wl).why_invalid(replace(config, stages=3))
    assert "exceed chunk=1" in conv2d_space(wl).why_invalid(replace(config, frag_buffers=2))
    turing = conv2d_space(wl, gpu_for_arch("sm_75"))
    assert "needs cp.async" in turing.why_invalid(replace(config, stages=2))


def test_split_k_adds_a_summing_kernel_over_the_k_slices():
    from dataclasses import replace

    from tc_autotune import conv2d_space

    wl = workloads.get("rfc-3x3-b1")  # M = 196: 4-16 blocks of 64x64 without splitting
    space = conv2d_space(wl)
    config = replace(space.default_config(), split_k=4, stages=2)
    assert space.why_invalid(config) is None
    kernel = build_conv2d(wl, config, target="sm_90")
    src = kernel.cuda_source
    # The partial sums are the caller's fp32 workspace (allocated once), not a per-call allocation.
    assert kernel.workspace_shape == (4, -(-196 // config.block_m) * config.block_m,
                                      -(-256 // config.block_n) * config.block_n)
    from tc_autotune.templates.tc_gemm.schedule import schedule_conv2d
    assert len(schedule_conv2d(wl, config)["main"].params) == 4
    assert len(schedule_conv2d(wl, replace(config, split_k=1))["main"].params) == 3
    kernels = re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(([^)]*)\) \{', src)
    assert [name for name, _ in kernels] == ["main_kernel", "main_kernel_1"]
    assert "blockIdx.z" in src  # the K slice of the GEMM kernel
    # The summing kernel reads the fp32 partials and writes the output.
    assert "float* __restrict__ C_ptr" in kernels[1][1] and "out_ptr" in kernels[1][1]
    assert f"zk < 4" in src


def test_split_k_is_refused_where_the_grid_is_full_or_a_slice_empty():
    from dataclasses import replace

    from tc_autotune import conv2d_space

    big = conv2d_space(workloads.get("tutorial"))
    assert "already fill the GPU" in big.why_invalid(replace(big.default_config(), split_k=2))
    short = conv2d_space(workloads.get("n=1,h=8,c=32,k=32,r=1"))  # K = 32
    config = replace(short.default_config(), chunk=1, wmma="m16n16k16", stages=1, frag_buffers=1)
    assert short.why_invalid(replace(config, split_k=2)) is None
    assert "leaves a K slice empty" in short.why_invalid(replace(config, split_k=4))


def test_mma_intrinsic_swizzles_the_shared_tiles_instead_of_padding_them():
    from dataclasses import replace

    from tc_autotune import conv2d_space

    wl = workloads.get("tutorial")
    space = conv2d_space(wl)
    wmma = replace(space.default_config(), wmma="m16n16k16", chunk=4, stages=3, frag_buffers=2,
                   offset_a=8, offset_b=8, vec_a=8, vec_b=8)
    mma = replace(wmma, intrinsic="mma", offset_a=0, offset_b=0)
    assert space.why_invalid(wmma) is None and space.why_invalid(mma) is None
    src = build_conv2d(wl, mma, target="sm_90").cuda_source
    # cp.async writes and ldmatrix reads address the tiles through (chunk ^ row % 8): XOR in
    # the shared-memory offsets, none in the WMMA kernel of the same tiling.
    assert src.count(" ^ ") >= 4 and " ^ " not in build_conv2d(wl, wmma, target="sm_90").cuda_source
    assert "cp.async.wait_group 1;" in src
    # Unpadded tiles: three stages of the fp16 A (block_m x 64) and B (64 x block_n) tiles.
    assert mma.smem_bytes == 3 * 2 * 64 * (mma.block_m + mma.block_n) < wmma.smem_bytes


def test_mma_intrinsic_is_refused_where_it_cannot_work():
    from dataclasses import replace

    from tc_autotune import conv2d_space
    from tc_autotune.backends.cuda.gpu import gpu_for_arch

    wl = workloads.get("tutorial")
    space = conv2d_space(wl)
    mma = replace(space.default_config(), intrinsic="mma", wmma="m16n16k16", chunk=2,
                  offset_a=0, offset_b=0, stages=1, frag_buffers=1, split_k=1)
    assert space.why_invalid(mma) is None
    assert "not wmma=m32n8k16" in space.why_invalid(replace(mma, wmma="m32n8k16"))
    assert "offset_a and offset_b must be 0" in space.why_invalid(replace(mma, offset_b=8))
    assert "multiples of 32" in space.why_invalid(replace(mma, chunk=1))
    turing = conv2d_space(wl, gpu_for_arch("sm_75"))
    assert "sm_80 or newer" in turing.why_invalid(replace(mma, warp_row_tiles=2))


def test_mma_fragment_layout_is_the_m16n8k16_register_layout():
    from tc_autotune.templates.tc_gemm.mma_sync import mma_fragment_layout

    places = {mma_fragment_layout(i, j): (i, j) for i in range(16) for j in range(16)}
    assert len(places) == 256 and {lane for lane, _ in places} == set(range(32))
    # PTX ISA, m16n8k16 A fragment: lane 0 holds (0,0),(0,1),(8,0),(8,1),(0,8),(0,9),(8,8),(8,9).
    assert [places[(0, slot)] for slot in range(8)] == [(0, 0), (0, 1), (8, 0), (8, 1),
                                                       (0, 8), (0, 9), (8, 8), (8, 9)]
    # lane 5: group 1 (rows 1 and 9), columns 2 * (5 % 4) + {0, 1} (and + 8)
    assert [places[(5, slot)] for slot in range(8)] == [(1, 2), (1, 3), (9, 2), (9, 3),
                                                       (1, 10), (1, 11), (9, 10), (9, 11)]


def test_kernels_are_built_through_the_nvcc_callback():
    """TVM compiles at build time through the registered callback where it has a CUDA runtime:
    ours must be in place before the first build, so the binary never depends on whether
    another kernel ran first (NVRTC's ptxas makes other code than nvcc's)."""
    import tvm
    import tvm_ffi

    kernel = build_conv2d("rfc-1x1-b1", target="sm_90")
    callback = tvm_ffi.get_global_func("tvm_callback_cuda_compile")
    with tvm.target.Target({"kind": "cuda", "arch": "sm_90"}):
        assert bytes(callback(kernel.cuda_source)) == kernel.cubin


def test_wgmma_intrinsic_is_refused_where_it_cannot_work():
    from dataclasses import replace

    from tc_autotune import conv2d_space
    from tc_autotune.backends.cuda.gpu import gpu_for_arch

    wl = workloads.get("tutorial")
    space = conv2d_space(wl)
    wgmma = replace(space.default_config(), intrinsic="wgmma", wmma="m16n16k16", block_row_warps=4,
                    block_col_warps=2, warp_row_tiles=2, warp_col_tiles=4, chunk=4, offset_a=0,
                    offset_b=0, stages=3, frag_buffers=1, split_k=1, vec_a=8, vec_b=8)
    assert space.why_invalid(wgmma) is None
    assert "block_row_warps=4" in space.why_invalid(replace(wgmma, block_row_warps=2))
    assert "chunk=4" in space.why_invalid(replace(wgmma, chunk=2))
    assert "frag_buffers=1" in space.why_invalid(replace(wgmma, frag_buffers=2))
    assert "offset_b=0" in space.why_invalid(replace(wgmma, offset_b=8))
    assert "64-column swizzle atom" in space.why_invalid(replace(wgmma, warp_col_tiles=2))
    ampere = conv2d_space(wl, gpu_for_arch("sm_80"))
    assert "Hopper instruction (sm_90), not sm_80" in ampere.why_invalid(wgmma)


def test_wgmma_reads_each_warpgroup_slab_through_swizzled_descriptors():
    """Two warpgroups of 64 columns, two 64-row slabs, three stages: each k-step issues one
    call (four m64n64k16) per slab, the B atom stride is one 64 x 64 fp16 atom (8 KB), and the
    A tile rows are stored slab-major so a slab is one 8 KB block."""
    from dataclasses import replace

    from tc_autotune import conv2d_space

    wl = workloads.get("tutorial")
    space = conv2d_space(wl)
    config = replace(space.default_config(), intrinsic="wgmma", wmma="m16n16k16", block_row_warps=4,
                     block_col_warps=2, warp_row_tiles=2, warp_col_tiles=4, chunk=4, offset_a=0,
                     offset_b=0, offset_c=4, stages=3, frag_buffers=1, split_k=1, vec_a=8, vec_b=8,
                     vec_c=4)
    kernel = build_conv2d(wl, config, target="sm_90")
    src = kernel.cuda_source
    calls = re.findall(r"tc_wgmma_m64n64k64\(C_\w+, \((\w+) \* 4\), .*?, (\d+)\);", src)
    assert calls and {stride for _, stride in calls} == {str(64 * 64 * 2)}
    # main loop plus the pipeline's two drain steps, each over the slabs (fragments slab * 4 ...)
    assert len(calls) == 3
    assert "cp.async.wait_group 1;" in src and src.count(" ^ ") >= 2
    assert config.smem_bytes == max(3 * 2 * 64 * (128 + 128), 128 * (128 + 4) * 4)
    assert kernel.cubin[:4] == b"\x7fELF"


# ---- wgmma groups in flight across k-steps (wgmma_in_flight=1) -------------------------------
_IN_FLIGHT = dict(offset_a=0, offset_b=0, intrinsic="wgmma", block_row_warps=4, chunk=4, wgmma_in_flight=1)
IN_FLIGHT_CASES = (  # (workload, knob changes from the generator's probe config)
    ("tutorial", dict(_IN_FLIGHT, warp_col_tiles=8, block_col_warps=1, stages=2)),
    ("tutorial", dict(_IN_FLIGHT, warp_col_tiles=4, stages=3)),
    ("tutorial", dict(_IN_FLIGHT, warp_col_tiles=8, block_col_warps=1, warp_row_tiles=1, stages=4)),
    ("resnet50-res5-3x3-512-512-s2-b1", dict(_IN_FLIGHT, warp_col_tiles=4, warp_row_tiles=1, split_k=4, stages=3)),
    ("dense:m=256,n=256,k=512", dict(_IN_FLIGHT, warp_col_tiles=4, stages=3)),
    ("dense:m=256,n=256,k=512,b=nk,out_dtype=float16", dict(_IN_FLIGHT, warp_col_tiles=4, stages=2)),
    ("dense:m=64,n=1024,k=4096,b=nk", dict(_IN_FLIGHT, warp_row_tiles=1, warp_col_tiles=8, block_col_warps=1,
                                           split_k=4, stages=2)),
)
_EVENTS = {"cp_async_wait_group_async_wait_group_": "wait", "__syncthreads();": "sync", "_in_flight(": "wgmma",
           "ptx_cp_async_legacy": "copy", "cp_async_commit_group": "commit", "tc_wgmma_drain_": "drain",
           "store_matrix_sync": "store"}


def _events(lines):
    """The synchronisation, wgmma and copy events of source lines, repeats merged."""
    out = []
    for line in lines:
        for marker, event in _EVENTS.items():
            if marker in line:
                event += line.split(marker)[1][0] if event == "wait" else ""
                if not out or out[-1] != event:
                    out.append(event)
    return out


def _version(expr: str, stages: int) -> str:
    """How TVM writes ``expr`` modulo the number of stages."""
    expr = f"({expr})" if " " in expr else expr
    return f"({expr} & {stages - 1})" if stages & (stages - 1) == 0 else f"({expr} % {stages})"


@pytest.mark.parametrize("case", IN_FLIGHT_CASES,
                         ids=lambda c: f"{c[0][:16]}-s{c[1]['stages']}-k{c[1].get('split_k', 1)}")
def test_wgmma_in_flight_computes_each_step_before_the_copies_that_reuse_its_buffer(case):
    """The k-loop (compute first): wait for step k's cp.async group (stages - 2 may still run),
    barrier, wgmma(k) reading buffer k % stages, barrier (every warpgroup waited for wgmma(k - 1)),
    copies of step k + stages - 1 into buffer (k - 1) % stages; after the loop the drain waits
    for the last groups before the barrier in front of the accumulator store."""
    from tc_autotune.templates.tc_gemm import generator
    from tc_autotune.core import tasks
    from tc_autotune.api.build import build

    [(workload, config)] = generator.probe_kernels([case])
    assert tasks.of(workload).space(workload, gpu_for_arch("sm_90")).why_invalid(config) is None
    kernel = build(workload, config, target="sm_90")
    src, stages = kernel.cuda_source, config.stages
    lines = src.splitlines()
    start = next(i for i, line in enumerate(lines) if "for (int rk_0 = 0;" in line)
    end = next(i for i in range(start, len(lines)) if lines[i] == lines[start].split("for")[0] + "}")
    loop = lines[start + 1:end]
    assert _events(loop) == [f"wait{stages - 2}", "sync", "wgmma", "sync", "copy", "commit"]
    calls = [line for line in loop if "_in_flight(" in line]
    copies = [line for line in loop if "ptx_cp_async_legacy" in line]
    assert all(_version("rk_0", stages) in line for line in calls)
    assert copies and all(_version(f"rk_0 + {stages - 1}", stages) in line for line in copies)
    after = _events(lines[end:])
    assert after[:after.index("store") + 1][-4:] == ["wgmma", "drain", "sync", "store"]
    # the call commits and waits for all groups but its own; the drain for all, tied to every
    # accumulator register of the warp
    n = config.warp_col_tiles * 16
    call = src[src.index(f"void tc_wgmma_m64n{n}k64"):]
    call = call[:call.index("\n}\n")]
    assert "wgmma.wait_group.sync.aligned 1;" in call and "wait_group.sync.aligned 0" not in call
    frags = config.warp_row_tiles * config.warp_col_tiles
    drain = src[src.index(f"void tc_wgmma_drain_{frags}("):]
    drain = drain[:drain.index("\n}\n")]
    assert "wgmma.wait_group.sync.aligned 0;" in drain and drain.count('"+f"') == 8 * frags
    assert kernel.arch == "sm_90a" and kernel.cubin[:4] == b"\x7fELF"
    # the plain kernel of the same tiling is the old one: one buffer per stage, its own wait
    plain = generated_source(workload, replace(config, wgmma_in_flight=0))
    assert "_in_flight(" not in plain and "tc_wgmma_drain" not in plain


def _ptxas_report(source: str) -> str:
    """ptxas's messages (-v) for a kernel built for sm_90a with the package's nvcc flags."""
    import subprocess
    import tempfile

    from tc_autotune.backends.cuda.toolkit import NVCC_FLAGS

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cu"
        path.write_text(source)
        proc = subprocess.run([find_nvcc(), *NVCC_FLAGS, "-arch=sm_90a", "-Xptxas", "-v", "-o",
                               str(path.with_suffix(".cubin")), str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert path.with_suffix(".cubin").read_bytes()[:4] == b"\x7fELF"  # a real cubin, as a build makes
    return proc.stderr


@pytest.mark.parametrize("which", ["IN_FLIGHT", "DENSE_IN_FLIGHT"])
def test_wgmma_in_flight_probes_are_not_serialized(which):
    """ptxas keeps the wgmma pipeline across k-steps only when nothing but wgmma touches the
    accumulators between an instruction and its wait; else it serializes them ("C7514 Potential
    Performance Loss ... serialized") or injects waits (C7517/C7519), and the knob buys nothing."""
    from tc_autotune.templates.tc_gemm import generator
    from tc_autotune.core import tasks
    from tc_autotune.api.build import build

    probes = getattr(generator, f"{which}_PROBES")
    for workload, config in generator.probe_kernels(probes):
        assert config.wgmma_in_flight == 1
        assert tasks.of(workload).space(workload, gpu_for_arch("sm_90")).why_invalid(config) is None
        report = _ptxas_report(generated_source(workload, config))  # ptxas -v is the compile
        assert "(C75" not in report and "serialized" not in report, report
        assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report


def test_the_kernel_class_keeps_its_earlier_names():
    """conv2d and dense kernels are one class, ``Kernel``; code written against the earlier
    names (``Conv2dKernel``, ``DenseKernel``) still gets it."""
    import tc_autotune as tc
    from tc_autotune.api import build, kernel

    assert tc.Kernel is kernel.Kernel is tc.Conv2dKernel is kernel.DenseKernel
    assert build.build_dense.__annotations__["return"] in ("Kernel", kernel.Kernel)
