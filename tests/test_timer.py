"""The one timer (``backends.cuda.timer``) without a GPU: its real ctypes driver layer
(``CudaDriver``) on a simulated ``libcuda`` (``fake_cuda.FakeLibcuda``), whose clock makes every
figure exact: how many launches a repeat holds, which repeat is dropped, that everything it
made is freed, and that each failure is one ``TimerError``.  Then the TVM side (the stream TVM
launches on, the global function an RPC server calls) on the CPU device."""

import contextlib
import json
import math

import numpy as np
import pytest
import tvm
import tvm_ffi

import fake_cuda
from tc_autotune.backends.cuda import timer
from tc_autotune.backends.cuda.timer import TimerError
from tc_autotune.core.results import CUDA_TIMER, TIMER, TIMERS


@pytest.fixture
def lib(monkeypatch):
    return fake_cuda.install(monkeypatch)


def kernel(lib, ms):
    """A launch of an ``ms``-millisecond kernel; ``.calls`` counts them."""
    def launch():
        launch.calls += 1
        lib.launch(ms)

    launch.calls = 0
    return launch


def on_stream(seen):
    """An ``on_stream`` that notes the stream it is given."""
    return lambda stream: seen.append(stream) or contextlib.nullcontext()


def assert_all_freed(lib):
    assert lib.alive() == [] and not lib.capturing and lib.contexts == [] and lib.retained == 0


def test_the_timers_name_is_todays_and_records_know_it():
    assert TIMER == CUDA_TIMER and CUDA_TIMER in TIMERS
    assert {"time_evaluator", "cuda_graph"} <= set(TIMERS)  # old records stay readable


# ---- number, repeat, min_repeat_ms ----------------------------------------------------------------
@pytest.mark.parametrize("ms,captured", [(0.01, [20, 1000]), (5.0, [20]), (1e-6, [20, 4096])],
                         ids=["10 us: 1000 launches fill 10 ms", "5 ms: 20 already do", "1 ns: capped at 4096"])
def test_each_repeat_is_filled_to_min_repeat_ms_and_divided_by_its_launches(lib, ms, captured):
    run = kernel(lib, ms)
    times = timer.time_launches(run, on_stream=on_stream([]), warmup=3, number=20, repeat=7, min_repeat_ms=10)
    assert times == pytest.approx([ms / 1e3] * 7)  # seconds per launch, one figure per kept repeat
    # the warm-up, then each graph's launches; one replay per graph tried, then 7 + 1 timed
    assert lib.captured == captured and run.calls == 3 + sum(captured)
    assert lib.replays == len(captured) + 8
    assert_all_freed(lib)


def test_number_grows_by_at_least_the_golden_ratio_and_a_nearly_full_repeat_is_full(lib):
    timer.time_launches(kernel(lib, 0.09), on_stream=on_stream([]), warmup=0, number=100, repeat=1, min_repeat_ms=10)
    assert lib.captured == [100, 162]  # 9 ms of 10: 112 would fill it, but at least x1.618
    lib.captured.clear()
    timer.time_launches(kernel(lib, 0.4975), on_stream=on_stream([]), warmup=0, number=20, repeat=1, min_repeat_ms=10)
    assert lib.captured == [20]  # 9.95 ms of 10: within 1%, full


def test_without_a_minimum_a_repeat_is_number_launches(lib):
    run = kernel(lib, 0.01)
    times = timer.time_launches(run, on_stream=on_stream([]), warmup=10, number=20, repeat=5)
    assert times == pytest.approx([1e-5] * 5)
    assert run.calls == 10 + 20 and lib.captured == [20] and lib.replays == 1 + 6


def test_the_first_timed_repeat_is_dropped_and_only_it(monkeypatch):
    # replay 1 sizes the graph; replay 2, the first timed one, runs 1.5x slow: dropped
    lib = fake_cuda.install(monkeypatch, slow_replays={2: 1.5})
    times = timer.time_launches(kernel(lib, 0.01), on_stream=on_stream([]), number=20, repeat=4)
    assert times == pytest.approx([1e-5] * 4)
    lib = fake_cuda.install(monkeypatch, slow_replays={3: 1.5})  # the second timed one is kept
    times = timer.time_launches(kernel(lib, 0.01), on_stream=on_stream([]), number=20, repeat=4)
    assert times == pytest.approx([1.5e-5, 1e-5, 1e-5, 1e-5])


def test_launches_go_to_a_stream_of_the_timers_own_in_the_devices_primary_context(lib):
    seen, contexts = [], []

    def launch():
        contexts.append(list(lib.contexts))
        lib.launch(0.01)

    timer.time_launches(launch, on_stream=on_stream(seen), device=3, warmup=1, number=2, repeat=2)
    (stream,) = seen
    assert lib.stream_flags == {stream: 1}  # CU_STREAM_NON_BLOCKING: not the legacy default stream
    assert contexts == [[0xC0 + 3]] * 3  # device 3's primary context was current for every launch
    assert lib.calls["cuCtxSynchronize"] == 1  # the inputs were ready before the first launch
    assert_all_freed(lib)


