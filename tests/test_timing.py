"""The timing code every figure rests on, without a GPU: the baseline's timing
(``baseline.time_torch``) and our kernels' (``Kernel.time``), both the one timer
(``backends.cuda.timer``) on a simulated CUDA driver (``fake_cuda``), the benchmark's
check-then-time of our kernels (on the CPU device here), ``benchmark.benchmark``'s rows, and the
re-timing that nightly reports and merges (``autotune.time_configs``, ``retime_against_default``,
``nightly.run_nightly``)."""

import inspect
import logging
import sys
from dataclasses import replace

import numpy as np
import pytest
import tvm

import fake_cuda
from synthetic import SyntheticMeasurer
from tc_autotune.api.kernel import Kernel
from tc_autotune.tuning import autotune, benchmark, nightly
from tc_autotune.measure import baseline, checked_timing
from tc_autotune.database import records
from tc_autotune.core import tasks
from tc_autotune import workloads
from tc_autotune.backends.cuda import timer
from tc_autotune.backends.cuda.gpu import GpuInfo, default_gpu
from tc_autotune.core.results import CUDA_TIMER, MeasureResult

WL = workloads.get("n=1,h=8,c=16,k=16,r=3,pad=1")


@pytest.fixture
def cuda(monkeypatch):
    """The simulated CUDA driver under the timer, and the fake torch (with that GPU) in
    sys.modules; our kernels' TVM tensors live on the CPU device."""
    lib = fake_cuda.install(monkeypatch)
    monkeypatch.setitem(sys.modules, "torch", fake_cuda.fake_torch(lib))
    monkeypatch.setattr(tvm, "cuda", lambda index=0: tvm.cpu(index))
    return lib


@pytest.fixture
def no_torch(cuda, monkeypatch):
    """No PyTorch GPU: no baseline; our kernels are timed all the same."""
    monkeypatch.setattr(baseline, "available", lambda: False)
    return cuda


class Launches:
    """A ``run()`` of a kernel taking ``ms`` per launch on the fake GPU; counts its calls."""

    def __init__(self, cuda, ms):
        self.cuda, self.ms, self.calls = cuda, ms, 0

    def __call__(self):
        self.calls += 1
        self.cuda.launch(self.ms)


# ---- baseline.time_torch: the cuDNN/cuBLAS side of every ratio ----------------------------------
@pytest.mark.parametrize("ms,captured", [(0.01, [20, 1000]), (5.0, [20]), (1e-6, [20, 4096])],
                         ids=["10 us: 1000 launches fill 10 ms", "5 ms: 20 already do", "1 ns: capped at 4096"])
def test_the_baseline_fills_each_repeat_and_divides_by_its_launches(cuda, ms, captured):
    run = Launches(cuda, ms)
    times = baseline.time_torch(run, number=20, repeat=7, warmup=3, min_repeat_ms=10)
    assert times == pytest.approx([ms / 1e3] * 7)  # seconds per launch, one entry per kept repeat
    # warm-up, then each graph's launches (the first sized the repeat); the first timed replay dropped
    assert run.calls == 3 + sum(captured) and cuda.captured == captured
    assert cuda.replays == len(captured) + 7 + 1
    # PyTorch launched on the timer's stream (ExternalStream: cuDNN and cuBLAS take torch's current one)
    assert sys.modules["torch"].cuda.streams == list(cuda.stream_flags) and cuda.alive() == []


def test_without_a_minimum_the_repeat_is_number_launches(cuda):
    run = Launches(cuda, 0.01)
    assert baseline.time_torch(run, number=20, repeat=5, warmup=10) == pytest.approx([1e-5] * 5)
    assert run.calls == 10 + 20


def test_where_capture_fails_the_baseline_is_one_timer_error(monkeypatch):
    """(It used to fall back to eager launches with a warning: figures of another timer under
    this one's name.)"""
    lib = fake_cuda.install(monkeypatch, invalidate_capture=True)
    monkeypatch.setitem(sys.modules, "torch", fake_cuda.fake_torch(lib))
    run = Launches(lib, 0.05)
    with pytest.raises(timer.TimerError, match="^cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"):
        baseline.time_torch(run, number=20, repeat=4, warmup=2, min_repeat_ms=10)
    assert run.calls == 2 + 20 and lib.alive() == [] and not lib.capturing  # nothing timed, all freed


