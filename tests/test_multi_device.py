"""Measuring on several devices: scheduling over fake runners (one dies mid-batch, one hangs),
the pipeline (the next batch builds while this one runs; every finished result is logged after
an interrupt or the loss of every device), the exit code when every device is lost, the device
each record names, and the RPC runner end to end through a real TVM tracker and server on
localhost (its device is the server's CPU, with a CPU kernel and a CPU output checker: no GPU
here), with the bytes it sends counted by a proxy."""

import _thread
import concurrent.futures as cf
import json
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from command_paths import run_completed, start_python

from tc_autotune.tuning import autotune
from tc_autotune import conv2d_space
from tc_autotune.database import records
from tc_autotune import workloads
from tc_autotune.measure.devices import LocalDevice, RpcDevice, choose_local, parse_indices
from tc_autotune.measure.dispatch import AllDevicesLost, RunnerFault
from tc_autotune.backends.cuda.gpu import GpuInfo, gpu_for_arch
from tc_autotune.measure.measurer import LocalMeasurer, MeasureErrorNo, MeasureOptions
from tc_autotune.templates.tc_gemm.workspaces import workspaces
from tc_autotune.core.results import CUDA_TIMER

ROOT = Path(__file__).resolve().parent.parent
SMALL = workloads.get("n=2,h=14,c=64,k=64,r=1")
GPU = gpu_for_arch("sm_90")


class FakeRunner:
    """Returns a time that depends on the kernel file; can die (RunnerFault) or hang after some runs."""

    def __init__(self, label, die_after=None, hang_after=None, delay=0.02):
        self.label, self.die_after, self.hang_after, self.delay = label, die_after, hang_after, delay
        self.device = GPU
        self.runs, self.stops = [], 0
        self.ended = []  # (build number, time.monotonic()) of each run that returned
        self.release = threading.Event()

    def run(self, so_path, key, tensors):
        if self.die_after is not None and len(self.runs) >= self.die_after:
            raise RunnerFault(f"{self.label} is gone")
        if self.hang_after is not None and len(self.runs) >= self.hang_after:
            self.release.wait(60)
        self.runs.append(so_path)
        time.sleep(self.delay)
        number = int(Path(so_path).stem.split("_")[-1])
        self.ended.append((number, time.monotonic()))
        return "ok", [1e-4 * (1 + number)]

    def stop(self):
        self.stops += 1


def _measurer(tmp_path, runners, monkeypatch, hang_timeout=None, builds=None):
    """A LocalMeasurer whose builds are instant fakes (a file per config, numbered in submission
    order; ``builds`` gets the time.monotonic() of each) and whose runners are ``runners``."""
    space = conv2d_space(SMALL, GPU)
    measurer = LocalMeasurer(space, MeasureOptions(build_workers=1), runners=runners)
    counter = iter(range(10**6))

    def fake_submit(config):
        if builds is not None:
            builds.append(time.monotonic())
        future = cf.Future()
        path = tmp_path / f"kernel_{next(counter)}.so"
        path.write_bytes(b"x")
        future.set_result((str(path), None, 0.01))
        return future

    monkeypatch.setattr(measurer, "_submit", fake_submit)
    if hang_timeout is not None:
        measurer._dispatcher.hang_timeout = hang_timeout
    return measurer


def _configs(n, seed=3):
    return conv2d_space(SMALL, GPU).sample(n, seed=seed)


def test_a_batch_is_spread_over_every_device_and_results_keep_their_order(tmp_path, monkeypatch):
    runners = [FakeRunner("cuda:0 GPU-a"), FakeRunner("cuda:1 GPU-b")]
    with _measurer(tmp_path, runners, monkeypatch) as measure:
        assert measure.n_devices == 2
        results = measure(_configs(12))
    assert [r.seconds for r in results] == [1e-4 * (1 + i) for i in range(12)]  # in submission order
    assert all(r.ok for r in results)
    assert {r.device for r in results} == {"cuda:0 GPU-a", "cuda:1 GPU-b"}
    assert all(runner.runs for runner in runners)


