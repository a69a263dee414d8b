"""The rule table and the intrinsic path registry: one implementation, no silent fallbacks."""

from dataclasses import replace

import numpy as np
import pytest

from tc_autotune.templates.tc_gemm import intrinsic_paths
from tc_autotune import workloads
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.templates.tc_gemm.knobs import KNOBS, TcGemmConfig
from tc_autotune.templates.tc_gemm.rules import derive, values_of_config
from tc_autotune.templates.registry import ConfigSpace
from tc_autotune.core.config_space import positions_from_configs, positions_from_indices, radices, valid_mask

SPACE = ConfigSpace(workloads.get("tutorial"), gpu_for_arch("sm_90"))


def _valid_indices(space, chunk=1 << 18):
    """The index of every valid config of ``space``, in order: ``valid_mask`` over the whole
    space, a block of indices at a time (the mask is row by row; decoding all of a 17M-config
    space at once would take gigabytes).  A block spans the first knobs' every value (the first
    knob varies fastest) with the later ones fixed, so its rows are the first knobs' rows,
    decoded once, plus the block's first index's: half the time of decoding every index."""
    rad = radices(space).tolist()
    knobs, block = 0, 1
    while knobs < len(rad) and block * rad[knobs] <= chunk:
        block, knobs = block * rad[knobs], knobs + 1
    low = positions_from_indices(space, np.arange(block))  # the later knobs' columns are 0
    starts = range(0, len(space), block)
    return np.concatenate([start + np.flatnonzero(valid_mask(space, low + first)) for start, first in
                           zip(starts, positions_from_indices(space, np.asarray(starts)))])


def _path_table(name, **pinned):
    """The knob table with path ``name`` and the knob values it requires pinned, and ``pinned``.
    group_pack, swap_ab and consumer_n stay at their neutral values: on the tutorial's conv
    (ungrouped, no dense) every other value is invalid by its own rule, and brute-forcing them would
    multiply these whole-space scans by 60 for no valid config; deep_ring too (it doubles the scans;
    test_tuner's test_narrow_consumers_and_the_deep_ring_validity samples both)."""
    path = {"intrinsic": name, "group_pack": 1, "swap_ab": 0, "consumer_n": 0, "deep_ring": 0,
            **intrinsic_paths.get(name).requires, **pinned}
    return {**KNOBS, **{knob: (value,) for knob, value in path.items()}}


@pytest.mark.parametrize("name", [n for n, p in intrinsic_paths.PATHS.items() if p.requires])
def test_every_requirement_of_a_path_is_a_rule(name):
    path = intrinsic_paths.get(name)
    base = ConfigSpace(SPACE.workload, SPACE.gpu, _path_table(name)).sample(1, seed=0)[0]
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


# ---- warp_specialized: a producer warpgroup feeding 1-2 wgmma consumer warpgroups -----------
WS = TcGemmConfig(block_row_warps=4, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=4, chunk=4,
                  wmma="m16n16k16", offset_a=0, offset_b=0, offset_c=0, vec_a=8, vec_b=8, vec_c=1, stages=3,
                  intrinsic="wgmma", warp_specialized=1)
_WS_WHY = "warp_specialized=1 feeds wgmma consumer warpgroups from a producer warpgroup: it needs intrinsic=wgmma"


def _space_of(spec, arch="sm_90"):
    return ConfigSpace(workloads.get(spec), gpu_for_arch(arch))


