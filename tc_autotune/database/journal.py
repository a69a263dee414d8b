"""A crash-safe append-only file of lines: the storage under the tuning logs.

Tuning runs are killed (OOM, a hung GPU, Ctrl-C, ``kill -9`` of a nightly job),
and several processes may append to one log.  What this module guarantees:

* Appends are serialised by an exclusive ``flock`` and fsynced before the lock is
  released; one call is one ``write`` of whole lines.
* A writer killed mid-``write`` leaves a torn last line (the kernel may stop a big
  write part-way).  The next appender sees a file that does not end in a newline
  and *fences* it before writing: a tail that is still a whole line (only its
  newline missing) gets the newline; anything else is moved, byte for byte, to
  ``<log>.torn`` (for forensics) and cut off, so no torn line stays in the log.
* Readers never hold a whole oversized line in memory: lines over
  ``MAX_LINE_BYTES`` are skipped while being read.
* ``replace_atomic`` swaps a whole file (temp file, fsync, rename, directory
  fsync), optionally keeping the previous content as ``<file>.bak``.  ``rewrite`` does it
  under the append lock, and appenders check, once they hold the lock, that the file they
  opened is still the one at the path: a rewrite never loses a concurrent append.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator

MAX_LINE_BYTES = 1 << 20  # a record is ~1-4 KB; a longer line is not one
_CHUNK = 1 << 16
TORN_SUFFIX = ".torn"


def append_lines(path, lines: Iterable[bytes], is_whole: Callable[[bytes], bool]) -> int:
    """Append ``lines`` (bytes without newlines) to ``path`` under an exclusive lock.

    ``is_whole(tail)`` tells whether an unterminated last line left by a dead writer
    is a complete entry (kept, newline added) or torn (moved to ``<path>.torn``).
    Returns the number of lines written.
    """
    lines = list(lines)
    if not lines:
        return 0
    data = b"".join(line + b"\n" for line in lines)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        with open(path, "ab+") as f:  # append mode; '+' to read a torn tail
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                if not _still_at(f, path):  # ``rewrite`` replaced the file while we waited: append to the new one
                    continue
                f.write(_fence(f, path, is_whole) + data)
                f.flush()
                os.fsync(f.fileno())
                return len(lines)
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _still_at(f, path: Path) -> bool:
    """Whether the open file ``f`` is still the file at ``path`` (not renamed over since it was opened)."""
    try:
        here, there = os.fstat(f.fileno()), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def rewrite(path, transform: Callable[[bytes], bytes], backup: bool = False) -> bool:
    """Replace ``path`` by ``transform(its bytes)``, atomically (``replace_atomic``), holding its
    append lock from the read to the rename: an append waiting for the lock then finds the file
    replaced and goes to the new one (``append_lines``), so no line is lost.  Returns whether
    anything changed (an unchanged file is not rewritten).  FileNotFoundError where it is missing.
    """
    path = Path(path)
    while True:
        with open(path, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                if not _still_at(f, path):
                    continue
                data = f.read()
                new = transform(data)
                if new == data:
                    return False
                replace_atomic(path, new, backup=backup)
                return True
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _fence(f, path: Path, is_whole: Callable[[bytes], bool]) -> bytes:
    """Deal with an unterminated last line (we hold the lock): returns bytes to prepend."""
    fd = f.fileno()
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return b""
    start = _last_line_start(fd, size)
    if size - start <= MAX_LINE_BYTES and is_whole(os.pread(fd, size - start, start)):
        return b"\n"
    with open(path.with_name(path.name + TORN_SUFFIX), "ab") as torn:
        offset = start
        while offset < size:
            chunk = os.pread(fd, min(_CHUNK, size - offset), offset)
            torn.write(chunk)
            offset += len(chunk)
        torn.write(b"\n")
        torn.flush()
        os.fsync(torn.fileno())
    os.ftruncate(fd, start)  # only after the torn bytes are safe in the sidecar
    return b""


def _last_line_start(fd: int, size: int) -> int:
    """Offset just after the last newline before ``size`` (0 when there is none)."""
    end = size
    while end > 0:
        begin = max(0, end - _CHUNK)
        chunk = os.pread(fd, end - begin, begin)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return begin + newline + 1
        end = begin
    return 0


def read_lines(path) -> Iterator[tuple[int, bytes | None, bool]]:
    """(line number, bytes or None when longer than MAX_LINE_BYTES, ends with newline).

    The last line of a file being appended to (or torn) has no newline: callers may
    treat it as unfinished rather than corrupt.
    """
    with open(path, "rb") as f:
        lineno = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            lineno += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while True:  # skip the rest of the line, a chunk at a time
                    chunk = f.readline(_CHUNK)
                    if not chunk or chunk.endswith(b"\n"):
                        break
                yield lineno, None, True
                continue
            yield lineno, raw, raw.endswith(b"\n")


def replace_atomic(path, data: bytes, backup: bool = False) -> Path | None:
    """Replace ``path`` by ``data`` all at once: readers see the old or the new file.

    With ``backup``, the previous file is first copied to ``<path>.bak`` (returned).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = None
    if backup and path.exists():
        saved = path.with_name(path.name + ".bak")
        _write_new(saved, path.read_bytes())
    _write_new(path, data)
    return saved


def _write_new(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make shipped logs private
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


__all__ = ["MAX_LINE_BYTES", "TORN_SUFFIX", "append_lines", "read_lines", "replace_atomic", "rewrite"]
