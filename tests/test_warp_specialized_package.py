"""The warp-specialized kernel's package (``tc_autotune.templates.tc_gemm.warp_specialized``): small emitter modules
that write the kernel's text right the first time, the fixed CUDA in ``.cuh`` files, the names
callers import from the package, and the SM count as one parameter.  No GPU; what the generated
code does is tested in test_warp_specialized.py and on the GPU, and records of it are keyed by its
hash (database.record)."""

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from tc_autotune import workloads
from tc_autotune.templates.tc_gemm import warp_specialized
from tc_autotune.templates.tc_gemm.views import view_of
from tc_autotune.templates.tc_gemm.warp_specialized import layout, pipeline, tile_scheduler

PACKAGE = Path(warp_specialized.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))
CUDA_FILES = sorted(PACKAGE.glob("*.cuh"))


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_each_module_is_small_and_patches_no_generated_text(module):
    source = module.read_text()
    assert len(source.splitlines()) <= 400
    calls = [node for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "replace"]
    assert not calls, f"{module.name}:{calls[0].lineno}: emit the right text instead of patching it"


def test_the_fixed_cuda_is_read_from_the_packages_cuh_files():
    assert {p.name for p in CUDA_FILES} == {"pipeline.cuh", "cluster.cuh", "multicast.cuh", "im2col.cuh",
                                            "tma_store.cuh", "bf16.cuh", "convert.cuh"}
    for path in CUDA_FILES:
        text = layout.fixed_cuda(path.name)
        assert text == path.read_text() and text.startswith("#ifndef TC_WS_") and text.endswith("#endif\n")
    assert f"> {pipeline.WAIT_LIMIT_NS}ull) __trap();" in layout.fixed_cuda("pipeline.cuh")


def test_the_public_names_stay_importable_from_the_package():
    for name in ("plan", "kernel_module", "smem_bytes", "tma_boxes", "c_store_box", "fused_pair", "starting_configs",
                 "STARTING_TILINGS", "KernelPlan", "TmaBox", "Im2colBox", "CExpr", "_element",
                 "RASTER_GROUP", "ROW_BYTES", "CHUNK", "WAIT_LIMIT_NS"):
        assert hasattr(warp_specialized, name), name


def test_the_sm_count_sets_a_persistent_kernels_grid_only():
    """The plan holds no SM count: a persistent kernel launches a block per SM of whatever GPU it
    runs on (``launch_grid``), at most one per tile; a kernel of a block per tile ignores it."""
    from test_warp_specialized import WS

    view = view_of(workloads.get("rfc-1x1-b256"))  # 392 tiles of 128 x 256
    persistent = warp_specialized.plan(view, replace(WS, warp_specialized=2))
    assert persistent.persistent and persistent.grid == (392, 1)
    assert persistent.launch_grid(132) == (132, 1) and persistent.launch_grid(114) == (114, 1)
    assert persistent.launch_grid(1000) == (392, 1)  # fewer tiles than SMs: a block per tile
    one_tile_a_block = warp_specialized.plan(view, WS)
    assert not one_tile_a_block.persistent and one_tile_a_block.launch_grid(114) == one_tile_a_block.grid == (392, 1)


def test_a_persistent_kernels_launch_has_a_block_per_sm_of_the_builder_and_no_parameter_for_it():
    """The grid's x is min(tiles, the SM count of the GPU it is built on: here, without a GPU, the
    nominal sm_90's 132), a constant of the host code's launch; the kernel's source takes no
    parameter for it (records key on the source: it stays what it was)."""
    import tvm

    from test_warp_specialized import WS
    from tc_autotune.backends.cuda.gpu import default_gpu
    from tc_autotune.templates.tc_gemm.warp_specialized import tvm_module

    view = view_of(workloads.get("rfc-1x1-b256"))
    kp = warp_specialized.plan(view, replace(WS, warp_specialized=2))
    assert tvm_module.blocks_x(kp) == min(392, default_gpu().sm_count)
    assert tvm_module.blocks_x(kp, 114) == 114 and tvm_module.blocks_x(kp, 1000) == 392
    assert tvm_module.blocks_x(warp_specialized.plan(view, WS)) == 392
    lowered = tvm.tirx.transform.SplitHostDevice()(tvm.tirx.transform.BindTarget(
        tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}).with_host("llvm"))(warp_specialized.kernel_module(
            view, replace(WS, warp_specialized=2))))
    kernel_params = [p.name for gv, f in lowered.functions.items() if gv.name_hint == "main_kernel" for p in f.params]
    assert kernel_params == ["A_ptr", "B_ptr", "C_ptr", "data_tensormap", "weight_tensormap"]
