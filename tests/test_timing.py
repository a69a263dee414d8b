"""The timing code every figure rests on, without a GPU: the baseline's CUDA-graph timing
(``baseline.time_launches``) on a simulated GPU clock (``fake_cuda``), the benchmark's
check-then-time of our kernels (TVM's time_evaluator path on the CPU device, the graph path on the
fake clock), ``benchmark.benchmark``'s rows, and the re-timing that nightly reports and merges
(``autotune.time_configs``, ``retime_against_default``, ``nightly.run_nightly``)."""

import logging
import sys

import numpy as np
import pytest
import tvm

import fake_cuda
from synthetic import SyntheticMeasurer
from tc_autotune.tuning import autotune, benchmark, nightly
from tc_autotune.measure import baseline
from tc_autotune.database import records
from tc_autotune.core import tasks
from tc_autotune.workloads import conv2d as workloads
from tc_autotune.backends.cuda.gpu import GpuInfo
from tc_autotune.core.results import CUDA_GRAPH, MeasureResult

WL = workloads.get("n=1,h=8,c=16,k=16,r=3,pad=1")


@pytest.fixture
def cuda(monkeypatch):
    """The fake torch, with its simulated GPU, in sys.modules."""
    gpu = fake_cuda.FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", fake_cuda.fake_torch(gpu))
    return gpu


class Launches:
    """A ``run()`` of a kernel taking ``ms`` per launch on the fake GPU; counts its calls."""

    def __init__(self, cuda, ms):
        self.cuda, self.ms, self.calls = cuda, ms, 0

    def __call__(self):
        self.calls += 1
        self.cuda.launch(self.ms)


# ---- baseline.time_launches: the cuDNN side of every ratio (and ours, with PyTorch) ---------------
@pytest.mark.parametrize("ms,number", [(0.01, 1000), (5.0, 20), (1e-6, 4096)],
                         ids=["10 us: 1000 launches fill 10 ms", "5 ms: 20 already do", "1 ns: capped at 4096"])
def test_graph_timing_fills_each_repeat_and_divides_by_its_launches(cuda, ms, number):
    run = Launches(cuda, ms)
    times = baseline.time_launches(run, number=20, repeat=7, warmup=3, min_repeat_ms=10)
    assert times == pytest.approx([ms / 1e3] * 7)  # seconds per launch, one entry per repeat
    # warm-up, the 20 launches that measure a launch, then one graph of `number` launches
    assert run.calls == 3 + 20 + number and cuda.captures == 1
    assert cuda.replays == 1 + 7  # one untimed replay, then the timed ones


def test_without_a_minimum_the_repeat_is_number_launches(cuda):
    run = Launches(cuda, 0.01)
    assert baseline.time_launches(run, number=20, repeat=5, warmup=10) == pytest.approx([1e-5] * 5)
    assert run.calls == 10 + 20


def test_where_capture_fails_eager_launches_are_timed_with_a_warning(monkeypatch, caplog):
    gpu = fake_cuda.FakeCuda(fail_capture=True)
    monkeypatch.setitem(sys.modules, "torch", fake_cuda.fake_torch(gpu))
    run = Launches(gpu, 0.05)
    with caplog.at_level(logging.WARNING, logger="tc_autotune.measure.baseline"):
        times = baseline.time_launches(run, number=20, repeat=4, warmup=2, min_repeat_ms=10)
    assert times == pytest.approx([5e-5] * 4)
    assert run.calls == 2 + 20 + (1 + 4) * 200  # each repeat launches all 200 itself
    assert "CUDA graph capture failed" in caplog.text and "eager" in caplog.text


def test_the_baseline_is_timed_only_when_its_output_is_right(cuda, monkeypatch):
    reference = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    timed = []
    monkeypatch.setattr(baseline, "time_launches", lambda run, *a, **k: timed.append(run) or [3e-5, 1e-5, 2e-5])
    run = Launches(cuda, 0.02)
    assert baseline._checked_time((run, reference * 1.001), reference, 20, 3, 10) == (2e-5, pytest.approx(1e-3, rel=1e-3))
    seconds, err = baseline._checked_time((run, reference * 1.5), reference, 20, 3, 10)
    assert seconds is None and err == pytest.approx(0.5) and timed == [run]  # the wrong one was not timed
    nan = reference.copy()
    nan[1, 1] = np.nan
    assert baseline._checked_time((run, nan), reference, 20, 3, 10) == (None, float("inf"))


