"""On a Hopper GPU: wgmma groups kept in flight across k-steps (``wgmma_in_flight=1``) give,
bit for bit, what the kernel that waits for each k-step's groups gives (same instructions on
each accumulator, in the same order), run after run, and match the fp32 reference on
NaN-poisoned output.  A missing barrier or drain would show as a difference somewhere."""

from dataclasses import replace

import numpy as np
import pytest

from tc_autotune.templates.tc_gemm.generator import DENSE_IN_FLIGHT_PROBES, IN_FLIGHT_PROBES, probe_kernels

from test_gpu_epilogue import check, run

pytestmark = pytest.mark.gpu

# conv2d and dense, 2-4 stages, split-K, both warpgroup widths, 1-4 slabs, both weight layouts,
# fp16 output, fp32 input, a fused epilogue, and rfc-3x3-b256's full-size grid
PROBES = IN_FLIGHT_PROBES + DENSE_IN_FLIGHT_PROBES


@pytest.mark.parametrize("index", range(len(PROBES)), ids=[p[0][:40] for p in PROBES])
def test_in_flight_probes_match_the_reference_and_the_waiting_kernel(index):
    workload, config = probe_kernels(PROBES)[index]
    check(workload, config)
    waiting = run(workload, replace(config, wgmma_in_flight=0))[0]
    for _ in range(3):
        in_flight = run(workload, config)[0]
        assert np.array_equal(in_flight, waiting), f"{np.sum(in_flight != waiting)} elements differ"


@pytest.mark.parametrize("name", ["b1-7x7-s2-c3", "odd-channels", "dilation2"])
def test_split_k_with_fp16_output_matches_the_waiting_kernel(name):
    """Small grids: one config per (stages, split_k) of the in-flight variant, fp16 output."""
    from tc_autotune import workloads

    from matrix import WORKLOADS, variant_space

    wl = workloads.get(WORKLOADS[name]).replace(out_dtype="float16")
    picked = {}
    for config in variant_space(str(wl), "wgmma-in-flight").sample(400, seed=9):
        picked.setdefault((config.stages, config.split_k), config)
    assert any(split > 1 for _, split in picked)
    for config in picked.values():
        check(wl, config)
        assert np.array_equal(run(wl, config)[0], run(wl, replace(config, wgmma_in_flight=0))[0])
