"""The template version: a change of the generated code without a version bump fails here."""

import pytest

from tc_autotune import generator
from tc_autotune.gpu import gpu_for_arch
from tc_autotune.space import KNOBS, WMMA_SHAPES, conv2d_space


@pytest.fixture(scope="module")
def fingerprint():
    return generator.fingerprint()


def test_generated_code_is_the_one_the_template_version_names(fingerprint):
    assert generator.version_check(fingerprint) is None, generator.version_check(fingerprint)


def test_a_generator_change_without_a_bump_is_caught(monkeypatch, fingerprint):
    from tc_autotune import cuda

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