def test_the_baseline_is_timed_only_when_its_output_is_right(cuda, monkeypatch):
    reference = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    timed = []
    monkeypatch.setattr(baseline, "time_torch", lambda run, **options: timed.append(run) or [3e-5, 1e-5, 2e-5])
    run = Launches(cuda, 0.02)
    assert baseline._checked_time((run, reference * 1.001), reference, 20, 3, 10) == (2e-5, pytest.approx(1e-3, rel=1e-3))
    seconds, err = baseline._checked_time((run, reference * 1.5), reference, 20, 3, 10)
    assert seconds is None and err == pytest.approx(0.5) and timed == [run]  # the wrong one was not timed
    nan = reference.copy()
    nan[1, 1] = np.nan
    assert baseline._checked_time((run, nan), reference, 20, 3, 10) == (None, float("inf"))


# ---- checked_timing.checked_kernel_time: our side -----------------------------------------------
class FakeKernel:
    """A 'built kernel' of WL: called, it writes its reference (times ``1 + error``; None: writes
    nothing) into ``out``; its host function (what ``Kernel.time`` times: the real one) launches
    ``seconds`` on the fake GPU.  Counts its checked runs and its timed launches."""

    time = Kernel.time  # the real timing path: the timer on the kernel's function, workspaces appended

    def __init__(self, seconds, error=0.0, config="cfg", cuda=None):
        self.seconds, self.error, self.config, self.cuda = seconds, error, config, cuda
        self.runs = self.launches = 0

    def __call__(self, *args):
        self.runs += 1
        *inputs, out = args  # TVM tensors
        if self.error is not None:
            ref = tasks.of(WL).reference(WL, *(a.numpy() for a in inputs)) * (1 + self.error)
            out.copyfrom(ref.astype(out.dtype))

    def _function(self):
        def main(*args):
            assert len(args) == 3  # data, weight, out: no workspaces
            self.launches += 1
            self.cuda.launch(self.seconds * 1e3)
        return main

    def _extra_args(self, dev):
        return ()


def test_a_kernel_is_checked_then_timed_by_the_one_timer(no_torch):
    arrays = checked_timing.task_arrays(WL)
    right = FakeKernel(1e-5, error=1e-4, cuda=no_torch)
    seconds, err = checked_timing.checked_kernel_time(right, WL, *arrays, number=20, repeat=5, min_repeat_ms=0)
    assert seconds == pytest.approx(1e-5) and err == pytest.approx(1e-4, rel=1e-2)
    assert right.runs == 1 and right.launches == 10 + 20  # the checked run; the timer's warm-up and graph
    for wrong in (FakeKernel(1e-6, error=0.02, cuda=no_torch), FakeKernel(1e-6, error=None, cuda=no_torch)):
        seconds, err = checked_timing.checked_kernel_time(wrong, WL, *arrays, repeat=5)  # off by 2%; writes nothing
        assert seconds is None and err > 0.0199 and wrong.launches == 0 and wrong.runs == 1
    assert checked_timing.checked_kernel_time(FakeKernel(1e-6, error=None, cuda=no_torch), WL, *arrays)[1] == float("inf")


def test_our_kernel_is_timed_as_the_baseline_is(cuda, monkeypatch):
    """Ours and the baseline go through the same ``timer.time_launches`` with the same options
    (benchmark 26e: TVM's eager launches added 1-3 us a call; now neither side launches eagerly)."""
    calls = []
    real = timer.time_launches

    def spy(launch, **options):  # notes every option, defaults filled in
        bound = inspect.signature(real).bind(launch, **options)
        bound.apply_defaults()
        calls.append({k: v for k, v in bound.arguments.items() if k not in ("launch", "on_stream")})
        return real(launch, **options)

    monkeypatch.setattr(timer, "time_launches", spy)
    arrays = checked_timing.task_arrays(WL)
    kernel = FakeKernel(2e-5, cuda=cuda)
    seconds, err = checked_timing.checked_kernel_time(kernel, WL, *arrays, number=20, repeat=9, min_repeat_ms=10)
    assert seconds == pytest.approx(2e-5) and err < 1e-6
    assert cuda.captured == [20, 500] and cuda.replays == 2 + 9 + 1  # 10 ms of 20-us launches
    assert kernel.runs == 1 and kernel.launches == 10 + 20 + 500  # checked run; warm-up, both graphs
    baseline._checked_time((Launches(cuda, 0.02), np.ones(3)), np.ones(3), 20, 9, 10)
    ours, theirs = calls
    assert ours == theirs == dict(device=0, warmup=10, number=20, repeat=9, min_repeat_ms=10)
    wrong = FakeKernel(2e-5, error=0.5, cuda=cuda)
    assert checked_timing.checked_kernel_time(wrong, WL, *arrays)[0] is None and wrong.runs == 1 and wrong.launches == 0


