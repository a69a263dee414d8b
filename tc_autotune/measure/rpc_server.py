"""A TVM RPC server that measures for tc_autotune: ``python -m tc_autotune.measure.rpc_server``
with ``tvm.exec.rpc_server``'s options (``--tracker HOST:PORT --key KEY --no-fork ...``).

It is TVM's server, plus the two global functions a remote measurement calls: the package's
timer (``timer.TIME_FUNCTION``: remote kernels are timed as local ones, ``rpc_runner``) and
TMA im2col's tensor-map encoder (``tensormap.ENCODE_IM2COL``: what ``tma_im2col`` kernels'
host code calls).  A bare ``tvm.exec.rpc_server`` has neither, and ``RpcRunner`` refuses it.

They are registered when this module is imported, not in ``main``: TVM serves each session
from a child process, and with ``--no-fork`` that child is spawned, so it imports this module
again (multiprocessing runs the parent's main module as ``__mp_main__``) without calling
``main``.  For the same reason TVM's server runs with this module left as ``__main__``
(``runpy`` without ``alter_sys``).
"""

from __future__ import annotations

import runpy

from ..backends.cuda import tensormap, timer

timer.register()
tensormap.register()


def main() -> None:
    """Run ``tvm.exec.rpc_server`` on this process's arguments (``sys.argv``)."""
    runpy.run_module("tvm.exec.rpc_server", run_name="__main__", alter_sys=False)


if __name__ == "__main__":
    main()
