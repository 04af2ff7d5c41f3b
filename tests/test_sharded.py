"""tripletml.distributed.sharded's shard readers: regular files only, declared rows
checked against stored bytes, every error naming the shard (issue 26)."""
import io
import os
import signal
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from tripletml.distributed import sharded
from tripletml.distributed.sharded import load_npz_shard, read_npz_shards, write_npz_shards


def _alarm_guard(what):
    def hung(signum, frame):
        raise TimeoutError(f"{what} blocked")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    return old


def _lying_shard(path, shape, data=b"", member="X", compress=zipfile.ZIP_STORED):
    """A shard whose ``member.npy`` header claims ``shape`` (float64) but
    stores only ``data`` after the header."""
    hdr = io.BytesIO()
    np.lib.format.write_array_header_1_0(hdr, {"descr": "<f8", "fortran_order": False,
                                               "shape": shape})
    with zipfile.ZipFile(path, "w", compression=compress) as zf:
        zf.writestr(member + ".npy", hdr.getvalue() + data)
    return path


def test_round_trip_dense_and_sparse(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(25, 4))
    y = np.arange(25) % 3
    paths = write_npz_shards(tmp_path / "d", X, y, rows_per_shard=10)
    coll = read_npz_shards(tmp_path / "d")
    assert coll.n_rows == [10, 10, 5]
    Xb, yb = load_npz_shard(paths[2])
    np.testing.assert_array_equal(Xb, X[20:])
    np.testing.assert_array_equal(yb, y[20:])
    Xs = sp.random(25, 6, density=0.3, format="csr", random_state=0)
    paths = write_npz_shards(tmp_path / "s", Xs, y, rows_per_shard=10)
    assert read_npz_shards(tmp_path / "s").n_rows == [10, 10, 5]
    Xb, yb = load_npz_shard(paths[1])
    assert sp.isspmatrix_csr(Xb) and (Xb != Xs[10:20]).nnz == 0
    # a plain scipy.sparse.save_npz archive (no labels) is a shard too
    sp.save_npz(tmp_path / "plain.npz", Xs)
    Xb, yb = load_npz_shard(tmp_path / "plain.npz")
    assert yb is None and Xb.shape == (25, 6)