# ---- benchmark.benchmark: the rows of the table -------------------------------------------------
def test_benchmark_rows_time_default_applied_and_baseline_on_the_same_inputs(no_torch, monkeypatch, tmp_path):
    default, logged, log = _a_logged_config(tmp_path)
    built, inputs = [], []

    def build(workload, config, pdl=False):
        assert not pdl
        built.append(config)
        return FakeKernel(3e-5 if config == default else 1e-5, config=config, cuda=no_torch)

    def cudnn(workload, *arrays, **timing):
        inputs.append(arrays)
        return 2e-5, 1e-4

    monkeypatch.setattr(benchmark, "build", build)
    _baselines_are(monkeypatch, cudnn)
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", "")
    (row,) = benchmark.benchmark([str(WL)], logs=[log], repeat=3)
    assert built == [default, logged] and row.tuned_config == logged.as_dict() and row.tuned_source == "record"
    assert row.default_s == pytest.approx(3e-5) and row.tuned_s == pytest.approx(1e-5)
    assert row.baseline_s is None and row.timer == CUDA_TIMER  # no PyTorch GPU here: no baseline
    monkeypatch.setattr(baseline, "available", lambda: True)  # with PyTorch on a GPU: the baseline too
    built.clear()
    replays = no_torch.replays
    (row,) = benchmark.benchmark([str(WL)], repeat=3)  # no log: the applied config is the default
    assert built == [default] and row.tuned_source == "default" and row.baseline_s == 2e-5
    assert row.as_dict()["baseline"] == "cuDNN" and "cudnn_s" not in row.as_dict()
    # timed once: a 20-launch graph sized the repeat, a 334-launch one filled it, 3 + 1 timed replays
    assert row.tuned_s == row.default_s == pytest.approx(3e-5) and no_torch.replays - replays == 2 + 3 + 1
    assert len(inputs) == 1 and np.array_equal(inputs[0][-1], checked_timing.task_arrays(WL)[-1])  # same reference


def test_benchmark_with_pdl_times_pdl_builds_of_both_configs_and_says_so(no_torch, monkeypatch, tmp_path):
    default, logged, log = _a_logged_config(tmp_path)
    built = []

    def build(workload, config, pdl=False):
        built.append((config, pdl))
        return FakeKernel(3e-5 if config == default else 1e-5, config=config, cuda=no_torch)

    monkeypatch.setattr(benchmark, "build", build)
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", "")
    (row,) = benchmark.benchmark([str(WL)], logs=[log], repeat=3, pdl=True)
    assert built == [(default, True), (logged, True)] and row.pdl and row.tuned_s == pytest.approx(1e-5)
    assert benchmark.BenchRow.from_dict(row.as_dict()).pdl
    assert benchmark.markdown_table([row]).startswith("Ours built with PDL")
    plain = replace(row, pdl=False)
    assert "PDL" not in benchmark.markdown_table([plain])


def _a_logged_config(tmp_path):
    """(the default config, another config, a log holding one record of the other)."""
    space = tasks.of(WL).space(WL, default_gpu())
    default = space.default_config()
    logged = next(c for c in space.sample(50, seed=1) if c != default)
    log = tmp_path / "log.jsonl"
    records.append(log, [records.stamped("cuda -arch=sm_90", space, logged, MeasureResult((1e-5,)),
                                         records.make_provenance(space.gpu))])
    return default, logged, log


def _baselines_are(monkeypatch, timed) -> None:
    """Every task's baseline is ``timed`` (the package face binds the real ones: ``tasks.use_baseline``)."""
    for name in tasks.names():
        monkeypatch.setitem(tasks._BASELINES, name, timed)