def test_a_device_that_dies_mid_batch_is_dropped_and_its_candidate_measured_elsewhere(tmp_path, monkeypatch,
                                                                                       caplog):
    dying, healthy = FakeRunner("cuda:0", die_after=2), FakeRunner("cuda:1")
    with _measurer(tmp_path, [dying, healthy], monkeypatch) as measure:
        results = measure(_configs(10))
        assert measure.n_devices == 1
        assert all(r.ok for r in results), [r.error_msg for r in results]
        assert [r.seconds for r in results] == [1e-4 * (1 + i) for i in range(10)]
        assert len(dying.runs) == 2 and dying.stops >= 2  # restarted once, then dropped
        assert "dropped after 2 faults" in caplog.text
        later = measure(_configs(3, seed=4))  # the next batch runs on what is left
    assert all(r.ok and r.device == "cuda:1" for r in later)


def test_a_hung_device_is_dropped_and_its_candidate_measured_elsewhere(tmp_path, monkeypatch, caplog):
    hanging, healthy = FakeRunner("cuda:0", hang_after=1), FakeRunner("cuda:1", delay=0.05)
    try:
        with _measurer(tmp_path, [hanging, healthy], monkeypatch, hang_timeout=1.0) as measure:
            results = measure(_configs(8))
            # the batch did not wait for the hung run: it is still hanging (behaviour, no clock)
            assert len(hanging.ended) == 1 and not hanging.release.is_set()
            assert measure.n_devices == 1
    finally:
        hanging.release.set()
    assert all(r.ok for r in results), [r.error_msg for r in results]
    assert sum(r.device == "cuda:0" for r in results) == 1  # its one result before it hung
    assert "hung" in caplog.text


def test_losing_every_device_raises_with_the_finished_results(tmp_path, monkeypatch):
    runners = [FakeRunner("cuda:0", die_after=1), FakeRunner("cuda:1", die_after=2)]
    with _measurer(tmp_path, runners, monkeypatch) as measure:
        with pytest.raises(AllDevicesLost, match="every device is lost") as lost:
            measure(_configs(8))
    finished = [r for r in lost.value.results if r is not None]
    assert len(finished) == 3 and all(r.ok for r in finished)


def test_records_name_their_device_and_survive_losing_every_device(tmp_path, monkeypatch):
    log = tmp_path / "t.jsonl"
    runners = [FakeRunner("cuda:0 GPU-a", die_after=3), FakeRunner("cuda:1 GPU-b", die_after=3)]

    def factory(space, options):
        return _measurer(tmp_path, runners, monkeypatch)

    with pytest.raises(AllDevicesLost):
        autotune.tune_workload(SMALL, 40, log, tuner="random", batch_size=4, seed=0, gpu=GPU,
                               options=MeasureOptions(devices=(LocalDevice(0), LocalDevice(1))),
                               shipped_transfer=False, compare_baseline=False, measurer_factory=factory)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    measured = [line for line in lines if line["result"][1] == MeasureErrorNo.NO_ERROR]
    assert len(measured) == 6  # every finished measurement was written before the run ended
    assert {line["provenance"]["device"] for line in measured} == {"cuda:0 GPU-a", "cuda:1 GPU-b"}
    assert all(line["provenance"]["gpu"] == GPU.name for line in lines)
    # Which candidate each dying runner faults on is a race: when the faults of both land on one
    # candidate (three in all), the dispatcher's max_requeues records it as a run error that says
    # so (dispatch.py: a candidate that takes every device down must not take the run with it).
    blamed = [line for line in lines if line not in measured]
    assert len(blamed) <= 1
    assert all(line["result"][1] == MeasureErrorNo.RUN_ERROR and "the runner failed while measuring it 3 times"
               in line["error_msg"] for line in blamed)
    assert len(list(records.load(log))) == len(lines)  # readable as before: only a provenance field was added