# ---- benchmark.checked_kernel_time: our side -------------------------------------------------------
class FakeKernel:
    """A 'built kernel' of WL: writes its reference (times ``1 + error``; None: writes nothing) into
    ``out``; TVM's ``time_evaluator`` gives ``seconds`` per repeat; on the fake GPU a launch
    takes ``seconds``.  Counts what it is asked."""

    def __init__(self, seconds, error=0.0, config="cfg", cuda=None):
        self.seconds, self.error, self.config, self.cuda = seconds, error, config, cuda
        self.runs = self.evaluated = 0

    def _compute(self, inputs, out):
        self.runs += 1
        if self.cuda is not None:
            self.cuda.launch(self.seconds * 1e3)
        if self.error is None:
            return
        ref = tasks.of(WL).reference(WL, *inputs) * (1 + self.error)
        return ref.astype(out.dtype)

    def __call__(self, *args, out=None):
        if out is not None:  # torch tensors (the graph path)
            result = self._compute([a.numpy() for a in args], out.array)
            if result is not None:
                out.array[...] = result
            return
        *inputs, out = args  # TVM tensors (time_evaluator's path)
        result = self._compute([a.numpy() for a in inputs], out.numpy())
        if result is not None:
            out.copyfrom(result)

    def time_evaluator(self, number, repeat, min_repeat_ms):
        def evaluate(*args):
            self.evaluated += 1
            return type("Result", (), {"results": [self.seconds * (1 + 0.1 * i) for i in range(repeat)]})()
        return evaluate


@pytest.fixture
def cpu_device(monkeypatch):
    """No PyTorch GPU: kernels are timed with TVM's time_evaluator, on the CPU device here."""
    monkeypatch.setattr(baseline, "available", lambda: False)
    monkeypatch.setattr(benchmark.tvm, "cuda", lambda index=0: tvm.cpu(index))


def test_a_kernel_is_checked_then_timed_by_the_time_evaluator(cpu_device):
    arrays = benchmark.task_arrays(WL)
    right = FakeKernel(1e-5, error=1e-4)
    seconds, err = benchmark.checked_kernel_time(right, WL, *arrays, repeat=5)
    assert seconds == pytest.approx(1.2e-5) and err == pytest.approx(1e-4, rel=1e-2)  # median of 5
    assert right.evaluated == 1 and right.runs == 1 + 3  # the checked run, then 3 warm-up launches
    for wrong in (FakeKernel(1e-6, error=0.02), FakeKernel(1e-6, error=None)):  # off by 2%; writes nothing
        seconds, err = benchmark.checked_kernel_time(wrong, WL, *arrays, repeat=5)
        assert seconds is None and err > 0.0199 and wrong.evaluated == 0 and wrong.runs == 1
    assert benchmark.checked_kernel_time(FakeKernel(1e-6, error=None), WL, *arrays)[1] == float("inf")


def test_with_pytorch_our_kernel_is_timed_like_the_baseline(cuda):
    """Where PyTorch runs, our launches are replayed from a CUDA graph too (benchmark 26e: TVM's
    eager launches add 1-3 us a call): the same time_launches, the same per-launch figure."""
    arrays = benchmark.task_arrays(WL)
    kernel = FakeKernel(2e-5, cuda=cuda)
    seconds, err = benchmark.checked_kernel_time(kernel, WL, *arrays, number=20, repeat=9, min_repeat_ms=10)
    assert seconds == pytest.approx(2e-5) and err < 1e-6
    assert kernel.evaluated == 0 and cuda.captures == 1 and cuda.replays == 1 + 9
    assert kernel.runs == 1 + 10 + 20 + 500  # checked run, warm-up, launch measure, 10 ms of 20-us launches
    wrong = FakeKernel(2e-5, error=0.5, cuda=cuda)
    assert benchmark.checked_kernel_time(wrong, WL, *arrays)[0] is None and wrong.runs == 1


