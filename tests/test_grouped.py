"""Grouped conv2d and conv weight layouts (issue #32) on the CPU: the spec keys, one-line refusals,
the grouped host reference (each group's conv), the GEMM view's maps and the TE compute (on LLVM)
against it for every layout, the rules of each path, and CUDA that nvcc compiles for sm_80 and
sm_90 on each path a layout is valid for."""

import re
from dataclasses import replace

import numpy as np
import pytest
from matrix import operand_matrix

from tc_autotune.api import apply
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.search import zero_shot
from tc_autotune.templates.registry import conv2d_space
from tc_autotune.templates.tc_gemm.views import conv2d_view
from tc_autotune import workloads
from tc_autotune.workloads.reference import conv2d_reference, random_inputs

SM80, SM90 = gpu_for_arch("sm_80"), gpu_for_arch("sm_90")
GROUPED = "n=2,h=6,w=5,c=12,k=8,r=3,pad=1,groups=4"  # 3 input and 2 output channels a group


def wl(spec):
    return workloads.get(spec)


# ---- the workload ------------------------------------------------------------------------------
def test_the_spec_keys_round_trip_and_their_defaults_stay_out_of_the_string():
    plain = wl("n=2,h=8,c=16,k=32,r=3,pad=1")
    assert "groups" not in str(plain) and "weight_layout" not in str(plain)
    assert wl(str(plain) + ",groups=1,weight_layout=HWIO") == plain  # the defaults, spelled out
    grouped = wl("n=2,h=8,c=16,k=32,r=3,pad=1,groups=4,weight_layout=oihw,epilogue=bias_relu")
    assert str(grouped).endswith(",groups=4,weight_layout=OIHW,epilogue=bias_relu")
    assert wl(str(grouped)) == grouped and grouped.weight_layout == "OIHW"
    assert grouped.gemm_shape == (2 * 8 * 8, 8, 9 * 4)  # each group's GEMM
    assert grouped.flops == 4 * 2 * (2 * 8 * 8) * 8 * 36
    shapes = {layout: plain.replace(groups=4, weight_layout=layout).weight_shape for layout in ("HWIO", "OIHW", "OHWI")}
    assert shapes == {"HWIO": (3, 3, 4, 32), "OIHW": (32, 4, 3, 3), "OHWI": (32, 3, 3, 4)}