# ---- the re-timing nightly reports and merges (autotune.retime_against_default) ------------------
@pytest.fixture
def retiming(cuda, monkeypatch):
    """Builds of fake kernels on the fake GPU, a baseline of 2e-5 s, and what they saw."""
    # seconds: config -> its kernel's time (or "wrong"); other: any other config's time
    seen = {"built": [], "baseline": [], "seconds": {}, "other": 1e-5}

    def build(workload, config):
        seen["built"].append(config)
        seconds = seen["seconds"].get(config, seen["other"])
        return FakeKernel(1e-5 if seconds == "wrong" else seconds, error=0.5 if seconds == "wrong" else 0.0,
                          config=config, cuda=cuda)

    def cudnn(workload, *arrays, **timing):
        seen["baseline"].append(arrays)
        return 2e-5, 1e-4

    monkeypatch.setattr(autotune, "build", build)
    _baselines_are(monkeypatch, cudnn)
    return seen


def test_retiming_times_each_distinct_config_once_beside_the_baseline_on_the_same_inputs(retiming, caplog):
    space = tasks.of(WL).space(WL, default_gpu())
    default = space.default_config()
    tuned, wrong = [c for c in space.sample(20, seed=2) if c != default][:2]
    retiming["seconds"].update({default: 3e-5, tuned: 1e-5})
    # ours are timed by the one timer, as the baseline is, and the figures say so
    assert autotune.retime_against_default(WL, tuned, repeat=5) == autotune.Retimed(
        pytest.approx(1e-5), pytest.approx(3e-5), 2e-5, timer=CUDA_TIMER)
    assert retiming["built"] == [tuned, default]
    (arrays,) = retiming["baseline"]  # the baseline ran on the inputs ours ran on (seed 1)
    assert all(np.array_equal(a, b) for a, b in zip(arrays, checked_timing.task_arrays(WL, seed=1)))
    retiming["built"].clear()
    timed, baseline_s = autotune.time_configs(WL, {"tuned": default, "default": default}, repeat=5)
    assert timed == {"tuned": pytest.approx(3e-5), "default": pytest.approx(3e-5)} and len(retiming["built"]) == 1
    assert baseline_s == 2e-5
    retiming["seconds"][wrong] = "wrong"
    with caplog.at_level(logging.ERROR, logger="tc_autotune.tuning.autotune"):
        timed, _ = autotune.time_configs(WL, {"tuned": wrong, "default": default}, repeat=5)
    assert timed["tuned"] is None and timed["default"] == pytest.approx(3e-5)
    assert "gives a wrong result" in caplog.text


def test_nightly_re_times_with_the_real_retiming_and_records_it(retiming, tmp_path, monkeypatch):
    """The re-time pass as nightly runs it (``retime`` not replaced): the best and the default
    are timed, the figures reach the report and the log, and a slowdown is confirmed by a second
    re-timing before it counts as a regression."""
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", "")
    gpu = GpuInfo(name="Synthetic GPU", arch="sm_90", sm_count=132)
    path = tmp_path / "job.toml"
    path.write_text(f'log = "n.jsonl"\nreport_dir = "reports"\nbest_log_dir = "best"\ntrials = 16\n'
                    f'workloads = [{{ name = "{WL}" }}]\n')
    job = nightly.load_job(path)
    default = tasks.of(WL).space(WL, default_gpu()).default_config()
    retiming["seconds"][default] = 3e-5
    (row,) = nightly.run_nightly(job, gpu=gpu, measurer_factory=SyntheticMeasurer).rows
    assert (row.status, row.retimed_s, row.default_s, row.baseline_s) == ("ok", pytest.approx(1e-5),
                                                                          pytest.approx(3e-5), 2e-5)
    assert row.timer == CUDA_TIMER
    best_config = records.load_best(job.log, WL)[0]
    assert len(retiming["built"]) == 2 and set(retiming["built"]) == {default, best_config}
    retimes = [r for r in records.load(job.log) if r.result.error_msg == "nightly re-time"]
    assert sorted(r.result.seconds for r in retimes) == pytest.approx([1e-5, 3e-5])
    assert {r.timer for r in records.load(job.log)} == {CUDA_TIMER}  # the tuner's and the re-times' alike
    # the next night the best runs 1.5x slower: confirmed by a second re-timing, a regression
    # (the default, unchanged, is re-timed beside it)
    retiming["built"].clear()
    retiming["other"] = 1.5e-5  # whichever config is the best by then
    (row,) = nightly.run_nightly(job, gpu=gpu, measurer_factory=SyntheticMeasurer).rows
    assert row.status == "regression" and row.retimed_s == pytest.approx(1.5e-5)
    assert row.previous_s == pytest.approx(1e-5) and len(retiming["built"]) == 4  # re-timed twice
