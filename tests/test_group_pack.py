"""Packed groups (the group_pack knob, issue #32) on the CPU: the packed view's maps against the host
reference (a block-diagonal B: zeros off its groups' blocks, the weight on them), its TE compute on
LLVM, the rules (which P a view takes, vectors within a block), the default config and starting
configs of narrow groups, and group_pack=1 as the view itself (today's kernels).  CUDA that nvcc
compiles: ``test_grouped.py``'s CODEGEN; on the GPU: ``test_gpu_grouped.py``."""

from dataclasses import replace

import numpy as np
import pytest

from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.templates.registry import conv2d_space
from tc_autotune.templates.tc_gemm.packing import MAX_PACKED_CHANNELS, pack_groups, packable
from tc_autotune.templates.tc_gemm.starting_tilings import starting_configs
from tc_autotune.templates.tc_gemm.validity import default_config
from tc_autotune.templates.tc_gemm.views import conv2d_view
from tc_autotune import workloads
from tc_autotune.workloads.reference import conv2d_reference, random_inputs

from matrix import operand_matrix

SM80, SM90 = gpu_for_arch("sm_80"), gpu_for_arch("sm_90")
PACKED = "n=2,h=6,w=5,c=16,k=8,r=3,pad=1,groups=4"  # 4 input and 2 output channels a group
RESNEXT_4 = "n=32,h=56,w=56,c=128,k=128,r=3,s=3,pad=1,groups=32,epilogue=bias_relu"  # issue #32's slowest


def wl(spec):
    return workloads.get(spec)


