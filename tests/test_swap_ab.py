"""swap_ab on the CPU: a small-M dense with an (N, K) weight computed by the warp-specialized kernel as
C^T = B^T A^T (``swap``): the swapped GEMM view, the rules (and their one-line refusals), what the
rules derive in the task's tile terms, the generated kernel (the weight as wgmma's A, the tokens as
its n, the deep ring, the transposed store), the tensor maps' order, features, starting configs and
draws, and a few kernels compiled by nvcc for sm_90a.  The kernels' results are checked on the GPU
(``test_gpu_swap_ab.py``)."""

import re
from dataclasses import replace

import numpy as np
import pytest
from generated import lowered

from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.core import tasks
from tc_autotune.templates.tc_gemm.gemm import RowMajor, Transposed
from tc_autotune.templates.tc_gemm.generator import SWAP_PROBES, probe_kernels
from tc_autotune.templates.tc_gemm.knobs import KNOB_DEFAULTS, KNOBS, TcGemmConfig
from tc_autotune.templates.tc_gemm.operand_layout import COL_MAJOR
from tc_autotune.templates.tc_gemm.rules import derive, values_of_config
from tc_autotune.templates.tc_gemm.swap import swappable, swapped
from tc_autotune.templates.tc_gemm.views import view_of
from tc_autotune.templates.tc_gemm.warp_specialized.kernel import kernel_module, plan
from tc_autotune import workloads

HOPPER = gpu_for_arch("sm_90")
FP8_M16 = "dense:m=16,n=4096,k=4096,b=nk,dtype=float8_e4m3,out_dtype=bfloat16"
FP16_M40 = "dense:m=40,n=1088,k=1024,b=nk,out_dtype=float16,epilogue=bias"
SWAP = dict(probe_kernels(SWAP_PROBES)[0][1].as_dict())  # 64 x 8, ring of 16, one consumer


def _space(spec, arch="sm_90"):
    wl = workloads.get(spec)
    return tasks.of(wl).space(wl, gpu_for_arch(arch))


def _config(**changes) -> TcGemmConfig:
    return TcGemmConfig(**{**SWAP, **changes})


def test_the_knob_is_appended_last_with_zero_first():
    # (after it: consumer_n and deep_ring, appended later still)
    assert list(KNOBS)[-3:] == ["swap_ab", "consumer_n", "deep_ring"]
    assert KNOBS["swap_ab"][0] == 0 and KNOB_DEFAULTS["swap_ab"] == 0
    assert TcGemmConfig(**{**SWAP, "swap_ab": 0}).block_n == 64 and _config().block_n == 8


def test_the_swapped_view_is_the_transposed_gemm_of_the_tasks_tensors():
    view = view_of(workloads.get("dense:batch=2,m=3,n=40,k=64,b=nk,dtype=float8_e4m3,b_dtype=float8_e5m2"))
    assert swappable(view) and not view.swapped
    s = swapped(view)
    assert s.shape == (40, 6, 64) and s.swapped and not swappable(s)
    assert (s.dtype, s.b_dtype) == ("float8_e5m2", "float8_e4m3fn")  # the operands' dtypes swap places
    assert (s.a.tensor, s.b.tensor, s.c.tensor) == ("weight", "data", "out")
    assert isinstance(s.a.map, RowMajor) and isinstance(s.b.map, Transposed) and s.b.layout == COL_MAJOR
    # A'[n, k] is the weight's [n, k]; B'[k, m] the (flattened) data's [m, k]; C'[n, m] is C[m, n]
    assert s.a.map.element(5, 7)[0] == view.b.map.element(7, 5)[0] == (5, 7)
    assert s.b.map.element(7, 4)[0] == (4, 7) and s.b.shape == (6, 64)
    assert s.c.map.element(5, 4)[0] == (4, 5)
    with pytest.raises(ValueError, match=re.escape("swap_ab takes a dense with an (N, K) weight (b=nk)")):
        swapped(view_of(workloads.get("dense:m=16,n=64,k=64")))
    for spec in ("dense:m=16,n=64,k=64", "tutorial"):  # a (K, N) weight, a conv
        assert not swappable(view_of(workloads.get(spec))), spec


