"""The tests' way of running a command (``command_paths.run_python``, a fork of
``script_server``) answers as ``python script args`` would: exit codes, stdio, environment,
working directory, tracebacks, atexit handlers."""

import os
import subprocess
import sys
import textwrap

from command_paths import run_python

SCRIPT = textwrap.dedent("""\
    import atexit, os, sys
    atexit.register(lambda: print("atexit ran", flush=True))
    print("argv", sys.argv[1:], "cwd", os.path.basename(os.getcwd()), "env", os.environ.get("TC_PROBE"))
    print("to stderr", file=sys.stderr)
    how = sys.argv[1]
    if how == "raise":
        raise KeyError("boom")
    if how == "message":
        sys.exit("a message")
    sys.exit(int(how))
""")


def _both(tmp_path, *args):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    forked = run_python(script, *args, cwd=tmp_path, env={"TC_PROBE": "on"})
    real = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "TC_PROBE": "on"}, timeout=120)
    return forked, (real.returncode, real.stdout, real.stderr)


def test_exit_codes_stdio_environment_and_atexit_are_the_interpreters(tmp_path):
    for how in ("0", "3", "message"):
        forked, real = _both(tmp_path, how)
        assert forked == real
    forked, _ = _both(tmp_path, "3")
    assert forked[0] == 3 and f"argv ['3'] cwd {tmp_path.name} env on" in forked[1] and "atexit ran" in forked[1]


def test_an_uncaught_exception_is_a_traceback_and_exit_1(tmp_path):
    (code, out, err), (real_code, real_out, real_err) = _both(tmp_path, "raise")
    assert code == real_code == 1 and out == real_out
    assert err.splitlines()[0] == "to stderr" and "Traceback" in err and err.splitlines()[-1] == "KeyError: 'boom'"
    assert err.splitlines()[-1] == real_err.splitlines()[-1]


def test_a_module_runs_with_dash_m(tmp_path):
    (tmp_path / "probe_module.py").write_text("import sys\nprint('module', sys.argv[1:])\n")
    code, out, _ = run_python("-m", "probe_module", "x", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert (code, out) == (0, "module ['x']\n")