def test_batches_are_sized_to_the_devices(tmp_path, monkeypatch):
    sizes = []
    runners = [FakeRunner("cuda:0"), FakeRunner("cuda:1"), FakeRunner("cuda:2")]

    def factory(space, options):
        measurer = _measurer(tmp_path, runners, monkeypatch)

        class Counting:
            n_devices = 3

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                measurer.close()

            def __call__(self, configs):
                sizes.append(len(configs))
                return measurer(configs)

        return Counting()

    summary = autotune.tune_workload(SMALL, 24, tmp_path / "t.jsonl", tuner="random", batch_size=4, seed=0,
                                     gpu=GPU, shipped_transfer=False, compare_baseline=False,
                                     measurer_factory=factory)
    assert sizes == [12, 12] and summary.devices == 3 and summary.configs_per_minute > 0


# ---- the pipeline: one batch in flight ahead ---------------------------------------------
def _tune(tmp_path, monkeypatch, runners, n_trial=40, builds=None, **kw):
    """tune_workload on SMALL over fake runners, batches of 4 configs per device; the log's lines."""
    log = tmp_path / "t.jsonl"
    measurer = _measurer(tmp_path, runners, monkeypatch, builds=builds)
    summary = autotune.tune_workload(SMALL, n_trial, log, tuner="random", batch_size=4, seed=0, gpu=GPU,
                                     shipped_transfer=False, compare_baseline=False,
                                     measurer_factory=lambda space, options: measurer, **kw)
    return summary, _lines(log)


