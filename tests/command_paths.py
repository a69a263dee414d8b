"""Where the tests find each command of a checkout (the product's in scripts/, the study's, a lab
harness outside the package, in lab/), and running one as a user does: a process of its own
(``run_python``: forked from a process that has the package and TVM imported already,
``script_server``; a test of what a command imports runs an interpreter of its own instead), or
starting one that runs beside the test (``start_python``: a server, a writer to kill)."""

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_SERVER_SCRIPT = Path(__file__).resolve().parent / "script_server.py"
_server: subprocess.Popen | None = None


def script_path(script: str) -> Path:
    return ROOT / "lab" / "run_study.py" if script == "study.py" else ROOT / "scripts" / script


def run_script(script: str, *args, cwd=None, env=None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python <script> args`` (``env`` added to this one's)."""
    return run_python(script_path(script), *args, cwd=cwd, env=env)


def run_python(script, *args, cwd=None, env=None, timeout: float = 120) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python script args`` in a process of its own, with this
    process's environment plus ``env`` and the working directory ``cwd`` (default: this one's)."""
    request = {"argv": [str(script), *map(str, args)], "cwd": str(cwd or os.getcwd()),
               "env": {**os.environ, **{k: str(v) for k, v in (env or {}).items()}}}
    with tempfile.TemporaryDirectory(prefix="tc_autotune_cmd_") as tmp:
        request["stdout"], request["stderr"] = f"{tmp}/out", f"{tmp}/err"
        code = _serve(request, timeout)
        return code, Path(request["stdout"]).read_text(), Path(request["stderr"]).read_text()


class Started:
    """A command ``start_python`` started: like a ``subprocess.Popen(..., start_new_session=True)``
    (its process group is its pid; ``poll``, ``wait``, ``send_signal``, ``kill``), but a fork of
    ``script_server``, which reaps it."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            server = _the_server()
            server.stdin.write(json.dumps({"poll": self.pid}) + "\n")
            server.stdin.flush()
            self.returncode = json.loads(_reply(server, 30))["code"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """``sig`` to its process group: it and what it started (a server's workers)."""
        if self.returncode is None:  # not reaped: its pid is not anyone else's yet
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> int:
        self.send_signal(signal.SIGKILL)
        return self.wait(30)


def start_python(script, *args, cwd=None, env=None, stdout=os.devnull, stderr=os.devnull) -> Started:
    """``python script args`` started beside this process, as ``run_python`` runs it (forked from
    ``script_server``), in a session of its own; its output goes to the files ``stdout``, ``stderr``."""
    request = {"argv": [str(script), *map(str, args)], "cwd": str(cwd or os.getcwd()),
               "env": {**os.environ, **{k: str(v) for k, v in (env or {}).items()}},
               "stdout": str(stdout), "stderr": str(stderr), "background": True}
    server = _the_server()
    server.stdin.write(json.dumps(request) + "\n")
    server.stdin.flush()
    return Started(json.loads(_reply(server, 30))["pid"])


def _serve(request: dict, timeout: float) -> int:
    server = _the_server()
    server.stdin.write(json.dumps(request) + "\n")
    server.stdin.flush()
    pid = json.loads(_reply(server, timeout))["pid"]
    try:
        return json.loads(_reply(server, timeout))["code"]
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)  # the server then reaps it and answers; this test has failed
        _reply(server, 30)
        raise


def _reply(server: subprocess.Popen, timeout: float) -> str:
    ready, _, _ = select.select([server.stdout], [], [], timeout)
    if not ready:
        raise subprocess.TimeoutExpired(_SERVER_SCRIPT.name, timeout)
    line = server.stdout.readline()
    if not line:
        raise RuntimeError(f"the tests' command server ended (exit {server.wait()})")
    return line


def _the_server() -> subprocess.Popen:
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([sys.executable, str(_SERVER_SCRIPT)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, cwd=ROOT)
        atexit.register(_server.stdin.close)
    return _server


def run_completed(script, *args, **kwargs) -> subprocess.CompletedProcess:
    """``run_python`` as ``subprocess.run(..., capture_output=True, text=True)`` answers."""
    code, out, err = run_python(script, *args, **kwargs)
    return subprocess.CompletedProcess([sys.executable, str(script), *map(str, args)], code, out, err)
