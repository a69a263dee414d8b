"""A process that runs the checkout's commands for the tests, each in a process of its own forked
from this one (``command_paths.run_python``).

A test that runs ``python scripts/tune.py ...`` as a user does pays for a new interpreter and for
importing the package and TVM each time (about 2 s on the CI machine, a few hundred runs in the
suite): here they are imported once, and each command runs in a fork of this process, which is
a fresh process in every way a command can see (its own argv, environment, working directory,
stdio, exit code) except that those modules are already loaded.  A test that checks what a
command imports runs its own interpreter instead.

Protocol (one JSON object a line): a request on stdin {"argv", "cwd", "env", "stdout", "stderr"}
(argv: a script and its arguments, or "-m", a module and its arguments);
on stdout the child's pid ({"pid"}), then its exit code ({"code"}).  With "background": true the
child is started in a session of its own (as ``subprocess.Popen(..., start_new_session=True)``:
its process group is its pid) and only its pid is answered; {"poll": pid} then answers its exit
code, or null while it runs (``command_paths.start_python``: servers and writers a test runs
beside itself).  This process stays single threaded, so forking it is safe.
"""

import atexit
import json
import os
import runpy
import sys
import threading
import traceback


def _preload() -> None:
    import tc_autotune  # noqa: F401
    import tc_autotune.cli.common  # noqa: F401
    import tvm  # noqa: F401  (what a command that builds or checks a kernel imports)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"), as the interpreter does
    return 1


def _child(request: dict) -> None:
    """Run one command as ``python argv...`` would, then end this process with its exit code."""
    code = 1
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        if request.get("cwd"):
            os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.stdin = open(os.devnull)
        # the interpreter's path: the script's folder (for -m, the working directory), then PYTHONPATH
        for entry in reversed(request["env"].get("PYTHONPATH", "").split(os.pathsep)):
            if entry:
                sys.path.insert(0, entry)
        script, *args = request["argv"]
        try:
            if script == "-m":  # python -m module args
                module, *args = args
                sys.path.insert(0, os.getcwd())
                sys.argv = [module, *args]
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                sys.argv = [script, *args]
                sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
                runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exit_:
            code = _exit_code(exit_.code)
        except BaseException:  # noqa: BLE001  (what an uncaught exception does: the traceback, exit 1)
            traceback.print_exc()
            code = 1
        # the interpreter's own shutdown: wait for non-daemon threads, then the atexit handlers
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _poll(pid: int):
    """The exit code of background child ``pid`` (reaped), or None while it runs."""
    done, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if done else None


def main() -> int:
    _preload()
    reply = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        if "poll" in request:
            reply.write(json.dumps({"code": _poll(request["poll"])}) + "\n")
            reply.flush()
            continue
        background = request.get("background", False)
        pid = os.fork()
        if pid == 0:
            if background:
                os.setsid()
            _child(request)
        reply.write(json.dumps({"pid": pid}) + "\n")
        reply.flush()
        if background:
            continue
        _, status = os.waitpid(pid, 0)
        reply.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
        reply.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
