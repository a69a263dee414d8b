"""The GPU runner process without a GPU: the real ``LocalRunner`` (a spawned process, its pipe
protocol, its environment, restart after a crash, kill on a timeout) and the real measurer and
dispatcher around it, with a stand-in main (``runner_stubs``) whose "kernels" return, fail,
crash or hang.  Timeouts here are waits for something that never comes (a hung stand-in), so
no result depends on how loaded the machine is."""

import concurrent.futures as cf
import os
from dataclasses import replace

import pytest

import runner_stubs
from tc_autotune import conv2d_space
from tc_autotune.measure import bench as bench_module, runner
from tc_autotune import workloads
from tc_autotune.measure.devices import LocalDevice
from tc_autotune.measure.dispatch import RunnerFault
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.measure.measurer import LocalMeasurer, MeasureErrorNo, MeasureOptions
from tc_autotune.measure.runner import LocalRunner
from tc_autotune.core.results import CUDA_TIMER

OPTIONS = MeasureOptions(build_workers=1, run_timeout=600)  # only a hung stand-in reaches it


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def local_runner(tmp_path):
    made = []

    def make(main=runner_stubs.stub_main, options=OPTIONS, device=None):
        made.append(LocalRunner(str(tmp_path), options, device, main=main))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def test_one_process_serves_runs_until_an_error_then_a_fresh_one_starts(tmp_path, local_runner):
    r = local_runner()
    assert r.run(str(tmp_path / "ok_0.001"), "key", [((4,), "float32")]) == ("ok", [0.001] * 3)
    assert r.device == runner_stubs.GPU and r.device_name == runner_stubs.GPU.name
    assert r.run(str(tmp_path / "wrong"), "key", []) == ("wrong", "relative L2 error 1 against the fp32 reference")
    assert r.run(str(tmp_path / "ok_0.002"), "key", [])[0] == "ok"
    first = runner_stubs.starts(tmp_path)
    assert len(first) == 1  # a wrong result is the kernel's: the process goes on
    status, message = r.run(str(tmp_path / "raise"), "key", [])
    assert status == "error" and message == "RuntimeError: CUDA: an illegal memory access was encountered"
    assert r.process is None and not _alive(first[0])  # its CUDA context may be broken: stopped
    assert r.run(str(tmp_path / "pid"), "key", []) == ("ok", runner_stubs.starts(tmp_path)[1])
    assert len(runner_stubs.starts(tmp_path)) == 2


def test_a_crash_is_the_candidates_error_and_the_runner_restarts_at_once(tmp_path, local_runner):
    r = local_runner()
    assert r.run(str(tmp_path / "ok_0.001"), "key", [])[0] == "ok"
    status, message = r.run(str(tmp_path / "crash"), "key", [])
    assert (status, message) == ("error", "the runner process died (exit code 7)")
    crashed, fresh = runner_stubs.starts(tmp_path)
    assert not _alive(crashed) and r.process.is_alive() and r.process.pid == fresh  # restarted already
    assert r.run(str(tmp_path / "pid"), "key", []) == ("ok", fresh)


def test_a_hung_kernel_is_a_timeout_and_its_process_is_killed(tmp_path, local_runner):
    r = local_runner()
    assert r.run(str(tmp_path / "ok_0.001"), "key", [])[0] == "ok"  # started (start time is not run time)
    r.options = replace(OPTIONS, run_timeout=1)
    assert r.run(str(tmp_path / "hang"), "key", []) == ("timeout", "no result within 1 s")
    (hung,) = runner_stubs.starts(tmp_path)
    assert r.process is None and not _alive(hung)
    r.options = OPTIONS
    assert r.run(str(tmp_path / "ok_0.003"), "key", []) == ("ok", [0.003] * 3)
    assert len(runner_stubs.starts(tmp_path)) == 2