# ---- the packed view ---------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,pack", [
    (PACKED, 2), (PACKED + ",weight_layout=OIHW", 2), (PACKED + ",weight_layout=OHWI", 2),
    ("n=2,h=7,c=12,k=24,r=1,groups=4,weight_layout=OIHW", 2),  # a 1x1 OIHW weight: an (N, K) matrix
    ("n=1,h=9,w=7,c=24,k=16,r=3,s=2,stride=2x1,pad=1x0x2x1,dilation=2x1,groups=8", 4),
])
def test_the_packed_views_maps_multiply_to_the_reference(spec, pack):
    workload = wl(spec)
    view = pack_groups(conv2d_view(workload), pack)
    g, cg, kg = workload.groups, workload.in_channels // workload.groups, workload.out_channels // workload.groups
    assert (view.groups, view.n, view.group_pack) == (g // pack, pack * kg, pack)
    assert view.k == workload.kernel_h * workload.kernel_w * pack * cg and view.a.run == pack * cg
    assert view.flops == workload.flops  # the zeros are not the task's work
    data, weight = (x.astype(np.float32) for x in random_inputs(workload, seed=3))
    c = np.stack([operand_matrix(view.a, data, view.m, view.k, z) @ operand_matrix(view.b, weight, view.k, view.n, z)
                  for z in range(view.groups)])
    got = c[view.c.map.matrix_index(*np.indices(workload.out_shape))]
    np.testing.assert_allclose(got, conv2d_reference(workload, data, weight), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["HWIO", "OIHW", "OHWI"])
def test_the_packed_b_is_block_diagonal_with_each_groups_b_on_its_diagonal(layout):
    workload = wl(PACKED + f",weight_layout={layout}")
    unpacked, pack = conv2d_view(workload), 2
    view = pack_groups(unpacked, pack)
    weight = random_inputs(workload, seed=4)[1].astype(np.float32)
    taps, cg, kg = 9, 4, 2
    for z in range(view.groups):
        b = operand_matrix(view.b, weight, view.k, view.n, z).reshape(taps, pack, cg, pack, kg)
        for p in range(pack):
            for q in range(pack):
                block = b[:, p, :, q, :].reshape(taps * cg, kg)
                if p != q:  # input channels of one group, output channels of another: 0
                    assert not block.any(), (z, p, q)
                else:  # group z * pack + p's own B
                    np.testing.assert_array_equal(block, operand_matrix(unpacked.b, weight, unpacked.k, unpacked.n,
                                                                 z * pack + p))


def test_group_pack_1_is_the_view_itself_and_bad_packs_are_refused():
    view = conv2d_view(wl(PACKED))
    assert pack_groups(view, 1) is view and pack_groups(pack_groups(view, 2), 2) is pack_groups(view, 2)
    assert packable(view) and not packable(conv2d_view(wl("n=2,h=8,c=64,k=64,r=3,groups=2")))
    for pack, needle in ((4, "does not divide groups=4 into 2 or more GEMMs"), (8, "does not divide groups=4")):
        with pytest.raises(ValueError, match=needle):
            pack_groups(view, pack)


def test_the_te_compute_of_packed_groups_on_llvm_matches_the_reference():
    """Packed groups' TE compute (what every path schedules) unscheduled on the CPU: an epilogue, and an
    OIHW weight with split-K's slices of each packed GEMM."""
    tvm = pytest.importorskip("tvm")

    from tc_autotune.templates.tc_gemm.compute import gemm_schedule
    from tc_autotune.templates.tc_gemm.knobs import TcGemmConfig
    from tc_autotune.templates.tc_gemm.workspaces import workspaces

    base = TcGemmConfig(block_row_warps=1, block_col_warps=1, warp_row_tiles=2, warp_col_tiles=1, chunk=1,
                        wmma="m16n16k16", offset_a=8, offset_b=8, offset_c=4, vec_a=1, vec_b=1, vec_c=1)
    oihw = "n=2,h=6,w=5,c=16,k=16,r=3,pad=1,groups=8,weight_layout=OIHW"
    for spec, changes in ((PACKED + ",epilogue=bias_relu", dict(group_pack=2)), (oihw, dict(group_pack=4, split_k=2))):
        workload, config = wl(spec), replace(base, **changes)
        func = tvm.compile(gemm_schedule(conv2d_view(workload), config).mod, tvm.target.Target({"kind": "llvm"}))
        arrays = random_inputs(workload, seed=1)
        args = [tvm.runtime.tensor(a) for a in arrays] + [tvm.runtime.empty(workload.out_shape, workload.out_dtype)]
        func(*args, *(tvm.runtime.empty(shape, dtype) for shape, dtype in workspaces(workload, config)))
        ref = conv2d_reference(workload, *arrays)
        assert np.abs(args[len(arrays)].numpy() - ref).max() / np.abs(ref).max() < 2e-3, spec


# ---- the rules -----------------------------------------------------------------------------------------
def _why(spec, gpu=SM90, **changes):
    space = conv2d_space(wl(spec), gpu)
    return space.why_invalid(replace(default_config(space, group_pack=1), **changes))


def test_the_rules_take_packs_that_divide_narrow_groups_into_two_or_more_gemms():
    assert _why(RESNEXT_4, group_pack=2) is None and _why(RESNEXT_4, group_pack=8) is None
    assert "group_pack=8 does not divide groups=4 into 2 or more GEMMs" in _why(PACKED, group_pack=8)
    assert "group_pack=4 does not divide groups=4" in _why(PACKED, group_pack=4)  # one GEMM: not a grouped one
    assert "group_pack=4 does not divide groups=6" in _why("n=2,h=8,c=24,k=24,r=3,pad=1,groups=6", group_pack=4)
    assert "this GEMM has one group" in _why("n=2,h=14,c=64,k=128,r=3,pad=1", group_pack=2)
    wide = _why("n=2,h=14,c=128,k=128,r=3,pad=1,groups=4", group_pack=2)
    assert f"narrow groups only (at most {MAX_PACKED_CHANNELS} input and output channels a group), not 32" in wide


def test_packed_vectors_stay_within_a_group_of_b_and_span_the_packed_channels_of_a_and_c():
    spec = PACKED  # C/G = 4, K/G = 2
    assert "vec_a=8 does not divide the 4 input channels per group" in _why(spec, vec_a=8, vec_b=1, vec_c=1)
    assert _why(spec, group_pack=2, vec_a=8, vec_b=2, vec_c=4) is None  # A's and C's runs: 8 and 4 channels
    assert "vec_b=4 does not divide the 2 output channels per group" in _why(spec, group_pack=2, vec_a=8, vec_b=4)
    assert "vec_c=4 does not divide the 2 output channels per group" in _why(spec, vec_a=4, vec_b=2, vec_c=4)
    ohwi = _why(spec + ",weight_layout=OHWI", group_pack=2, vec_a=8, vec_b=8, vec_c=1)  # a filter's runs: 4 channels
    assert "vec_b=8 does not divide the 4 input channels of a group (a block of the packed B)" in ohwi


# ---- search ------------------------------------------------------------------------------------------
def test_narrow_groups_default_to_packing_and_tunes_start_from_each_pack():
    space = conv2d_space(wl(RESNEXT_4), SM90)
    default = space.default_config()
    assert default.group_pack > 1 and default.vec_a == 8  # A in 16-byte vectors: 8 channels of 2+ groups
    packs = [c.group_pack for c in starting_configs(space)]
    assert sorted(packs + [default.group_pack]) == [1, 2, 4, 8]
    prior = space.template.prior
    from tc_autotune.core.config_space import positions_from_indices

    unpacked = default_config(space, group_pack=1)
    assert prior(space, positions_from_indices(space, [space.index(default)]))[0] > \
        prior(space, positions_from_indices(space, [space.index(unpacked)]))[0]


def test_ungrouped_and_wide_group_spaces_draw_as_before_the_knob():
    """group_pack stays 1 in their random draws: the same draws, samples and defaults."""
    from tc_autotune.templates.registry import ConfigSpace
    from tc_autotune.templates.tc_gemm.knobs import KNOBS

    for spec in ("n=2,h=14,c=64,k=128,r=3,pad=1", "n=2,h=14,c=128,k=128,r=3,pad=1,groups=4"):
        space, pinned = conv2d_space(wl(spec), SM80), ConfigSpace(wl(spec), SM80, {**KNOBS, "group_pack": (1,)})
        assert space.draw_bound == pinned.draw_bound and space.sample(20, seed=5) == pinned.sample(20, seed=5)
        assert space.default_config() == pinned.default_config()
    narrow = conv2d_space(wl(RESNEXT_4), SM80)
    assert {c.group_pack for c in narrow.sample(200, seed=1)} == {1, 2, 4, 8}