@pytest.mark.parametrize("spec,changes,reason", [
    ("tutorial", dict(intrinsic="mma"), f"{_WS_WHY}, not mma"),
    ("tutorial", dict(intrinsic="wmma", offset_a=8, offset_b=8), f"{_WS_WHY}, not wmma"),
    ("resnet50-res5-3x3-512-512-s2-b1", dict(split_k=4, warp_specialized=2),  # a grid small enough for split-K
     "warp_specialized=2 takes split_k <= 8 (a cluster of blocks, one per K slice), and only unpersistent "
     "(warp_specialized=1), not split_k=4"),
    ("tutorial", dict(stages=1),
     "warp_specialized=1 needs stages >= 2, not 1: the producer fills one stage while the consumers read another"),
    ("tutorial", dict(vec_a=4),
     "warp_specialized=1 needs vec_a=8 and vec_b=8, not 4 and 8: the producer copies A and B in 16-byte "
     "cp.async chunks"),
    ("tutorial", dict(vec_b=2), "warp_specialized=1 needs vec_a=8 and vec_b=8, not 8 and 2"),
    ("tutorial", dict(block_col_warps=4),
     "warp_specialized=1 needs block_col_warps <= 2 (consumer warpgroups), not 4: 640 threads leave too few "
     "registers for the accumulators"),
    ("tutorial", dict(vec_c=4, offset_c=4),
     "warp_specialized=1 needs vec_c=1 and offset_c=0, not 4 and 4: its consumers store C from their "
     "registers, so no other value makes another kernel"),
], ids=["mma", "wmma", "split_k", "stages", "vec_a", "vec_b", "consumers", "c_tile"])
# (fp32 input takes the kernel with a converting producer: test_fp32_input's refusals)
def test_warp_specialized_is_refused_off_the_wgmma_path_and_outside_its_kernel(spec, changes, reason):
    space = _space_of(spec)
    config = replace(WS, **changes)
    assert space.why_invalid(config).startswith(reason)
    assert not valid_mask(space, positions_from_configs(space, [config]))[0]
    assert space.why_invalid(replace(config, warp_specialized=0)) is None  # only the knob was wrong


def test_a_warp_specialized_config_of_one_or_two_consumer_warpgroups_is_valid():
    configs = [WS, replace(WS, block_col_warps=1, warp_col_tiles=8), replace(WS, stages=2, wgmma_in_flight=1)]
    assert [SPACE.why_invalid(c) for c in configs] == [None] * 3
    assert valid_mask(SPACE, positions_from_configs(SPACE, configs)).all()
    assert "Hopper instruction (sm_90), not sm_80" in _space_of("tutorial", "sm_80").why_invalid(WS)


def test_a_warp_specialized_kernel_has_a_producer_warpgroup_and_no_c_staging_tile():
    """threads = 128 x (1 + consumer warpgroups); shared memory: per stage one 64-deep k-step of A
    and B in 128-byte rows and two mbarriers, plus 1024 bytes of alignment slack."""
    v = derive(values_of_config(WS), SPACE.context)
    assert WS.threads == v["threads"] == 128 * (1 + 2)
    assert WS.smem_bytes == v["smem"] == 3 * (128 * 128 + 128 * 128) + 1024 + 16 * 3
    waiting = replace(WS, warp_specialized=0)  # the same tiles, every thread copying, C staged
    assert waiting.threads == 256 and waiting.smem_bytes == 3 * (128 * 128 + 128 * 128) < WS.smem_bytes


def test_the_warp_specialized_accumulator_rule_names_its_limit():
    """warp_row_tiles x warp_col_tiles x 8 floats per consumer thread, at most 128 (the space's
    accumulator rule, 16 fragments per warp, says so first: why_invalid names that one)."""
    rule = next(r for r in intrinsic_paths.WGMMA.rules if r.name == "warp_specialized_accumulators")
    config = replace(WS, warp_row_tiles=8, warp_col_tiles=4, stages=2)
    v = derive(values_of_config(config), SPACE.context)
    assert not rule.ok(v, SPACE.context) and rule.ok(derive(values_of_config(WS), SPACE.context), SPACE.context)
    assert rule.message(config, v, SPACE.context) == ("warp_specialized=1 holds 256 accumulator floats per consumer "
                                                      "thread (warp_row_tiles x warp_col_tiles x 8), more than 128")
    assert "accumulator fragments per warp exceed 16" in SPACE.why_invalid(config)


def test_the_space_has_valid_warp_specialized_configs_on_hopper_only():
    """Every config of the wgmma path with warp_specialized=1 (the rest of the tutorial's knobs
    free), checked at once: valid ones exist on sm_90, all obey the kernel's limits; none of them is
    valid on sm_80 (where no rule is looser than on sm_90: its shared memory is smaller)."""
    table = _path_table("wgmma", warp_specialized=1)
    hopper = ConfigSpace(SPACE.workload, gpu_for_arch("sm_90"), table)
    indices = _valid_indices(hopper)
    assert indices.size > 0
    valid = [hopper.get(int(i)) for i in indices[::97]]
    assert all(hopper.why_invalid(c) is None for c in valid)
    assert all(c.vec_a == c.vec_b == 8 and c.split_k == 1 and c.stages >= 2 and c.block_col_warps <= 2
               for c in valid)
    ampere = ConfigSpace(SPACE.workload, gpu_for_arch("sm_80"), table)
    assert not valid_mask(ampere, positions_from_indices(ampere, indices)).any()
    assert all(ampere.why_invalid(c) is not None for c in valid[:50])  # the rules say so one by one too


