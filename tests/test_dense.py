"""The dense (GEMM) task without a GPU: specs and presets, its GEMM view against numpy's
matmul, its space, records, the tuning job with a synthetic measurer, and Tensor Core CUDA
for every intrinsic path and weight layout that nvcc compiles (an (N, K) weight copied
along K with vector loads and fed to the Tensor Cores K-major)."""

import re

import numpy as np
import pytest

from tc_autotune.database import records
from tc_autotune.core import builtin_tasks
from tc_autotune import workloads
from tc_autotune.tuning.autotune import tune_workload
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.workloads.dense import DenseWorkload
from tc_autotune.templates.tc_gemm.gemm import Transposed
from tc_autotune.templates.tc_gemm.operand_layout import COL_MAJOR, ROW_MAJOR
from tc_autotune.templates.tc_gemm.views import dense_view, view_of
from tc_autotune.backends.cuda.gpu import GpuInfo, gpu_for_arch
from tc_autotune.workloads.reference import dense_inputs, dense_reference
from tc_autotune.core.results import MeasureResult
from tc_autotune.templates.tc_gemm.knobs import KNOB_NAMES
from tc_autotune.templates.registry import dense_space

from synthetic import SyntheticMeasurer
from matrix import operand_matrix

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
    from tc_autotune.workloads import dense as dense_workloads

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
    assert view_of(wl) == view == builtin_tasks.DENSE.space(wl, SM90).view
    assert [op.shape for op in (view.a, view.b, view.c)] == [wl.a_shape, wl.b_shape, wl.out_shape]
    assert (view.a.run, view.c.run) == (wl.k, wl.n)
    assert view.b.run == (wl.n if wl.b_layout == "kn" else wl.k)
    assert view.b.layout == (ROW_MAJOR if wl.b_layout == "kn" else COL_MAJOR)
    assert isinstance(view.b.map, Transposed) == (wl.b_layout == "nk")
    assert view.a.layout == view.c.layout == ROW_MAJOR
    data, weight = dense_inputs(wl, seed=2)
    a = operand_matrix(view.a, data.astype(np.float32), view.m, view.k)
    b = operand_matrix(view.b, weight.astype(np.float32), view.k, view.n)
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
    if wl.b_layout == "nk":  # vector loads along K (all these K are multiples of 8)
        assert default.vec_b > 1
    sampled = space.sample(20, seed=1)  # tiny shapes have too few valid configs to draw
    assert all(space.is_valid(c) for c in sampled) and (len(sampled) == 20 or wl.m * wl.n < 1000)


@pytest.mark.parametrize("k,widest", [(512, 8), (100, 4), (98, 2), (9, 1)])
def test_an_nk_weights_vector_loads_run_along_k(k, widest):
    """vec_b divides K (the weight's rows), as vec_a does; N does not matter."""
    from dataclasses import replace

    space = dense_space(workloads.get(f"dense:m=256,n=200,k={k},b=nk"), SM90)
    base = space.default_config()
    assert base.vec_b == widest
    for vec in (1, 2, 4, 8):
        reason = space.why_invalid(replace(base, vec_b=vec, offset_b=8))
        if vec <= widest:
            assert reason is None, reason
        else:
            assert f"vec_b={vec} does not divide the {k} input features" in reason


def test_offset_b_pads_a_col_major_b_along_k():
    """An (N, K) weight's tile is [n][k] in shared memory: offset_b pads its K rows."""
    from tc_autotune.templates.tc_gemm.rules import derive, values_of_config

    config = dense_space(workloads.get("llm-4096x4096-m128"), SM90).default_config()
    found = {}
    for layout in ("kn", "nk"):
        space = dense_space(workloads.get(f"dense:m=128,n=4096,k=4096,b={layout}"), SM90)
        found[layout] = derive(values_of_config(config), space.context)
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    assert found["nk"]["b_row"] == bk and found["kn"]["b_row"] == bn
    for layout, b_tile in (("kn", bk * (bn + config.offset_b)), ("nk", bn * (bk + config.offset_b))):
        ab = config.stages * 2 * (bm * (bk + config.offset_a) + b_tile)
        assert found[layout]["smem"] == max(ab, bm * (bn + config.offset_c) * 4)


# ---- records and tuning --------------------------------------------------------------------
def test_a_dense_record_round_trips_and_load_best_picks_it(tmp_path):
    wl = workloads.get("dense-rfc-b32")
    space = dense_space(wl, SM90)
    configs = space.sample(3, seed=4)
    recs = [records.stamped("cuda -arch=sm_90", space, c, MeasureResult((t,)))
            for c, t in zip(configs, (3e-5, 1e-5, 2e-5))]
    line = recs[0].to_json()
    assert '"dense_tensorcore.cuda"' in line and str(wl) in line
    back = records.Record.from_json(line)
    assert back == recs[0] and back.task is builtin_tasks.DENSE and not back.stale
    log = tmp_path / "dense.jsonl"
    records.append(log, recs)
    best = records.load_best(log, wl, target="sm_90")
    assert best[0] == configs[1] and best[1] == pytest.approx(1e-5)


