"""What the command-line scripts share: exit codes, a parser whose errors are one line,
argument types for numbers, paths and workloads.

Every script checks all of its input with these before it touches the GPU or builds a
kernel, so a typo costs a second and one line on stderr, never a traceback after a
measured batch.  Nothing here imports TVM (a bad argument must fail fast); the
workload checks import only the pure-Python ``workloads``.  An argument type that one command
alone takes is that command's (``benchmark.knob_values``).
The path checks never create or modify anything.  A path the user may not read or
write (permission denied) is ``NoAccess``: one line and ``EXIT_IO_ERROR``, not exit 2,
so a cron job can tell a permissions problem from a typo.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import math
import os
import sys
from pathlib import Path

from ..measure import devices
from .. import workloads
from ..tuning.jobs import MAX_TRIALS

# Exit codes of all scripts (scripts/nightly.py's agree with tc_autotune.tuning.nightly.EXIT_*).
EXIT_OK = 0
EXIT_BAD_INPUT = 2  # bad arguments or input files: one line naming the bad value
EXIT_NO_GPU = 3
EXIT_NOTHING_VALID = 4  # tune.py: no valid config was measured
EXIT_LOCKED = 5  # nightly.py: another run holds the job's lock
EXIT_REGRESSION = 6  # nightly.py: a workload regressed or has no valid record
EXIT_DEVICES_LOST = 8  # tune.py, nightly.py: every GPU (local runner or RPC server) died or hung
EXIT_IO_ERROR = 9  # a file or folder cannot be read or written: permission denied, read-only or full disk
EXIT_TIMER = 10  # benchmark.py: the GPU could not time a kernel (the timer's CUDA error): one line
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)

BadValue = argparse.ArgumentTypeError  # what the argument types raise; argparse prints its text

# Sane upper bounds: a value past them is a typo (10**12 for 10**2), and would otherwise
# pass every check and fail hours later, or overflow inside TVM, numpy or threading.
MAX_COUNT = 4096  # build workers, RPC sessions
MAX_SECONDS = 7 * 24 * 3600.0  # timeouts (threading's waits overflow past threading.TIMEOUT_MAX)
MAX_REPEAT_MS = 60_000.0  # one timed repeat (TVM's time_evaluator takes an int of milliseconds)
# errno values that make an OSError about a path an I/O error of the user's (EXIT_IO_ERROR)
IO_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO}


class NoAccess(PermissionError):
    """A path the user may not read or write.  Not a ``BadValue``: argparse does not turn it
    into an exit 2, the parser turns it into one line and ``EXIT_IO_ERROR``."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit 2 (argparse's own
    error also prints the usage, which buries the message in cron logs); a path that cannot
    be read or written is one line and exit ``EXIT_IO_ERROR``."""

    def error(self, message):
        message = " ".join(str(message).splitlines())
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")

    def _get_value(self, action, arg_string):
        # argparse's hook that calls an argument's type: the one place that knows the option's
        # name, so the line says "argument --log: ...".  An OSError the type raises (a stat in a
        # folder we may not enter) is not one of the errors argparse turns into an exit 2.
        try:
            return super()._get_value(action, arg_string)
        except OSError as err:
            if not is_io_error(err):
                raise
            name = argparse._get_action_name(action) or action.dest
            self.exit(EXIT_IO_ERROR, f"{self.prog}: error: argument {name}: {describe_io_error(err)}\n")

    def parse_known_args(self, args=None, namespace=None):
        try:
            return super().parse_known_args(args, namespace)
        except OSError as err:  # should argparse stop calling _get_value: still one line
            if not is_io_error(err):
                raise
            self.exit(EXIT_IO_ERROR, f"{self.prog}: error: {describe_io_error(err)}\n")


def log_progress(verbose: bool = False) -> None:
    """The commands' log lines on stderr: time, level and message (debug ones with ``verbose``)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")


def torch_gpu_missing(prog: str) -> str | None:
    """Why a command that runs PyTorch on the GPU cannot run here, as its one line of error
    (exit 3), or None where it can."""
    try:
        import torch
    except ImportError:
        return f"{prog}: PyTorch is not installed"
    if not torch.cuda.is_available():
        return f"{prog}: no CUDA GPU (torch.cuda.is_available() is False)"
    return None


def script_parser(prog: str, doc: str | None) -> OneLineParser:
    """The parser of a script: its module docstring (usage and exit codes) as description."""
    return OneLineParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


# ---- I/O errors ---------------------------------------------------------------------
def is_io_error(err: BaseException) -> bool:
    """An OSError about a file the user cannot read or write (not a socket or a missing program)."""
    return isinstance(err, NoAccess) or (isinstance(err, OSError) and err.errno in IO_ERRNOS
                                         and err.filename is not None)


def describe_io_error(err: OSError) -> str:
    """One line: the path and the reason ("'/x/log.jsonl': permission denied")."""
    if isinstance(err, NoAccess) or err.filename is None:
        return " ".join(str(err).splitlines())
    reason = err.strerror.lower() if err.strerror else str(err)
    return f"{str(err.filename)!r}: {reason}"


@contextlib.contextmanager
def io_errors_exit(prog: str):
    """Around a command's body: an I/O error about a path raised anywhere in it (a report
    folder made read-only mid-run, an unreadable log in a folder of logs) is one line on
    stderr and ``SystemExit(EXIT_IO_ERROR)`` instead of a traceback.  Other errors pass."""
    try:
        yield
    except OSError as err:
        if not is_io_error(err):
            raise
        print(f"{prog}: {describe_io_error(err)}", file=sys.stderr)
        raise SystemExit(EXIT_IO_ERROR) from None