@pytest.mark.parametrize("spec,changes,message", [
    ("tutorial", {}, "swap_ab=8 needs the warp-specialized wgmma kernel (intrinsic=wgmma, warp_specialized > 0) and "
                     "a dense with an (N, K) weight (b=nk) of M <= 128 rows, not intrinsic=wgmma, warp_specialized=1, "
                     "M=50176, and this GEMM is not such a dense"),
    ("dense:m=16,n=4096,k=4096", {}, "and this GEMM is not such a dense"),
    ("dense:m=256,n=4096,k=4096,b=nk", {}, "of M <= 128 rows, not intrinsic=wgmma, warp_specialized=1, M=256"),
    (FP8_M16, dict(warp_specialized=0), "swap_ab=8 needs the warp-specialized wgmma kernel"),
    (FP8_M16, dict(swap_ab=32), "swap_ab=32 rows of M a block are more than twice M=16 rounded up to 8"),
    ("dense:m=1,n=4096,k=4096,b=nk", dict(swap_ab=16), "swap_ab=16 rows of M a block are more than twice M=1"),
    (FP8_M16, dict(warp_col_tiles=8), "swap_ab=8 sets the block's rows of M (the wgmma's n) itself: it needs "
                                      "warp_col_tiles=4 and one consumer warpgroup, two along M"),
    (FP8_M16, dict(block_col_warps=2, split_k=2), "or two along K (unpersistent, split_k=1), not warp_col_tiles=4, "
                                                  "block_col_warps=2, consumers_along_m=0, warp_specialized=1, split_k=2"),
    (FP8_M16, dict(block_col_warps=2, warp_specialized=2), "block_col_warps=2, consumers_along_m=0, warp_specialized=2"),
    (FP8_M16, dict(warp_specialized=2, ping_pong=1), "it takes no ping_pong, multicast_b or tma_store, not ping_pong=1"),
    (FP8_M16, dict(multicast_b=1), "multicast_b=1"),
    (FP8_M16, dict(tma_store=1), "tma_store=1"),
    ("llm-4096x4096-m16", dict(intrinsic="mma", warp_specialized=0, wgmma_in_flight=0),
     "swap_ab=8 needs the warp-specialized wgmma kernel (intrinsic=wgmma, warp_specialized > 0) and a dense with "
     "an (N, K) weight (b=nk) of M <= 128 rows, not intrinsic=mma, warp_specialized=0, M=16"),
    (FP8_M16, dict(stages=4, warp_row_tiles=4), "bytes of shared memory exceed"),  # 16 stages of 256 x 8
])
def test_what_swap_ab_cannot_take_is_refused_in_one_line(spec, changes, message):
    why = _space(spec).why_invalid(_config(**changes))
    assert why is not None and message in why and "\n" not in why, why


def test_the_swap_configs_the_kernel_takes_are_valid_and_the_masks_agree():
    from tc_autotune.search import cost_model

    cases = [(FP8_M16, {}), (FP8_M16, dict(swap_ab=16, split_k=2)), (FP8_M16, dict(warp_specialized=2)),
             ("llm-4096x4096-m16", dict(swap_ab=8)), ("llm-4096x4096-m128", dict(swap_ab=64, stages=3)),
             (FP16_M40, dict(swap_ab=64, block_col_warps=2, warp_row_tiles=2, consumers_along_m=1, stages=2)),
             (FP8_M16, dict(block_col_warps=2)), (FP8_M16, dict(swap_ab=16, block_col_warps=2, warp_row_tiles=2, stages=2))]
    for spec, changes in cases:
        space = _space(spec)
        config = _config(**changes)
        assert space.why_invalid(config) is None, (spec, changes, space.why_invalid(config))
        pos = cost_model.positions_from_indices(space, np.array([space.index(config)]))
        assert cost_model.valid_mask(space, pos).all()
        plan(view_of(space.workload), config)  # the kernel takes it


