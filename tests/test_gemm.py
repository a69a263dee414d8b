"""The GEMM view: conv2d's M, N, K and index maps, and a dense-like view (identity maps)
that the space, its rules, the default config, the features and the template take as is."""

from dataclasses import replace

import numpy as np
import pytest
from matrix import operand_matrix

from tc_autotune.search import cost_model
from tc_autotune.core import builtin_tasks
from tc_autotune import workloads
from tc_autotune.templates.tc_gemm.gemm import GemmView, Operand, RowMajor, Transposed
from tc_autotune.templates.tc_gemm.operand_layout import COL_MAJOR
from tc_autotune.templates.tc_gemm.views import conv2d_view, view_of
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.workloads.reference import conv2d_reference, random_inputs
from tc_autotune.templates.registry import ConfigSpace, conv2d_space
from tc_autotune.templates.tc_gemm.knobs import TcGemmConfig

SM90 = gpu_for_arch("sm_90")


@pytest.mark.parametrize("spec,mnk", [
    # M = N * OH * OW, N = K (out channels), K = R * S * C
    ("tutorial", (256 * 14 * 14, 512, 3 * 3 * 256)),
    ("n=1,h=224,w=224,c=3,k=64,r=7,stride=2,pad=3", (112 * 112, 64, 7 * 7 * 3)),  # (224+6-7)//2+1
    ("n=2,h=20,c=32,k=64,r=3,dilation=2,pad=2", (2 * 20 * 20, 64, 9 * 32)),  # (20+4-5)+1
    ("n=2,h=20,c=32,k=64,r=3,dilation=2", (2 * 16 * 16, 64, 9 * 32)),  # no padding: 20-5+1
    ("n=3,h=17,w=23,c=40,k=72,r=5,s=3,stride=2x1,pad=2x1,dilation=2",
     (3 * 7 * 21, 72, 5 * 3 * 40)),  # OH (17+4-9)//2+1, OW 23+2-5+1
    ("n=3,h=17,w=15,c=20,k=40,r=3,pad=1x2x0x1", (3 * 16 * 16, 40, 9 * 20)),  # 17+1-3+1, 15+3-3+1
    ("rfc-1x1-b32", (32 * 14 * 14, 256, 1024)),
])
def test_conv2d_view_has_the_implicit_gemms_m_n_k(spec, mnk):
    wl = workloads.get(spec)
    view = conv2d_view(wl)
    m = wl.batch * wl.out_height * wl.out_width
    assert view.shape == (m, wl.out_channels, wl.kernel_h * wl.kernel_w * wl.in_channels) == wl.gemm_shape
    assert view.shape == mnk
    assert (view.a.run, view.b.run, view.c.run) == (wl.in_channels, wl.out_channels, wl.out_channels)
    assert (view.dtype, view.out_dtype) == (wl.dtype, wl.out_dtype)
    assert view.flops == wl.flops
    assert [op.shape for op in (view.a, view.b, view.c)] == [wl.data_shape, wl.weight_shape, wl.out_shape]
    assert view_of(wl) == view and view_of(view) is view
    assert builtin_tasks.CONV2D.space(wl, SM90).view == view
    assert conv2d_space(wl, SM90).view == view


@pytest.mark.parametrize("spec", [
    "n=2,h=9,w=7,c=8,k=16,r=3,pad=1",
    "n=1,h=12,w=11,c=4,k=8,r=3,s=2,stride=2x1,pad=1x0x2x1,dilation=2x1",
    "n=3,h=5,c=6,k=10,r=1",
])
def test_conv2d_index_maps_compute_the_reference_conv(spec):
    """A = im2col(data) and B = weight as a matrix, multiplied, and C's map read back: the
    host reference conv, for stride, dilation and asymmetric padding."""
    wl = workloads.get(spec)
    view = conv2d_view(wl)
    data, weight = random_inputs(wl, seed=3)
    a = operand_matrix(view.a, data.astype(np.float32), view.m, view.k)
    b = operand_matrix(view.b, weight.astype(np.float32), view.k, view.n)
    c = a @ b
    index = np.indices(wl.out_shape)
    row, col = view.c.map.matrix_index(*index)
    np.testing.assert_allclose(c[row, col], conv2d_reference(wl, data, weight), rtol=1e-5, atol=1e-5)


def dense_view(m: int, n: int, k: int) -> GemmView:
    """A dense C = A B on row-major 2-D tensors: identity maps."""
    return GemmView(
        m, n, k, "float16", "float32",
        a=Operand("a", (m, k), RowMajor((m, k)), k, "columns of A"),
        b=Operand("b", (k, n), RowMajor((k, n)), n, "columns of B"),
        c=Operand("c", (m, n), RowMajor((m, n)), n, "columns of C", axes=("i", "j")),
    )


