"""The dense (GEMM) task without a GPU: specs and presets, its GEMM view against numpy's
matmul, its space, records, the tuning job with a synthetic measurer, and Tensor Core CUDA
for every intrinsic path and weight layout that nvcc compiles."""

import numpy as np
import pytest

from tc_autotune import records, tasks, workloads
from tc_autotune.autotune import tune_workload
from tc_autotune.cuda import find_nvcc
from tc_autotune.dense_workloads import DenseWorkload
from tc_autotune.gemm import Transposed, dense_view, view_of
from tc_autotune.gpu import GpuInfo, gpu_for_arch
from tc_autotune.reference import dense_inputs, dense_reference
from tc_autotune.results import MeasureResult
from tc_autotune.space import dense_space

from synthetic import SyntheticMeasurer
from test_gemm import _matrix

SM90 = gpu_for_arch("sm_90")


# ---- specs and presets -------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("dense:m=128,n=4096,k=4096", DenseWorkload(128, 4096, 4096)),
    ("dense:m=128,n=4096,k=4096,b=nk,out_dtype=float16", DenseWorkload(128, 4096, 4096, b_layout="nk",
                                                                     out_dtype="float16")),
    ("dense: batch=4, m=3, n=8, k=16", DenseWorkload(3, 8, 16, batch=4)),
    ("dense-rfc-b32", DenseWorkload(32, 1024, 2048, b_layout="nk")),
    ("dense-rfc-b256", DenseWorkload(256, 1024, 2048, b_layout="nk")),
    ("resnet50-fc-b1", DenseWorkload(1, 1000, 2048, b_layout="nk")),
    ("resnet50-fc-b256", DenseWorkload(256, 1000, 2048, b_layout="nk")),
    ("llm-4096x11008-m16", DenseWorkload(16, 11008, 4096, b_layout="nk")),
    ("llm-11008x4096-m8192", DenseWorkload(8192, 4096, 11008, b_layout="nk")),
])
def test_specs_and_presets_resolve_and_round_trip(text, expected):
    wl = workloads.get(text)
    assert wl == expected
    assert DenseWorkload.parse(str(wl)) == wl and workloads.get(str(wl)) == wl
    name = workloads.display_name(wl)
    assert workloads.get(name) == wl


def test_every_documented_preset_resolves_and_conv_specs_are_unchanged():
    from tc_autotune import dense_workloads

    for name in dense_workloads.preset_names():
        assert workloads.preset_name(workloads.get(name)) == name
    assert len(dense_workloads.preset_names()) == 2 + 3 + 15
    assert workloads.get("resnet50-res2-3x3-64-64-b1").kernel_h == 3
    assert str(workloads.get("tutorial")).startswith("n=256,h=14")


@pytest.mark.parametrize("text,message", [
    ("dense:m=1,n=2", "dense spec is missing k"),
    ("dense:m=1,n=2,k=x", "k='x' is not an integer"),
    ("dense:m=1,n=2,k=3,b=kk", "unknown b_layout 'kk': expected one of kn, nk"),
    ("dense:m=1,n=2,k=3,q=1", "unknown key 'q' in dense spec"),
    ("dense:m=1,n=2,k=3,m=4", "key 'm' given twice"),
    ("dense:m=0,n=2,k=3", "m must be a positive integer, got 0"),
    ("dense:m=1,n=2,k=3,dtype=float32", "unknown dtype 'float32'"),
    ("dense:m=1,n=2,k=3,out_dtype=int8", "unknown out_dtype 'int8'"),
    ("dense:m=1,n,k=3", "malformed item 'n'"),
    ("llm-4096x4097-m1", "unknown dense preset 'llm-4096x4097-m1'"),
    ("dense-rfc-b0", "batch must be positive"),
])
def test_bad_specs_say_why_in_one_line(text, message):
    with pytest.raises(ValueError, match=message) as err:
        workloads.get(text)
    assert "\n" not in str(err.value)


