"""Hardening, round 4 (issue 42): checkpoints tied to their data (section 4),
scheduler addresses that fail fast (section 2)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from sklearn.datasets import load_digits

import tripletml
from tripletml.distributed.sharded import ShardedCollection
from tripletml.distributed.partitioned import fit_partitioned

from _crash import reseal


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:400], y[:400]


def _coll(X, y):
    return ShardedCollection.from_arrays(X, y, n_partitions=2)


def _make(name, **kw):
    params = dict(n_triplets=600, max_iter=2, tol=None, random_state=0)
    params.update(kw)
    return getattr(tripletml, name)(**params)


def _state(d):
    return json.loads((d / "state.json").read_text())


def _arrays_path(d):
    return d / _state(d)["state"]["file"]


# ---------------------------------------------------------------------------
# section 4: checkpoints belong to their data
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["OASIS", "SDCA"])
def test_checkpoint_of_other_data_with_the_same_sizes_is_refused(tmp_path, digits, name):
    X, y = digits
    fit_partitioned(_make(name), _coll(X, y), checkpoint_dir=tmp_path)
    other = np.array(X)
    other[300] += 1.0                    # one row of partition 1
    with pytest.raises(ValueError, match=r"made from other data .*partition 1 differ"):
        fit_partitioned(_make(name), _coll(other, y), checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match=r"made from other data .*partitions 0, 1 differ"):
        fit_partitioned(_make(name), _coll(X[::-1], y[::-1]), checkpoint_dir=tmp_path)
    # resume=False starts again on the new data
    fit_partitioned(_make(name), _coll(other, y), checkpoint_dir=tmp_path, resume=False)


def test_fingerprint_sees_a_swap_of_rows_or_labels_outside_the_hashed_rows():
    from tripletml.distributed.partitioned import Partition, _fingerprint
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(5000, 3)), rng.integers(0, 3, 5000)
    fp = _fingerprint(Partition(0, X, y), np.unique(y, return_counts=True))
    X2 = X.copy()
    X2[[2501, 2502]] = X2[[2502, 2501]]
    y2 = y.copy()
    i, j = 2501, 2501 + int(np.flatnonzero(y[2502:] != y[2501])[0]) + 1
    y2[[i, j]] = y2[[j, i]]
    assert _fingerprint(Partition(0, X2, y), np.unique(y, return_counts=True)) != fp
    assert _fingerprint(Partition(0, X, y2), np.unique(y2, return_counts=True)) != fp
    assert _fingerprint(Partition(0, X.copy(), y.copy()),
                        np.unique(y, return_counts=True)) == fp


def test_checkpoint_of_other_settings_names_the_setting(tmp_path, digits):
    X, y = digits
    fit_partitioned(_make("OASIS"), _coll(X, y), checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match=r"other settings \(params\.C: "):
        fit_partitioned(_make("OASIS", C=0.5), _coll(X, y), checkpoint_dir=tmp_path)


def test_edited_checkpoint_files_are_refused_by_their_digests(tmp_path, digits):
    X, y = digits
    coll = _coll(X, y)
    fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    path = _arrays_path(tmp_path)
    arrays = dict(np.load(path))
    raw = path.read_bytes()
    arrays["W"] = arrays["W"] * 1000
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="round-.*npz was modified after tripletml wrote it"):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    path.write_bytes(raw)
    state = _state(tmp_path)
    state["state"]["meta"]["hist"]["loss"][0] *= 2       # an edited history
    (tmp_path / "state.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match="state.json was modified after tripletml wrote it"):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)


def test_sdca_edits_with_rewritten_digests_fail_the_primal_from_the_duals(tmp_path, digits):
    """Duals x5 or the model x1000, digests rewritten: M(alpha) recomputed
    from the data disagrees."""
    X, y = digits
    coll = _coll(X, y)
    fit_partitioned(_make("SDCA", output="average"), coll, checkpoint_dir=tmp_path)
    path = _arrays_path(tmp_path)
    good = dict(np.load(path))
    for key, factor in (("alpha", 5.0), ("M", 1000.0), ("alpha_sum", 5.0)):
        arrays = {k: v.copy() for k, v in good.items()}
        arrays[key] = arrays[key] * factor
        np.savez(path, **arrays)
        reseal(tmp_path)
        with pytest.raises(ValueError, match="not the model of its dual variables"):
            fit_partitioned(_make("SDCA", output="average"), coll, checkpoint_dir=tmp_path)
    np.savez(path, **good)
    reseal(tmp_path)                      # the untouched arrays are accepted
    fit_partitioned(_make("SDCA", output="average"), coll, checkpoint_dir=tmp_path)


def test_changed_seed_or_step_count_with_rewritten_digests_is_refused(tmp_path, digits):
    X, y = digits
    coll = _coll(X, y)
    fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    good = _state(tmp_path)
    state = json.loads(json.dumps(good))
    state["state"]["meta"]["seed"] = str(int(good["state"]["meta"]["seed"]) + 1)
    (tmp_path / "state.json").write_text(json.dumps(state))
    reseal(tmp_path)
    with pytest.raises(ValueError, match="sampling seed .* random_state=0"):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    state = json.loads(json.dumps(good))
    state["state"]["meta"]["model"]["t"] += 7
    (tmp_path / "state.json").write_text(json.dumps(state))
    reseal(tmp_path)
    with pytest.raises(ValueError, match="step count t="):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)


@pytest.mark.parametrize("kind", ["file", "devnull", "below_a_file"])
def test_checkpoint_dir_that_is_not_a_directory_is_refused(tmp_path, digits, kind):
    X, y = digits
    f = tmp_path / "f"
    f.write_text("mine")
    target = {"file": f, "devnull": "/dev/null", "below_a_file": f / "ck"}[kind]
    if kind == "devnull" and not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    with pytest.raises(ValueError, match="checkpoint_dir .*(not a directory|cannot be)"):
        fit_partitioned(_make("OASIS"), _coll(X, y), checkpoint_dir=target)
    assert f.read_text() == "mine"


def test_huge_declared_shape_and_tampered_counters_name_the_file(tmp_path, digits):
    X, y = digits
    coll = _coll(X, y)
    fit_partitioned(_make("SDCA"), coll, checkpoint_dir=tmp_path)
    path = _arrays_path(tmp_path)
    good = path.read_bytes()
    arrays = dict(np.load(path))
    np.savez(path, **arrays)
    # rewrite the header of M to declare a (10**6, 10**6) array (7.3 TiB)
    raw = path.read_bytes()
    d = arrays["M"].shape[0]
    old = f"'shape': ({d}, {d}), }}".encode()
    new = b"'shape': (1000000, 1000000), }"
    assert raw.count(old) >= 1
    forged = raw.replace(old, new[:len(old)] if len(new) > len(old) else new.ljust(len(old)))
    if len(new) > len(old):              # keep the header length: shorten the padding
        i = raw.index(old)
        end = raw.index(b"\n", i)
        pad = end - i - len(old)
        assert pad >= len(new) - len(old)
        forged = raw[:i] + new + b" " * (pad - (len(new) - len(old))) + raw[end:]
    path.write_bytes(forged)
    reseal(tmp_path)
    with pytest.raises(ValueError, match=r"round-\d+\.npz: member 'M' declares shape"):
        fit_partitioned(_make("SDCA"), coll, checkpoint_dir=tmp_path)
    path.write_bytes(good)
    state = _state(tmp_path)
    state["state"]["meta"]["n_window"] = 10 ** 18
    (tmp_path / "state.json").write_text(json.dumps(state))
    reseal(tmp_path)
    with pytest.raises(ValueError, match="averaging window is malformed"):
        fit_partitioned(_make("SDCA"), coll, checkpoint_dir=tmp_path)


def test_foreign_files_in_the_checkpoint_folder_are_never_deleted(tmp_path, digits):
    X, y = digits
    coll = _coll(X, y)
    mine = tmp_path / "round-000000000001.npz"
    np.savez(mine, a=np.arange(3))
    before = mine.read_bytes()
    with pytest.raises(ValueError, match="did not write .*round-000000000001.npz"):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    assert mine.read_bytes() == before
    mine.unlink()
    (tmp_path / "state.json").write_text('{"my": "settings"}')
    with pytest.raises(ValueError, match="did not write .*state.json"):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path, resume=False)
    assert (tmp_path / "state.json").read_text() == '{"my": "settings"}'
    (tmp_path / "state.json").unlink()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    tmpname = tmp_path / ".round-000000000001.npz.abcd1234.tmp"    # a look-alike name
    tmpname.write_text("mine too")
    fit_partitioned(_make("OASIS", max_iter=3), coll, checkpoint_dir=tmp_path)
    assert notes.read_text() == "mine" and tmpname.read_text() == "mine too"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".round-000000000001.npz.abcd1234.tmp", "notes.txt", "round-000000000003.npz",
        "state.json"]


def test_temporaries_of_a_killed_save_are_removed_at_the_next_save(tmp_path, digits):
    from tripletml.distributed.checkpoint import RoundCheckpoint
    X, y = digits
    coll = _coll(X, y)
    fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    raw = _arrays_path(tmp_path).read_bytes()
    killed = [tmp_path / ".round-000000000003.npz.k1ll3d_1.tmp",
              tmp_path / ".state.json.k1ll3d_2.tmp"]
    killed[0].write_bytes(raw[:len(raw) // 2])       # a half-written arrays file
    killed[1].write_bytes(b"")                       # killed before writing
    ck = RoundCheckpoint.__new__(RoundCheckpoint)    # a save without a new open
    ck.dir, ck.resume = tmp_path, True
    ck.settings, ck.data = _state(tmp_path)["settings"], _state(tmp_path)["data"]
    ck.save(3, {"W": np.eye(2)}, {"seed": "1"})
    assert not any(p.exists() for p in killed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["round-000000000003.npz",
                                                          "state.json"]


# ---------------------------------------------------------------------------
# section 2: scheduler addresses fail fast (loopback only, bounded loops)
# ---------------------------------------------------------------------------
class _SilentServer:
    """Accepts connections on 127.0.0.1 and never answers (at most 50)."""

    def __init__(self):
        import socket
        import threading
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.conns = []
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        import socket
        for _ in range(500):                         # bounded: 100 s at most
            if self.stop.is_set() or len(self.conns) >= 50:
                return
            try:
                self.conns.append(self.sock.accept()[0])
            except socket.timeout:
                continue
            except OSError:
                return

    def close(self):
        self.stop.set()
        self.thread.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()


class _HTTPServer:
    def __init__(self):
        import http.server
        import threading
        self.srv = http.server.HTTPServer(("127.0.0.1", 0),
                                          http.server.BaseHTTPRequestHandler)
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever,
                                       kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.thread.join(5)


def _free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                         # nothing listens there now
    return port


@pytest.fixture(scope="module")
def cli_inputs(tmp_path_factory):
    from sklearn.datasets import dump_svmlight_file

    from tripletml.distributed.sharded import write_npz_shards
    d = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    y = np.arange(60) % 3
    X = rng.normal(size=(60, 4)) + y[:, None]
    dump_svmlight_file(X, y, str(d / "toy.svm"), zero_based=False)
    write_npz_shards(d / "shards", X, y, rows_per_shard=30)
    return d


#: --scheduler-timeout of these tests (a silent peer costs each command this
#: long).  A loopback connect completes at once (the probe allows it at least
#: 10 ms even past the deadline, and then times out reading: the same error),
#: so a quarter second tells a silent peer from the other failures as surely
#: as a whole one; the messages name the value given.
_TIMEOUT = 0.25


def _commands(d, address, timeout):
    tail = ["--scheduler", address, "--scheduler-timeout", str(timeout)]
    return {"fit": ["fit", "OASIS", str(d / "toy.svm"), "-o", str(d / "m.npz")] + tail,
            "fit auto": ["fit", "auto", str(d / "toy.svm"), "-o", str(d / "a.npz")] + tail,
            "shards": ["fit", "OASIS", str(d / "shards"), "-o", str(d / "s.npz")] + tail,
            "reproduce": ["reproduce", "euclidean", "--quick", "--out", str(d / "r")] + tail}


@pytest.mark.parametrize("kind, message", [
    ("silent", "accepted the connection but did not answer as a Dask scheduler within "
               f"{_TIMEOUT:g} s"),
    ("nothing", "nothing answers at"),
    ("not an address", "is not a scheduler address"),
    ("http url", "is an HTTP URL"),
    ("http port", f"did not answer as a Dask scheduler within {_TIMEOUT:g} s"),
])
def test_bad_scheduler_address_is_a_clear_error_for_every_command(cli_inputs, capsys, kind,
                                                                  message):
    pytest.importorskip("distributed")
    from tripletml.cli import main
    server = {"silent": _SilentServer, "http port": _HTTPServer}.get(kind, lambda: None)()
    try:
        address = {"silent": lambda: f"tcp://127.0.0.1:{server.port}",
                   "nothing": lambda: f"tcp://127.0.0.1:{_free_port()}",
                   "not an address": lambda: "not an address",
                   "http url": lambda: "http://127.0.0.1:8787/status",
                   "http port": lambda: f"tcp://127.0.0.1:{server.port}"}[kind]()
        for name, argv in _commands(cli_inputs, address, _TIMEOUT).items():
            code = main(argv)
            err = capsys.readouterr().err
            assert code in (1, 2), name
            assert "tripletml: error: use_cluster:" in err and message in err, (name, err)
            assert "Traceback" not in err
            assert not (cli_inputs / "m.npz").exists()
    finally:
        if server is not None:
            server.close()


def test_silent_scheduler_ends_the_process_without_traceback_or_exit_wait(cli_inputs):
    """In a fresh interpreter: the error, exit status 1, no traceback and no
    wait at exit for a half-made Client (a hang guard, not a timing test)."""
    pytest.importorskip("distributed")
    import subprocess
    import sys
    server = _SilentServer()
    try:
        argv = _commands(cli_inputs, f"tcp://127.0.0.1:{server.port}", _TIMEOUT)["fit"]
        code = f"import sys; from tripletml.cli import main; sys.exit(main({argv!r}))"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    finally:
        server.close()
    assert proc.returncode == 1, proc.stderr
    assert "did not answer as a Dask scheduler" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_use_cluster_timeout_is_validated_and_defaults_to_10_s():
    pytest.importorskip("distributed")
    import inspect

    from tripletml.distributed.dask_search import CONNECT_TIMEOUT, use_cluster
    assert CONNECT_TIMEOUT == 10.0
    assert inspect.signature(use_cluster.__wrapped__).parameters["timeout"].default == 10.0
    for bad in (0, -1, float("nan"), float("inf"), True, "5"):
        with pytest.raises(ValueError, match="timeout must be a positive number"):
            with use_cluster("tcp://127.0.0.1:1", timeout=bad):
                pass


# section 1 (losing a worker): tests/test_fault_worker_kill.py