def _lines(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_next_batch_builds_while_this_one_runs_and_trials_stay_exact(tmp_path, monkeypatch):
    runners = [FakeRunner("cuda:0", delay=0.1), FakeRunner("cuda:1", delay=0.1)]
    builds = []
    summary, lines = _tune(tmp_path, monkeypatch, runners, builds=builds)
    run_ends = dict(end for runner in runners for end in runner.ended)
    batches = [range(start, start + 8) for start in range(0, 40, 8)]  # 4 configs per device
    for batch, following in zip(batches, batches[1:]):
        assert min(builds[n] for n in following) < max(run_ends[n] for n in batch)  # they overlap
    assert summary.trials == len(lines) == len(run_ends) == len(builds) == 40  # never more than --trials
    assert len({line["config"]["index"] for line in lines}) == 40  # no config measured twice
    assert summary.batches and [count for _, count in summary.batches] == [8] * 5


def test_early_stopping_counts_the_configs_in_flight(tmp_path, monkeypatch):
    """Every config after the first is slower (fake times grow with the build number): the search
    stops exactly 10 trials after the first, as a search measuring one batch at a time does."""
    summary, lines = _tune(tmp_path, monkeypatch, [FakeRunner("cuda:0"), FakeRunner("cuda:1")],
                           early_stopping=10)
    assert summary.trials == len(lines) == 11


def test_a_stop_cancels_the_batch_in_flight_and_logs_what_it_finished(tmp_path, monkeypatch, caplog):
    caplog.set_level("INFO")
    summary, lines = _tune(tmp_path, monkeypatch, [FakeRunner("cuda:0"), FakeRunner("cuda:1")], deadline=0.0)
    assert 8 <= summary.trials == len(lines) < 24  # the first batch, and what the next one finished
    assert len({line["config"]["index"] for line in lines}) == len(lines)
    assert "stopped with 8 configs in flight" in caplog.text


def test_an_interrupt_mid_pipeline_keeps_every_finished_result(tmp_path, monkeypatch):
    """Ctrl-C while the second batch runs (the third is queued): the log holds every run that
    finished, those of the batches cut short included."""
    log = tmp_path / "t.jsonl"
    pause, release, trigger = threading.Event(), threading.Event(), threading.Lock()
    parked = []

    class Interrupting(FakeRunner):
        def run(self, so_path, key, tensors):
            if pause.is_set():
                parked.append(self.label)
                release.wait(30)
                return "ok", [1.0]  # too late: its batch was cancelled
            second_batch = sum(len(r.ended) for r in runners) >= 11
            if second_batch and len(_lines(log)) >= 8 and trigger.acquire(blocking=False):
                pause.set()  # the other runner finishes its run, then parks
                deadline = time.time() + 10
                while not parked and time.time() < deadline:
                    time.sleep(0.01)
                _thread.interrupt_main()
                return self.run(so_path, key, tensors)
            return super().run(so_path, key, tensors)

    runners = [Interrupting("cuda:0", delay=0.05), Interrupting("cuda:1", delay=0.05)]
    # interrupt_main() is Ctrl-C only where SIGINT has Python's handler: a pytest started with
    # SIGINT ignored (in the background of a non-interactive shell) would never see it, and the
    # parked runners would hold each remaining run for 30 s.
    sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            _tune(tmp_path, monkeypatch, runners)
    finally:
        release.set()
        signal.signal(signal.SIGINT, sigint)
    lines = _lines(log)
    finished = sum(len(r.ended) for r in runners)
    assert len(lines) == finished and 8 < finished < 16  # the first batch and part of the second
    assert len({line["config"]["index"] for line in lines}) == len(lines)


def test_losing_every_device_mid_pipeline_keeps_every_finished_result(tmp_path, monkeypatch):
    runners = [FakeRunner("cuda:0", die_after=7), FakeRunner("cuda:1", die_after=7)]
    with pytest.raises(AllDevicesLost):
        _tune(tmp_path, monkeypatch, runners)
    lines = _lines(tmp_path / "t.jsonl")
    assert len({line["config"]["index"] for line in lines}) == len(lines)
    # 8 + 6 of the second batch (and a run error for a candidate that took 3 runners down, if one did)
    assert sum(line["result"][1] == 0 for line in lines) == 14 and len(lines) <= 15


def test_a_build_timeout_restarts_the_pool_and_the_next_batch_still_builds(tmp_path):
    """The first batch's build hangs past its deadline while the next batch's builds wait behind
    it in the pool: the hung one is a build timeout, the others are built by the new pool."""
    import cloudpickle

    from tc_autotune.measure.measurer import _run_pickled

    space = conv2d_space(SMALL, GPU)
    measurer = LocalMeasurer(space, MeasureOptions(build_workers=1, build_timeout=0.5), runners=[FakeRunner("cuda:0")])
    counter = iter(range(10**6))

    def fake_build(number, seconds, folder):
        time.sleep(seconds)
        path = os.path.join(folder, f"kernel_{number}.so")
        open(path, "wb").close()
        return path, None, seconds

    def submit(config):
        seconds = 600 if config == hung else 0.01
        payload = cloudpickle.dumps((fake_build, (next(counter), seconds, str(tmp_path))))
        return measurer._pool.submit(_run_pickled, payload)

    measurer._submit = submit
    hung, *others = _configs(6)  # more than the pool has taken to its call queue
    with measurer:
        first, second = measurer.submit([hung]), measurer.submit(others)
        (timed_out,) = measurer.collect(first)
        results = measurer.collect(second)
    assert timed_out.error_no == MeasureErrorNo.BUILD_TIMEOUT
    assert all(r.ok for r in results), [r.error_msg for r in results]


def test_runs_go_by_batch_and_cancelled_ones_are_skipped():
    from tc_autotune.measure.dispatch import Dispatcher

    gate, order, done = threading.Event(), [], []

    class Gated:
        label, device = "cuda:0", GPU

        def run(self, name):
            gate.wait(10)
            order.append(name)
            return "ok", [1e-3]

        def stop(self):
            pass

    dispatcher = Dispatcher([Gated()], hang_timeout=60)
    try:
        report = lambda status, payload, label: done.append(status)  # noqa: E731
        dispatcher.submit(("first",), report, priority=0)
        time.sleep(0.5)  # the runner holds "first"
        dispatcher.submit(("later batch",), report, priority=2)
        skipped = dispatcher.submit(("cancelled",), report, priority=1)
        dispatcher.submit(("earlier batch",), report, priority=1)
        skipped.cancel()
        gate.set()
        deadline = time.time() + 10
        while len(done) < 4 and time.time() < deadline:
            time.sleep(0.05)
    finally:
        dispatcher.close()
    assert order == ["first", "earlier batch", "later batch"] and sorted(done) == ["cancelled", "ok", "ok", "ok"]


def test_device_choice_keeps_one_gpu_model():
    gpus = [LocalDevice(0, "NVIDIA H100", "GPU-a"), LocalDevice(1, "NVIDIA H100", "GPU-b"),
            LocalDevice(2, "NVIDIA A100", "GPU-c")]
    assert choose_local(None, "NVIDIA H100", gpus) == gpus[:2]  # default: every GPU of GPU 0's model
    assert choose_local((1,), "NVIDIA H100", gpus) == [gpus[1]]
    with pytest.raises(ValueError, match="different models"):
        choose_local((0, 2), "NVIDIA H100", gpus)
    with pytest.raises(ValueError, match="no GPU 7"):
        choose_local((7,), "NVIDIA H100", gpus)
    assert gpus[1].environment() == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "GPU-b"}
    assert gpus[1].label == "cuda:1 GPU-b" and RpcDevice("h", 9190, "k").label == "rpc:k@h:9190"
    assert parse_indices("0,1") == (0, 1)