# ---- numbers ------------------------------------------------------------------------
def _number(kind, what: str, minimum: float, inclusive: bool, maximum: float | None = None):
    bound = "not be negative" if (minimum == 0 and inclusive) else "be positive"

    def parse(text):
        try:
            value = kind(text)
        except (TypeError, ValueError, OverflowError):
            raise BadValue(f"{text!r} is not {what}") from None
        if not math.isfinite(value):
            raise BadValue(f"{text!r} must be a finite number")
        if value < minimum or (value == minimum and not inclusive):
            raise BadValue(f"{text!r} must {bound}")
        if maximum is not None and value > maximum:
            limit = int(maximum) if float(maximum).is_integer() else maximum
            raise BadValue(f"{text!r} is more than the limit of {limit}")
        return value

    return parse


positive_int = _number(int, "an integer", 0, inclusive=False)
non_negative_int = _number(int, "an integer", 0, inclusive=True)
positive_float = _number(float, "a number", 0, inclusive=False)
non_negative_float = _number(float, "a number", 0, inclusive=True)
trial_count = _number(int, "an integer", 0, inclusive=False, maximum=MAX_TRIALS)  # trials, batch sizes
worker_count = _number(int, "an integer", 0, inclusive=False, maximum=MAX_COUNT)
seconds = _number(float, "a number", 0, inclusive=False, maximum=MAX_SECONDS)
repeat_ms = _number(float, "a number", 0, inclusive=True, maximum=MAX_REPEAT_MS)


# ---- paths --------------------------------------------------------------------------
def _path_check(check):
    """A path check whose stat of a path in a folder the user may not enter (PermissionError
    from ``Path.exists``) is ``NoAccess`` naming the path as given, not a traceback."""

    def checked(text):
        try:
            return check(text)
        except NoAccess:
            raise
        except OSError as err:
            if err.errno not in IO_ERRNOS:
                raise
            raise NoAccess(f"{str(text)!r}: {(err.strerror or 'permission denied').lower()}") from None

    checked.__name__, checked.__doc__ = check.__name__, check.__doc__
    return checked


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _creatable(path: Path, text: str, what: str) -> None:
    """``path`` does not exist: can it (with any missing parent folders) be created?"""
    ancestor = _nearest_existing(path.parent)
    if not ancestor.is_dir():
        raise BadValue(f"{text!r}: cannot create {what}: {str(ancestor)!r} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise NoAccess(f"{text!r}: cannot create {what}: directory {str(ancestor)!r} is not writable")


@_path_check
def appendable_log(text) -> str:
    """A JSONL log that can be read (to resume) and appended to: an existing readable,
    writable file, or a new file whose folder exists or can be created (appends create
    missing parent folders).  Checked without creating or touching anything."""
    path = Path(text)
    if path.is_dir():
        raise BadValue(f"{str(text)!r} is a directory, not a log file")
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise NoAccess(f"{str(text)!r} cannot be appended to: permission denied")
        return str(text)
    _creatable(path, str(text), "the log")
    return str(text)


@_path_check
def writable_file(text) -> str:
    """An output file that can be (over)written: not a directory, writable if it exists,
    else creatable."""
    path = Path(text)
    if path.is_dir():
        raise BadValue(f"{str(text)!r} is a directory, not a file")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise NoAccess(f"{str(text)!r} is not writable: permission denied")
        return str(text)
    _creatable(path, str(text), "the file")
    return str(text)


@_path_check
def writable_dir(text) -> str:
    """An output folder: an existing writable directory, or one that can be created."""
    path = Path(text)
    if path.exists():
        if not path.is_dir():
            raise BadValue(f"{str(text)!r} is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise NoAccess(f"directory {str(text)!r} is not writable: permission denied")
        return str(text)
    _creatable(path, str(text), "the directory")
    return str(text)


@_path_check
def existing_path(text) -> str:
    """An input file or folder that exists and can be read (a mistyped log must not be
    silently read as empty)."""
    path = Path(text)
    if not path.exists():
        raise BadValue(f"{str(text)!r} does not exist")
    if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
        raise NoAccess(f"{str(text)!r} is not readable: permission denied")
    return str(text)


# ---- domain values ------------------------------------------------------------------
def workload_name(text) -> str:
    """A workload preset or spec that ``workloads.get`` accepts; returned as given (the
    name labels report rows)."""
    try:
        workloads.get(text)
    except ValueError as err:
        raise BadValue(str(err)) from None
    return text


def gpu_indices(text) -> tuple[int, ...]:
    """GPU indices as nvidia-smi numbers them: '0' or '0,1,3'."""
    try:
        return devices.parse_indices(text)
    except ValueError as err:
        raise BadValue(str(err)) from None


def tracker_address(text) -> tuple[str, int]:
    """An RPC tracker's HOST:PORT."""
    try:
        return devices.parse_tracker(text)
    except ValueError as err:
        raise BadValue(str(err)) from None


def cuda_arch(text) -> str:
    """A CUDA architecture name such as sm_90."""
    if not (text.startswith("sm_") and text[3:].isdigit()):
        raise BadValue(f"{text!r} is not a CUDA arch such as sm_90")
    return text