def test_the_default_config_is_never_warp_specialized():
    """A default is the kernel for shapes nobody tuned: it must be one measured across many shapes.
    Even a table of unpadded wgmma tiles, where the prior's best valid config is a
    warp-specialized one (found by brute force here), defaults to a config without the knob."""
    from tc_autotune.templates.tc_gemm.prior import prior_score

    assert SPACE.default_config().intrinsic == "wmma"
    space = ConfigSpace(SPACE.workload, SPACE.gpu, _path_table("wgmma", offset_c=0, vec_c=1))
    indices = _valid_indices(space)
    scores = prior_score(space, positions_from_indices(space, indices))
    assert space.get(int(indices[np.argmax(scores)])).warp_specialized == 1
    default = space.default_config()
    assert default.warp_specialized == 0 and space.is_valid(default)
    plain = indices[positions_from_indices(space, indices)[:, list(space.knobs).index("warp_specialized")] == 0]
    best_plain = space.get(int(plain[np.argmax(prior_score(space, positions_from_indices(space, plain)))]))
    assert default == best_plain


@pytest.mark.parametrize("spec", ["tutorial", "n=32,h=28,c=256,k=256,r=3,pad=1,groups=32",
                                  "dense:m=1,n=11008,k=4096,b=nk,dtype=float8_e4m3fn,out_dtype=bfloat16"])
def test_the_screened_mask_of_a_large_batch_is_the_rule_tables(spec):
    """valid_mask drops a large batch's rows that lack a value their path requires before it
    derives the rest: the mask must be exactly the whole rule table's, on uniform draws (which
    the screen mostly drops) and on every config one knob from a valid one (which it mostly keeps,
    and whose moves off a required value it must drop only where a rule does)."""
    from tc_autotune.templates.tc_gemm import validity
    from tc_autotune.templates.tc_gemm.rules import derive_rows

    space = ConfigSpace(workloads.get(spec), gpu_for_arch("sm_90"))
    rng = np.random.default_rng(7)
    drawn = positions_from_indices(space, space.drawn(rng.integers(0, space.draw_bound, 50_000)))
    valid = positions_from_configs(space, space.sample(40, seed=1))
    moved = []
    for j, candidates in enumerate(space.knobs.values()):
        for p in range(len(candidates)):
            rows = valid.copy()
            rows[:, j] = p
            moved.append(rows)
    for pos in (drawn, np.concatenate(moved)):
        assert len(pos) >= validity._SCREEN_ROWS
        mask = valid_mask(space, pos)
        assert mask.tolist() == validity.rule_mask(derive_rows(space, pos), space.context).tolist()
        assert 0 < mask.sum() < len(pos)
    assert not validity.meets_requirements(space, np.concatenate(moved)).all()  # the screen had rows to drop


def test_drawn_positions_are_the_drawn_configs_positions():
    """The random draws' positions, read off their digits, are those of the indices ``drawn``
    puts the pinned knobs back into (spaces with and without pinned draws)."""
    rng = np.random.default_rng(2)
    for spec in ("tutorial", "n=32,h=28,c=256,k=256,r=3,pad=1,groups=32",
                 "dense:m=1,n=11008,k=4096,b=nk,dtype=float8_e4m3fn,out_dtype=bfloat16"):
        space = ConfigSpace(workloads.get(spec), gpu_for_arch("sm_90"))
        draws = rng.integers(0, space.draw_bound, 5000)
        assert space.drawn_positions(draws).tolist() == positions_from_indices(space, space.drawn(draws)).tolist()
    pinned = ConfigSpace(SPACE.workload, SPACE.gpu, {**KNOBS, "chunk": (4,)})
    draws = rng.integers(0, pinned.draw_bound, 100)
    assert pinned.drawn_positions(draws).tolist() == positions_from_indices(pinned, pinned.drawn(draws)).tolist()
