"""The template version: a change of the generated code without a version bump fails here."""

import pytest

from tc_autotune.templates.tc_gemm import generator
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.templates.tc_gemm.knobs import KNOBS, WMMA_SHAPES
from tc_autotune.templates.registry import conv2d_space


@pytest.fixture(scope="module")
def fingerprint():
    return generator.fingerprint()


def test_generated_code_is_the_one_the_template_version_names(fingerprint):
    assert generator.version_check(fingerprint) is None, generator.version_check(fingerprint)


def test_a_generator_change_without_a_bump_is_caught(monkeypatch, fingerprint):
    from tc_autotune.backends.cuda import nvcc as cuda

    monkeypatch.setattr(cuda, "NVCC_FLAGS", cuda.NVCC_FLAGS + ("-lineinfo",))  # other binaries
    message = generator.version_check()
    assert message and f"bump TEMPLATE_VERSION to {generator.TEMPLATE_VERSION + 1}" in message


def test_versions_only_grow():
    assert max(generator.FINGERPRINTS) == generator.TEMPLATE_VERSION
    values = list(generator.FINGERPRINTS.values())
    assert all(len(v) == 64 for v in values) and len(set(values)) == len(values)


def test_the_probes_are_valid_and_cover_every_path():
    gpu = gpu_for_arch(generator.PROBE_ARCH)
    probes = generator.probe_kernels()
    for workload, config in probes:
        assert conv2d_space(workload, gpu).why_invalid(config) is None, (workload, config)
    configs = [c for _, c in probes]
    assert {c.intrinsic for c in configs} == set(KNOBS["intrinsic"])
    assert {c.wmma for c in configs} == set(WMMA_SHAPES)
    assert {c.stages for c in configs} >= {1, 2, 3} and {c.frag_buffers for c in configs} == {1, 2}
    assert any(c.split_k > 1 and c.intrinsic == "wmma" for c in configs)
    assert any(c.split_k > 1 and c.intrinsic == "mma" for c in configs)
    wls = [w for w, _ in probes]
    assert {w.dtype for w in wls} == {"float16", "float32"} and {w.out_dtype for w in wls} == {"float16", "float32"}
    assert any(max(w.stride) > 1 for w in wls) and any(max(w.dilation) > 1 for w in wls)


# ---- the pairwise cover: a change conditional on any knob value changes a fingerprint ----------
@pytest.mark.parametrize("family,probes", [("plain", generator.COVER_PROBES), ("ws", generator.COVER_WS_PROBES)])
def test_the_cover_probes_are_valid_and_meet_every_pair_of_knob_values(family, probes):
    """Every pair of knob values that a seeded sample of valid configs of a path combines is in
    some probe of that path (so every value of every knob is, on every path where it is valid):
    a code change only some value's kernels see, even only where one other knob has some value
    (the fragment pipeline at stages=4 and frag_buffers=2 before), changes the fingerprint."""
    from tc_autotune.templates.tc_gemm import probe_cover

    gpu = gpu_for_arch(generator.PROBE_ARCH)
    kernels = generator.probe_kernels(probes)
    for workload, config in kernels:
        assert conv2d_space(workload, gpu).why_invalid(config) is None, (workload, config)
    configs = [c for _, c in kernels]
    assert {probe_cover.path_of(c)[0] for c in configs} == {family}
    missing = probe_cover.uncovered(configs, [c for _, c in probe_cover.sampled(family)])
    assert not missing, (f"{len(missing)} pairs of knob values no probe has, e.g. {sorted(missing, key=str)[:3]}: "
                         "add a probe set from `python -m tc_autotune.templates.tc_gemm.probe_cover`")
    if family == "plain":  # the case that slipped through: a pipelined k-loop with 4 stages
        for path in ("wmma", "mma"):
            assert any(c.intrinsic == path and c.stages == 4 and c.frag_buffers == 2 for c in configs), path


def test_the_cover_probes_have_the_fingerprint_of_their_version():
    """The template's kernels of the pairwise cover (100 configs: ~30 s of lowering, no nvcc)
    generate the code that TEMPLATE_VERSION names (the warp-specialized cover is checked with
    the other warp-specialized sets, in test_warp_specialized.py)."""
    found = generator.fingerprint(generator.COVER_PROBES)
    assert found == generator.COVER_FINGERPRINTS[generator.TEMPLATE_VERSION], (
        f"the code generated for the cover probes changed: bump tasks.CONV2D.template_version and add {found!r}")