def test_rules_derive_the_tasks_tile_and_the_swapped_kernels_ring():
    space = _space(FP8_M16)
    v = derive(values_of_config(_config()), space.context)
    # 8 tokens x 64 weight rows a block: 2 x 64 blocks, 16 stages of (64 + 8) 128-byte rows
    assert (v["bm"], v["bn"], v["gm"], v["gn"], v["ring"], v["frags"]) == (8, 64, 2, 64, 16, 1)
    assert v["smem"] == 16 * 72 * 128 + 16 * 16 + 1024 == _config().smem_bytes
    along = _config(swap_ab=16, block_col_warps=2, warp_row_tiles=2, consumers_along_m=1, stages=2)
    v = derive(values_of_config(along), space.context)
    assert (v["bm"], v["bn"], v["frags"], v["ring"], v["threads"]) == (16, 128, 1, 8, 384)
    unswapped = derive(values_of_config(_config(swap_ab=0)), space.context)
    assert (unswapped["bm"], unswapped["bn"], unswapped["ring"]) == (64, 64, 4)


def test_the_kernel_runs_the_weight_as_wgmmas_a_and_stores_c_transposed():
    wl = workloads.get(FP8_M16 + ",epilogue=bias")
    kp = plan(view_of(wl), _config())
    src = kp.source
    assert kp.swapped and kp.grid == (64, 2) and kp.threads == 256 and kp.smem_bytes == _config().smem_bytes
    assert "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}," in src
    assert "C[4096, 16] = A[4096, 4096] B[4096, 16]" in src and "swap-AB" in src
    assert "constexpr int STAGES = 16, KT = 32;" in src and "constexpr int A_BYTES = 8192, STAGE_BYTES = 9216;" in src
    assert "tma_load_2d(a_s, map_a, &full[stage], k0, m0);" in src and "tma_load_2d(b_s + 0, map_b" in src
    # half a fragment (slots 0-3), lanes r and r ^ 1 exchange, pairs of features of one token stored
    assert "for (int p = 0; p < 4; p += 2)" in src and "__shfl_xor_sync(0xffffffffu, v0, 4)" in src
    assert "if (m < 16 && n < 4096)" in src and "C + (long long)m * 4096 + n" in src
    assert "__ldg(reinterpret_cast<const float2*>(bias + n))" in src  # bias per feature: the tile's rows
    assert src.index("v0 *= scale_ab") < src.index("__shfl_xor_sync")
    # the maps in the kernel's order: the weight's (the task's B) first, then the data's
    script = kernel_module(view_of(wl), _config()).script()
    encodes = re.findall(r"tensormap_encode_tiled\((\w+), (\w)\.data, (\d+), (\d+), \d+, (\d+), (\d+)", script)
    assert encodes == [("weight_tensormap", "B", "4096", "4096", "128", "64"),
                       ("data_tensormap", "A", "4096", "16", "128", "8")]
    assert re.search(r"T\.address_of\(weight_tensormap\), T\.address_of\(data_tensormap\)", script)
    # unswapped, the same config's kernel is today's
    assert not plan(view_of(wl), _config(swap_ab=0)).swapped


def test_two_consumers_along_k_take_the_k_steps_in_turn_and_sum_before_the_store():
    """Two consumer warpgroups of one 64 x 8 tile: even k-steps warpgroup 0, odd ones 1, each stage
    read (and released) by one of them; warpgroup 1's sums go through shared memory to warpgroup 0,
    which alone stores."""
    space = _space(FP8_M16)
    v = derive(values_of_config(_config(block_col_warps=2)), space.context)
    assert (v["bm"], v["bn"], v["frags"], v["threads"], v["ring"]) == (8, 64, 1, 384, 16)
    kp = plan(view_of(workloads.get(FP8_M16)), _config(block_col_warps=2))
    src = kp.source
    assert kp.threads == 384 and kp.grid == (64, 2) and "2 consumer warpgroup(s) along K" in src
    assert "for (int kt = wg; kt < KT; kt += 2) {" in src and "mbar_init(&empty[s], 128);" in src
    assert "const unsigned char* b_s = a_s + A_BYTES;" in src  # both read all of B: the whole stage
    assert "if (kt >= 2) mbar_arrive(&empty[(kt - 2) % STAGES]);" in src
    assert src.index("if (wg == 1) return;") < src.index("acc[j / 8].x[j % 8] += k_partial[j * 128 + tid - 128]")
    assert src.index("acc[j / 8].x[j % 8] += k_partial") < src.index("__shfl_xor_sync")


def test_split_k_shares_the_swapped_fragments_by_pairs():
    src = plan(view_of(workloads.get(FP16_M40)), _config(swap_ab=16, split_k=2)).source
    assert "if (j / 2 % 2 != split_rank) continue;" in src and "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16" in src
    assert "if (m < 40 && n < 1088)" in src


