"""Measuring on several devices: scheduling over fake runners (one dies mid-batch, one hangs),
the exit code when every device is lost, the device each record names, and the RPC runner end
to end through a real TVM tracker and server on localhost (its device is the server's CPU, with a
CPU kernel: no GPU here)."""

import concurrent.futures as cf
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tc_autotune import autotune, conv2d_space, records, workloads
from tc_autotune.devices import LocalDevice, RpcDevice, choose_local, parse_indices
from tc_autotune.dispatch import AllDevicesLost, RunnerFault
from tc_autotune.gpu import GpuInfo, gpu_for_arch
from tc_autotune.measure import LocalMeasurer, MeasureErrorNo, MeasureOptions
from tc_autotune.template import workspaces

ROOT = Path(__file__).resolve().parent.parent
SMALL = workloads.get("n=2,h=14,c=64,k=64,r=1")
GPU = gpu_for_arch("sm_90")


class FakeRunner:
    """Returns a time that depends on the kernel file; can die (RunnerFault) or hang after some runs."""

    def __init__(self, label, die_after=None, hang_after=None, delay=0.02):
        self.label, self.die_after, self.hang_after, self.delay = label, die_after, hang_after, delay
        self.device = GPU
        self.runs, self.stops = [], 0
        self.release = threading.Event()

    def run(self, so_path, key, tensors):
        if self.die_after is not None and len(self.runs) >= self.die_after:
            raise RunnerFault(f"{self.label} is gone")
        if self.hang_after is not None and len(self.runs) >= self.hang_after:
            self.release.wait(60)
        self.runs.append(so_path)
        time.sleep(self.delay)
        return "ok", [1e-4 * (1 + int(Path(so_path).stem.split("_")[-1]))]

    def stop(self):
        self.stops += 1


def _measurer(tmp_path, runners, monkeypatch, hang_timeout=None):
    """A LocalMeasurer whose builds are instant fakes (a file per config) and whose runners are ``runners``."""
    space = conv2d_space(SMALL, GPU)
    measurer = LocalMeasurer(space, MeasureOptions(build_workers=1), runners=runners)
    counter = iter(range(10**6))

    def fake_submit(config):
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
            start = time.time()
            results = measure(_configs(8))
            assert time.time() - start < 20
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
                               shipped_transfer=False, compare_cudnn=False, measurer_factory=factory)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 6  # every finished measurement was written before the run ended
    assert {line["provenance"]["device"] for line in lines} == {"cuda:0 GPU-a", "cuda:1 GPU-b"}
    assert all(line["provenance"]["gpu"] == GPU.name for line in lines)
    assert len(list(records.load(log))) == 6  # readable as before: only a provenance field was added


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
                                     gpu=GPU, shipped_transfer=False, compare_cudnn=False,
                                     measurer_factory=factory)
    assert sizes == [12, 12] and summary.devices == 3 and summary.configs_per_minute > 0


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
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "tune.py"), "--workload", "tutorial", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# ---- RPC end to end on localhost ------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def rpc_servers():
    """A TVM RPC tracker and one server of key 'test' on localhost (skipped where they cannot start)."""
    try:
        import tornado  # noqa: F401  (TVM's tracker needs it)
    except ImportError:
        pytest.skip("TVM's RPC tracker needs tornado (pip install tornado)")
    import tvm.rpc

    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
                               "--port", str(port), "--port-end", str(port + 1)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)]  # it serves from a child process

    def start_server():
        procs.append(subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                       "--tracker", f"127.0.0.1:{port}", "--key", "test"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True))  # its listener is a child process
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                info = tvm.rpc.connect_tracker("127.0.0.1", port).summary()["queue_info"]
                if info.get("test", {}).get("free"):
                    return procs[-1]
            except Exception:
                pass
            time.sleep(0.3)
        pytest.skip("the RPC tracker and server did not come up within 60 s")

    time.sleep(1)
    try:
        yield port, start_server
    finally:
        for proc in procs:
            _kill_group(proc)


def _kill_group(proc):
    """Kill a process we started and the children it forked (a server's listener and sessions)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # started with start_new_session: its own group
    except ProcessLookupError:
        pass
    proc.wait(10)


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
    from tc_autotune import rpc_runner
    from tc_autotune.rpc_runner import RpcRunner

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
        assert ok.device == rpc.label == ok2.device and ok2.ok
        assert wrong.error_no == MeasureErrorNo.WRONG_RESULT and "relative L2 error" in wrong.error_msg
        # The server dies: the runner cannot get a session again, its candidate goes back to the
        # queue, and with no device left the batch ends with AllDevicesLost.
        _kill_group(server)
        monkeypatch.setattr(rpc_runner, "CONNECT_TIMEOUT", 3.0)
        runner.stop()
        kernels = iter([_cpu_conv(tmp_path / "d.so", SMALL)] * 3)
        with pytest.raises(AllDevicesLost):
            measure(configs[:1])
    assert not os.path.exists(tmp_path / "a.so")  # measured kernels are removed
    np.testing.assert_array_less(0, ok.costs)


def test_a_remote_cuda_init_error_is_one_line_with_the_fix():
    from tc_autotune.rpc_runner import _one_line

    err = RuntimeError("Error caught from RPC call:\nCUDA Runtime Error: cudaErrorInitializationError (3): "
                       "initialization error\n")
    text = _one_line(err)
    assert "\n" not in text and text.startswith("CUDA Runtime Error") and "--no-fork" in text
    assert _one_line(ValueError("plain")) == "plain"