# ---- the scripts: flags and the exit code of a lost run ----------------------------------
def _tune_main(monkeypatch, argv):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import tune
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return tune.main(argv)


def test_tune_exits_8_when_every_device_is_lost(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(autotune, "measurement_devices", lambda *a, **k: (GPU, (LocalDevice(0),)))

    def lost(*args, **kwargs):
        raise AllDevicesLost("every device is lost (cuda:0)")

    monkeypatch.setattr(autotune, "tune_workload", lost)
    code = _tune_main(monkeypatch, ["--workload", str(SMALL), "--log", str(tmp_path / "t.jsonl")])
    err = capsys.readouterr().err
    assert code == 8 and "every device is lost" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args,needle", [
    (["--devices", "0,x"], "expected GPU indices"),
    (["--rpc-tracker", "nohost"], "expected HOST:PORT"),
    (["--rpc-tracker", "127.0.0.1:9190"], "--rpc-tracker and --rpc-key go together"),
    (["--rpc-tracker", "127.0.0.1:9190", "--rpc-key", "k", "--devices", "0"], "not with --rpc-tracker"),
])
def test_bad_device_arguments_exit_2(args, needle):
    proc = run_completed(str(ROOT / "scripts" / "tune.py"), "--workload", "tutorial", *args, timeout=120)
    assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# ---- RPC end to end on localhost ------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def rpc_servers():
    """A TVM RPC tracker on localhost and ``start_server`` (skipped where they cannot start).
    Each runs as a command forked from the tests' ``script_server`` (``start_python``), which has
    TVM imported: the tracker is TVM's, served in that process (``rpc_tracker.py``), each server
    the package's command (whose worker, a fresh interpreter, TVM spawns itself)."""
    try:
        import tornado  # noqa: F401  (TVM's tracker needs it)
    except ImportError:
        pytest.skip("TVM's RPC tracker needs tornado (pip install tornado)")
    import tvm.rpc

    here = Path(__file__).resolve().parent
    port = _free_port()
    procs = [start_python(here / "rpc_tracker.py", "127.0.0.1", port)]
    path = os.pathsep.join([str(here.parent), str(here), os.environ.get("PYTHONPATH", "")])

    def start_server(key="test", *options, bare=False):
        """The package's server, its timer on a host clock (``rpc_host_clock``); ``bare``: TVM's own."""
        program = (["tvm.exec.rpc_server"] if bare
                   else ["tc_autotune.measure.rpc_server", "--init", "rpc_host_clock:install"])
        procs.append(start_python("-m", *program, "--host", "127.0.0.1", "--tracker", f"127.0.0.1:{port}",
                                  "--key", key, *options,
                                  env={"PYTHONPATH": path}))  # this checkout, rpc_host_clock
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                info = tvm.rpc.connect_tracker("127.0.0.1", port).summary()["queue_info"]
                if info.get(key, {}).get("free"):
                    return procs[-1]
            except Exception:
                pass
            time.sleep(0.1)
        pytest.skip("the RPC tracker and server did not come up within 60 s")

    try:
        # listening before any client asks (TVM's connect_tracker retries a refused connection
        # only every 5 s)
        deadline = time.time() + 60
        while procs[0].poll() is None and time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        else:
            pytest.skip("the RPC tracker did not come up within 60 s")
        yield port, start_server
    finally:
        for proc in procs:
            _kill_group(proc)


def _kill_group(proc):
    """Kill a process we started and the children it forked (a server's listener and sessions):
    ``start_python`` starts each in a process group of its own."""
    proc.kill()