def test_row_major_maps_of_2d_tensors_are_the_identity():
    view = dense_view(5, 6, 7)
    assert view.a.map.element(3, 4) == ((3, 4), ())
    assert view.c.map.matrix_index(2, 5) == (2, 5)


@pytest.mark.parametrize("mnk", [(1000, 256, 512), (200, 96, 72), (7, 40, 36)])
def test_a_dense_view_gives_a_valid_space_whose_rules_and_default_config_work(mnk):
    view = dense_view(*mnk)
    space = ConfigSpace(view, SM90)
    assert space.view is view and space.context.view is view
    default = space.default_config()
    assert space.why_invalid(default) is None
    # the rules read the view: a vector width that does not divide K misaligns A's rows
    m, n, k = mnk
    valid = space.sample(200, seed=1)  # a tiny M leaves few valid tiles (M=7: ~1 config in 12000)
    assert len(valid) >= 5
    configs = space.sample(300, seed=1, valid_only=False) + valid
    reasons = [space.why_invalid(c) for c in configs]
    mask = cost_model.valid_mask(space, cost_model.positions_from_configs(space, configs))
    assert list(mask) == [r is None for r in reasons]
    assert all(mask[300:]) and not all(mask[:300])
    for config, reason in zip(configs, reasons):
        if k % config.vec_a and reason and reason.startswith("vec_a="):
            assert f"does not divide the {k} columns of A" in reason
    feats = cost_model.config_features(space, [default])
    names = list(space.template.feature_names)
    assert feats[0, names.index("log2_M")] == pytest.approx(np.log2(m))
    assert feats[0, names.index("log2_K")] == pytest.approx(np.log2(k))


def test_the_dense_views_rules_follow_its_runs_not_a_conv():
    """A K of 36 allows vec_a 4 but not 8 (rows of 36 fp16); N of 40 allows vec_b/vec_c 8/4."""
    space = ConfigSpace(dense_view(512, 40, 36), SM90)
    base = space.default_config()
    assert base.vec_a == 4  # the widest that divides 36 (the prior prefers wide vectors)
    wide = replace(base, vec_a=8)
    assert "vec_a=8 does not divide the 36 columns of A" in (space.why_invalid(wide) or "")


def test_the_template_views_each_tasks_workloads_and_nothing_else():
    assert view_of(workloads.get("tutorial")) == conv2d_view(workloads.get("tutorial"))
    with pytest.raises(TypeError, match="no GEMM view for str"):
        view_of("tutorial")


def test_a_dense_view_lowers_to_a_tensor_core_kernel():
    """The template takes the dense view as is: its kernel reads a and b and writes c."""
    pytest.importorskip("tvm")
    import tvm

    from tc_autotune.templates.tc_gemm.schedule import lower_gemm

    view = dense_view(200, 96, 72)
    space = ConfigSpace(view, SM90)
    config = space.default_config()
    for config in (config, space.sample(1, seed=2)[0]):
        arch = "sm_90a" if config.intrinsic == "wgmma" else "sm_90"
        src = lower_gemm(view, config, tvm.target.Target({"kind": "cuda", "arch": arch})).mod.imports[0] \
            .inspect_source()
        assert "half* __restrict__ a" in src and "half* __restrict__ b" in src
        assert "float* __restrict__ c" in src


def test_a_col_major_b_is_copied_along_k_and_read_col_major():
    """Any view's B held (N, K) (``COL_MAJOR``, runs along K) gets the K-major template:
    vector copies of its rows of K, col_major matrix_b fragments; a col-major A is refused."""
    pytest.importorskip("tvm")
    import tvm

    from tc_autotune.templates.tc_gemm.schedule import lower_gemm

    m, n, k = 200, 96, 72
    rows = dense_view(m, n, k)
    view = replace(rows, b=Operand("b", (n, k), Transposed((n, k)), k, "rows of B", layout=COL_MAJOR))
    space = ConfigSpace(view, SM90)
    config = TcGemmConfig(block_row_warps=2, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=2, chunk=2,
                          wmma="m16n16k16", offset_a=8, offset_b=8, offset_c=4, vec_a=8, vec_b=8, vec_c=4)
    assert space.why_invalid(config) is None
    arch = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    src = lower_gemm(view, config, arch).mod.imports[0].inspect_source()
    assert "half, nvcuda::wmma::col_major>" in src and "b[" not in src
    with pytest.raises(ValueError, match="reads A and writes C row-major"):
        lower_gemm(replace(rows, a=replace(rows.a, layout=COL_MAJOR)), config, arch)
