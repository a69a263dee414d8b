"""A TVM RPC server that measures for tc_autotune: ``python -m tc_autotune.measure.rpc_server``
with ``tvm.exec.rpc_server``'s options (``--tracker HOST:PORT --key KEY --no-fork ...``).

It is TVM's server plus the global functions a remote measurement calls: the package's timer
(``timer.TIME_FUNCTION``: remote kernels are timed as local ones, ``rpc_runner``), the GPU's
facts from its driver (``gpu.GPU_FACTS``: the limits the tuner's space checks), and TMA
im2col's tensor-map encoders (``tensormap.ENCODE_IM2COL``, bf16's ``tensormap_bf16.ENCODE_IM2COL``:
what ``tma_im2col`` kernels' host code calls).  A bare ``tvm.exec.rpc_server`` has none of
them, and ``RpcRunner`` refuses it.

Where they are installed (``install``), and why there: TVM's server runs in a worker process
it starts itself (``server_init_callback`` runs there), and serves each session from a child
of that worker: forked, it inherits them; spawned (``--no-fork``, what CUDA needs), it is a
fresh interpreter that imports TVM's ``_serve_loop`` and nothing of ours.  So ``install``
also replaces the worker's ``tvm.rpc.server._serve_loop`` with ours (``_serve_loop``), which
installs them again in the child before TVM's loop runs: a child unpickles it from this
module, importing it.  ``--init MODULE:FUNCTION`` is called in each of these processes too
(the tests give the timer a host clock for their CPU kernels that way).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging

import tvm.rpc
import tvm.rpc.server as tvm_server

from ..backends.cuda import gpu, tensormap_bf16, timer

_TVM_SERVE_LOOP = tvm_server._serve_loop  # this process's, before ``install`` replaces it


def install(init: str | None = None) -> None:
    """Install the global functions (and call ``init``, "module:function") in this process and,
    through ``_serve_loop``, in every session process it serves."""
    timer.register()
    gpu.register()
    tensormap_bf16.register()  # fp16's encoder and bf16's
    if init:
        module, _, function = init.partition(":")
        getattr(importlib.import_module(module), function)()
    tvm_server._serve_loop = functools.partial(_serve_loop, init)


def _serve_loop(init, sock, load_library, work_path):
    install(init)
    _TVM_SERVE_LOOP(sock, load_library, work_path)


def parse_args(argv=None):
    """``tvm.exec.rpc_server``'s options, and ``--init``."""
    p = argparse.ArgumentParser(prog="python -m tc_autotune.measure.rpc_server", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="0.0.0.0", help="the address to bind to")
    p.add_argument("--port", type=int, default=9090, help="the first port to try")
    p.add_argument("--port-end", type=int, default=9199, help="the end of the ports to try")
    p.add_argument("--through-proxy", dest="through_proxy", action="store_true",
                   help="serve through a proxy at --host:--port")
    p.add_argument("--tracker", help="the RPC tracker, HOST:PORT")
    p.add_argument("--key", default="", help="the key the tracker lists this server under")
    p.add_argument("--silent", action="store_true", help="log errors only")
    p.add_argument("--load-library", help="additional libraries to load (colon-separated)")
    p.add_argument("--no-fork", dest="fork", action="store_false",
                   help="spawn session processes instead of forking them (needed for CUDA)")
    p.add_argument("--custom-addr", help="the address to report to the tracker")
    p.add_argument("--init", metavar="MODULE:FUNCTION", help="also call this in every serving process")
    args = p.parse_args(argv)
    if args.tracker:
        host, _, port = args.tracker.rpartition(":")
        if not host or not port.isdigit():
            p.error(f"argument --tracker: expected HOST:PORT, got {args.tracker!r}")
        if not args.key:
            p.error("argument --key: a server registered with a tracker needs a key")
        args.tracker = (host, int(port))
    if args.init and not all(args.init.partition(":")[::2]):
        p.error(f"argument --init: expected MODULE:FUNCTION, got {args.init!r}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    server = tvm.rpc.Server(args.host, args.port, args.port_end, is_proxy=args.through_proxy, key=args.key,
                            tracker_addr=args.tracker, load_library=args.load_library, custom_addr=args.custom_addr,
                            silent=args.silent, no_fork=not args.fork,
                            server_init_callback=functools.partial(install, args.init))
    server.proc.join()


if __name__ == "__main__":
    # Run as this module under its own name: the serving processes unpickle ``install`` and
    # ``_serve_loop`` by their module's name, and "__main__" there is another module.
    importlib.import_module(__spec__.name).main()
