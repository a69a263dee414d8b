"""``python tests/rpc_tracker.py HOST PORT``: TVM's RPC tracker (``tvm.rpc.tracker``), served in
this process.  ``python -m tvm.exec.rpc_tracker`` serves the same tracker from a worker process
it spawns, a second interpreter that imports TVM again (3 s); the RPC tests of
``test_multi_device`` start this one, forked from ``script_server`` (``command_paths.start_python``)."""

import sys

from tvm.rpc.tracker import PopenTrackerServerState

if __name__ == "__main__":
    host, port = sys.argv[1], int(sys.argv[2])
    PopenTrackerServerState(host, port, port + 1, silent=True).thread.join()