def _cpu_conv(path, workload, wrong=False):
    """A CPU kernel with the template's signature (data, weight, out) computing the 1x1 conv."""
    import tvm
    from tvm import te

    data = te.placeholder(workload.data_shape, workload.dtype, name="data")
    weight = te.placeholder(workload.weight_shape, workload.dtype, name="weight")
    rc = te.reduce_axis((0, workload.in_channels), name="rc")
    scale = 0.5 if wrong else 1.0
    out = te.compute(workload.out_shape, lambda n, h, w, k: te.sum(
        data[n, h, w, rc].astype("float32") * weight[0, 0, rc, k].astype("float32") * scale, axis=rc))
    tvm.compile(te.create_prim_func([data, weight, out]), target=tvm.target.Target({"kind": "llvm"})
                ).export_library(str(path))
    return str(path)


def test_rpc_runner_checks_and_times_on_the_remote_device(tmp_path, monkeypatch, rpc_servers):
    from tc_autotune.measure import rpc_runner
    from tc_autotune.measure.rpc_runner import RpcRunner

    port, start_server = rpc_servers
    server = start_server()
    rpc = RpcDevice("127.0.0.1", port, "test")
    probed = GpuInfo("Remote Fake GPU", "sm_90", 132)
    runner = RpcRunner("", MeasureOptions(repeat=3, min_repeat_ms=1, run_timeout=60), rpc, device_type="cpu",
                       probe=lambda dev: probed)
    assert runner.connect() == probed  # the space checks configs against the remote device's limits
    space = conv2d_space(SMALL, probed)
    configs = [c for c in space.sample(40, seed=5) if not workspaces(SMALL, c)][:3]
    kernels = iter([_cpu_conv(tmp_path / "a.so", SMALL), _cpu_conv(tmp_path / "b.so", SMALL, wrong=True),
                    _cpu_conv(tmp_path / "c.so", SMALL)])
    with LocalMeasurer(space, MeasureOptions(build_workers=1), runners=[runner]) as measure:
        runner.inputs_dir = measure.inputs_dir

        def fake_build(config):  # the build pool's job: here, a CPU kernel exported beforehand
            future = cf.Future()
            future.set_result((next(kernels), None, 0.01))
            return future

        monkeypatch.setattr(measure, "_submit", fake_build)
        ok, wrong, ok2 = measure(configs)
        assert ok.ok and len(ok.costs) == 3 and all(0 < c < 1 for c in ok.costs), ok.error_msg
        assert ok.timer == ok2.timer == CUDA_TIMER  # timed on the server by the one timer
        assert ok.device == rpc.label == ok2.device and ok2.ok
        assert wrong.error_no == MeasureErrorNo.WRONG_RESULT and "relative L2 error" in wrong.error_msg
        # The server dies: the runner cannot get a session again, its candidate goes back to the
        # queue, and with no device left the batch ends with AllDevicesLost.
        _kill_group(server)
        monkeypatch.setattr(rpc_runner, "CONNECT_TIMEOUT", 1.0)  # no server to wait for
        runner.stop()
        kernels = iter([_cpu_conv(tmp_path / "d.so", SMALL)] * 3)
        with pytest.raises(AllDevicesLost):
            measure(configs[:1])
    assert not os.path.exists(tmp_path / "a.so")  # measured kernels are removed
    np.testing.assert_array_less(0, ok.costs)


def test_a_bare_tvm_rpc_server_is_refused_with_the_command_that_serves(rpc_servers):
    """A bare ``tvm.exec.rpc_server`` has no timer: its kernels would be timed by another timer
    than every other figure, so the runner does not use it (a fault: its device is dropped)."""
    from tc_autotune.measure.rpc_runner import RpcRunner

    port, start_server = rpc_servers
    start_server("bare", bare=True)
    runner = RpcRunner("", MeasureOptions(), RpcDevice("127.0.0.1", port, "bare"), device_type="cpu",
                       probe=lambda dev: GpuInfo("Remote Fake GPU", "sm_90", 132))
    with pytest.raises(RunnerFault) as err:
        runner.connect()
    message = str(err.value)
    assert message.startswith("the RPC server of key 'bare' has no tc_autotune timer (")
    assert "python -m tc_autotune.measure.rpc_server" in message and "\n" not in message


