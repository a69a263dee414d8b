"""The generated CUDA, the validity masks and reasons, the default configs and the features of
a fixed sample are what they were when ``tests/data/arch_fingerprint.json`` was written (see
``tests/arch_fingerprint.py``): refactors of space, rules, cost model or template keep them."""

import json

import pytest

import arch_fingerprint as fp

EXPECTED = json.loads(fp.DATA.read_text())


def test_the_sample_covers_every_path():
    configs = [case["config"] for case in EXPECTED["cuda"]]
    assert {(c["intrinsic"], c["wmma"]) for c in configs} == {
        ("wmma", "m16n16k16"), ("wmma", "m8n32k16"), ("wmma", "m32n8k16"), ("mma", "m16n16k16"),
        ("wgmma", "m16n16k16")}
    assert {c["intrinsic"] for c in configs if c["split_k"] > 1} == {"wmma", "mma", "wgmma"}
    # wgmma groups in flight, with and without split-K (older entries lack the knob: 0)
    assert {c["split_k"] > 1 for c in configs if c.get("wgmma_in_flight")} == {True, False}
    assert set(fp.WORKLOADS.values()) == {case["workload"] for case in EXPECTED["cuda"]}
    assert len(configs) >= 90


@pytest.mark.parametrize("case", EXPECTED["cuda"], ids=lambda c: f"{c['workload'][:24]}-{c['config']['intrinsic']}")
def test_generated_cuda_is_unchanged(case):
    assert fp.cuda_hash(case) == case["sha256"]


def test_validity_masks_and_reasons_are_unchanged():
    found = {key: fp.mask_fingerprint(key, space, n) for key, space, n in fp.mask_spaces()}
    changed = [key for key in EXPECTED["masks"] if found.get(key) != EXPECTED["masks"][key]]
    assert not changed and found.keys() == EXPECTED["masks"].keys(), changed[:10]


def test_default_configs_and_features_are_unchanged():
    assert {f"{n}/{a}": fp.default_index(n, a) for n, a in fp.DEFAULTS} == EXPECTED["defaults"]
    assert {key: fp.features_hash(free) for key, free in fp.FEATURE_ENTRIES.items()} == {
        key: EXPECTED[key] for key in fp.FEATURE_ENTRIES}