def test_tune_workload_writes_dense_records(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", "")
    wl = workloads.get("dense:m=512,n=1024,k=2048,b=nk")
    log = tmp_path / "dense.jsonl"
    gpu = GpuInfo(name="Synthetic GPU", arch="sm_90", sm_count=132)
    summary = tune_workload(wl, 24, log, gpu=gpu, compare_baseline=False, measurer_factory=SyntheticMeasurer,
                            batch_size=8, seed=0)
    written = list(records.load(log))
    assert summary.trials == len(written) >= 24
    assert all(r.workload == wl and r.task is builtin_tasks.DENSE for r in written)
    assert '"dense_tensorcore.cuda"' in log.read_text().splitlines()[0]
    assert summary.best_config is not None
    assert any(r.config["entity"][KNOB_NAMES.index("vec_b")][2] > 1 for r in written)
    from tc_autotune.api.apply import apply_history_best, best_config

    with apply_history_best(log):
        assert best_config(wl, gpu)[0] == summary.best_config


# ---- CUDA -----------------------------------------------------------------------------------
nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


@nvcc
@pytest.mark.parametrize("index", range(8))
def test_dense_kernels_compile_for_every_path_and_weight_layout(index):
    from tc_autotune.templates.tc_gemm import generator
    from tc_autotune.api.build import build_dense

    workload, config = generator.probe_kernels(generator.DENSE_PROBES)[index]
    kernel = build_dense(workload, config, target="sm_90")
    src = kernel.cuda_source
    marker = {"wmma": "wmma::mma_sync", "mma": "mma.sync.aligned.m16n8k16",
              "wgmma": "wgmma.mma_async.sync.aligned"}[config.intrinsic]
    assert marker in src
    assert kernel.arch == ("sm_90a" if config.intrinsic == "wgmma" else "sm_90")
    assert kernel.cubin[:4] == b"\x7fELF" and len(kernel.cubin) > 1000
    assert kernel.workload == workload


# An (N, K) weight on every path and WMMA shape, pipelined or not, split-K, batched A, odd
# N and K: (spec, knob changes from the generator's probe config, whose vec_b is 8).
_SWIZZLED = dict(offset_a=0, offset_b=0)
K_MAJOR_CASES = (
    ("dense:m=128,n=256,k=512,b=nk", dict(stages=1)),
    ("dense:m=128,n=256,k=512,b=nk", dict(wmma="m8n32k16", warp_row_tiles=4, stages=2)),
    ("dense:m=128,n=200,k=520,b=nk", dict(wmma="m32n8k16", warp_col_tiles=4, stages=3, split_k=2)),
    ("dense:batch=2,m=64,n=200,k=520,b=nk", dict(_SWIZZLED, intrinsic="mma", stages=2, frag_buffers=2)),
    ("dense:m=128,n=256,k=512,b=nk", dict(_SWIZZLED, intrinsic="wgmma", block_row_warps=4, chunk=4,
                                          warp_col_tiles=4, stages=2)),
)
_CP_ASYNC_16 = re.compile(r"\s*ptx_cp_async\w*_16_\w*\(buf_dyn_shmem_ptr, .*, weight_ptr, ")


@nvcc
@pytest.mark.parametrize("case", K_MAJOR_CASES, ids=lambda c: c[1].get("intrinsic", c[1].get("wmma", "wmma")))
def test_an_nk_weight_is_copied_along_k_and_fed_k_major(case):
    """16-byte copies of the weight (cp.async in a pipeline, uint4 loads without), never one
    element at a time; col_major matrix_b fragments, ldmatrix without .trans, or a K-major
    wgmma B (no transpose)."""
    from tc_autotune.templates.tc_gemm import generator
    from tc_autotune.api.build import build_dense

    [(workload, config)] = generator.probe_kernels([case])
    assert dense_space(workload, SM90).why_invalid(config) is None
    kernel = build_dense(workload, config, target="sm_90")
    src = kernel.cuda_source
    assert kernel.cubin[:4] == b"\x7fELF"
    copies = [line for line in src.splitlines() if "weight_ptr" in line and "__global__" not in line]
    assert copies and "weight_ptr[" not in src
    for line in copies:
        assert _CP_ASYNC_16.match(line) if config.stages > 1 else "= *(uint4*)(weight_ptr + " in line, line
    if config.intrinsic == "wmma":
        m, n, k = config.wmma_mnk
        assert f"fragment<nvcuda::wmma::matrix_b, {m}, {n}, {k}, half, nvcuda::wmma::col_major>" in src
        assert "matrix_b, 16, 16, 16, half, nvcuda::wmma::row_major" not in src
    elif config.intrinsic == "mma":
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src and ".trans" not in src
    else:
        n = config.warp_col_tiles * 16
        assert f"tc_wgmma_m64n{n}k64_bcol(" in src and ", 1, 1, 1, 0, 0;" in src and "b0 + 2 * k" in src


def test_build_dense_refuses_a_conv_workload():
    pytest.importorskip("tvm")
    from tc_autotune.api.build import build_dense

    with pytest.raises(ValueError, match="expected a DenseWorkload, got Conv2dWorkload"):
        build_dense("tutorial")


def test_an_untuned_dense_takes_the_nearest_tuned_gemms_config(tmp_path, monkeypatch):
    """The dense zero-shot pick: the record of the tuned dense GEMM of its kind nearest in log2 M, N,
    K (a layer tuned at 16 and 512 tokens runs 32 with the 16-token config, 256 with the 512-token
    one); never a record of another weight layout, of fp8 for 16-bit inputs, or for a conv."""
    from tc_autotune.api.apply import choose_config

    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", str(tmp_path / "none"))
    spec = "dense:m={},n=512,k=1024,b={}{}"
    small, large, near_small, near_large = (workloads.get(spec.format(m, "nk", "")) for m in (16, 512, 32, 256))
    spaces = [dense_space(w, SM90) for w in (small, large, near_small, near_large)]
    both = [c for c in spaces[0].template.starting_configs(spaces[0]) if all(s.is_valid(c) for s in spaces)]
    tuned_small, tuned_large = both[0], next(c for c in both if c != both[0])
    log = tmp_path / "log.jsonl"
    records.append(log, [records.stamped("cuda -arch=sm_90", space, config, MeasureResult((t,)))
                         for space, config, t in ((spaces[0], tuned_small, 9e-5), (spaces[1], tuned_large, 1e-5))])
    logs = [(str(log), False)]

    for workload, tuned, source in ((near_small, tuned_small, small), (near_large, tuned_large, large)):
        choice = choose_config(workload, SM90, warn=False, logs=logs)
        assert (choice.source, choice.config, choice.log) == ("neighbour", tuned, str(source))
    with pytest.warns(UserWarning, match="nearest tuned GEMM"):
        choose_config(near_small, SM90, logs=logs)
    bf16 = workloads.get(spec.format(32, "nk", ",dtype=bfloat16,out_dtype=bfloat16"))
    assert choose_config(bf16, SM90, warn=False, logs=logs).config == tuned_small  # 16-bit alike
    for other in (spec.format(32, "kn", ""), spec.format(32, "nk", ",dtype=float8_e4m3,out_dtype=bfloat16"),
                  "n=1,h=8,c=64,k=512,r=1"):
        assert choose_config(workloads.get(other), SM90, warn=False, logs=logs).source in ("default", "zero-shot")


def test_an_untuned_16_bit_dense_takes_the_models_pick_near_the_nearest_tuned_gemms(tmp_path):
    """With the stored zero-shot model, an untuned fp16 dense GEMM's config is the model's favourite
    among the nearest tuned GEMMs' best configs (four of each, fastest first, nearest GEMM first) and
    their neighbourhood, not the nearest one's record as it is; fp8 keeps to records of its kind."""
    from tc_autotune.api import apply
    from tc_autotune.search import zero_shot
    from tc_autotune.search.cost_model import positions_from_indices

    model, why = zero_shot.stored_model(SM90)
    assert model is not None, why
    spec = "dense:m={},n=512,k=1024,b=nk{}"
    tuned = [workloads.get(spec.format(m, "")) for m in (16, 32, 64, 512, 2048)]
    recs = []
    for i, workload in enumerate(tuned):
        space = dense_space(workload, SM90)
        configs = [c for c in space.template.starting_configs(space) if space.is_valid(c)][:6]
        recs += [records.stamped("cuda -arch=sm_90", space, c, MeasureResult(((i + 1 + j) * 1e-5,)))
                 for j, c in enumerate(configs)]
    log = tmp_path / "log.jsonl"
    records.append(log, recs)
    logs = [(str(log), False)]

    untuned = workloads.get(spec.format(128, ""))
    seeds, nearest = apply.neighbour_seeds(untuned, SM90, logs)
    assert nearest == [tuned[2], tuned[1], tuned[3], tuned[0]]  # 2x, 4x (by spec order), 4x, 8x away
    by_workload = {}
    for r in recs:
        by_workload.setdefault(r.workload, []).append(r.config["index"])
    assert seeds == [i for w in nearest for i in by_workload[w][:apply.BEST_PER_GEMM]]

    choice = apply.choose_config(untuned, SM90, warn=False, logs=logs)
    space = dense_space(untuned, SM90)
    assert (choice.source, choice.log) == ("zero-shot", str(tuned[2])) and space.is_valid(choice.config)
    valid_seeds = [i for i in seeds if space.is_valid(space.get(i))]
    scores = model.score(space, positions_from_indices(space, np.array([space.index(choice.config), *valid_seeds])))
    assert valid_seeds and scores[0] >= scores[1:].max()  # the model's favourite, seeds included
    with pytest.warns(UserWarning, match=r"ranked among those tuned for the nearest GEMMs \(" + re.escape(str(tuned[2]))):
        apply.choose_config(untuned, SM90, logs=logs)
    fp8 = workloads.get(spec.format(128, ",dtype=float8_e4m3,out_dtype=bfloat16"))
    assert apply.dense_zero_shot_config(fp8, SM90, logs) is None and apply.neighbour_seeds(fp8, SM90, logs) == ([], [])