@pytest.mark.parametrize("spec,needle", [
    ("n=1,h=8,c=16,k=12,r=3,groups=8", "groups=8 does not divide the channels: 16 in, 12 out"),
    ("n=1,h=8,c=12,k=16,r=3,groups=8", "groups=8 does not divide the channels: 12 in, 16 out"),
    ("n=1,h=8,c=16,k=32,r=3,groups=16", "groups=16 with 16 input channels: a depthwise conv"),
    ("n=1,h=8,c=16,k=16,r=3,groups=0", "groups must be a positive integer, got 0"),
    ("n=1,h=8,c=16,k=16,r=3,groups=x", "groups='x' is not an integer"),
    ("n=1,h=8,c=16,k=16,r=3,weight_layout=NCHW", "unknown weight_layout 'NCHW': expected one of HWIO, OIHW, OHWI"),
])
def test_bad_groups_and_layouts_are_refused_in_one_line(spec, needle):
    with pytest.raises(ValueError) as err:
        wl(spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("layout", ["HWIO", "OIHW", "OHWI"])
def test_the_grouped_reference_is_each_groups_own_conv(layout):
    """An independent check of the reference: group g's outputs are the ungrouped conv of its
    input channels with its filters."""
    grouped = wl(GROUPED).replace(weight_layout=layout, epilogue="bias_relu")
    data, weight, bias = random_inputs(grouped, seed=2)
    out = conv2d_reference(grouped, data, weight, bias)
    hwio = np.transpose(weight, {"HWIO": (0, 1, 2, 3), "OIHW": (2, 3, 1, 0), "OHWI": (1, 2, 3, 0)}[layout])
    single = wl(GROUPED).replace(groups=1, in_channels=3, out_channels=2, epilogue="bias_relu")
    for g in range(4):
        part = conv2d_reference(single, data[..., 3 * g:3 * g + 3], hwio[..., 2 * g:2 * g + 2], bias[2 * g:2 * g + 2])
        np.testing.assert_allclose(out[..., 2 * g:2 * g + 2], part, rtol=1e-6, atol=1e-6)


# ---- the GEMM view and the TE compute ---------------------------------------------------------------


@pytest.mark.parametrize("spec", [
    GROUPED, GROUPED + ",weight_layout=OIHW", GROUPED + ",weight_layout=OHWI",
    "n=2,h=7,c=12,k=10,r=1,groups=2,weight_layout=OIHW",  # a 1x1 OIHW weight is an (N, K) matrix
    "n=1,h=9,w=7,c=6,k=4,r=3,s=2,stride=2x1,pad=1x0x2x1,dilation=2x1,weight_layout=OIHW",
    "n=1,h=9,w=7,c=6,k=4,r=3,pad=1,weight_layout=OHWI",
])
def test_the_views_maps_multiply_to_the_reference(spec):
    workload = wl(spec)
    view = conv2d_view(workload)
    data, weight = (x.astype(np.float32) for x in random_inputs(workload, seed=3))
    index = np.indices(workload.out_shape)
    mapped = view.c.map.matrix_index(*index)
    groups = range(view.groups) if view.groups > 1 else [None]
    c = np.stack([operand_matrix(view.a, data, view.m, view.k, g) @ operand_matrix(view.b, weight, view.k, view.n, g)
                  for g in groups])
    got = c[mapped] if view.groups > 1 else c[0][mapped]
    np.testing.assert_allclose(got, conv2d_reference(workload, data, weight), rtol=1e-5, atol=1e-5)
    layouts = {"HWIO": "row_major", "OIHW": "col_major", "OHWI": "col_major"}
    assert view.b.layout == layouts[workload.weight_layout]


@pytest.mark.parametrize("spec,changes", [
    (GROUPED, {}),
    (GROUPED + ",weight_layout=OIHW,epilogue=bias_residual_relu", {}),
    ("n=2,h=6,w=5,c=12,k=24,r=3,pad=1,groups=2,weight_layout=OHWI,out_dtype=float16", {"split_k": 2}),
    ("n=2,h=6,w=5,c=16,k=8,r=3,stride=2,pad=1,weight_layout=OIHW,dtype=float32", {}),
])
def test_the_te_compute_on_llvm_matches_the_reference(spec, changes):
    """The kernels' TE compute (what every path schedules), unscheduled on the CPU, its arguments
    the task's tensors (a grouped output computed as (group, row, col), laid out as NHWC)."""
    tvm = pytest.importorskip("tvm")

    from tc_autotune.templates.tc_gemm.compute import gemm_schedule
    from tc_autotune.templates.tc_gemm.knobs import TcGemmConfig
    from tc_autotune.templates.tc_gemm.workspaces import workspaces

    workload = wl(spec)
    config = TcGemmConfig(block_row_warps=1, block_col_warps=1, warp_row_tiles=2, warp_col_tiles=1, chunk=1,
                          wmma="m16n16k16", offset_a=8, offset_b=8, offset_c=4, vec_a=1, vec_b=1, vec_c=1,
                          **changes)
    func = tvm.compile(gemm_schedule(conv2d_view(workload), config).mod, tvm.target.Target({"kind": "llvm"}))
    arrays = random_inputs(workload, seed=1)
    args = [tvm.runtime.tensor(a) for a in arrays] + [tvm.runtime.empty(workload.out_shape, workload.out_dtype)]
    func(*args, *(tvm.runtime.empty(shape, dtype) for shape, dtype in workspaces(workload, config)))
    ref = conv2d_reference(workload, *arrays)
    assert np.abs(args[len(arrays)].numpy() - ref).max() / np.abs(ref).max() < 2e-3


# ---- the rules -------------------------------------------------------------------------------------
MMA = dict(intrinsic="mma", wmma="m16n16k16", offset_a=0, offset_b=0, block_col_warps=1, warp_col_tiles=2, chunk=2,
           stages=2)
WGMMA = dict(intrinsic="wgmma", wmma="m16n16k16", offset_a=0, offset_b=0, block_row_warps=4, block_col_warps=1,
             warp_row_tiles=1, warp_col_tiles=4, chunk=4, frag_buffers=1, stages=2)
WS = dict(intrinsic="wgmma", wmma="m16n16k16", offset_a=0, offset_b=0, offset_c=0, block_row_warps=4,
          block_col_warps=1, warp_row_tiles=1, warp_col_tiles=8, chunk=4, stages=3, vec_a=8, vec_b=8, vec_c=1,
          frag_buffers=1, split_k=1, warp_specialized=1)


def _why(spec, gpu=SM90, **changes):
    space = conv2d_space(wl(spec), gpu)  # the prior's best config of the pack asked for (default: unpacked)
    return space.why_invalid(replace(space.template.default_config(space, group_pack=changes.get("group_pack", 1)),
                                     **changes))


def test_each_path_takes_what_it_can_read():
    """The warp-specialized kernel takes one GEMM and a weight TMA can box (HWIO, OHWI, a 1x1
    OIHW); the TensorIR paths take grouped convs and every layout (an OIHW 3x3 weight one element
    at a time: vec_b=1)."""
    conv = "n=2,h=14,c=64,k=128,r=3,pad=1"
    assert _why(conv + ",weight_layout=OHWI", **WS) is None
    assert _why("n=2,h=14,c=256,k=128,r=1,weight_layout=OIHW", **WS) is None
    assert "an OIHW weight of an R x S > 1 conv" in _why(conv + ",weight_layout=OIHW", **WS)
    assert "takes one GEMM, not the 2 of a grouped conv" in _why(conv + ",groups=2,weight_layout=OHWI", **WS)
    oihw = conv2d_space(wl(conv + ",weight_layout=OIHW"), SM90)
    assert {c.vec_b for c in oihw.sample(60, seed=1)} == {1}
    assert "vec_b=2 does not divide the 1 contiguous element of an OIHW weight" in oihw.why_invalid(
        replace(oihw.default_config(), vec_b=2))
    paths = {"wmma": dict(intrinsic="wmma", block_col_warps=1, warp_col_tiles=2, split_k=1),
             "mma": dict(MMA, split_k=1), "wgmma": dict(WGMMA, split_k=1)}
    for spec in (conv + ",groups=2", conv + ",weight_layout=OIHW", conv + ",groups=2,weight_layout=OHWI"):
        for name, changes in paths.items():
            assert _why(spec, **changes, vec_b=1) is None, (spec, name)


def test_the_grouped_rules_read_a_groups_channels_and_count_every_groups_blocks():
    spec = "n=2,h=14,c=96,k=64,r=3,pad=1,groups=8"  # 12 input and 8 output channels a group
    assert "vec_a=8 does not divide the 12 input channels per group" in _why(spec, vec_a=8, group_pack=1)
    assert "vec_c=4" not in (_why(spec, vec_c=4, group_pack=1) or "")
    space = conv2d_space(wl(spec), SM90)
    from tc_autotune.templates.tc_gemm.rules import derive, values_of_config

    config = replace(space.default_config(), split_k=1, group_pack=1)
    v = derive(values_of_config(config), space.context)
    assert v["blocks"] == v["gm"] * v["gn"] * 8
    # the odd widths (K/G = 5, C/G = 3) have a default config, every vector width 1 (packed in
    # pairs: A's runs are 6 channels, B's blocks still 5 columns wide)
    odd = conv2d_space(wl("n=3,h=9,w=11,c=12,k=20,r=3,pad=1,groups=4"), SM80)
    unpacked = odd.template.default_config(odd, group_pack=1)
    assert (unpacked.vec_a, unpacked.vec_b, unpacked.vec_c, unpacked.group_pack) == (1, 1, 1, 1)
    assert odd.template.default_config(odd, group_pack=2).vec_b == 1


def test_zero_shot_distance_and_siblings_know_groups_and_layouts():
    plain = wl("n=2,h=14,c=64,k=64,r=3,pad=1")
    assert zero_shot.workload_distance(plain, plain.replace(groups=2)) > 0
    assert zero_shot.workload_distance(plain, plain.replace(weight_layout="OIHW")) == 0
    assert apply.same_gemm(plain, plain.replace(weight_layout="OHWI", epilogue="bias"))
    assert not apply.same_gemm(plain, plain.replace(groups=2))


def test_workload_of_reads_every_layout():
    data = np.zeros((2, 9, 9, 12), np.float16)
    for layout, shape in (("HWIO", (3, 1, 4, 6)), ("OIHW", (6, 4, 3, 1)), ("OHWI", (6, 3, 1, 4))):
        found = apply.workload_of(data, np.zeros(shape, np.float16), padding=1, groups=3, weight_layout=layout)
        assert found == wl("n=2,h=9,c=12,k=6,r=3,s=1,pad=1,groups=3").replace(weight_layout=layout)
    with pytest.raises(ValueError, match=r"weight has 4 input channels, data has 12 \(an OIHW weight \[8, 4, 3, 3\]\)"):
        apply.workload_of(data, np.zeros((8, 4, 3, 3), np.float16), weight_layout="OIHW")
    with pytest.raises(ValueError, match=r"weight has 3 input channels per group, 6 in 2 groups, data has 12"):
        apply.workload_of(data, np.zeros((3, 3, 3, 8), np.float16), groups=2)


# ---- CUDA that nvcc compiles ------------------------------------------------------------------------
# (spec, arch, config changes): what test_codegen_arches.py's grouped and OHWI classes do not reach:
# an odd group width (its stores bounded by the group), split-K's slices of each group, a group
# narrower than the tile stored in vectors, and an OIHW 3x3 weight (read one element at a time)
# on mma and wgmma.
CODEGEN = [
    ("n=3,h=9,w=11,c=12,k=20,r=3,pad=1,groups=4,epilogue=bias", "sm_80", dict(intrinsic="wmma", split_k=1, stages=1)),
    ("n=2,h=14,w=5,c=12,k=8,r=3,pad=1,groups=4,weight_layout=OIHW", "sm_80",
     dict(intrinsic="wmma", wmma="m32n8k16", block_col_warps=1, warp_col_tiles=1, chunk=1, stages=1, split_k=2)),
    ("n=2,h=14,c=64,k=64,r=3,pad=1,groups=4", "sm_80", dict(MMA, split_k=1)),
    ("n=2,h=14,c=64,k=64,r=3,pad=1,weight_layout=OIHW", "sm_80", dict(MMA, stages=3, split_k=1, vec_b=1)),
    ("n=2,h=14,c=64,k=128,r=3,pad=1,weight_layout=OIHW", "sm_90", dict(WGMMA, wgmma_in_flight=1, split_k=1, vec_b=1)),
    # packed groups (group_pack): ResNeXt's 4-channel groups 4 and 8 a GEMM on mma (sm_80) and
    # wgmma (sm_90), and an odd OIHW pair with split-K on WMMA
    ("n=2,h=14,c=128,k=128,r=3,pad=1,groups=32,epilogue=bias_relu", "sm_80",
     dict(MMA, split_k=1, group_pack=4, vec_a=8, vec_b=4)),
    ("n=2,h=14,c=128,k=128,r=3,pad=1,groups=32", "sm_90", dict(WGMMA, split_k=1, group_pack=8, vec_a=8, vec_b=4)),
    ("n=2,h=14,w=5,c=12,k=8,r=3,pad=1,groups=4,weight_layout=OIHW", "sm_80",
     dict(intrinsic="wmma", wmma="m32n8k16", block_col_warps=1, warp_col_tiles=1, chunk=1, stages=2, split_k=2,
          group_pack=2, vec_a=2, vec_b=1)),
]


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("spec,arch,changes", CODEGEN,
                         ids=[f"{c[2]['intrinsic']}-{c[1]}" + ("-packed" * ("group_pack" in c[2])) for c in CODEGEN])
def test_grouped_convs_and_weight_layouts_compile(spec, arch, changes):
    from tc_autotune import build_conv2d

    workload = wl(spec)
    space = conv2d_space(workload, gpu_for_arch(arch))
    config = replace(space.template.default_config(space, group_pack=changes.get("group_pack", 1)), **changes)
    assert space.why_invalid(config) is None
    kernel = build_conv2d(workload, config, target=arch)
    src = kernel.cuda_source
    assert kernel.cubin[:4] == b"\x7fELF" and len(kernel.cubin) > 1000
    pack = config.group_pack  # a GEMM's groups: its channels are theirs
    if workload.groups > 1:  # a group's GEMM per blockIdx.z (its split-K slices: z // split), its channels offset
        cg = workload.in_channels // workload.groups * pack
        assert re.search(r"blockIdx\.z\)(?: >> 1\))? \* %d\)" % cg, src)
    if workload.groups > 1 and config.split_k == 1:
        # The C tile's stores are bounded by the group's width (K/G < block_n: its padded columns
        # would be the next group's channels), not only by the output's channels.
        store = src.rindex("out_ptr")  # the store from the C tile (after the signature's and loads' names)
        guard = src[src.rindex("if (", 0, store):store]
        kg = workload.out_channels // workload.groups * pack  # in elements, or in vectors of vec_c
        assert re.search(r"\) < (%d|%d)\)" % (kg, kg // config.vec_c), guard) or kg % config.block_n == 0, guard
