"""What a runner process needs that does not load TVM: the measurement options it is handed
and its request loop.  ``runner`` runs the loop on a GPU; a process that imports only this
module (a test's stand-in runner, ``tests/runner_stubs.py``) starts in a fraction of a second
instead of importing TVM first (~3 s of CPU each on the CI machines).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.results import TOLERANCE


@dataclass(frozen=True)
class MeasureOptions:
    """How candidates are built and timed, and on which devices."""

    build_workers: int = 0  # 0: one per CPU core
    build_timeout: float = 60.0  # seconds per build
    run_timeout: float = 30.0  # seconds per candidate on the GPU (load, check, time)
    repeat: int = 5  # timed repeats, each at least min_repeat_ms long
    min_repeat_ms: int = 20
    tolerance: float = TOLERANCE  # relative L2 error against the fp32 reference
    # devices.LocalDevice or devices.RpcDevice entries; empty: one runner on local GPU 0
    devices: tuple = ()
    rpc_session_s: float = 600.0  # an RPC session is renewed after this long (frees hung servers)
    # seconds the RPC tracker has to accept a connection (TVM's own connect retries a refused
    # one for 60 s and waits the OS's TCP timeout on an unreachable host)
    rpc_connect_s: float = 5.0

    @property
    def n_devices(self) -> int:
        return max(1, len(self.devices))


def serve(conn, device, measure) -> None:
    """A runner process's loop: say ("ready", device) (the ``GpuInfo`` it measures on, passed
    through), then answer each (so_path, inputs key,
    [(shape, dtype)]) request with ``measure(so_path, key, tensors)``'s (status, payload) until
    the pipe closes; after an exception, answer ("error", message) and return (the CUDA context
    may be broken: the parent starts a fresh runner).  Tests serve stand-in ``measure``s."""
    conn.send(("ready", device))
    while True:
        try:
            so_path, key, tensors = conn.recv()
        except EOFError:
            return
        try:
            conn.send(measure(so_path, key, tensors))
        except Exception as err:
            conn.send(("error", f"{type(err).__name__}: {str(err)[-1500:]}"))
            return  # let the parent start a fresh runner
