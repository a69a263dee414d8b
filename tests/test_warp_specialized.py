"""The warp-specialized kernel (``warp_specialized=1``) on the CPU: the C index expressions it
generates from the GEMM views compute the views' own addresses, the operands it loads with TMA,
and kernels that TVM wraps and nvcc compiles for sm_90a without spills or serialized wgmmas."""

import random
import re
from dataclasses import replace

import numpy as np
import pytest

from tc_autotune import tasks, workloads
from tc_autotune.cuda import find_nvcc
from tc_autotune.gemm import view_of
from tc_autotune.gpu import gpu_for_arch
from tc_autotune.knobs import Conv2dConfig
from tc_autotune.warp_specialized import _element, plan, smem_bytes, tma_operands

WS = Conv2dConfig(block_row_warps=4, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, chunk=4,
                  wmma="m16n16k16", offset_a=0, offset_b=0, offset_c=0, vec_a=8, vec_b=8, vec_c=4, stages=4,
                  intrinsic="wgmma", wgmma_in_flight=1, warp_specialized=1)
# padding, stride 2, dilation, a 7x7 filter, dense with either weight layout and a batch
VIEWS = ["rfc-3x3-b1", "resnet50-res3-1x1-256-512-s2-b1", "resnet50-conv1-b1",
         "n=2,h=9,w=11,c=16,k=32,r=3,s=3,stride=1,pad=2,dilation=2",
         "dense:m=100,n=200,k=136,b=nk", "dense:batch=2,m=24,n=64,k=96,b=kn"]


def _c_eval(expr: str, **env) -> int:
    """A generated C int expression evaluated in Python (its divisions act on non-negative values)."""
    py = expr.replace("&&", " and ").replace("(long long)", "").replace("/", "//")
    return eval(py, {}, env)  # noqa: S307 - our own generated arithmetic


@pytest.mark.parametrize("name", VIEWS)
def test_the_generated_addresses_are_the_views_own(name):
    view = view_of(workloads.get(name))
    rng = random.Random(0)
    for operand, rows, cols, row, col in ((view.a, view.m, view.k, "m", "k"), (view.b, view.k, view.n, "k", "n")):
        offset, inside = _element(operand, rows, cols, row, col)
        for _ in range(300):
            r, c = rng.randrange(rows + 3), rng.randrange(cols + 8)
            index, conditions = operand.map.element(r, c)
            expected = r < rows and c < cols and all(conditions)
            assert bool(_c_eval(inside, **{row: r, col: c})) == expected, (name, r, c)
            if expected:
                assert _c_eval(offset, **{row: r, col: c}) == np.ravel_multi_index(index, operand.shape)


def test_tma_loads_every_operand_that_is_a_box_of_its_tensor():
    def tma(name):
        return tma_operands(view_of(workloads.get(name)))

    assert tma("dense:m=100,n=200,k=136,b=nk") == tma("dense:m=64,n=64,k=64,b=kn") == (True, True)
    assert tma("rfc-1x1-b32") == (True, True)  # 1x1, stride 1, no padding: A is the data
    assert tma("rfc-3x3-b32") == (False, True)  # im2col: gathered with cp.async
    assert tma("resnet50-res3-1x1-256-512-s2-b1") == (False, True)  # stride 2


def test_the_space_offers_warp_specialized_configs_on_hopper_only():
    wl = workloads.get("tutorial")
    hopper = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
    assert hopper.why_invalid(WS) is None
    assert tasks.of(wl).space(wl, gpu_for_arch("sm_80")).why_invalid(WS) is not None
    assert smem_bytes(WS) == 4 * (128 + 256) * 128 + 1024 + 64


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("name,in_flight", [("rfc-3x3-b1", 1), ("rfc-1x1-b32", 0),
                                            ("dense:m=100,n=200,k=136,b=nk,out_dtype=float16", 1),
                                            ("dense:m=256,n=128,k=256,b=kn", 0)])
def test_kernels_compile_for_sm90a_with_tensor_maps_and_unserialized_wgmma(name, in_flight):
    from tc_autotune.kernel import build

    from test_codegen import _ptxas_report

    wl = workloads.get(name)
    config = replace(WS, wgmma_in_flight=in_flight)
    kernel = build(wl, config, target="sm_90")
    source = kernel.cuda_source
    signature = next(line for line in source.splitlines() if "__global__" in line)
    for operand, tma in zip(view_of(wl).inputs, tma_operands(view_of(wl))):
        assert (f"const __grid_constant__ CUtensorMap {operand.tensor}_tensormap" in signature) == tma
    assert "__launch_bounds__(384)" in signature  # a producer and two consumer warpgroups
    assert ("_in_flight(" in source) == bool(in_flight) and ("tc_wgmma_drain_" in source) == bool(in_flight)
    assert "runtime.cuTensorMapEncodeTiled" in kernel.executable.mod.inspect_source()
    assert kernel.arch == "sm_90a" and kernel.cubin[:4] == b"\x7fELF"
    report = _ptxas_report(source)
    assert "(C75" not in report and "serialized" not in report, report
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report
    assert plan(view_of(wl), config).grid == (-(-view_of(wl).m // 128), -(-view_of(wl).n // 256))
