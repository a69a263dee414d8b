"""Stand-ins for the GPU runner process's main (``runner.LocalRunner(main=...)``): module-level
functions, so a spawned process can import them.  They serve the real request loop
(``runner.serve``) with a measure function that needs no GPU: the kernel path's file name says
what the "kernel" does."""

import os
import time
from pathlib import Path

from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.measure.runner_protocol import serve  # not tc_autotune.measure.runner: no TVM, a fast start

GPU = gpu_for_arch("sm_90")


def _measure(so_path, key, tensors):
    """ok_<seconds>: three timings; wrong: a wrong result; raise: an error in the process (as a
    CUDA error); crash: the process dies (as an illegal memory access kills it); hang: never
    returns; env: the process's CUDA_VISIBLE_DEVICES; pid: its pid."""
    what = Path(so_path).name.split("-")[0]
    if what.startswith("ok_"):
        seconds = float(what[3:])
        return "ok", [seconds, seconds, seconds]
    if what == "wrong":
        return "wrong", "relative L2 error 1 against the fp32 reference"
    if what == "raise":
        raise RuntimeError("CUDA: an illegal memory access was encountered")
    if what == "crash":
        os._exit(7)
    if what == "hang":
        time.sleep(3600)
    if what == "env":
        return "ok", os.environ.get("CUDA_VISIBLE_DEVICES")
    if what == "pid":
        return "ok", os.getpid()
    raise ValueError(f"unknown stand-in kernel {so_path}")


def _started(inputs_dir):
    with open(os.path.join(inputs_dir, "starts"), "a") as f:  # one line per process started
        f.write(f"{os.getpid()}\n")


def stub_main(conn, inputs_dir, options):
    _started(inputs_dir)
    serve(conn, GPU, _measure)


def dies_at_start(conn, inputs_dir, options):
    _started(inputs_dir)
    os._exit(3)  # as a process without a CUDA GPU does


def never_ready(conn, inputs_dir, options):
    _started(inputs_dir)
    time.sleep(3600)


def starts(inputs_dir) -> list[int]:
    """The pids of the processes started so far, in order."""
    path = Path(inputs_dir) / "starts"
    return [int(line) for line in path.read_text().split()] if path.exists() else []