class _CountingProxy:
    """Forwards TCP connections from ``listen`` to ``target`` and counts the bytes each way, in a
    process of its own (in this one it would wait for the GIL, which TVM holds while it frees a
    remote object and waits for the server's answer)."""

    def __init__(self, listen, target):
        context = multiprocessing.get_context("fork")
        self._counts = context.Array("q", 2)  # sent to the server, received from it
        server = socket.create_server(listen)  # bound before any client is told the address
        self._process = context.Process(target=_relay, args=(server, target, self._counts), daemon=True)
        self._process.start()
        server.close()

    @property
    def bytes(self) -> int:
        return self._counts[0] + self._counts[1]

    def close(self):
        self._process.kill()
        self._process.join(10)


def _relay(server, target, counts):
    def pump(source, sink, which):
        try:
            while data := source.recv(1 << 16):
                with counts.get_lock():
                    counts[which] += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()

    while True:
        client, _ = server.accept()
        upstream = socket.create_connection(target)
        threading.Thread(target=pump, args=(client, upstream, 0), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, 1), daemon=True).start()


def test_rpc_candidates_send_no_output_sized_data(tmp_path, monkeypatch, rpc_servers):
    """The inputs, reference, NaN template and checker go to the server once per session; per
    candidate only the kernel's library goes up and a few numbers come back (counted by a proxy
    between this process and the server: the server tells the tracker the proxy's address)."""
    from tc_autotune.measure.rpc_runner import RpcRunner

    port, start_server = rpc_servers
    server_port = _free_port()
    proxy = _CountingProxy(("127.0.0.2", server_port), ("127.0.0.1", server_port))
    try:
        start_server("counted", "--no-fork", "--port", str(server_port), "--port-end", str(server_port + 1),
                     "--custom-addr", "127.0.0.2")
        workload = workloads.get("n=2,h=56,c=8,k=64,r=1")
        out_bytes = np.prod(workload.out_shape) * 4  # 1.6 MB of fp32
        probed = GpuInfo("Remote Fake GPU", "sm_90", 132)
        runner = RpcRunner("", MeasureOptions(repeat=2, min_repeat_ms=1, run_timeout=60),
                           RpcDevice("127.0.0.1", port, "counted"), device_type="cpu", probe=lambda dev: probed)
        runner.connect()
        space = conv2d_space(workload, probed)
        configs = [c for c in space.sample(40, seed=5) if not workspaces(workload, c)][:4]
        kernels = iter([_cpu_conv(tmp_path / f"{i}.so", workload) for i in range(4)])
        library_bytes = os.path.getsize(tmp_path / "3.so")
        with LocalMeasurer(space, MeasureOptions(build_workers=1), runners=[runner]) as measure:
            runner.inputs_dir = measure.inputs_dir

            def fake_build(config):
                future = cf.Future()
                future.set_result((next(kernels), None, 0.01))
                return future

            monkeypatch.setattr(measure, "_submit", fake_build)
            start = proxy.bytes
            assert measure(configs[:1])[0].ok  # the session's setup and one candidate
            setup = proxy.bytes - start
            results = measure(configs[1:])
            per_candidate = (proxy.bytes - start - setup) / 3
    finally:
        proxy.close()
    assert all(r.ok for r in results), [r.error_msg for r in results]
    assert setup > 2 * out_bytes  # the reference and the NaN template went up (through the proxy)
    assert per_candidate < library_bytes + 64 * 1024 < out_bytes / 8, (per_candidate, library_bytes)


def test_a_remote_cuda_init_error_is_one_line_with_the_fix():
    from tc_autotune.measure.rpc_runner import _one_line

    err = RuntimeError("Error caught from RPC call:\nCUDA Runtime Error: cudaErrorInitializationError (3): "
                       "initialization error\n")
    text = _one_line(err)
    assert "\n" not in text and text.startswith("CUDA Runtime Error") and "--no-fork" in text
    assert _one_line(ValueError("plain")) == "plain"
