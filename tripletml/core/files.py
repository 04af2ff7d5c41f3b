"""Opening the files the library reads: regular files only.

Every reader of the library (model files, indexes, shards, data sets) opens
its input through :func:`open_regular`, which refuses anything but a regular
file -- a FIFO (whose ``open`` would block forever), a character device such
as ``/dev/zero`` (endless), a directory or a socket -- with a ValueError
naming the reader, in bounded time: the file is opened non-blocking and
checked with ``fstat`` on the open descriptor, so a name swapped between a
check and the open cannot slip through.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Any

__all__ = ["open_regular", "check_regular_file", "read_json", "write_atomically"]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _refuse(who: str, path: Any, mode: int) -> ValueError:
    return ValueError(f"{who}: {os.fspath(path)} is {_kind(mode)}, not a regular file; "
                      "only regular files are read.")


def is_regular_file(path: Any) -> bool:
    """A regular file that is not a symbolic link (``lstat``): what a
    checkpoint reads back (a link could point anywhere)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def check_regular_file(path: Any, who: str) -> Path:
    """The path of an existing regular file (symbolic links followed), or a
    ValueError naming ``who``; FileNotFoundError when it does not exist.
    Does not open the file."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(who, path, st.st_mode)
    return Path(path)


def open_regular(path: Any, who: str) -> IO[bytes]:
    """Open ``path`` for binary reading if it is a regular file.

    The open is non-blocking (a FIFO without a writer does not block it) and
    the descriptor is checked with ``fstat`` before anything is read; the
    returned file object is an ordinary blocking binary reader.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        Not a regular file (directory, FIFO, device, socket), naming ``who``.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError:                     # a directory, a socket (ENXIO), ...
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(who, path, st.st_mode) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(who, path, st.st_mode)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_json(path: Any, who: str, max_bytes: int, what: str) -> Any:
    """The JSON value of a regular file of at most ``max_bytes`` bytes
    (ValueError naming ``who`` and saying the file is not ``what``
    otherwise); bounded time and memory whatever the file holds."""
    import json

    with open_regular(path, who) as fh:
        raw = fh.read(int(max_bytes) + 1)
    if len(raw) > max_bytes:
        raise ValueError(f"{who}: {os.fspath(path)} is larger than {max_bytes} bytes; it is not "
                         f"{what}.")
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{who}: {os.fspath(path)} is not valid JSON ({exc}).") from None


def write_atomically(path: Path, write, *, mode: int | None = None) -> None:
    """Write ``path`` through ``write(binary_file)`` into a new temporary file
    beside it (created exclusively, never through an existing name), then
    rename it over ``path``; the temporary is removed on any failure.
    ``mode``: the permissions to give the file (default: mkstemp's 0600).
    The temporary's name is ``.<name>.<random>.tmp``."""
    import tempfile

    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                               dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