def test_the_process_sees_only_its_gpu_and_the_parent_keeps_its_environment(tmp_path, local_runner, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    by_uuid = local_runner(device=LocalDevice(3, "NVIDIA H200", "GPU-8f3c"))
    by_index = local_runner(device=LocalDevice(2, "NVIDIA H200"))
    assert by_uuid.run(str(tmp_path / "env"), "key", []) == ("ok", "GPU-8f3c")
    assert by_index.run(str(tmp_path / "env"), "key", []) == ("ok", "2")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and by_uuid.label == "cuda:3 GPU-8f3c"


def test_a_process_that_dies_at_start_is_a_runner_fault(tmp_path, local_runner):
    r = local_runner(main=runner_stubs.dies_at_start)
    with pytest.raises(RunnerFault, match=r"the GPU runner \(GPU 0\) died at start \(no CUDA GPU\?\)"):
        r.run(str(tmp_path / "ok_0.001"), "key", [])
    assert r.process is None and len(runner_stubs.starts(tmp_path)) == 1


def test_a_process_that_never_starts_is_killed_and_is_a_runner_fault(tmp_path, local_runner, monkeypatch):
    monkeypatch.setattr(runner, "START_TIMEOUT", 2.0)  # the stand-in never says ready at all
    r = local_runner(main=runner_stubs.never_ready, device=LocalDevice(1, "NVIDIA H200", "GPU-b"))
    stopped = []
    real_stop = r.stop
    monkeypatch.setattr(r, "stop", lambda: (stopped.append(r.process.pid if r.process else None), real_stop()))
    with pytest.raises(RunnerFault, match=r"the GPU runner \(cuda:1 GPU-b\) did not start within 2 s"):
        r.run(str(tmp_path / "ok_0.001"), "key", [])
    assert r.process is None and stopped and stopped[0] is not None and not _alive(stopped[0])


class _StubRunner(LocalRunner):
    device_type = None  # the measurer exports no output checker for it (that needs a CUDA build)


def test_the_measurer_records_what_the_runner_process_says_and_goes_on_after_crashes(tmp_path, monkeypatch):
    """The whole chain without a GPU: measurer -> dispatcher -> runner process.  Candidates that
    crash or hang the process are their own errors; the others are measured, each in order, by
    the same runner restarted as needed."""
    space = conv2d_space(workloads.get("n=2,h=14,c=64,k=64,r=1"), gpu_for_arch("sm_90"))
    configs = space.sample(6, seed=3)
    kernels = ["ok_0.001", "crash", "ok_0.002", "hang", "raise", "ok_0.004"]
    options = replace(OPTIONS, run_timeout=5)
    stub = _StubRunner(str(tmp_path), options, LocalDevice(0, "NVIDIA H200", "GPU-a"), main=runner_stubs.stub_main)
    with LocalMeasurer(space, options, runners=[stub]) as measure:
        names = iter(kernels)

        def fake_build(config):  # the "kernel" a config builds to: its file name says what it does
            future = cf.Future()
            path = tmp_path / f"{next(names)}-{space.index(config)}.so"
            path.write_bytes(b"")
            future.set_result((str(path), None, 0.0))
            return future

        monkeypatch.setattr(measure, "_submit", fake_build)
        results = measure(configs)
    assert [r.error_no for r in results] == [MeasureErrorNo.NO_ERROR, MeasureErrorNo.RUN_ERROR,
                                             MeasureErrorNo.NO_ERROR, MeasureErrorNo.RUN_TIMEOUT,
                                             MeasureErrorNo.RUN_ERROR, MeasureErrorNo.NO_ERROR]
    assert [r.seconds for r in results if r.ok] == [0.001, 0.002, 0.004]
    assert {r.timer for r in results} == {CUDA_TIMER}  # every runner times with the one timer
    assert "exit code 7" in results[1].error_msg and "no result within 5 s" in results[3].error_msg
    assert {r.device for r in results} == {"cuda:0 GPU-a"}
    # one process, restarted after the crash, the hang and the error: four in all, none left over
    started = runner_stubs.starts(tmp_path)
    assert len(started) == 4 and not any(_alive(pid) for pid in started)
    assert not list(tmp_path.glob("*.so"))  # every kernel file was removed once it ran


# ---- what a runner process measures with: check, then the one timer -------------------------
def _cpu_conv(workload, scale=1.0):
    """A CPU module whose "main" computes the 1x1 conv (times ``scale``): data, weight, out."""
    import tvm
    from tvm import te

    data = te.placeholder(workload.data_shape, workload.dtype, name="data")
    weight = te.placeholder(workload.weight_shape, workload.dtype, name="weight")
    rc = te.reduce_axis((0, workload.in_channels), name="rc")
    out = te.compute(workload.out_shape, lambda n, h, w, k: te.sum(
        data[n, h, w, rc].astype("float32") * weight[0, 0, rc, k].astype("float32") * scale, axis=rc))
    return tvm.compile(te.create_prim_func([data, weight, out]), target=tvm.target.Target({"kind": "llvm"})).mod


def test_check_and_time_times_a_right_kernel_with_the_timer_and_never_a_wrong_one(tmp_path, monkeypatch):
    """``bench.check_and_time`` as a runner process runs it, on the CPU device with the timer on a
    host clock: the kernel's function, on the bench's arguments, with the runner's options."""
    import inspect

    import fake_cuda
    import tvm
    from tc_autotune.backends.cuda import checker, timer
    from tc_autotune.core import tasks

    clock, calls = fake_cuda.HostClock(), []
    real = timer.time_launches

    def spy(launch, **options):
        bound = inspect.signature(real).bind(launch, **options)
        bound.apply_defaults()
        calls.append({k: v for k, v in bound.arguments.items() if k not in ("launch", "on_stream")})
        return real(launch, **options)

    monkeypatch.setattr(timer, "driver", lambda: clock)
    monkeypatch.setattr(timer, "time_launches", spy)
    workload = workloads.get("n=1,h=4,c=8,k=8,r=1")
    task = tasks.of(workload)
    inputs = task.inputs(workload, seed=0)
    _, shape, dtype = task.signature(workload)[-1]
    path = checker.export(str(tmp_path / "check.so"), shape, dtype, checker.target_for("cpu", "sm_90"))
    bench = bench_module.Bench(tvm.cpu(), inputs, task.reference(workload, *inputs), tvm.runtime.load_module(path))
    options = MeasureOptions(repeat=4, min_repeat_ms=1)
    status, costs = bench_module.check_and_time(_cpu_conv(workload), bench, [(shape, dtype)], options)
    assert status == "ok" and len(costs) == 4 and all(0 < c < 0.1 for c in costs)
    assert calls == [dict(device=0, warmup=10, number=1, repeat=4, min_repeat_ms=1.0)]  # bench.timer_options
    status, message = bench_module.check_and_time(_cpu_conv(workload, scale=0.5), bench, [(shape, dtype)], options)
    assert (status, len(calls)) == ("wrong", 1) and message.startswith("relative L2 error 0.5")
