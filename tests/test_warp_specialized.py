"""The warp-specialized kernel (``warp_specialized=1``) on the CPU: the C index expressions it
generates from the GEMM views compute the views' own addresses, the operands it loads with TMA,
and kernels that TVM wraps and nvcc compiles for sm_90a without spills or serialized wgmmas."""

import math
import random
import re
from dataclasses import replace

import numpy as np
import pytest
from generated import lowered

from tc_autotune.core import tasks
from tc_autotune import workloads
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.templates.tc_gemm.gemm import box_tile
from tc_autotune.templates.tc_gemm.views import view_of
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.templates.tc_gemm.knobs import TcGemmConfig
from tc_autotune.templates.tc_gemm.warp_specialized import _element, plan, smem_bytes, tma_boxes

WS = TcGemmConfig(block_row_warps=4, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=8, chunk=4,
                  wmma="m16n16k16", offset_a=0, offset_b=0, offset_c=0, vec_a=8, vec_b=8, vec_c=1, stages=4,
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
                strides = np.cumprod((1,) + operand.shape[:0:-1])[::-1]  # row-major element strides
                assert _c_eval(offset, **{row: r, col: c}) == int(np.dot(index, strides))


def test_tma_loads_every_operand_that_is_a_box_of_its_tensor():
    def tma(name, **knobs):
        a, b = tma_boxes(view_of(workloads.get(name)), replace(WS, **knobs))
        return a and len(a.box), len(b)

    assert tma("dense:m=100,n=200,k=136,b=nk") == (2, 1)  # A and an (N, K) B: one box each
    assert tma("dense:m=64,n=64,k=64,b=kn") == (2, 4)  # a (K, N) B: one box per 64-column atom
    assert tma("rfc-1x1-b32") == (2, 4)  # 1x1, stride 1, no padding: A is the data
    assert tma("rfc-3x3-b32") == (4, 4)  # 9 whole 14-pixel rows of one image: 126 of 128 rows
    assert tma("resnet50-res5-3x3-512-512-b32", block_col_warps=1) == (4, 2)  # two 7x7 images
    assert tma("resnet50-res3-1x1-256-512-s2-b1") == (4, 4)  # stride 2: TMA's traversal stride
    assert tma("resnet50-res5-3x3-512-512-s2-b1") == (None, 4)  # 7-pixel rows: gathered
    assert tma("n=2,h=9,w=11,c=16,k=32,r=3,s=3,stride=1,pad=2,dilation=2") == (None, 4)  # 16 channels
    assert tma("resnet50-conv1-b1") == (None, 4)  # 3 channels: gathered
    a, _ = tma_boxes(view_of(workloads.get("rfc-3x3-b32")), WS)
    assert a.box == (64, 14, 9, 1) and a.dims == (256, 14, 14, 32) and a.bytes == 9 * 14 * 128
    rows, _ = tma_boxes(view_of(workloads.get("resnet50-res3-1x1-256-512-s2-b1")), WS)
    assert rows.box == (64, 56, 1, 1) and rows.element_strides == (1, 2, 1, 1) and rows.bytes == 28 * 128


@pytest.mark.parametrize("name,block_m,kind,blocks", [
    ("tutorial", 128, "SpatialTile", 512),  # 9 then 5 rows of each image (one box a tap beats 399 blocks of 9 boxes)
    ("resnet50-res5-3x3-512-512-b32", 128, "SpatialTile", 16),  # 2 whole 7x7 images
    ("resnet50-res5-3x3-512-512-b32", 256, "SpatialTile", 7),  # 5 whole images
    ("resnet50-res3-3x3-128-128-b32", 128, "SpatialTile", 224),  # 4 rows of 28
    ("resnet50-res3-3x3-128-128-s2-b32", 128, "RowTile", 224),  # stride 2: 4 rows of 28, a box each
    ("n=3,h=33,w=33,c=128,k=96,r=3,s=3,stride=2,pad=1", 128, "RowTile", 8),  # 7 rows of 17 across images
    ("resnet50-res5-3x3-512-512-s2-b32", 128, None, 0),  # stride 2, 7-pixel rows: gathered
    ("n=1,h=7,w=100,c=64,k=64,r=3,s=3,pad=1", 128, "SpatialTile", 7),  # 100 of 128 rows: 78%, a row a block
    ("n=1,h=7,w=90,c=64,k=64,r=3,s=3,pad=1", 128, None, 0),  # 70%: gathered
    ("resnet50-conv1-b1", 128, None, 0),  # 3 channels
])
def test_a_box_tiling_is_spatial_else_rows_else_none(name, block_m, kind, blocks):
    from tc_autotune.templates.tc_gemm.gemm import box_tile

    view = view_of(workloads.get(name))
    tile = box_tile(view, block_m)
    assert type(tile).__name__ == kind if kind else tile is None
    if tile is not None:
        assert tile.grid_m == blocks and tile.pixels <= block_m
        assert blocks * tile.pixels >= view.m  # every output pixel has a block


def test_the_space_offers_warp_specialized_configs_on_hopper_only():
    wl = workloads.get("tutorial")
    hopper = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
    assert hopper.why_invalid(WS) is None
    assert tasks.of(wl).space(wl, gpu_for_arch("sm_80")).why_invalid(WS) is not None
    assert smem_bytes(WS) == 4 * (128 + 256) * 128 + 1024 + 64


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("name,in_flight", [("rfc-3x3-b1", 1), ("rfc-1x1-b32", 0), ("resnet50-res3-1x1-256-512-s2-b1", 1),
                                            ("dense:m=100,n=200,k=136,b=nk,out_dtype=float16", 1),
                                            ("dense:m=256,n=128,k=256,b=kn", 0)])
def test_kernels_compile_for_sm90a_with_tensor_maps_and_unserialized_wgmma(name, in_flight):
    from test_codegen import _ptxas_report

    wl = workloads.get(name)
    config = replace(WS, wgmma_in_flight=in_flight, stages=min(WS.stages, -(-view_of(wl).k // 64)))
    kernel = lowered(wl, config, target="sm_90")
    source = kernel.cuda_source
    signature = next(line for line in source.splitlines() if "__global__" in line)
    a_box, _ = tma_boxes(view_of(wl), config)
    for operand, tma in zip(view_of(wl).inputs, (a_box is not None, True)):
        assert (f"const __grid_constant__ CUtensorMap {operand.tensor}_tensormap" in signature) == tma
    assert "__launch_bounds__(384)" in signature  # a producer and two consumer warpgroups
    assert ("_in_flight(" in source) == bool(in_flight) and ("tc_wgmma_drain_" in source) == bool(in_flight)
    assert "runtime.cuTensorMapEncodeTiled" in kernel.executable.mod.inspect_source()
    assert kernel.arch == "sm_90a"  # (_ptxas_report compiles it)
    report = _ptxas_report(source)
    # No wgmma serialized and no wait injected between a wgmma and its own wait_group.  (ptxas
    # may inject a warpgroup.arrive, C7519, where a fully unrolled short k-loop lets other code
    # reuse accumulator registers: a fence, like the one each call already issues.)
    assert "serialized" not in report and "(C7514" not in report and "(C7517" not in report, report
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report
    tile = box_tile(view_of(wl), 128) if len(getattr(a_box, "box", ())) == 4 else None
    grid_m = tile.grid_m if tile else -(-view_of(wl).m // 128)
    assert plan(view_of(wl), config).grid == (grid_m, -(-view_of(wl).n // 256))
    assert ("copy16(a_s" in source) == (a_box is None)  # a gathered A only


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
def test_split_k_runs_the_slices_as_a_cluster_that_sums_in_distributed_shared_memory():
    from test_codegen import _ptxas_report

    wl = workloads.get("dense:m=16,n=4096,k=4096,b=nk")  # 64 k-steps: 4 slices of 16
    config = replace(WS, block_col_warps=1, warp_row_tiles=1, split_k=4)
    kp = plan(view_of(wl), config)
    assert kp.grid == (4, 32) and kp.cluster == 4  # one M tile's 4 slices, 32 N tiles
    assert "SLICE = 16" in kp.source and "kt_begin = split_rank * SLICE" in kp.source
    assert kp.source.count("cluster_sync();") == 2 and "mapa.shared::cluster" in kp.source
    from tc_autotune.templates.tc_gemm.workspaces import workspaces
    assert workspaces(wl, config) == []  # no split-K workspace: the cluster sums in shared memory
    report = _ptxas_report(lowered(wl, config).cuda_source)
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report
    uneven = plan(view_of(workloads.get("rfc-3x3-b1")), replace(WS, block_col_warps=1, split_k=8))
    assert "SLICE = 5" in uneven.source  # 36 k-steps: 7 slices of 5 and one of 1


def test_split_k_rules_of_the_warp_specialized_kernel():
    wl = workloads.get("dense:m=16,n=4096,k=4096,b=nk")
    space = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
    small = replace(WS, block_col_warps=1, warp_row_tiles=1)  # 64 x 128: a 64-row slab for 16 rows
    assert space.why_invalid(replace(small, split_k=8)) is None
    assert "split_k <= 8" in space.why_invalid(replace(small, split_k=16))
    assert "split_k <= 8" in space.why_invalid(replace(small, split_k=4, warp_specialized=2))  # persistent
    # 2 consumers x 128 threads x 128 floats (128 KB) do not fit in 2 stages of 384 rows (96 KB)
    wide = tasks.of(workloads.get("dense:m=256,n=512,k=4096,b=nk"))
    wide_space = wide.space(workloads.get("dense:m=256,n=512,k=4096,b=nk"), gpu_for_arch("sm_90"))
    assert "partial sums" in wide_space.why_invalid(replace(WS, split_k=2, stages=2))
    assert wide_space.why_invalid(replace(WS, split_k=2, stages=3)) is None
    # wgmma's 64-row slab is the smallest M tile: M = 16 may pad it, a 128-row tile no longer
    assert "more than twice" in space.why_invalid(replace(WS, block_col_warps=1, split_k=4))


def test_the_gpu_cases_are_valid_configs_of_their_spaces():
    from test_gpu_warp_specialized import (ALONG_M_CASES, CASES, IM2COL_CASES, MULTICAST_CASES, NARROW_CASES,
                                           PING_PONG_CASES, SPLIT_CASES, TMA_STORE_CASES)

    along_m = [(name, dict(knobs, consumers_along_m=1)) for name, knobs in ALONG_M_CASES]
    multicast = [(name, dict(knobs, multicast_b=1)) for name, knobs in MULTICAST_CASES]
    ping_pong = [(name, {"block_col_warps": 1, **knobs, "warp_specialized": 2, "ping_pong": 1})
                 for name, knobs in PING_PONG_CASES]
    im2col = [(name, dict(knobs, tma_im2col=1)) for name, knobs in IM2COL_CASES]
    stored = [(name, dict(knobs, tma_store=1)) for name, knobs in TMA_STORE_CASES]
    narrow = [(name, {"warp_col_tiles": 4, **knobs}) for name, knobs in NARROW_CASES]
    for name, knobs in CASES + SPLIT_CASES + along_m + multicast + ping_pong + im2col + stored + narrow:
        wl = workloads.get(name)
        assert tasks.of(wl).space(wl, gpu_for_arch("sm_90")).why_invalid(replace(WS, **knobs)) is None, name


def test_untuned_shapes_never_default_to_the_warp_specialized_kernel():
    for name in ("tutorial", "rfc-1x1-b32", "dense:m=2048,n=4096,k=4096,b=nk"):
        wl = workloads.get(name)
        space = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
        assert space.default_config().warp_specialized == 0
        assert space.why_invalid(space.default_config()) is None


def test_the_prior_weighs_the_kernel_by_how_it_loads_a():
    from tc_autotune.templates.tc_gemm.prior import prior_score
    from tc_autotune.core.config_space import positions_from_configs

    ratios = {}
    for name in ("rfc-1x1-b32", "rfc-3x3-b32", "resnet50-res3-1x1-256-512-s2-b1"):
        wl = workloads.get(name)
        space = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
        ws, plain = prior_score(space, positions_from_configs(space, [WS, replace(WS, warp_specialized=0)]))
        ratios[name] = ws / plain
    # TMA boxes of A (a 1x1's matrix, a 3x3's spatial tile) weigh more than a gathered A (the
    # strided 1x1's row boxes count as gathered), and a gathered A still a little over plain
    assert ratios["rfc-1x1-b32"] > ratios["resnet50-res3-1x1-256-512-s2-b1"] > 1, ratios
    assert ratios["rfc-3x3-b32"] > ratios["resnet50-res3-1x1-256-512-s2-b1"], ratios


def test_the_prior_weighs_a_producer_converting_fp32_input_at_its_measured_cost():
    """fp32 input: the warp-specialized kernel's producer converts A and B with its threads' loads
    (0.45x of the cast kernel's paths on compute-bound convs, H200), while a plain path's config
    keeps the prior it has with fp16 input (the cast kernel is not its own knob)."""
    from tc_autotune.templates.tc_gemm.prior import prior_score
    from tc_autotune.core.config_space import positions_from_configs

    scores = {}
    for dtype in ("float16", "float32"):
        wl = workloads.get("rfc-3x3-b32").replace(dtype=dtype)
        space = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
        scores[dtype] = prior_score(space, positions_from_configs(space, [WS, replace(WS, warp_specialized=0)]))
    (ws16, plain16), (ws32, plain32) = scores["float16"], scores["float32"]
    assert math.isclose(ws32, 0.45 * ws16) and plain32 == plain16
    assert ws32 < plain32 and ws16 > plain16  # the plain path first with fp32 input, not with fp16


def test_the_prior_counts_k_slices_that_split_a_gathered_as_channels():
    """A plain (no producer warpgroup) mma or wgmma conv whose k-slice is not a multiple of its
    channels computes a filter tap per vector load: 2-2.5x slower in the H100 logs.  The producer
    warpgroup's gather hides it, and a channel count the slice divides has no such cost."""
    from tc_autotune.templates.tc_gemm.prior import prior_score
    from tc_autotune.core.config_space import positions_from_configs

    def plain_over_producer(channels, plain, chunk):  # the same tile with and without a producer
        wl = workloads.get(f"n=16,h=27,c={channels},k=256,r=5,pad=2")
        space = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
        rows = positions_from_configs(space, [replace(plain, chunk=chunk), replace(WS, chunk=chunk)])
        ours, producer = prior_score(space, rows)
        return ours / producer

    for intrinsic, weight in (("wgmma", 0.45), ("mma", 0.7)):
        plain = replace(WS, warp_specialized=0, intrinsic=intrinsic)
        # 96 channels: a 64-deep slice (chunk 4) splits them, a 32-deep one does not; 128: neither
        split, aligned = (plain_over_producer(c, plain, 4) / plain_over_producer(c, plain, 2) for c in (96, 128))
        assert math.isclose(split, weight * aligned), intrinsic


def test_consumers_along_m_split_the_rows_and_widen_the_wgmma():
    """Along M, consumer wg takes rows wg * 64 .. of a 128-row block and one wgmma of all 256
    columns (m64n256), reading A from its own slab and B from the tile's start."""
    view = view_of(workloads.get("dense:m=256,n=512,k=512,b=nk"))
    by_cols = plan(view, WS).source
    by_rows = plan(view, replace(WS, consumers_along_m=1)).source
    assert "tc_wgmma_m64n128k64" in by_cols and "tc_wgmma_m64n256k64" not in by_cols
    assert "tc_wgmma_m64n256k64" in by_rows and "acc[16]" in by_rows and "acc[16]" in by_cols  # same registers
    assert "a_s = smem + stage * STAGE_BYTES + wg * 8192;" in by_rows  # 64 rows x 128 bytes
    assert "b_s = a_s + A_BYTES + wg * 16384;" in by_cols  # 128 [n][k] rows x 128 bytes
    assert "const int m = m0 + wg * 64 + s * 64" in by_rows and "const int n = n0 + f * 16" in by_rows
    assert plan(view, WS).grid == plan(view, replace(WS, consumers_along_m=1)).grid


def test_b_multicast_pairs_blocks_along_m_that_each_load_half_of_b():
    view = view_of(workloads.get("dense:m=330,n=200,k=520,b=kn,out_dtype=float16"))  # 3 M tiles, (K, N) atoms
    config = replace(WS, multicast_b=1, stages=3)
    kp = plan(view, config)
    assert kp.cluster == 2 and kp.grid == (4, 1)  # a fourth block past M partners the third
    _, halves = tma_boxes(view, config)
    assert [box.box for box in halves] == [(64, 32)] * 4  # 32 of each atom's 64 k rows
    assert all(box.coords[1] == "k0 + cta_rank * 32" for box in halves)
    assert kp.source.count("tma_load_2d_multicast(b_s") == 4 and "b_s + 8192 + cta_rank * 4096" in kp.source
    # the stage counts A (128 rows) and the whole B (4 atoms), half of which the peer sends
    assert "mbar_arrive_expect_tx(&full[stage], 49152);" in kp.source
    assert "mbar_init(&empty[s], 16);" in kp.source  # 8 consumer warps in each of 2 blocks
    assert "release_stage_pair(&empty[" in kp.source and kp.source.count("cluster_sync();") == 2
    col_major = tma_boxes(view_of(workloads.get("dense:m=330,n=200,k=520,b=nk")), config)[1]
    assert [(box.box, box.coords[1]) for box in col_major] == [((64, 128), "n0 + cta_rank * 128")]


def test_narrow_consumers_take_48_or_96_rows_of_a_k_major_b_and_the_deep_ring_doubles_the_stages():
    view = view_of(workloads.get("dense:m=100,n=200,k=520,b=nk"))
    config = replace(WS, block_col_warps=1, warp_col_tiles=4, consumer_n=96, stages=3, deep_ring=1)
    kp = plan(view, config)
    assert kp.grid == (1, 3) and kp.threads == 256  # 200 columns in 96-column blocks; one consumer
    assert "m64n96k16" in kp.source and "constexpr int STAGES = 6," in kp.source
    assert kp.b_box.box == (64, 96)  # 96 rows of B ([n][k]) a k-step
    assert kp.smem_bytes == config.smem_bytes == 6 * (128 + 96) * 128 + 6 * 16 + 1024
    along = plan(view, replace(config, block_col_warps=2, consumers_along_m=1))
    assert along.grid == (1, 3) and "m64n96k16" in along.source  # two consumers of 64 rows, 96 columns each
    by_cols = plan(view, replace(config, block_col_warps=2, consumer_n=48, deep_ring=0))
    assert by_cols.grid == (1, 3) and "m64n48k16" in by_cols.source and "STAGES = 3," in by_cols.source


def test_rules_of_narrow_consumers_and_the_deep_ring():
    gpu = gpu_for_arch("sm_90")
    dense = workloads.get("dense:m=128,n=11008,k=4096,b=nk")
    space = tasks.of(dense).space(dense, gpu)
    narrow = replace(WS, block_col_warps=1, warp_col_tiles=4, consumer_n=96, stages=3, deep_ring=1)
    assert space.why_invalid(narrow) is None
    for broken in (replace(narrow, warp_col_tiles=8), replace(narrow, warp_specialized=0, vec_c=4, offset_c=4)):
        assert "consumer_n=96 needs" in space.why_invalid(broken)
    kn = workloads.get("dense:m=128,n=11008,k=4096,b=kn")  # a (K, N) weight: 64-column atoms
    assert "B row_major" in tasks.of(kn).space(kn, gpu).why_invalid(narrow)
    assert "deep_ring=1 needs" in space.why_invalid(replace(narrow, stages=2))
    fp16_out = workloads.get("dense:m=128,n=11008,k=4096,b=nk,out_dtype=float16")  # 96 x 2 bytes: no whole chunks
    stored = replace(narrow, tma_store=1, deep_ring=0, stages=4)
    assert space.why_invalid(stored) is None
    assert "not whole chunks" in tasks.of(fp16_out).space(fp16_out, gpu).why_invalid(stored)
    mma = replace(WS, intrinsic="mma", warp_specialized=0, wgmma_in_flight=0, block_row_warps=2, chunk=2, vec_c=4,
                  offset_c=4, warp_col_tiles=4, deep_ring=1, stages=3)
    assert "deep_ring=1 deepens" in space.why_invalid(mma)


def test_rules_of_consumers_along_m_and_b_multicast():
    wl = workloads.get("dense:m=2048,n=4096,k=4096,b=nk")
    space = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
    along_m, multicast = replace(WS, consumers_along_m=1), replace(WS, multicast_b=1)
    assert space.why_invalid(along_m) is None and space.why_invalid(replace(along_m, warp_specialized=2)) is None
    assert space.why_invalid(replace(multicast, consumers_along_m=1)) is None
    for config in (replace(along_m, block_col_warps=1), replace(along_m, warp_row_tiles=1),
                   replace(along_m, warp_specialized=0, vec_c=4)):
        assert "consumers_along_m=1 needs" in space.why_invalid(config)
    for config in (replace(multicast, warp_specialized=2), replace(multicast, split_k=2)):
        assert "multicast_b=1 needs" in space.why_invalid(config)
    one_tile = workloads.get("dense:m=100,n=4096,k=4096,b=nk")  # a single 128-row M tile: nothing to pair
    assert "1 M tile(s)" in tasks.of(one_tile).space(one_tile, gpu_for_arch("sm_90")).why_invalid(multicast)
    mma = replace(WS, intrinsic="mma", warp_specialized=0, wgmma_in_flight=0, block_row_warps=2, chunk=2,
                  vec_c=4, multicast_b=1)
    assert "it needs intrinsic=wgmma" in space.why_invalid(mma)


def test_ping_pong_warpgroups_take_whole_tiles_in_turn():
    """Warpgroup wg takes tiles blockIdx.x + wg * 132, then every 264th, from ring step wg * KT;
    each reads the whole stage and stores the whole tile (one wgmma over all block_n columns); a stage has one reader warpgroup; the
    main loop is handed over on named barriers 2 and 3 (only to a warpgroup that has a tile)."""
    view = view_of(workloads.get("dense:m=2048,n=4096,k=4096,b=nk"))  # 16 x 32 tiles of 128 x 128
    config = replace(WS, warp_specialized=2, block_col_warps=1, ping_pong=1)
    kp = plan(view, config)
    assert kp.threads == 384 and kp.launch_grid(132) == (132, 1) and kp.smem_bytes == plan(view, replace(config, ping_pong=0)).smem_bytes
    src = kp.source
    assert "int it = wg * KT;" in src and "tile = blockIdx.x + wg * gridDim.x; tile < 512; tile += 2 * gridDim.x" in src
    assert "it += KT;" in src and "mbar_init(&empty[s], 128);" in src
    assert "b_s = a_s + A_BYTES;" in src and "const int n = n0 + f * 16" in src and "acc[16]" in src
    assert 'if (tile >= (int)gridDim.x) asm volatile("bar.sync %0, 256;" :: "r"(2 + wg)' in src
    assert 'if (tile + (int)gridDim.x < 512) asm volatile("bar.arrive %0, 256;" :: "r"(3 - wg)' in src
    # the producer walks every tile of the block in order, as without ping-pong
    assert "for (int tile = blockIdx.x; tile < 512; tile += gridDim.x)" in src
    wide = plan(view, replace(config, block_col_warps=2, warp_row_tiles=1)).source  # 64 x 256
    assert "tc_wgmma_m64n256k64" in wide and "acc[16]" in wide and "mbar_init(&empty[s], 128);" in wide
    assert "b_s = a_s + A_BYTES;" in wide and "const int n = n0 + f * 16" in wide


def _ping_pong_protocol(source: str, tiles: int, grid: int, block: int, rng: random.Random) -> list[int]:
    """Run the generated ping-pong hand-over of one block under a random interleaving of its two
    warpgroups: named barriers as the hardware counts them (256 threads: one warpgroup's
    bar.sync meets the other's bar.arrive), each main loop an atomic step between them.  The
    tiles in the order their main loops ran; fails on a deadlock, on a barrier that two
    arrivals would complete without its waiter, or on an arrival left over at the end."""
    loop = re.search(r"for \(int tile = (.+?); tile < (\d+); tile \+= (.+?)\) \{", source.split("const int wg =")[1])
    wait = re.search(r"if \((.+?)\) asm volatile\(\"bar.sync %0, 256;\" :: \"r\"\((.+?)\)", source)
    hand = re.search(r"if \((.+?)\) asm volatile\(\"bar.arrive %0, 256;\" :: \"r\"\((.+?)\)", source)
    assert loop and wait and hand and int(loop.group(2)) == tiles

    def value(expr, **env):
        return _c_eval(expr.replace("(int)gridDim.x", "G").replace("gridDim.x", "G").replace("blockIdx.x", "B"),
                       G=grid, B=block, **env)

    def steps(wg):  # ("sync" | "arrive", barrier) and ("loop", tile) events in program order
        tile = value(loop.group(1), wg=wg)
        while tile < tiles:
            if value(wait.group(1), tile=tile):
                yield "sync", value(wait.group(2), wg=wg)
            yield "loop", tile
            if value(hand.group(1), tile=tile):
                yield "arrive", value(hand.group(2), wg=wg)
            tile += value(loop.group(3))

    arrived, order, pending = {2: 0, 3: 0}, [], {0: None, 1: None}
    events = {0: steps(0), 1: steps(1)}
    while events:
        runnable = [wg for wg in events if pending[wg] is None or arrived[pending[wg]] > 0]
        assert runnable, f"deadlock: both warpgroups wait (tiles {tiles}, grid {grid}, block {block})"
        wg = rng.choice(runnable)
        if pending[wg] is not None:  # its bar.sync completes
            arrived[pending[wg]] -= 1
            pending[wg] = None
        event = next(events[wg], None)
        if event is None:
            del events[wg]
        elif event[0] == "sync":
            pending[wg] = event[1]
        elif event[0] == "arrive":
            arrived[event[1]] += 1
            assert arrived[event[1]] <= 1, "two arrivals on one named barrier before its bar.sync"
        else:
            order.append(event[1])
    assert arrived == {2: 0, 3: 0} and pending == {0: None, 1: None}, "an arrival or a wait left over"
    return order


@pytest.mark.parametrize("mnk", [(2048, 4096, 4096), (1000, 1032, 520), (128, 256, 64), (4100, 2048, 256)])
def test_ping_pong_hand_over_runs_the_blocks_tiles_in_order_without_deadlock(mnk):
    """Whatever the interleaving, each block's main loops run in tile order (the order the
    producer fills the stage ring, which keeps every parity wait within one phase) and every
    bar.sync meets exactly one bar.arrive: 1-6 tiles a block, the last wave partial or not."""
    m, n, k = mnk
    view = view_of(workloads.get(f"dense:m={m},n={n},k={k},b=nk"))
    kp = plan(view, replace(WS, warp_specialized=2, block_col_warps=1, ping_pong=1))
    tiles = math.ceil(m / 128) * math.ceil(n / 128)
    rng = random.Random(0)
    grid = kp.launch_grid(132)[0]  # on an H100's 132 SMs
    for block in sorted({0, 1, grid // 2, grid - 1}):
        for _ in range(20):
            order = _ping_pong_protocol(kp.source, tiles, grid, block, rng)
            assert order == list(range(block, tiles, grid)), (block, order)


def test_rules_of_ping_pong():
    wl = workloads.get("rfc-3x3-b256")
    space = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
    ping_pong = replace(WS, warp_specialized=2, block_col_warps=1, ping_pong=1)
    assert space.why_invalid(ping_pong) is None and ping_pong.threads == 384
    wide = replace(ping_pong, block_col_warps=2, warp_row_tiles=1)  # 64 x 256: one m64n256 a warpgroup
    assert space.why_invalid(wide) is None and wide.threads == 384
    for config in (replace(ping_pong, warp_specialized=1), replace(wide, warp_row_tiles=2),  # 256 floats
                   replace(wide, warp_col_tiles=4),  # 64 x 128 is block_col_warps=1's
                   replace(wide, consumers_along_m=1, warp_row_tiles=2, warp_col_tiles=4)):
        assert "ping_pong=1 needs the persistent" in space.why_invalid(config)
    assert "exceed 16 (register spills)" in space.why_invalid(replace(ping_pong, warp_row_tiles=4))  # 256 x 128
    mma = replace(WS, intrinsic="mma", warp_specialized=0, wgmma_in_flight=0, block_row_warps=2, chunk=2,
                  vec_c=4, ping_pong=1)
    assert "ping_pong=1 alternates" in space.why_invalid(mma)


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("name,knobs", [("rfc-3x3-b256", dict(consumers_along_m=1)),
                                        ("rfc-3x3-b256", dict(consumers_along_m=1, multicast_b=1)),
                                        ("dense:m=330,n=200,k=520,b=kn", dict(multicast_b=1, wgmma_in_flight=0)),
                                        ("rfc-3x3-b256", dict(warp_specialized=2, block_col_warps=1, ping_pong=1)),
                                        ("dense:m=1000,n=1032,k=520,b=kn", dict(warp_specialized=2, block_col_warps=1,
                                                                                ping_pong=1, wgmma_in_flight=0)),
                                        ("rfc-3x3-b256", dict(warp_specialized=2, warp_row_tiles=1, ping_pong=1))])
def test_along_m_and_multicast_kernels_compile_without_spills_or_serialized_wgmma(name, knobs):
    from test_codegen import _ptxas_report

    kernel = lowered(workloads.get(name), replace(WS, **knobs), target="sm_90")
    assert ("multicast::cluster" in kernel.cuda_source) == bool(knobs.get("multicast_b"))
    report = _ptxas_report(kernel.cuda_source)
    assert "serialized" not in report and "(C7514" not in report and "(C7517" not in report, report
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report


# ---- A by TMA im2col (tma_im2col=1) ----------------------------------------------------------

IM2COL_VIEWS = ["tutorial", "rfc-3x3-b1", "n=3,h=17,w=23,c=64,k=128,r=3,s=5,pad=1x2,stride=2x1",
                "n=5,h=20,w=13,c=128,k=64,r=3,s=3,pad=2,dilation=2", "n=3,h=15,w=9,c=192,k=72,r=5,s=3,pad=2x1x1x0",
                "resnet50-res3-1x1-256-512-s2-b1"]


def _im2col_walk(box, dims, start, pixels):
    """The (w, h, image) of each pixel TMA's im2col mode walks from ``start``: along W with the
    traversal stride up to the window's end, then the next row from the window's start, then the
    next image (the semantics of cuTensorMapEncodeIm2col's corners and element strides)."""
    (lo_w, lo_h), (up_w, up_h), (tw, th) = box.window.lower, box.window.upper, box.window.traversal
    _, width, height, _ = dims
    w, h, n = start
    walked = []
    for _ in range(pixels):
        walked.append((w, h, n))
        w += tw
        if w > width - 1 + up_w:
            w, h = lo_w, h + th
            if h > height - 1 + up_h:
                h, n = lo_h, n + 1
    return walked


@pytest.mark.parametrize("name", IM2COL_VIEWS)
def test_the_im2col_box_loads_the_blocks_rows_of_the_im2col_a(name):
    """For sampled blocks and k-steps: the pixels TMA walks from the generated coordinates, shifted
    by the generated tap offsets, read exactly the elements (or padding zeros) of A's rows m0.. and
    columns k0..k0+63 that the view's own index map names."""
    view = view_of(workloads.get(name))
    config = replace(WS, block_col_warps=1, tma_im2col=1)
    kp = plan(view, config)
    box = kp.a_box
    assert box.dims == tuple(reversed(view.a.shape)) and box.pixels == config.block_m == 128
    row = re.search(r"const int a_img = ([^,]+), a_h = ([^,]+), a_w = ([^;]+);", kp.source)
    assert row and "tma_load_im2col_4d(a_s, map_a" in kp.source and "copy16(a_s" not in kp.source
    n, h, w, c = view.a.shape
    rng = random.Random(name)
    for m_tile in rng.sample(range(-(-view.m // config.block_m)), min(4, -(-view.m // config.block_m))):
        m0 = m_tile * config.block_m
        start = tuple(_c_eval(e, m0=m0) for e in (row.group(3), row.group(2), row.group(1)))
        walked = _im2col_walk(box, box.dims, start, box.pixels)
        for k0 in rng.sample(range(0, view.k, 64), min(3, view.k // 64)):
            c0 = _c_eval(box.coords[0], k0=k0)
            off_w, off_h = (_c_eval(e, k0=k0) for e in box.offsets)
            for j in range(0, box.pixels, 7):
                if m0 + j >= view.m:
                    continue  # past the last image: read as zeros, never stored
                pw, ph, pn = walked[j]
                (img, hh, ww, ci), inside = view.a.map.element(m0 + j, k0 + 5)
                assert (pn, ph + off_h, pw + off_w, c0 + 5) == (img, hh, ww, ci), (name, m0, j, k0)
                in_data = 0 <= ph + off_h < h and 0 <= pw + off_w < w
                assert in_data == all(bool(x) for x in inside)


def test_im2col_windows_and_where_im2col_applies():
    from tc_autotune.templates.tc_gemm.gemm import im2col_window

    window = im2col_window(view_of(workloads.get("n=3,h=17,w=23,c=64,k=128,r=3,s=5,pad=1x2,stride=2x1")))
    # out 9 x 23: the last output pixel's first tap reads column 22 - 2 = 20 = (23 - 1) - 2, row 8 * 2 - 1 = 15 = 16 - 1
    assert (window.lower, window.upper, window.traversal) == ((-2, -1), (-2, -1), (1, 2))
    assert im2col_window(view_of(workloads.get("rfc-3x3-b1"))).upper == (-1, -1)
    for name in ("rfc-1x1-b32",  # a 1x1 stride-1 conv's A is a plain matrix box
                 "n=2,h=9,w=11,c=16,k=32,r=3,s=3,pad=1",  # 16 channels: a k-step spans taps
                 "n=1,h=64,w=64,c=64,k=64,r=3,s=3,stride=9",  # TMA strides stop at 8
                 "dense:m=100,n=200,k=136,b=nk"):
        assert im2col_window(view_of(workloads.get(name))) is None, name


def test_rules_of_tma_im2col():
    gpu = gpu_for_arch("sm_90")
    space = tasks.of(workloads.get("tutorial")).space(workloads.get("tutorial"), gpu)
    im2col = replace(WS, tma_im2col=1)
    assert space.why_invalid(im2col) is None and space.why_invalid(replace(im2col, warp_specialized=2)) is None
    assert "tma_im2col=1 needs" in space.why_invalid(replace(im2col, warp_specialized=0))
    for name in ("rfc-1x1-b32", "dense:m=2048,n=4096,k=4096,b=nk"):
        wl = workloads.get(name)
        other = tasks.of(wl).space(wl, gpu)
        assert "this workload's A is none" in other.why_invalid(im2col), name
        # random draws stay where the knob is 0 (and tma_store and setmaxnreg too, and an ungrouped conv's
        # group_pack at 1, 4 values, and swap_ab at 0, 5 values): the draws from before them
        # (x 160: tma_im2col, tma_store, setmaxnreg, group_pack, swap_ab; x 6: consumer_n and deep_ring)
        assert 960 * other.draw_bound == len(other) == len(space) and not any(c.tma_im2col for c in other.sample(50))
    assert 480 * space.draw_bound == len(space)
    mma = replace(im2col, intrinsic="mma", warp_specialized=0, wgmma_in_flight=0)
    assert "tma_im2col=1 loads" in space.why_invalid(mma)


def test_the_prior_counts_an_im2col_a_as_boxed():
    from tc_autotune.templates.tc_gemm.prior import prior_score
    from tc_autotune.core.config_space import positions_from_configs

    wl = workloads.get("resnet50-res3-1x1-256-512-s2-b1")  # gathered without im2col (28-pixel rows: row boxes)
    space = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
    im2col, gathered, plain = prior_score(space, positions_from_configs(
        space, [replace(WS, tma_im2col=1), WS, replace(WS, warp_specialized=0)]))
    assert im2col > gathered > plain


def test_encode_im2col_asks_the_driver_once_per_data_and_copies_the_map(monkeypatch):
    """The host code's callback: the driver's arguments innermost first, the map copied into the
    kernel's slot, and a cached map for data it has seen (no driver call per launch)."""
    import ctypes

    from tc_autotune.backends.cuda import tensormap

    calls = []

    def fake_driver(slot, dtype, rank, data, dims, strides, lower, upper, channels, pixels, traversal, *modes):
        calls.append((dtype, rank, data, list(dims), list(strides), list(lower), list(upper), channels, pixels,
                      list(traversal), modes))
        assert slot % tensormap.MAP_ALIGN == 0
        ctypes.memmove(slot, bytes([len(calls)]) * tensormap.MAP_BYTES, tensormap.MAP_BYTES)
        return 0

    monkeypatch.setattr(tensormap, "_driver", lambda: fake_driver)
    tensormap._im2col_map.cache_clear()
    box = plan(view_of(workloads.get("n=3,h=17,w=23,c=64,k=128,r=3,s=5,pad=1x2,stride=2x1")),
               replace(WS, block_col_warps=1, tma_im2col=1)).a_box
    slot = ctypes.create_string_buffer(tensormap.MAP_BYTES)
    for data in (4096, 4096, 8192):
        assert tensormap.encode_im2col(ctypes.c_void_p(ctypes.addressof(slot)), ctypes.c_void_p(data),
                                       *box.encode_args()) == 0
    assert len(calls) == 2 and slot.raw == bytes([2]) * tensormap.MAP_BYTES
    assert calls[0] == (6, 4, 4096, [64, 23, 17, 3], [128, 23 * 128, 17 * 23 * 128], [-2, -1], [-2, -1], 64, 128,
                        [1, 1, 2, 1], (0, 3, 0, 0))
    tensormap._im2col_map.cache_clear()


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("name,knobs", [("tutorial", dict(warp_specialized=2, consumers_along_m=1)),
                                        ("n=3,h=17,w=23,c=64,k=128,r=3,s=5,pad=1x2,stride=2x1",
                                         dict(block_col_warps=1, wgmma_in_flight=0)),
                                        ("rfc-3x3-b32", dict(warp_specialized=2, block_col_warps=1, ping_pong=1))])
def test_im2col_kernels_compile_without_spills_or_serialized_wgmma(name, knobs):
    from test_codegen import _ptxas_report

    kernel = lowered(workloads.get(name), replace(WS, **knobs, tma_im2col=1), target="sm_90")
    assert "global.im2col.mbarrier::complete_tx::bytes" in kernel.cuda_source
    report = _ptxas_report(kernel.cuda_source)
    assert "serialized" not in report and "(C7514" not in report and "(C7517" not in report, report
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report


def test_an_im2col_kernels_host_code_encodes_its_map_through_the_packed_function():
    """TVM's host encodes A's tiled map itself; an im2col A's map comes from tensormap's callback,
    with the box's integers, and building the module registers it in this process."""
    import tvm_ffi

    from tc_autotune.backends.cuda import tensormap
    from tc_autotune.templates.tc_gemm.warp_specialized import kernel_module

    wl = workloads.get("n=3,h=17,w=23,c=64,k=128,r=3,s=5,pad=1x2,stride=2x1")
    config = replace(WS, block_col_warps=1, tma_im2col=1)
    script = kernel_module(view_of(wl), config).script()
    assert f'"{tensormap.ENCODE_IM2COL}"' in script and script.count("tensormap_encode_tiled") == 1  # B's
    args = plan(view_of(wl), config).a_box.encode_args()
    assert ", ".join(map(str, args)) in script
    assert tvm_ffi.get_global_func(tensormap.ENCODE_IM2COL, allow_missing=True) is not None
    plain = kernel_module(view_of(wl), replace(config, tma_im2col=0)).script()
    assert tensormap.ENCODE_IM2COL not in plain


# ---- C by TMA stores (tma_store) ----------------------------------------------------------
STORE_VIEWS = [("rfc-1x1-b256", dict(warp_specialized=2)),  # fp32: 32-column chunks, 2 consumers by columns
               ("dense:m=130,n=192,k=520,b=kn,out_dtype=float16", dict(warp_col_tiles=4, consumers_along_m=1)),
               ("rfc-3x3-b256", dict(block_col_warps=1, warp_specialized=2, ping_pong=1, tma_im2col=1))]


@pytest.mark.parametrize("name,knobs", STORE_VIEWS)
def test_the_staged_epilogue_puts_each_accumulator_where_tmas_swizzled_box_reads_it(name, knobs):
    """The generated staging writes (row, byte and address expressions, evaluated for every
    warp, lane, fragment and slot pair) read back through TMA's 128-byte swizzle (16-byte chunk
    c of row r at c ^ (r % 8)) give the element the accumulator holds (slot p of lane l: row
    8 * (p % 4 / 2) + l / 4 of the warp's 16, column 8 * (p / 4) + 2 * (l % 4) of the
    fragment's 16), and fill the chunk's 64 rows x 128 bytes exactly once."""
    view = view_of(workloads.get(name))
    config = replace(WS, **knobs, tma_store=1)
    kp = plan(view, config)
    width, rows = kp.c_box.box
    out_bytes = {"float32": 4, "float16": 2}[view.out_dtype]
    assert width * out_bytes == 128 and rows == 64 and kp.c_box.dims == (view.n, view.m)
    assert kp.c_box.strides == (view.n * out_bytes,)
    src = kp.source
    row = re.search(r"const int r = (.+);", src).group(1)
    byte = re.search(r"const int byte = (.+);", src).group(1)
    address = re.search(r"reinterpret_cast<\w+\*>\(buf \+ (.+)\) = ", src).group(1)
    chunk_frags = int(re.search(r"for \(int f = 0; f < (\d+); \+\+f\) \{\n\s+#pragma unroll\n\s+for \(int p", src).group(1))
    assert chunk_frags * 16 == width
    seen = np.zeros((rows, width), dtype=int)
    for warp in range(4):
        for lane in range(32):
            for f in range(chunk_frags):
                for p in range(0, 8, 2):
                    r = _c_eval(row, warp=warp, p=p, lane=lane)
                    b = _c_eval(byte, f=f, p=p, lane=lane)
                    addr = _c_eval(address, r=r, byte=b)
                    assert addr % (2 * out_bytes) == 0  # the pair's store is aligned
                    box_row, within = divmod(addr, 128)
                    col = ((within >> 4) ^ (box_row % 8)) * 16 // out_bytes + (within & 15) // out_bytes
                    assert (box_row, col) == (warp * 16 + 8 * (p % 4 // 2) + lane // 4,
                                              f * 16 + 8 * (p // 4) + 2 * (lane % 4))
                    seen[box_row, col:col + 2] += 1
    assert (seen == 1).all()


def test_tma_store_stages_c_in_two_buffers_a_warpgroup_and_stores_every_chunk():
    view = view_of(workloads.get("rfc-1x1-b256"))
    plain = plan(view, replace(WS, warp_specialized=2))
    stored = plan(view, replace(WS, warp_specialized=2, tma_store=1))
    assert stored.smem_bytes == plain.smem_bytes + 2 * 2 * 64 * 128  # 2 consumer warpgroups x 2 chunk buffers
    assert plain.c_box is None and "tma_store_2d" not in plain.source and "map_c" not in plain.source
    src = stored.source
    assert "smem + STAGES * STAGE_BYTES + 32768" in src  # the mbarriers after the staging buffers
    assert src.count("cp.async.bulk.commit_group;") == 1 and "cp.async.bulk.wait_group.read 1;" in src
    assert "cp.async.bulk.wait_group.read 0;" in src  # before the kernel ends: the buffers were read
    # 128 x 256 fp32: per consumer 2 slabs x 4 chunks of 32 columns at n0 + wg * 128 + j * 32
    assert "for (int j = 0; j < 4; ++j, ++chunk)" in src and "tma_store_2d(map_c, buf, n0 + wg * 128 + j * 32, m0 + s * 64)" in src
    assert "if (m < m_end" not in src  # TMA clips at C's edges
    ping_pong = plan(view, replace(WS, block_col_warps=1, warp_specialized=2, ping_pong=1, tma_store=1))
    assert ping_pong.smem_bytes == plan(view, replace(WS, block_col_warps=1, warp_specialized=2,
                                                      ping_pong=1)).smem_bytes + 2 * 16384  # both warpgroups store


def test_rules_of_tma_store():
    gpu = gpu_for_arch("sm_90")

    def why(name, **knobs):
        wl = workloads.get(name)
        return tasks.of(wl).space(wl, gpu).why_invalid(replace(WS, **knobs, tma_store=1))

    assert why("rfc-1x1-b32") is None and why("dense:m=100,n=200,k=136,b=nk", stages=3) is None  # matrix A
    assert why("tutorial", tma_im2col=1) is None  # im2col: blocks of consecutive pixels
    assert why("resnet50-res5-3x3-512-512-s2-b1", block_col_warps=1, stages=3) is None  # gathered A
    assert "tma_store=1 needs" in why("tutorial")  # spatial boxes: blocks of whole output rows
    assert "tma_store=1 needs" in why("resnet50-res3-1x1-256-512-s2-b1")  # row boxes
    assert "tma_store=1 needs" in why("dense:m=64,n=75,k=128,b=nk", block_col_warps=1, warp_col_tiles=4, stages=2)
    assert "tma_store=1 needs" in why("dense:m=16,n=4096,k=4096,b=nk", block_col_warps=1, warp_row_tiles=1,
                                      split_k=4)
    assert "tma_store=1 stores" in why("rfc-1x1-b32", intrinsic="mma", warp_specialized=0, wgmma_in_flight=0)
    # 64 x 128 at 4 stages and a staging pair: 115776 bytes, fits; 128 x 256 at 4 stages with two: 230464
    assert replace(WS, block_col_warps=1, warp_row_tiles=1, tma_store=1).smem_bytes == 115776
    assert replace(WS, tma_store=1).smem_bytes == 230464 and why("rfc-1x1-b256", warp_specialized=2) is None


def test_random_draws_keep_tma_store_setmaxnreg_and_an_im2col_that_cannot_apply_at_zero():
    from tc_autotune.templates.tc_gemm.knobs import KNOBS

    def space(name, **knobs):
        from tc_autotune.templates.registry import ConfigSpace

        return ConfigSpace(workloads.get(name), gpu_for_arch("sm_90"), {**KNOBS, **knobs})

    conv, one_by_one = space("tutorial"), space("rfc-1x1-b32")
    # (x 4: group_pack, which an ungrouped conv's draws keep at 1; x 5: swap_ab, x 3: consumer_n and
    # x 2: deep_ring, kept at 0)
    assert 480 * conv.draw_bound == len(conv) and 960 * one_by_one.draw_bound == len(one_by_one)
    assert 960 * space("tutorial", warp_specialized=(0,)).draw_bound == len(conv) // 3  # no kernel to take im2col
    # tma_im2col is the fourth knob from the end: a conv's draws reach both its values, never
    # tma_store=1, setmaxnreg=1 or swap_ab > 0
    drawn = [conv.get(int(i)) for i in conv.drawn(np.arange(0, conv.draw_bound, 9_999_991))]
    assert {c.tma_im2col for c in drawn} == {0, 1} and not any(c.tma_store or c.setmaxnreg or c.swap_ab for c in drawn)
    assert np.array_equal(conv.drawn(np.arange(100)), np.arange(100))
    sampled = conv.sample(20, seed=1)  # as many valid configs as the draws found before tma_store
    assert len(sampled) == 20 and not any(c.tma_store or c.setmaxnreg for c in sampled)


def test_the_persistent_starting_tilings_store_c_with_tma_where_they_can():
    from tc_autotune.templates.tc_gemm.warp_specialized import STARTING_TILINGS, starting_configs

    gpu = gpu_for_arch("sm_90")
    for name, stored in (("rfc-1x1-b32", True), ("tutorial", False)):
        wl = workloads.get(name)
        found = starting_configs(tasks.of(wl).space(wl, gpu))
        persistent = [c for c in found if c.warp_specialized == 2 and not c.tma_im2col]
        assert persistent and all(c.tma_store == stored for c in persistent), name
        assert all(c.tma_store == 0 for c in found if c.warp_specialized == 1)
    assert sum(t.get("tma_store", 0) for t in STARTING_TILINGS) == 5
    # setmaxnreg on the two ping-pong tilings, which keep it wherever they are valid
    assert [t.get("setmaxnreg", 0) for t in STARTING_TILINGS] == [t.get("ping_pong", 0) for t in STARTING_TILINGS]
    wl = workloads.get("rfc-3x3-b32")
    ping_pong = [c for c in starting_configs(tasks.of(wl).space(wl, gpu)) if c.ping_pong]
    assert len(ping_pong) == 2 and all(c.setmaxnreg for c in ping_pong)


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("name,knobs", STORE_VIEWS + [("dense:m=100,n=200,k=136,b=nk,out_dtype=float16", dict(stages=3))])
def test_tma_store_kernels_compile_without_spills_and_encode_cs_map(name, knobs):
    from test_codegen import _ptxas_report

    wl = workloads.get(name)
    kernel = lowered(wl, replace(WS, **knobs, tma_store=1), target="sm_90")
    signature = next(line for line in kernel.cuda_source.splitlines() if "__global__" in line)
    assert f"const __grid_constant__ CUtensorMap {view_of(wl).c.tensor}_tensormap" in signature
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in kernel.cuda_source
    host = kernel.executable.mod.inspect_source()
    assert host.count("runtime.cuTensorMapEncodeTiled") >= 2  # C's map beside B's
    report = _ptxas_report(kernel.cuda_source)
    assert "serialized" not in report and "(C7514" not in report and "(C7517" not in report, report
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report


def test_the_prior_weighs_tma_stores_more_for_fp16_output():
    from tc_autotune.templates.tc_gemm.prior import prior_score
    from tc_autotune.core.config_space import positions_from_configs

    gains = {}
    for dtype in ("float32", "float16"):
        wl = workloads.get(f"n=32,h=14,w=14,c=1024,k=256,r=1,s=1,out_dtype={dtype}")
        space = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
        stored, plain = prior_score(space, positions_from_configs(space, [replace(WS, tma_store=1), WS]))
        gains[dtype] = stored / plain
    assert 1.0 < gains["float32"] < gains["float16"]


def test_validity_and_the_prior_take_zero_rows():
    """A conv whose A comes in TMA boxes asks per block_m; with no rows that is an empty answer
    (the per-block_m lookup once raised on an empty column in the tma_store rule)."""
    from tc_autotune.templates.tc_gemm.prior import prior_score
    from tc_autotune.core.config_space import valid_mask

    wl = workloads.get("rfc-3x3-b32")
    space = tasks.of(wl).space(wl, gpu_for_arch("sm_90"))
    none = np.zeros((0, len(space.knobs)), dtype=np.int64)
    assert valid_mask(space, none).shape == (0,) and prior_score(space, none).shape == (0,)


# ---- fused epilogues ---------------------------------------------------------------------------

# Every part of the grammar, on both stores (registers, tma_store), fp32 and fp16 output, an odd N
# (channel and residual inputs read one by one), a conv and both dense layouts.
FUSED_VIEWS = [
    ("rfc-1x1-b32-scale_bias_residual_relu", dict(warp_specialized=2, tma_store=1)),
    ("resnet50-res4-3x3-256-256-b32-bias_relu", dict(consumers_along_m=1, tma_im2col=1)),
    ("dense:m=100,n=200,k=136,b=nk,out_dtype=float16,epilogue=bias_residual_gelu", dict(stages=3, tma_store=1)),
    ("dense:m=200,n=75,k=520,b=nk,epilogue=scale_bias_residual_relu", dict(block_col_warps=1, warp_col_tiles=4,
                                                                           stages=3)),
    ("dense:m=130,n=192,k=520,b=kn,out_dtype=float16,epilogue=residual", dict(warp_col_tiles=4, stages=3, split_k=2)),
    ("dense:m=1000,n=1032,k=520,b=kn,epilogue=bias_gelu", dict(block_col_warps=1, warp_row_tiles=1, warp_col_tiles=4,
                                                               stages=3, warp_specialized=2, ping_pong=1,
                                                               tma_store=1)),
]


def _fused_source(name, knobs):
    wl = workloads.get(name)
    return wl, plan(view_of(wl), replace(WS, **knobs)).source


@pytest.mark.parametrize("name,knobs", FUSED_VIEWS)
def test_the_warp_specialized_kernel_takes_every_epilogue_and_applies_it_in_order(name, knobs):
    from tc_autotune.workloads.epilogue import parse

    wl, source = _fused_source(name, knobs)
    fused = parse(wl.epilogue)
    assert tasks.of(wl).space(wl, gpu_for_arch("sm_90")).why_invalid(replace(WS, **knobs)) is None
    out_t = {"float32": "float", "float16": "half"}[wl.out_dtype]
    head = source[source.index("void tc_ws_gemm("):source.index("{", source.index("void tc_ws_gemm("))]
    pointers = re.findall(r"(?:const )?(float|half)\* __restrict__ (\w+)", head)
    assert pointers == [("half", "A"), ("half", "B"), *[("float", name) for name in fused.channel_inputs],
                        *[(out_t, "residual")] * fused.residual, (out_t, "C")]  # the task's argument order
    body = source[source.index(f"// epilogue {fused}"):]
    steps = [("scale", "scale"), ("bias", "bias"), ("residual", "residual"), ("activation", "fmaxf" if
             fused.activation == "relu" else "tanhf")]
    positions = [body.index(token) for part, token in steps if getattr(fused, part)]
    assert positions == sorted(positions)  # Epilogue.apply's order
    store = "tma_store_2d(" if knobs.get("tma_store") else "*>(C + (long long)m" if wl.out_shape[-1] % 2 == 0 else "C[("
    assert body.index(store) > positions[-1]  # the output after the epilogue
    if wl.out_shape[-1] % 2:  # odd N: column n + 1's inputs only inside C
        assert f"if (n + 1 < {wl.out_shape[-1]})" in body


def test_a_plain_workload_generates_the_kernel_it_did_before_epilogues():
    """The plain kernel's code is unchanged by the fused path (its probe fingerprints pin that)."""
    _, plain = _fused_source("dense:m=100,n=200,k=136,b=nk", dict(stages=3))
    assert "epilogue" not in plain and "const float v0 = acc" in plain


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("name,knobs", FUSED_VIEWS[:4])
def test_fused_warp_specialized_kernels_compile_without_spills_and_take_the_inputs(name, knobs):
    from tc_autotune.workloads.epilogue import parse

    from test_codegen import _ptxas_report

    wl = workloads.get(name)
    kernel = lowered(wl, replace(WS, **knobs), target="sm_90")
    signature = next(line for line in kernel.cuda_source.splitlines() if "__global__" in line)
    assert signature.count("__restrict__") == 3 + len(parse(wl.epilogue).inputs), signature
    report = _ptxas_report(kernel.cuda_source)
    assert "serialized" not in report and "(C7514" not in report and "(C7517" not in report, report
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report


# ---- registers moved from the producer to the consumers (setmaxnreg=1) --------------------------

MAXNREG_VIEWS = [("tutorial", dict(warp_specialized=2, consumers_along_m=1, tma_im2col=1, tma_store=1)),
                 ("rfc-3x3-b256", dict(warp_specialized=2, block_col_warps=1, ping_pong=1, tma_im2col=1)),
                 ("dense:m=100,n=200,k=520,b=kn,out_dtype=float16", dict(stages=3, split_k=2))]


@pytest.mark.parametrize("name,knobs", MAXNREG_VIEWS)
def test_setmaxnreg_moves_the_producers_registers_to_the_consumers(name, knobs):
    """The whole producer warpgroup gives registers back before its idle threads exit, each
    consumer thread takes them before its first instruction; 128 x 40 + 256 x 232 fits an SM."""
    from tc_autotune.templates.tc_gemm.knobs import WS_CONSUMER_REGS, WS_PRODUCER_REGS

    view = view_of(workloads.get(name))
    plain, moved = (plan(view, replace(WS, **knobs, setmaxnreg=on)).source for on in (0, 1))
    assert "setmaxnreg" not in plain
    lines = moved.splitlines()
    producer = lines.index("  if (tid < 128) {")
    assert lines[producer + 1].strip().startswith(f'asm volatile("setmaxnreg.dec.sync.aligned.u32 {WS_PRODUCER_REGS};"')
    assert "return;" in lines[producer + 2]  # the idle producer threads exit after it
    consumer = next(i for i, line in enumerate(lines) if line.strip() == "const int wg = tid / 128 - 1;")
    assert f"setmaxnreg.inc.sync.aligned.u32 {WS_CONSUMER_REGS};" in lines[consumer - 1]
    assert moved.count("setmaxnreg.") == 2
    assert 128 * WS_PRODUCER_REGS + 256 * WS_CONSUMER_REGS <= 65536  # an SM's register file
    assert WS_PRODUCER_REGS % 8 == WS_CONSUMER_REGS % 8 == 0  # setmaxnreg's granularity


def test_rules_of_setmaxnreg():
    space = tasks.of(workloads.get("tutorial")).space(workloads.get("tutorial"), gpu_for_arch("sm_90"))
    assert space.why_invalid(replace(WS, setmaxnreg=1)) is None  # 2 consumers by columns
    assert space.why_invalid(replace(WS, warp_specialized=2, block_col_warps=1, ping_pong=1, setmaxnreg=1)) is None
    one = replace(WS, block_col_warps=1, setmaxnreg=1)
    assert "setmaxnreg=1 needs the warp-specialized kernel with two consumer warpgroups" in space.why_invalid(one)
    plain = replace(WS, warp_specialized=0, wgmma_in_flight=0, setmaxnreg=1, vec_c=4)
    assert "setmaxnreg=1 needs" in space.why_invalid(plain)
    with pytest.raises(ValueError, match="not a warp-specialized config"):
        plan(view_of(workloads.get("tutorial")), one)
    draws = space.drawn(np.arange(0, space.draw_bound, space.draw_bound // 997))
    assert not any(space.get(int(i)).setmaxnreg for i in draws)  # draws keep it at 0


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("name,knobs", MAXNREG_VIEWS)
def test_setmaxnreg_kernels_compile_without_spills_or_serialized_wgmma(name, knobs):
    from test_codegen import _ptxas_report

    kernel = lowered(workloads.get(name), replace(WS, **knobs, setmaxnreg=1), target="sm_90")
    assert "setmaxnreg.inc.sync.aligned.u32" in kernel.cuda_source
    report = _ptxas_report(kernel.cuda_source)
    assert "serialized" not in report and "(C7514" not in report and "(C7517" not in report, report
    assert "setmaxnreg" not in report.lower(), report  # ptxas warns where it ignores the instruction
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report