def test_a_200_byte_shard_claiming_a_billion_rows_is_refused(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    path = _lying_shard(d / "shard-00000.npz", (10**9, 6), data=bytes(48))
    assert path.stat().st_size < 400
    with pytest.raises(ValueError, match=r"read_npz_shards: shard .*shard-00000.npz: X "
                                         r"declares shape \(1000000000, 6\) .* but stores "
                                         r"48 bytes"):
        read_npz_shards(d)
    with pytest.raises(ValueError, match=r"load_npz_shard: shard .*shard-00000.npz: X "
                                         r"declares shape"):
        load_npz_shard(path)


def test_a_sparse_shard_whose_shape_lies_is_refused(tmp_path):
    Xs = sp.random(20, 5, density=0.4, format="csr", random_state=1)
    sp.save_npz(tmp_path / "s.npz", Xs, compressed=False)
    with np.load(tmp_path / "s.npz") as z:
        members = {k: z[k] for k in z.files}
    members["shape"] = np.array([10**9, 5])
    np.savez(tmp_path / "lie.npz", **members)
    for func, who in ((read_npz_shards, "read_npz_shards"), (load_npz_shard, "load_npz_shard")):
        arg = tmp_path if func is read_npz_shards else tmp_path / "lie.npz"
        with pytest.raises(ValueError, match=rf"{who}: shard .*lie.npz: declares shape "
                                             r"\(1000000000, 5\) but its indptr has shape"):
            func(arg) if func is load_npz_shard else func(arg, "lie.npz")
    # column indices beyond the declared width: refused, naming the shard
    members = {**{k: v for k, v in members.items()}, "shape": np.array([20, 2])}
    np.savez(tmp_path / "cols.npz", **members)
    with pytest.raises(ValueError, match=r"load_npz_shard: shard .*cols.npz"):
        load_npz_shard(tmp_path / "cols.npz")
    # a CSC archive is not a shard
    sp.save_npz(tmp_path / "csc.npz", Xs.tocsc())
    with pytest.raises(ValueError, match=r"shard .*csc.npz: a scipy.sparse 'csc' archive"):
        load_npz_shard(tmp_path / "csc.npz")


def test_labels_must_match_rows(tmp_path):
    np.savez(tmp_path / "a.npz", X=np.zeros((5, 2)), y=np.zeros(4))
    for func, arg in ((load_npz_shard, tmp_path / "a.npz"), (read_npz_shards, tmp_path)):
        with pytest.raises(ValueError, match=r"shard .*a.npz: 4 labels for 5 rows"):
            func(arg)
    np.savez(tmp_path / "b.npz", X=np.zeros(5))
    with pytest.raises(ValueError, match=r"shard .*b.npz: X has shape \(5,\)"):
        load_npz_shard(tmp_path / "b.npz")
    np.savez(tmp_path / "c.npz", Z=np.zeros(5))
    with pytest.raises(ValueError, match=r"shard .*c.npz: neither an 'X' member"):
        load_npz_shard(tmp_path / "c.npz")


def test_truncated_and_foreign_shards_name_the_shard(tmp_path):
    np.savez(tmp_path / "good.npz", X=np.ones((30, 3)), y=np.arange(30))
    raw = (tmp_path / "good.npz").read_bytes()
    d = tmp_path / "t"
    d.mkdir()
    for cut in (0, 10, len(raw) // 2, len(raw) - 10):
        (d / "cut.npz").write_bytes(raw[:cut])
        for func, arg in ((load_npz_shard, d / "cut.npz"), (read_npz_shards, d)):
            with pytest.raises(ValueError, match=r"shard .*cut.npz: "):
                func(arg)
    (d / "cut.npz").write_text("not a zip at all")
    with pytest.raises(ValueError, match=r"load_npz_shard: shard .*cut.npz: not a readable"):
        load_npz_shard(d / "cut.npz")
    # a pickled object array is never unpickled
    np.savez(d / "cut.npz", X=np.array([[object()]], dtype=object))
    with pytest.raises(ValueError, match=r"shard .*cut.npz: X holds Python objects"):
        load_npz_shard(d / "cut.npz")
    with pytest.raises(FileNotFoundError):
        load_npz_shard(tmp_path / "missing.npz")


def test_compressed_bomb_shard_refused_before_inflating(tmp_path):
    n = 3 * 2**20                              # 24 MiB of zeros in a tiny file
    path = _lying_shard(tmp_path / "bomb.npz", (n, 1), data=bytes(8 * n),
                        compress=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 100_000
    for func, arg in ((load_npz_shard, path), (read_npz_shards, tmp_path)):
        with pytest.raises(ValueError, match=r"shard .*bomb.npz: member 'X.npy' would expand"):
            func(arg)
    # legitimately compressed shards load
    np.savez_compressed(tmp_path / "ok.npz", X=np.random.default_rng(0).normal(size=(50, 4)))
    assert load_npz_shard(tmp_path / "ok.npz")[0].shape == (50, 4)


@pytest.mark.parametrize("kind", ["fifo", "dir", "dev"])
def test_special_files_refused_without_blocking(tmp_path, kind):
    d = tmp_path / "shards"
    d.mkdir()
    np.savez(d / "shard-00000.npz", X=np.ones((3, 2)))
    if kind == "fifo":
        p, what = d / "shard-00001.npz", r"a FIFO \(named pipe\)"
        os.mkfifo(p)
    elif kind == "dir":
        p, what = d / "shard-00001.npz", "a directory"
        p.mkdir()
    else:
        p, what = d / "shard-00001.npz", "a character device"
        p.symlink_to("/dev/zero")
    old = _alarm_guard(kind)
    try:
        with pytest.raises(ValueError, match=f"read_npz_shards: .*shard-00001.npz is {what}"):
            read_npz_shards(d)
        with pytest.raises(ValueError, match=f"load_npz_shard: .*shard-00001.npz is {what}"):
            load_npz_shard(p)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_fit_stream_never_sees_a_lying_shard(tmp_path):
    """Issue 26: fit_stream allocated 44.7 GiB from a 200-byte shard."""
    from tripletml import OASIS
    from tripletml.distributed.streaming import fit_stream

    d = tmp_path / "shards"
    rng = np.random.default_rng(0)
    write_npz_shards(d, rng.normal(size=(40, 3)), np.arange(40) % 2, rows_per_shard=20)
    _lying_shard(d / "shard-00002.npz", (10**9, 3), data=bytes(24))
    with pytest.raises(ValueError, match=r"shard .*shard-00002.npz"):
        fit_stream(OASIS(random_state=0), read_npz_shards(d), n_triplets_per_shard=10)
    assert sharded.read_npz_shards(d, "shard-0000[01].npz").n_total == 40
