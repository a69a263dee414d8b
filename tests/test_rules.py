"""The rule table and the intrinsic path registry: one implementation, no silent fallbacks."""

from dataclasses import replace

import numpy as np
import pytest

from tc_autotune import intrinsic_paths, workloads
from tc_autotune.gpu import gpu_for_arch
from tc_autotune.knobs import KNOBS
from tc_autotune.rules import derive, values_of_config
from tc_autotune.space import ConfigSpace, positions_from_configs, valid_mask

SPACE = ConfigSpace(workloads.get("tutorial"), gpu_for_arch("sm_90"))


@pytest.mark.parametrize("name", [n for n, p in intrinsic_paths.PATHS.items() if p.requires])
def test_every_requirement_of_a_path_is_a_rule(name):
    path = intrinsic_paths.get(name)
    pinned = {**KNOBS, "intrinsic": (name,), **{k: (v,) for k, v in path.requires.items()}}
    base = ConfigSpace(SPACE.workload, SPACE.gpu, pinned).sample(1, seed=0)[0]
    for knob, value in path.requires.items():
        for other in (c for c in KNOBS[knob] if c != value):
            config = replace(base, **{knob: other})
            v = derive(values_of_config(config), SPACE.context)
            broken = [r.name for r in path.rules if not r.ok(v, SPACE.context)]
            assert broken and all(r.path == name for r in path.rules), (knob, other)
            assert SPACE.why_invalid(config) and not valid_mask(SPACE, positions_from_configs(SPACE, [config]))[0]


def test_an_unknown_path_is_an_error_not_another_paths_rules():
    config = replace(SPACE.default_config(), intrinsic="tcgen05")
    with pytest.raises(KeyError, match="unknown intrinsic path 'tcgen05'"):
        SPACE.why_invalid(config)


def test_why_invalid_and_the_mask_are_one_implementation():
    idx = np.random.default_rng(3).integers(0, len(SPACE), 4000)
    configs = [SPACE.get(int(i)) for i in idx]
    mask = valid_mask(SPACE, positions_from_configs(SPACE, configs))
    assert [SPACE.why_invalid(c) is None for c in configs] == mask.tolist()


def test_build_arch_comes_from_the_path():
    assert [intrinsic_paths.get(n).build_arch("sm_90") for n in KNOBS["intrinsic"]] == ["sm_90", "sm_90", "sm_90a"]
