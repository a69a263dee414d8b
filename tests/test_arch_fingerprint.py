"""The validity masks and reasons, the default configs and the features of a fixed sample are
what they were when ``tests/data/arch_fingerprint.json`` was written (see
``tests/arch_fingerprint.py``): refactors of space, rules, cost model or template keep them."""

import json

import arch_fingerprint as fp

EXPECTED = json.loads(fp.DATA.read_text())


def test_validity_masks_and_reasons_are_unchanged():
    found = {key: fp.mask_fingerprint(key, space, n) for key, space, n in fp.mask_spaces()}
    changed = [key for key in EXPECTED["masks"] if found.get(key) != EXPECTED["masks"][key]]
    assert not changed and found.keys() == EXPECTED["masks"].keys(), changed[:10]


def test_default_configs_and_features_are_unchanged():
    assert {f"{n}/{a}": fp.default_index(n, a) for n, a in fp.DEFAULTS} == EXPECTED["defaults"]
    assert {key: fp.features_hash(free) for key, free in fp.FEATURE_ENTRIES.items()} == {
        key: EXPECTED[key] for key in fp.FEATURE_ENTRIES}