# ---- failures: one TimerError, everything freed ----------------------------------------------------
@pytest.mark.parametrize("options,message", [
    (dict(fail={"cuGraphLaunch": 700}),
     "cuGraphLaunch failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"),
    (dict(invalidate_capture=True), "cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    (dict(misroute=True), "the captured graph is empty: the launches did not go to the timer's stream"),
    (dict(fail={"cuEventElapsedTime": 999}), "cuEventElapsedTime failed: CUDA error 999"),
    (dict(fail={"cuStreamCreate": 1}), "cuStreamCreate failed: CUDA_ERROR_INVALID_VALUE: invalid argument"),
], ids=["faulting kernel", "capture invalidated", "launches elsewhere", "unknown code", "no stream"])
def test_a_cuda_failure_is_one_timer_error_and_nothing_is_left_behind(monkeypatch, options, message):
    lib = fake_cuda.install(monkeypatch, **options)
    with pytest.raises(TimerError) as err:
        timer.time_launches(kernel(lib, 0.01), on_stream=on_stream([]), number=20, repeat=3, min_repeat_ms=1)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert_all_freed(lib)


@pytest.mark.parametrize("when,step", [(1, "a warm-up launch"), (4, "a launch under capture")])
def test_a_launch_that_raises_is_one_timer_error_naming_the_step(lib, when, step):
    calls = []

    def launch():
        calls.append(1)
        if len(calls) == when:
            raise RuntimeError("CUDA: an illegal memory access was encountered\n(traceback lines)")
        lib.launch(0.01)

    with pytest.raises(TimerError) as err:
        timer.time_launches(launch, on_stream=on_stream([]), warmup=2, number=5, repeat=3)
    assert str(err.value) == f"{step} failed: RuntimeError: (traceback lines)"
    assert isinstance(err.value.__cause__, RuntimeError)  # the original, for a debugger
    assert_all_freed(lib)  # a capture under way was ended


def test_no_cuda_driver_is_one_timer_error(monkeypatch):
    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    timer._cuda_driver.cache_clear()
    monkeypatch.setattr(timer.ctypes, "CDLL", no_library)
    try:
        with pytest.raises(TimerError, match=r"^no CUDA driver here \(libcuda.so.1: libcuda.so.1: cannot open"):
            timer.time_launches(lambda: None, on_stream=on_stream([]))
    finally:
        timer._cuda_driver.cache_clear()


@pytest.mark.parametrize("options,message", [
    (dict(number=0), "number must be an integer >= 1, got 0"),
    (dict(repeat=2.0), "repeat must be an integer >= 1, got 2.0"),
    (dict(warmup=-1), "warmup must be an integer >= 0, got -1"),
    (dict(min_repeat_ms=math.nan), "min_repeat_ms must be a finite number >= 0, got nan"),
    (dict(min_repeat_ms=True), "min_repeat_ms must be a finite number >= 0, got True"),
])
def test_bad_options_are_one_line_before_anything_runs(lib, options, message):
    with pytest.raises(ValueError, match=f"^timer: {message}$"):
        timer.time_launches(lambda: pytest.fail("launched"), on_stream=on_stream([]), **options)
    assert lib.calls["cuStreamCreate"] == 0


# ---- TVM: its stream, and the global function an RPC server runs ----------------------------------
def test_tvm_functions_launch_on_the_timers_stream(lib):
    dev = tvm.cpu(0)
    streams = []

    def func(a, b):  # stands in for a TVM function: where would TVM launch it?
        streams.append(tvm_ffi.get_raw_stream(dev))
        lib.launch(0.02 if (a, b) == (1, 2) else 1.0)

    times = timer.time_function(func, dev, [1, 2], warmup=1, number=4, repeat=3)
    assert times == pytest.approx([2e-5] * 3)
    assert len(set(streams)) == 1 and streams[0] in lib.stream_flags  # the timer's stream
    assert tvm_ffi.get_raw_stream(dev) != streams[0]  # and only while it timed


def _cpu_add_one(n=256):
    from tvm import te

    a = te.placeholder((n,), "float32", name="a")
    b = te.compute((n,), lambda i: a[i] + 1.0, name="b")
    return tvm.compile(te.create_prim_func([a, b]), target=tvm.target.Target({"kind": "llvm"}))


def test_the_registered_global_function_times_a_module_where_it_is(monkeypatch):
    """What an RPC server's session runs (``rpc_runner`` calls it through the session): here
    through TVM's FFI in this process, on a host clock, with a real CPU module."""
    clock = fake_cuda.HostClock()
    monkeypatch.setattr(timer, "driver", lambda: clock)
    timer.register()
    function = tvm_ffi.get_global_func(timer.TIME_FUNCTION)
    executable = _cpu_add_one()
    dev = tvm.cpu(0)
    a = tvm.runtime.tensor(np.arange(256, dtype="float32"), device=dev)
    b = tvm.runtime.empty((256,), "float32", device=dev)
    costs = timer.time_remote(function, executable.mod, "main", dev, [a, b], warmup=1, number=3, repeat=4,
                              min_repeat_ms=0)
    assert len(costs) == 4 and all(0 < c < 0.1 for c in costs)
    np.testing.assert_array_equal(b.numpy(), np.arange(256) + 1)  # it ran the module's function
    assert json.loads(function(executable.mod, "main", dev, 0, 1, 2, 0.0, a, b)).__len__() == 2
    with pytest.raises(ValueError, match="^timer: repeat must be"):
        timer.time_remote(function, executable.mod, "main", dev, [a, b], repeat=0)


def test_a_context_that_cannot_be_made_current_is_released_again(monkeypatch):
    lib = fake_cuda.install(monkeypatch, fail={"cuCtxPushCurrent_v2": 1})
    with pytest.raises(TimerError, match="^cuCtxPushCurrent_v2 failed: CUDA_ERROR_INVALID_VALUE"):
        timer.time_launches(lambda: None, on_stream=on_stream([]))
    assert_all_freed(lib)
    assert lib.calls["cuStreamCreate"] == 0