# ---- the GEMM view -------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [
    "dense:m=7,n=24,k=40", "dense:m=7,n=24,k=40,b=nk", "dense:batch=3,m=5,n=16,k=9,b=nk",
    "dense:batch=2,m=4,n=10,k=12",
])
def test_the_dense_views_maps_compute_numpys_matmul(spec):
    wl = workloads.get(spec)
    view = dense_view(wl)
    assert view.shape == (wl.batch * wl.m, wl.n, wl.k) and view.flops == wl.flops
    assert view_of(wl) == view == tasks.DENSE.gemm_view(wl)
    assert [op.shape for op in (view.a, view.b, view.c)] == [wl.a_shape, wl.b_shape, wl.out_shape]
    assert (view.a.run, view.c.run) == (wl.k, wl.n)
    assert view.b.run == (wl.n if wl.b_layout == "kn" else 1)
    assert isinstance(view.b.map, Transposed) == (wl.b_layout == "nk")
    data, weight = dense_inputs(wl, seed=2)
    a = _matrix(view.a, data.astype(np.float32), view.m, view.k)
    b = _matrix(view.b, weight.astype(np.float32), view.k, view.n)
    c = a @ b
    row, col = view.c.map.matrix_index(*np.indices(wl.out_shape))
    reference = dense_reference(wl, data, weight)
    assert reference.shape == wl.out_shape
    np.testing.assert_allclose(c[row, col], reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", [
    "llm-4096x4096-m1", "llm-4096x11008-m16", "dense:m=16,n=4096,k=4096", "resnet50-fc-b32",
    "dense-rfc-b256", "llm-11008x4096-m2048", "dense:m=100,n=72,k=200", "dense:batch=4,m=3,n=8,k=16,b=nk",
])
def test_dense_spaces_have_valid_default_configs(spec):
    wl = workloads.get(spec)
    space = dense_space(wl, SM90)
    assert space.view == dense_view(wl)
    default = space.default_config()
    assert space.why_invalid(default) is None
    if wl.b_layout == "nk":
        assert default.vec_b == 1
    sampled = space.sample(20, seed=1)  # tiny shapes have too few valid configs to draw
    assert all(space.is_valid(c) for c in sampled) and (len(sampled) == 20 or wl.m * wl.n < 1000)


def test_a_transposed_weight_allows_scalar_b_loads_only():
    space = dense_space(workloads.get("dense:m=256,n=256,k=512,b=nk"), SM90)
    from dataclasses import replace

    config = replace(space.default_config(), vec_b=8, offset_b=8)
    assert "vec_b=8 does not divide the 1 output feature (an N x K weight is contiguous along K)" in \
        space.why_invalid(config)


# ---- records and tuning --------------------------------------------------------------------
def test_a_dense_record_round_trips_and_load_best_picks_it(tmp_path):
    wl = workloads.get("dense-rfc-b32")
    space = dense_space(wl, SM90)
    configs = space.sample(3, seed=4)
    recs = [records.Record.from_measurement("cuda -arch=sm_90", space, c, MeasureResult((t,)))
            for c, t in zip(configs, (3e-5, 1e-5, 2e-5))]
    line = recs[0].to_json()
    assert '"dense_tensorcore.cuda"' in line and str(wl) in line
    back = records.Record.from_json(line)
    assert back == recs[0] and back.task is tasks.DENSE and not back.stale
    log = tmp_path / "dense.jsonl"
    records.append(log, recs)
    best = records.load_best(log, wl, target="sm_90")
    assert best[0] == configs[1] and best[1] == pytest.approx(1e-5)


def test_tune_workload_writes_dense_records(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", "")
    wl = workloads.get("dense:m=512,n=1024,k=2048,b=nk")
    log = tmp_path / "dense.jsonl"
    gpu = GpuInfo(name="Synthetic GPU", arch="sm_90", sm_count=132)
    summary = tune_workload(wl, 24, log, gpu=gpu, compare_cudnn=False, measurer_factory=SyntheticMeasurer,
                            batch_size=8, seed=0)
    written = list(records.load(log))
    assert summary.trials == len(written) >= 24
    assert all(r.workload == wl and r.task is tasks.DENSE for r in written)
    assert '"dense_tensorcore.cuda"' in log.read_text().splitlines()[0]
    assert summary.best_config is not None and summary.best_config.vec_b == 1
    from tc_autotune.apply import apply_history_best, best_config

    with apply_history_best(log):
        assert best_config(wl, gpu)[0] == summary.best_config


# ---- CUDA -----------------------------------------------------------------------------------
nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


def _probes():
    from tc_autotune import generator

    return generator.DENSE_PROBES


@nvcc
@pytest.mark.parametrize("index", range(6))
def test_dense_kernels_compile_for_every_path_and_weight_layout(index):
    from tc_autotune import generator
    from tc_autotune.kernel import build_dense

    workload, config = generator.probe_kernels(generator.DENSE_PROBES)[index]
    kernel = build_dense(workload, config, target="sm_90")
    src = kernel.cuda_source
    marker = {"wmma": "wmma::mma_sync", "mma": "mma.sync.aligned.m16n8k16",
              "wgmma": "wgmma.mma_async.sync.aligned"}[config.intrinsic]
    assert marker in src
    assert kernel.arch == ("sm_90a" if config.intrinsic == "wgmma" else "sm_90")
    assert kernel.cubin[:4] == b"\x7fELF" and len(kernel.cubin) > 1000
    assert kernel.workload == workload


@nvcc
def test_dense_generated_code_has_the_fingerprint_of_its_version():
    from tc_autotune import generator

    found = generator.fingerprint(generator.DENSE_PROBES)
    assert found == generator.DENSE_FINGERPRINTS[generator.DENSE_TEMPLATE_VERSION], (
        f"the dense code changed: bump tasks.DENSE.template_version and add {found!r}")


def test_build_dense_refuses_a_conv_workload():
    pytest.importorskip("tvm")
    from tc_autotune.kernel import build_dense

    with pytest.raises(ValueError, match="expected a DenseWorkload, got Conv2dWorkload"):
        build_dense("tutorial")
