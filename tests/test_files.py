"""tripletml.core.files: only regular files are read, in bounded time."""
import os
import signal
import socket

import pytest

from tripletml.core.files import check_regular_file, open_regular


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


def test_read_json_is_bounded_and_names_the_reader(tmp_path):
    from tripletml.core.files import read_json
    p = tmp_path / "a.json"
    p.write_text('{"a": 1}')
    assert read_json(p, "reader", 100, "a state") == {"a": 1}
    p.write_text("x" * 101)
    with pytest.raises(ValueError, match="reader: .* is larger than 100 bytes; it is not a state"):
        read_json(p, "reader", 100, "a state")
    p.write_text("{oops")
    with pytest.raises(ValueError, match="reader: .* is not valid JSON"):
        read_json(p, "reader", 100, "a state")


def test_write_atomically_replaces_or_leaves_the_old_file(tmp_path):
    from tripletml.core.files import write_atomically
    p = tmp_path / "out.bin"
    p.write_bytes(b"old")
    write_atomically(p, lambda fh: fh.write(b"new"), mode=0o644)
    assert p.read_bytes() == b"new" and (p.stat().st_mode & 0o777) == 0o644

    def broken(fh):
        fh.write(b"half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        write_atomically(p, broken)
    assert p.read_bytes() == b"new"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["out.bin"]    # no temporary left
