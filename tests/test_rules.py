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


def test_wgmma_in_flight_is_refused_off_the_wgmma_path_and_below_two_stages():
    wgmma = replace(SPACE.default_config(), intrinsic="wgmma", wmma="m16n16k16", block_row_warps=4,
                    block_col_warps=2, warp_row_tiles=2, warp_col_tiles=4, chunk=4, offset_a=0, offset_b=0,
                    stages=3, frag_buffers=1, split_k=1, vec_a=8, vec_b=8, wgmma_in_flight=1)
    refused = {
        "wgmma_in_flight=1 keeps wgmma groups in flight: it needs intrinsic=wgmma, not mma":
            replace(wgmma, intrinsic="mma"),
        "wgmma_in_flight=1 keeps wgmma groups in flight: it needs intrinsic=wgmma, not wmma":
            replace(wgmma, intrinsic="wmma", offset_a=8, offset_b=8),
        "wgmma_in_flight=1 needs stages >= 2, not 1": replace(wgmma, stages=1),
    }
    configs = [wgmma, replace(wgmma, stages=2), *refused.values()]
    assert [SPACE.why_invalid(c) for c in configs[:2]] == [None, None]
    for reason, config in refused.items():
        assert SPACE.why_invalid(config).startswith(reason), config
        assert SPACE.why_invalid(replace(config, wgmma_in_flight=0)) is None  # only the knob was wrong
    assert valid_mask(SPACE, positions_from_configs(SPACE, configs)).tolist() == [True, True, False, False, False]
    ampere = ConfigSpace(SPACE.workload, gpu_for_arch("sm_80"))
    assert "Hopper instruction (sm_90), not sm_80" in ampere.why_invalid(wgmma)
