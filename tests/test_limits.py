"""Absurd inputs are refused where they are given (issue #33), not hours later inside TVM or
nvcc: tensors past what 32-bit indexing reaches, trial counts and timeouts past any real run,
non-CUDA targets; an RPC tracker that is not there fails within the connect timeout; running
a kernel without a GPU says the package's "no CUDA GPU", not TVM's "Device API cuda is not
enabled"."""

import socket
from pathlib import Path

import numpy as np
import pytest

from tc_autotune import workloads
from tc_autotune.workloads.dense import DenseWorkload
from tc_autotune.workloads.spec import MAX_ELEMENTS
from tc_autotune.backends.cuda.gpu import NoGpuError, local_gpu
from command_paths import run_script as run

ROOT = Path(__file__).resolve().parent.parent
INT32 = "the kernels index with 32-bit integers, at most 2147483647 elements per tensor"



def assert_one_line(err, *needles):
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


# ---- sizes ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,needle", [
    ("rfc-3x3-b99999999999999", "data 99999999999999x14x14x256 has 5.02e+18 elements"),
    ("n=1000000000000,h=1,c=8,k=8,r=1", "data 1000000000000x1x1x8 has 8e+12 elements"),
    ("n=1,h=1,c=8,k=300000000,r=1", "weight 1x1x8x300000000 has 2.4e+09 elements"),
    ("n=64,h=256,c=8,k=2048,r=1", "output 64x256x256x2048 has 8.59e+09 elements"),
    ("dense:m=100000,n=100000,k=64", "C 100000x100000 has 1e+10 elements"),
    ("llm-4096x4096-m999999999", "A 999999999x4096 has 4.1e+12 elements"),
])
def test_tensors_past_int32_indexing_are_refused_when_parsed(spec, needle):
    with pytest.raises(ValueError) as err:
        workloads.get(spec)
    assert str(err.value) == f"{needle}: {INT32}"


def test_the_limit_is_exact():
    assert DenseWorkload(m=MAX_ELEMENTS, n=1, k=1).gemm_shape == (MAX_ELEMENTS, 1, 1)
    with pytest.raises(ValueError, match="A 2147483648x1 has"):
        DenseWorkload(m=MAX_ELEMENTS + 1, n=1, k=1)


def test_every_preset_and_shipped_workload_is_within_the_limit():
    names = workloads.preset_names() + [f"rfc-{k}-b512" for k in ("1x1", "3x3")] + ["resnet50-conv1-b256"]
    for name in names:
        workloads.get(name)


def test_tune_refuses_an_absurd_workload_with_one_line():
    code, out, err = run("tune.py", "--workload", "rfc-3x3-b99999999999999", "--log", "/nonexistent/never.jsonl")
    assert code == 2
    assert_one_line(err, "argument --workload", INT32)


# ---- counts and times ---------------------------------------------------------------------
@pytest.mark.parametrize("script,args,needle", [
    ("tune.py", ["--trials", "1000000000000"], "'1000000000000' is more than the limit of 1000000"),
    ("tune.py", ["--batch-size", "10000000"], "'10000000' is more than the limit of 1000000"),
    ("tune.py", ["--build-workers", "100000"], "'100000' is more than the limit of 4096"),
    ("tune.py", ["--timeout", "1e12"], "'1e12' is more than the limit of 604800"),
    ("tune.py", ["--rpc-connect-timeout", "0"], "'0' must be positive"),
    ("study.py", ["{job}", "--trials", "1000000000000"], "is more than the limit of 1000000"),
    ("study.py", ["{job}", "--plain-trials", "2000000"], "is more than the limit of 1000000"),
    ("benchmark.py", ["--repeat", "1000000000000"], "is more than the limit of 1000000"),
    ("benchmark.py", ["--min-repeat-ms", "1e15"], "'1e15' is more than the limit of 60000"),
])
def test_counts_and_times_past_any_real_run_exit_2(tmp_path, script, args, needle):
    job = ROOT / "lab" / "heldout.toml"
    extra = ["--workload", "rfc-3x3-b1", "--log", str(tmp_path / "t.jsonl")] if script == "tune.py" else []
    code, out, err = run(script, *[str(job) if a == "{job}" else a for a in args], *extra)
    assert code == 2
    assert_one_line(err, args[-2], needle)
    assert not (tmp_path / "t.jsonl").exists()


# ---- targets ------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["llvm", {"kind": "llvm"}, "c"])
def test_a_non_cuda_target_is_refused(target):
    from tc_autotune.api.build import build_conv2d

    with pytest.raises(ValueError) as err:
        build_conv2d("rfc-3x3-b1", target=target)
    kind = target["kind"] if isinstance(target, dict) else target
    assert str(err.value) == (f"target {kind!r} is not a CUDA target: the kernels are Tensor Core CUDA kernels "
                              "(give an arch such as 'sm_90', or a cuda target)")


# ---- the RPC tracker ---------------------------------------------------------------------
class _Unreachable:
    """socket.create_connection to a host that does not answer: records the timeout it got."""

    def __init__(self):
        self.timeouts = []

    def __call__(self, address, timeout=None):
        self.timeouts.append((address, timeout))
        raise socket.timeout("timed out")


