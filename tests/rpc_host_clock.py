"""``python -m tc_autotune.measure.rpc_server --init rpc_host_clock:install``: the package's RPC
server whose timer runs on a host clock (``fake_cuda.HostClock``), so the RPC tests time their
CPU kernels through the remote path a GPU server runs (``install`` is called in every serving
process; this folder must be on their PYTHONPATH)."""

import fake_cuda
from tc_autotune.backends.cuda import timer

_CLOCK = fake_cuda.HostClock()


def install():
    timer.driver = lambda: _CLOCK
