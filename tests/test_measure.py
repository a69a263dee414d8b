"""Measurement: builds in workers, invalid configs never built; on the GPU, checked timings and
isolation of crashing, hanging and wrong kernels."""

import os
from dataclasses import replace

import numpy as np
import pytest

from tc_autotune import conv2d_space
from tc_autotune import workloads
from tc_autotune.backends.cuda.gpu import gpu_for_arch, local_gpu
from tc_autotune.measure.measurer import LocalMeasurer, MeasureErrorNo, MeasureOptions, _build_one
from tc_autotune.templates.tc_gemm.workspaces import workspaces

SMALL = workloads.get("n=2,h=14,c=64,k=64,r=3,pad=1")


def test_build_worker_exports_a_loadable_library(tmp_path):
    config = conv2d_space(SMALL, gpu_for_arch("sm_90")).default_config()
    path, error, seconds, code = _build_one(str(SMALL), config.as_dict(), "sm_90", str(tmp_path), 60)
    assert error is None and os.path.getsize(path) > 10_000 and seconds > 0
    assert len(code) == 64  # the kernel's code hash, which its record carries


def test_build_worker_reports_errors_as_text(tmp_path):
    config = conv2d_space(SMALL, gpu_for_arch("sm_90")).default_config()
    path, error, _, code = _build_one("n=2,h=14", config.as_dict(), "sm_90", str(tmp_path), 60)
    assert path is None and "missing" in error and code is None


def test_invalid_configs_are_recorded_not_built():
    space = conv2d_space(workloads.get("n=1,h=8,c=3,k=16,r=1"), gpu_for_arch("sm_90"))
    bad = replace(space.default_config(), vec_a=8)
    with LocalMeasurer(space, MeasureOptions(build_workers=1)) as measure:
        (result,) = measure([bad])
    assert result.error_no == MeasureErrorNo.INVALID_CONFIG
    assert "vec_a=8" in result.error_msg and result.seconds == float("inf")


# ---- on the GPU ------------------------------------------------------------------
def _export(tmp_path, prim_func, name):
    import tvm

    from tc_autotune.backends.cuda.gpu import cuda_target

    path = str(tmp_path / f"{name}.so")
    tvm.compile(prim_func, cuda_target()).export_library(path)
    return path


def _bad_kernels(tmp_path):
    """A kernel that traps (as an illegal access does) and one that never finishes, both with the
    template's signature (data, weight, out) for SMALL."""
    import tvm
    from tvm.script import tirx as T

    n, h, w, c = SMALL.data_shape

    @T.prim_func
    def crash(d: T.Buffer((n, h, w, c), "float16"), wt: T.Buffer(SMALL.weight_shape, "float16"),
              o: T.Buffer(SMALL.out_shape, "float32")):
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                T.evaluate(T.call_extern("void", "__trap"))
                o[0, 0, 0, tx] = T.float32(1)

    @T.prim_func
    def hang(d: T.Buffer((n, h, w, c), "float16"), wt: T.Buffer(SMALL.weight_shape, "float16"),
             o: T.Buffer(SMALL.out_shape, "float32")):
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(1, thread="threadIdx.x"):
                while d[0, 0, 0, 0] == d[0, 0, 0, 0]:
                    o[0, 0, 0, 0] = o[0, 0, 0, 0] + T.float32(1)

    return (_export(tmp_path, tvm.IRModule({"main": crash}), "crash"),
            _export(tmp_path, tvm.IRModule({"main": hang}), "hang"))


@pytest.mark.gpu
def test_gpu_measures_checked_times_and_survives_bad_kernels(tmp_path):
    space = conv2d_space(SMALL)
    configs = space.sample(3, seed=2)
    options = MeasureOptions(build_workers=2, run_timeout=10, repeat=3, min_repeat_ms=5)
    with LocalMeasurer(space, options) as measure:
        results = measure(configs)
        assert all(r.ok for r in results), [r.error_msg for r in results]
        for r in results:
            assert len(r.costs) == 3 and all(0 < c < 0.1 for c in r.costs) and r.all_cost > 0
        local = local_gpu()  # the runner reports the device it measured on, with its limits
        assert (measure.device.name, measure.device.arch, measure.device.sm_count) == (
            local.name, local.arch, local.sm_count)
        out = [(SMALL.out_shape, SMALL.out_dtype)]
        crash, hang = _bad_kernels(tmp_path)
        status, msg = measure._runner.run(crash, measure._key, out)
        assert status == "error", msg
        status, msg = measure._runner.run(hang, measure._key, out)
        assert status == "timeout", msg
        # A kernel of another workload with the same tensor shapes computes something else.
        shifted = workloads.get("n=2,h=14,c=64,k=64,r=3,pad=2x2x0x0")
        other = conv2d_space(shifted)
        config = other.default_config()
        path, error, _, _ = _build_one(str(shifted), config.as_dict(), space.gpu.arch, str(tmp_path), 60)
        assert error is None
        status, msg = measure._runner.run(path, measure._key, out + workspaces(shifted, config))
        assert status == "wrong" and "relative L2 error" in msg
        # ... and the tuner's next candidates still run.
        again = measure(configs[:1])[0]
        assert again.ok and np.isclose(again.seconds, results[0].seconds, rtol=0.5)


def test_slow_runs_do_not_count_against_the_build_timeout(tmp_path):
    """Runs happen while later builds finish; a slow GPU must not turn builds into timeouts.
    The builds are instant stand-ins and the first run lasts until the measurer has checked its
    builds past the batch's build deadline (an event, not a sleep: whatever the machine's load),
    so only the deadline rule decides: a finished build is never a timeout, however long runs take."""
    import concurrent.futures as cf
    import threading
    import time

    space = conv2d_space(SMALL, gpu_for_arch("sm_90"))
    configs = space.sample(3, seed=21)
    runs, checked_late = [], threading.Event()

    class SlowFirstRun:
        label, device = "cuda:0", gpu_for_arch("sm_90")

        def run(self, so_path, key, tensors):
            runs.append(so_path)
            if len(runs) == 1:  # the GPU is slow: the build deadline passes during this run
                checked_late.wait(120)
            return "ok", [1e-3, 1e-3]

        def stop(self):
            pass

    def instant_build(config):
        future = cf.Future()
        path = tmp_path / f"kernel_{len(list(tmp_path.iterdir()))}.so"
        path.write_bytes(b"")
        future.set_result((str(path), None, 0.0, None))  # library, error, seconds, code hash
        return future

    with LocalMeasurer(space, MeasureOptions(build_workers=1, build_timeout=0.5), runners=[SlowFirstRun()]) as measure:
        real_check = measure._check_builds

        def check_builds():
            late = any(time.time() > batch.deadline for batch in measure._batches)
            real_check()
            if late:
                checked_late.set()

        measure._submit = instant_build
        measure._check_builds = check_builds
        measure._build_deadline = lambda: time.time() + 0.5  # instead of 0.5 s + 5 s per queued build
        results = measure(configs)
    assert checked_late.is_set()
    assert [r.error_no for r in results] == [MeasureErrorNo.NO_ERROR] * 3, [r.error_msg for r in results]
    assert all(r.costs == (1e-3, 1e-3) for r in results) and len(runs) == 3