def test_an_unreachable_tracker_fails_within_the_configured_connect_timeout(monkeypatch):
    import tvm.rpc

    from tc_autotune.tuning import autotune
    from tc_autotune.measure import rpc_runner
    from tc_autotune.measure.measurer import MeasureOptions

    unreachable = _Unreachable()
    monkeypatch.setattr(rpc_runner.socket, "create_connection", unreachable)
    monkeypatch.setattr(tvm.rpc, "connect_tracker", lambda *a: pytest.fail("TVM's 60 s retry loop was entered"))
    with pytest.raises(autotune.NoGpuError) as err:
        autotune.measurement_devices(tracker=("10.255.255.1", 9190), key="h100",
                                     options=MeasureOptions(rpc_connect_s=2.5))
    assert str(err.value) == ("cannot reach the RPC tracker 10.255.255.1:9190: no answer within 2.5 s "
                              "(--rpc-connect-timeout)")
    assert unreachable.timeouts == [(("10.255.255.1", 9190), 2.5)]


def test_the_runner_uses_the_connect_timeout_of_its_options(monkeypatch):
    from tc_autotune.measure import rpc_runner
    from tc_autotune.measure.devices import RpcDevice
    from tc_autotune.measure.dispatch import RunnerFault
    from tc_autotune.measure.measurer import MeasureOptions

    unreachable = _Unreachable()
    monkeypatch.setattr(rpc_runner.socket, "create_connection", unreachable)
    runner = rpc_runner.RpcRunner("", MeasureOptions(rpc_connect_s=0.75), RpcDevice("tracker.example", 9190, "h100"))
    with pytest.raises(RunnerFault, match="no answer within 0.75 s"):
        runner.connect()
    assert unreachable.timeouts == [(("tracker.example", 9190), 0.75)]
    assert MeasureOptions().rpc_connect_s == 5.0


def test_a_refused_tracker_fails_at_once_with_the_reason():
    """A closed port: TVM's own connect would retry it for 60 s."""
    from tc_autotune.measure import rpc_runner
    from tc_autotune.measure.devices import RpcDevice
    from tc_autotune.measure.dispatch import RunnerFault

    with socket.socket() as probe:  # a port nobody listens on (bound, then closed)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RunnerFault) as err:
        rpc_runner.connect_tracker(RpcDevice("127.0.0.1", port, "h100"), timeout=5.0)
    assert str(err.value) == f"cannot reach the RPC tracker 127.0.0.1:{port}: Connection refused"


def test_tune_passes_its_connect_timeout_on(monkeypatch, tmp_path, capsys):
    from tc_autotune.tuning import autotune
    from tc_autotune.cli import tune

    seen = []

    def devices(indices, tracker, key, sessions, options):
        seen.append((tracker, key, options.rpc_connect_s))
        raise autotune.NoGpuError("cannot reach the RPC tracker 10.0.0.1:9190: no answer within 2.5 s")

    monkeypatch.setattr(autotune, "measurement_devices", devices)
    code = tune.main(["--workload", "rfc-3x3-b1", "--log", str(tmp_path / "t.jsonl"), "--rpc-tracker",
                      "10.0.0.1:9190", "--rpc-key", "h100", "--rpc-connect-timeout", "2.5"])
    assert code == 3 and seen == [(("10.0.0.1", 9190), "h100", 2.5)]
    assert capsys.readouterr().err == "tc-tune: cannot reach the RPC tracker 10.0.0.1:9190: no answer within 2.5 s\n"


# ---- running a kernel without a GPU ----------------------------------------------------------
no_gpu = pytest.mark.skipif(local_gpu() is not None, reason="needs a machine without a GPU")
MESSAGE = ("no CUDA GPU found: running a kernel needs one; building works without "
           "(build_conv2d(workload, target='sm_90'))")


@no_gpu
def test_calling_a_kernel_without_a_gpu_says_no_cuda_gpu():
    from tc_autotune.api.kernel import Kernel, require_gpu

    wl = workloads.get("n=1,h=8,c=16,k=16,r=3,pad=1")
    kernel = Kernel(wl, config=None, target=None, executable=None, cubin=b"")  # never reaches them
    data, weight = np.zeros(wl.data_shape, "float16"), np.zeros(wl.weight_shape, "float16")
    with pytest.raises(NoGpuError) as err:
        kernel(data, weight)
    assert str(err.value) == MESSAGE
    with pytest.raises(NoGpuError, match="no CUDA GPU found"):
        kernel.time_evaluator()
    with pytest.raises(NoGpuError, match="no CUDA GPU found"):
        kernel.time(data, weight)  # the package's timer: the same message, before any CUDA call
    with pytest.raises(NoGpuError, match="no CUDA GPU found"):
        require_gpu()


@no_gpu
def test_tc_conv2d_without_a_gpu_says_so_before_building(monkeypatch):
    import tc_autotune as tc
    from tc_autotune.api import build_cache

    monkeypatch.setattr(build_cache, "kernel", lambda *a, **k: pytest.fail("built a kernel it cannot run"))
    with pytest.raises(NoGpuError) as err:
        tc.conv2d(np.zeros((1, 8, 8, 16), "float16"), np.zeros((3, 3, 16, 16), "float16"), padding=1)
    assert str(err.value) == MESSAGE
