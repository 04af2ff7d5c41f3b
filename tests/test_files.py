"""tripletml._files: only regular files are read, in bounded time."""
import os
import signal
import socket

import pytest

from tripletml._files import check_regular_file, open_regular


def test_a_regular_file_opens_and_reads(tmp_path):
    p = tmp_path / "a.bin"
    p.write_bytes(b"abc")
    with open_regular(p, "reader") as f:
        assert f.read() == b"abc"
    assert check_regular_file(p, "reader") == p
    link = tmp_path / "link"
    link.symlink_to(p)
    with open_regular(link, "reader") as f:
        assert f.read() == b"abc"


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "nope", "reader")
    with pytest.raises(FileNotFoundError):
        check_regular_file(tmp_path / "nope", "reader")


@pytest.mark.parametrize("kind", ["dir", "fifo", "dev", "socket"])
def test_special_files_are_refused_quickly(tmp_path, kind):
    if kind == "dir":
        p = tmp_path / "d.npz"
        p.mkdir()
        what = "a directory"
    elif kind == "fifo":
        p = tmp_path / "model.npz"
        os.mkfifo(p)
        what = r"a FIFO \(named pipe\)"
    elif kind == "dev":
        p = "/dev/zero"
        what = "a character device"
    else:
        p = tmp_path / "s.sock"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        what = "a socket"
    def hung(signum, frame):         # a FIFO must not block the open
        raise TimeoutError(f"open_regular blocked on {kind}")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        with pytest.raises(ValueError, match=f"reader: .* is {what}, not a regular file"):
            open_regular(p, "reader")
        with pytest.raises(ValueError, match=f"reader: .* is {what}"):
            check_regular_file(p, "reader")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