# ---- benchmark.benchmark: the rows of the table -------------------------------------------------
def test_benchmark_rows_time_default_applied_and_baseline_on_the_same_inputs(cpu_device, monkeypatch, tmp_path):
    space = tasks.of(WL).space(WL)
    default = space.default_config()
    logged = next(c for c in space.sample(50, seed=1) if c != default)
    log = tmp_path / "log.jsonl"
    records.append(log, [records.Record.from_measurement("cuda -arch=sm_90", space, logged, MeasureResult((1e-5,)),
                                                         records.make_provenance(space.gpu))])
    built, inputs, gpu = [], [], []  # gpu: the fake PyTorch GPU, once there is one

    def build(workload, config):
        built.append(config)
        return FakeKernel(3e-5 if config == default else 1e-5, config=config, cuda=gpu[0] if gpu else None)

    def cudnn(workload, *arrays, **timing):
        inputs.append(arrays)
        return 2e-5, 1e-4

    monkeypatch.setattr(benchmark, "build", build)
    _baselines_are(monkeypatch, cudnn)
    monkeypatch.setenv("TC_AUTOTUNE_SHIPPED_LOGS", "")
    (row,) = benchmark.benchmark([str(WL)], logs=[log], repeat=3)
    assert built == [default, logged] and row.tuned_config == logged.as_dict() and row.tuned_source == "record"
    assert row.default_s == pytest.approx(3.3e-5) and row.tuned_s == pytest.approx(1.1e-5)
    assert row.cudnn_s is None  # no PyTorch GPU here: no baseline
    gpu.append(fake_cuda.FakeCuda())  # with PyTorch on a GPU: the baseline too, ours graph-timed
    monkeypatch.setitem(sys.modules, "torch", fake_cuda.fake_torch(gpu[0]))
    monkeypatch.setattr(baseline, "available", lambda: True)
    built.clear()
    (row,) = benchmark.benchmark([str(WL)], repeat=3)  # no log: the applied config is the default
    assert built == [default] and row.tuned_source == "default" and row.cudnn_s == 2e-5
    assert row.tuned_s == row.default_s == pytest.approx(3e-5) and gpu[0].replays == 1 + 3  # timed once
    assert len(inputs) == 1 and np.array_equal(inputs[0][-1], benchmark.task_arrays(WL)[-1])  # same reference


def _baselines_are(monkeypatch, timed) -> None:
    """Every task's baseline is ``timed`` (the package face binds the real ones: ``tasks.use_baseline``)."""
    for name in tasks.names():
        monkeypatch.setitem(tasks._BASELINES, name, timed)


# ---- the re-timing nightly reports and merges (autotune.retime_against_default) ------------------
@pytest.fixture
def retiming(cuda, monkeypatch):
    """Builds of fake kernels on the fake PyTorch GPU, a baseline of 2e-5 s, and what they saw."""
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
    space = tasks.of(WL).space(WL)
    default = space.default_config()
    tuned, wrong = [c for c in space.sample(20, seed=2) if c != default][:2]
    retiming["seconds"].update({default: 3e-5, tuned: 1e-5})
    # with PyTorch on the GPU, ours are replayed from CUDA graphs as the baseline is, and say so
    assert autotune.retime_against_default(WL, tuned, repeat=5) == autotune.Retimed(
        pytest.approx(1e-5), pytest.approx(3e-5), 2e-5, timer=CUDA_GRAPH)
    assert retiming["built"] == [tuned, default]
    (arrays,) = retiming["baseline"]  # the baseline ran on the inputs ours ran on (seed 1)
    assert all(np.array_equal(a, b) for a, b in zip(arrays, benchmark.task_arrays(WL, seed=1)))
    retiming["built"].clear()
    timed, cudnn_s = autotune.time_configs(WL, {"tuned": default, "default": default}, repeat=5)
    assert timed == {"tuned": pytest.approx(3e-5), "default": pytest.approx(3e-5)} and len(retiming["built"]) == 1
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
    default = tasks.of(WL).space(WL).default_config()
    retiming["seconds"][default] = 3e-5
    (row,) = nightly.run_nightly(job, gpu=gpu, measurer_factory=SyntheticMeasurer).rows
    assert (row.status, row.retimed_s, row.default_s, row.cudnn_s) == ("ok", pytest.approx(1e-5), pytest.approx(3e-5),
                                                                       2e-5)
    best_config = records.load_best(job.log, WL)[0]
    assert len(retiming["built"]) == 2 and set(retiming["built"]) == {default, best_config}
    retimes = [r for r in records.load(job.log) if r.result.error_msg == "nightly re-time"]
    assert sorted(r.result.seconds for r in retimes) == pytest.approx([1e-5, 3e-5])
    # the next night the best runs 1.5x slower: confirmed by a second re-timing, a regression
    # (the default, unchanged, is re-timed beside it)
    retiming["built"].clear()
    retiming["other"] = 1.5e-5  # whichever config is the best by then
    (row,) = nightly.run_nightly(job, gpu=gpu, measurer_factory=SyntheticMeasurer).rows
    assert row.status == "regression" and row.retimed_s == pytest.approx(1.5e-5)
    assert row.previous_s == pytest.approx(1e-5) and len(retiming["built"]) == 4  # re-timed twice
