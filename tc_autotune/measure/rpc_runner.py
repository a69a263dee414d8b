"""The runner protocol on a remote GPU, through TVM's RPC tracker (``tvm.rpc``).

Kernels are built here (the shared build pool); the runner requests a session from the
tracker for its key, uploads each exported library, loads it on the server and checks and
times it there (``bench.check_and_time`` on the session's device: the same NaN-poisoned
check against the fp32 reference as the local runner, and the same timer, run on the server
through the global function ``timer.TIME_FUNCTION``: start the servers with
``python -m tc_autotune.measure.rpc_server``, which installs it; a bare ``tvm.exec.rpc_server``
lacks it and is refused at connect, as a fault, with that command in the message).  The
inputs, the reference, the NaN-filled output template and the output checker go to the
remote device once per session and workload (``bench.Bench``); per candidate only the
kernel's library goes up and the checker's two numbers and the timings come back.

Faults: a candidate that raises is the candidate's error, unless a fresh session cannot be
had afterwards (the server died): then ``RunnerFault`` sends it back to the queue.  A
candidate that does not finish within ``run_timeout`` is a timeout; its session is abandoned
(the server frees itself when the session's time limit, ``rpc_session_s``, runs out).
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import tvm
import tvm.rpc

from ..backends.cuda import timer
from .devices import RpcDevice
from .dispatch import RunnerFault
from ..backends.cuda.gpu import GpuInfo, remote_gpu
from .bench import Bench, check_and_time, timer_options
from .runner_protocol import MeasureOptions

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 60.0  # seconds to get a session from the tracker


def connect_tracker(rpc: RpcDevice, timeout: float = MeasureOptions.rpc_connect_s):
    """A ``tvm.rpc.TrackerSession``; RunnerFault when the tracker does not accept a connection
    within ``timeout`` seconds.  TVM's ``connect_tracker`` retries a refused connection for 60 s
    and has no timeout of its own (an unreachable host waits out the OS's TCP timeout), so a
    plain socket with ``timeout`` tries first: a tracker that is not there fails fast."""
    try:
        with socket.create_connection((rpc.host, rpc.port), timeout=timeout):
            pass
    except socket.timeout:
        raise RunnerFault(f"cannot reach the RPC tracker {rpc.host}:{rpc.port}: no answer within {timeout:g} s "
                          "(--rpc-connect-timeout)") from None
    except OSError as err:  # refused, no route, unknown host
        reason = err.strerror or str(err)
        raise RunnerFault(f"cannot reach the RPC tracker {rpc.host}:{rpc.port}: {reason}") from None
    try:
        return tvm.rpc.connect_tracker(rpc.host, rpc.port)
    except Exception as err:  # socket errors, RuntimeError of TVM's retry loop, not a tracker
        raise RunnerFault(f"cannot reach the RPC tracker {rpc.host}:{rpc.port}: {_one_line(err)}") from None


def free_servers(rpc: RpcDevice, timeout: float = MeasureOptions.rpc_connect_s) -> int:
    """How many servers of ``rpc.key`` the tracker lists as free now (0 when none)."""
    summary = connect_tracker(rpc, timeout).summary()
    return int(summary.get("queue_info", {}).get(rpc.key, {}).get("free", 0))


def _call_with_timeout(func, timeout: float):
    """(finished, value or exception): ``func()`` in a daemon thread, abandoned after ``timeout``."""
    box = {}

    def target():
        try:
            box["value"] = func()
        except BaseException as err:  # handed to the caller
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True, name="rpc call")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return False, None
    if "error" in box:
        raise box["error"]
    return True, box.get("value")


class RpcRunner:
    """Check and time built kernels on a GPU behind an RPC tracker.

    ``device_type`` is the remote device kind ("cuda"; tests use "cpu" with a CPU kernel) and
    ``probe(remote device) -> GpuInfo`` reads its limits (default: the server's CUDA driver, through
    the function ``gpu.GPU_FACTS`` that ``measure.rpc_server`` installs).
    """

    def __init__(self, inputs_dir: str, options: MeasureOptions, rpc: RpcDevice, device_type: str = "cuda",
                 probe=None):
        self.inputs_dir, self.options, self.rpc = inputs_dir, options, rpc
        self.device_type, self.probe = device_type, probe
        self.device: GpuInfo | None = None
        self._session = None
        self._dev = None
        self._time = None  # the server's timer.TIME_FUNCTION
        self._since = 0.0
        self._benches: dict = {}

    @property
    def label(self) -> str:
        return self.rpc.label

    def _request(self):
        tracker = connect_tracker(self.rpc, self.options.rpc_connect_s)
        try:
            done, session = _call_with_timeout(
                lambda: tracker.request(self.rpc.key, session_timeout=int(self.options.rpc_session_s)),
                CONNECT_TIMEOUT)
        except Exception as err:
            raise RunnerFault(f"no RPC session for key {self.rpc.key!r}: {err}") from None
        if not done:
            raise RunnerFault(f"no free RPC server of key {self.rpc.key!r} within {CONNECT_TIMEOUT:.0f} s")
        return session

    def connect(self) -> GpuInfo:
        """Open a session (if none is open) and return the remote device's ``GpuInfo``."""
        if self._session is None or time.monotonic() - self._since > self.options.rpc_session_s * 0.9:
            self.stop()
            session = self._request()
            dev = getattr(session, self.device_type)(0)
            try:  # first: a bare TVM server has neither the timer nor the driver's facts (GPU_FACTS)
                self._time = session.get_function(timer.TIME_FUNCTION)
            except (AttributeError, RuntimeError) as err:
                raise RunnerFault(f"the RPC server of key {self.rpc.key!r} has no tc_autotune timer "
                                  f"({_one_line(err)}): start it with python -m tc_autotune.measure.rpc_server "
                                  "(tvm.exec.rpc_server's options)") from None
            try:
                info = self.probe(dev) if self.probe else remote_gpu(session, dev)
            except Exception as err:
                raise RunnerFault(f"the RPC server of key {self.rpc.key!r} has no usable "
                                  f"{self.device_type} device: {_one_line(err)}") from None
            if self.device is not None and (info.name, info.arch) != (self.device.name, self.device.arch):
                raise RunnerFault(f"key {self.rpc.key!r} now serves a {info.name} ({info.arch}), "
                                  f"not a {self.device.name}: one run tunes one GPU model")
            self._session, self._dev, self.device, self._since = session, dev, info, time.monotonic()
        return self.device

    def stop(self):
        self._session, self._dev, self._benches, self._time = None, None, {}, None

    def _upload_and_load(self, path: str):
        """Upload a library to the server and load it there."""
        name = path.rsplit("/", 1)[-1]
        self._session.upload(path, name)
        return self._session.load_module(name)

    def _check_and_time(self, so_path: str, key: str, tensors):
        if key not in self._benches:
            self._benches = {key: Bench.load(self.inputs_dir, key, self._dev, self.device_type,
                                             self._upload_and_load)}
        module = self._upload_and_load(so_path)

        def remote(module, args):  # the timer runs on the server, beside the kernel
            return timer.time_remote(self._time, module, "main", self._dev, args, **timer_options(self.options))

        try:
            return check_and_time(module, self._benches[key], tensors, self.options, time=remote)
        finally:
            try:
                self._session.remove(so_path.rsplit("/", 1)[-1])
            except Exception:  # best effort: the session's folder goes with it
                pass

    def run(self, so_path: str, key: str, tensors) -> tuple[str, object]:
        """As ``LocalRunner.run``, on the remote GPU."""
        self.connect()
        tensors = [(tuple(shape), dtype) for shape, dtype in tensors]
        try:
            done, result = _call_with_timeout(lambda: self._check_and_time(so_path, key, tensors),
                                              self.options.run_timeout)
        except Exception as err:
            message = f"{type(err).__name__}: {str(err)[-1500:]}"
            self.stop()
            self.connect()  # RunnerFault when the server is gone: not the candidate's fault
            return "error", message
        if not done:
            self.stop()
            return "timeout", f"no result within {self.options.run_timeout:.0f} s"
        return result


def _one_line(err: Exception) -> str:
    """The last line of a (remote, multi-line) error, with the fix for the usual cause: a
    server that forks its sessions after CUDA was initialised in the parent."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = lines[-1] if lines else type(err).__name__
    if "InitializationError" in text:
        text += " (start the server with --no-fork: a forked session cannot use CUDA)"
    return text