def test_the_kernel_refuses_what_it_cannot_swap():
    view = view_of(workloads.get(FP8_M16))
    for changes in (dict(ping_pong=1, warp_specialized=2), dict(block_col_warps=2, split_k=2), dict(tma_store=1)):
        with pytest.raises(ValueError, match="swap_ab=8 takes no ping_pong, multicast_b or tma_store"):
            plan(view, _config(**changes))
    with pytest.raises(ValueError, match="swap_ab takes a dense"):
        plan(view_of(workloads.get("dense:m=16,n=256,k=256")), _config())


def test_features_starting_configs_and_draws():
    space = _space(FP8_M16)
    names = space.template.feature_names
    assert "swap_ab" in names
    starting = space.template.starting_configs(space)
    swaps = [c for c in starting if c.swap_ab]
    assert {c.swap_ab for c in swaps} == {8, 16} and all(space.why_invalid(c) is None for c in swaps)
    assert any(c.block_col_warps == 2 and not c.consumers_along_m for c in swaps)  # two consumers along K
    assert not any(c.swap_ab for c in _space("tutorial").template.starting_configs(_space("tutorial")))
    assert space.default_config().swap_ab == 0
    assert not any(c.swap_ab for c in space.sample(30, seed=0))  # draws keep it at 0
    from tc_autotune.search import cost_model

    rows = [space.index(c) for c in swaps]
    feats = cost_model.features_from_positions(space, cost_model.positions_from_indices(space, np.array(rows)))
    assert (feats[:, names.index("swap_ab")] == 1).all()


needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


@needs_nvcc
@pytest.mark.parametrize("index", [0, 1, 6], ids=["fp8-bias", "fp16-bias-split2", "fp8-along-k"])
def test_swapped_kernels_generate_code_that_nvcc_compiles_for_sm90a(index):
    from test_codegen import _ptxas_report


    workload, config = probe_kernels(SWAP_PROBES)[index]
    assert tasks.of(workload).space(workload, HOPPER).why_invalid(config) is None
    kernel = lowered(workload, config)  # compiled by _ptxas_report
    assert kernel.arch == "sm_90a"
    assert "swap-AB" in kernel.cuda_source and ", epilogue " in kernel.cuda_source
    report = _ptxas_report(kernel.cuda_source)
    assert "(C75" not in report and "serialized" not in report, report
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report), report


@pytest.mark.parametrize("name", [FP8_M16, "llm-4096x4096-m128", "dense:batch=2,m=20,n=520,k=1040,b=nk"])
def test_vectorised_validity_agrees_on_swap_ab(name):
    """swap_ab free around the warp-specialized kernel's values, where its rules and the others interact."""
    from tc_autotune.search.cost_model import positions_from_indices, valid_mask
    from tc_autotune.templates.registry import ConfigSpace

    knobs = {**KNOBS, "intrinsic": ("wgmma",), "wmma": ("m16n16k16",), "offset_a": (0,), "offset_b": (0,),
             "block_row_warps": (4,), "chunk": (4,), "frag_buffers": (1,), "vec_a": (8,), "vec_b": (8,),
             "vec_c": (1,), "offset_c": (0,), "warp_specialized": (1, 2), "swap_ab": KNOBS["swap_ab"][1:],
             "warp_col_tiles": (4,), "multicast_b": (0,), "ping_pong": (0,), "tma_im2col": (0,), "tma_store": (0,),
             "group_pack": (1,), "consumer_n": (0,), "deep_ring": (0,)}
    space = ConfigSpace(workloads.get(name), HOPPER, knobs)
    indices = np.random.default_rng(4).integers(0, len(space), 3000)
    mask = valid_mask(space, positions_from_indices(space, indices))
    configs = [space.get(int(i)) for i in indices]
    expected = np.array([space.is_valid(c) for c in configs])
    assert (mask == expected).all() and expected.any() and not expected.all()
    valid = [c for c, ok in zip(configs, expected) if ok]
    assert any(c.split_k > 1 for c in valid) and any(c.warp_specialized == 2 for c in valid)
    assert any(c.consumers_along_m for c in valid) and any(c.setmaxnreg for c in valid)
