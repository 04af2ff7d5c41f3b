"""Loading of the registered data sets from the real data (``data_home`` fixture)."""
from __future__ import annotations

import dataclasses
import gzip
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import datasets
from tripletml.datasets import _base, _registry
from tripletml.datasets import get_data_home, info, list_datasets, load

ALL = ["vehicle", "vowel", "segment", "svmguide4", "letter", "balance-scale", "ionosphere",
       "semeion", "car", "optdigits", "mnist-test", "wine-quality",
       "dexter", "20newsgroups", "yeast", "scene", "iris", "wine", "digits"]
CASES = [(n, s) for n in ALL if n != "20newsgroups" for s in info(n).subset_names]


def _copy(data_home: Path, dest: Path, rel: str) -> Path:
    (dest / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(data_home / rel, dest / rel)
    return dest / rel


def _gunzip(path: Path) -> Path:
    plain = path.with_suffix("")
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    path.unlink()
    return plain


# --------------------------------------------------------------------------- registry
def test_registry_names_and_records():
    assert sorted(ALL) == list_datasets()
    for name in ALL:
        r = info(name)
        assert r.name == name and r.kind in _registry.KINDS
        assert "all" in r.subset_names and r.subset("all").n_samples == r.shape[0]
        paths = {f.path for f in r.files}
        for s in r.subsets:
            assert set(s.files) <= paths
        assert (r.n_classes is None) != (r.n_labels is None)
        assert len(r.classes) == (r.n_classes or r.n_labels)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info("vehicle").name = "x"


@pytest.mark.data
def test_registry_hashes_match_stored_files(data_home):
    for name in ALL:
        for f in info(name).files:
            assert _base.sha256sum(data_home / f.path) == f.sha256, f.path
            assert f.url and f.url.startswith(("http://", "https://"))
            if not f.compressed:
                assert f.original_path == f.path


# --------------------------------------------------------------------------- shapes
@pytest.mark.data
@pytest.mark.parametrize("name,subset", CASES)
def test_load_shape_and_classes(data_home, name, subset):
    r = info(name)
    b = load(name, data_home, subset=subset)
    n = r.subset(subset).n_samples
    assert b.data.shape == (n, r.shape[1])
    assert b.data.dtype == np.float64
    if r.kind in ("libsvm", "dexter"):
        assert sp.issparse(b.data) and b.data.format == "csr"
    else:
        assert isinstance(b.data, np.ndarray)
    if r.n_labels is None:
        assert b.target.dtype == np.int64 and b.target.shape == (n,)
        n_classes = r.subset(subset).n_classes or r.n_classes
        assert set(np.unique(b.target)) == set(range(n_classes))
    else:
        assert b.target.dtype == np.int8 and b.target.shape == (n, r.n_labels)
        assert set(np.unique(b.target)) == {0, 1}
    assert b.target_names == list(r.classes)
    if r.feature_names:
        assert b.feature_names == list(r.feature_names) and len(r.feature_names) == r.shape[1]
    else:
        assert "feature_names" not in b
    assert b.name == name and b.subset == subset
    assert r.description in b.DESCR or r.kind == "sklearn"


@pytest.mark.data
def test_subsets_stack_to_all(data_home):
    for name in ("vowel", "svmguide4", "dexter", "yeast", "scene"):
        parts = [load(name, data_home, subset=s) for s in ("train", "test" if name != "dexter" else "valid")]
        full = load(name, data_home)
        stack = sp.vstack if sp.issparse(full.data) else np.vstack
        assert abs(stack([p.data for p in parts]) - full.data).max() == 0
        assert np.array_equal(np.concatenate([p.target for p in parts]), full.target)


# --------------------------------------------------------------------------- values
@pytest.mark.data
def test_spot_values(data_home):
    b = load("balance-scale", data_home)
    assert b.target_names[b.target[0]] == "B"
    np.testing.assert_array_equal(b.data[0], [1, 1, 1, 1])
    assert dict(zip(b.target_names, np.bincount(b.target))) == {"B": 49, "L": 288, "R": 288}

    b = load("vowel", data_home)
    assert b.target_names == [str(i) for i in range(11)]
    np.testing.assert_array_equal(np.bincount(b.target), [90] * 11)
    np.testing.assert_array_equal(np.bincount(load("vowel", data_home, subset="train").target), [48] * 11)

    b = load("vehicle", data_home)
    np.testing.assert_array_equal(np.bincount(b.target), [212, 217, 218, 199])

    b = load("ionosphere", data_home)
    assert b.target_names[b.target[0]] == "g"
    assert dict(zip(b.target_names, np.bincount(b.target))) == {"b": 126, "g": 225}
    assert b.data[0, 0] == 1 and b.data[0, 2] == pytest.approx(0.99539)

    b = load("svmguide4", data_home)
    assert b.target_names == ["-3", "-2", "-1", "1", "2", "3"]

    b = load("letter", data_home)
    np.testing.assert_array_equal(np.unique(b.target), np.arange(26))
    assert b.data.min() >= -1 and b.data.max() <= 1


@pytest.mark.data
def test_dexter_matches_param_checksums(data_home):
    # dexter.param: sum of all feature values, train 2816528, valid 2820952
    assert load("dexter", data_home, subset="train").data.sum() == 2816528
    b = load("dexter", data_home, subset="valid")
    assert b.data.sum() == 2820952
    np.testing.assert_array_equal(np.bincount(b.target), [150, 150])
    assert b.data.data.min() > 0 and b.data.indices.max() < 20000


@pytest.mark.data
def test_multilabel_values(data_home):
    y = load("yeast", data_home).target
    assert y.sum(1).mean() == pytest.approx(4.237, abs=5e-4)
    assert y.sum(1).min() >= 1
    b = load("scene", data_home, subset="train")
    assert b.target_names == ["Beach", "Sunset", "FallFoliage", "Field", "Mountain", "Urban"]
    np.testing.assert_array_equal(b.target.sum(0), [227, 165, 197, 196, 277, 224])
    assert b.data.min() >= 0 and b.data.max() <= 1


def test_sklearn_sets_match_sklearn():
    from sklearn.datasets import load_digits, load_iris, load_wine

    for name, fn in (("iris", load_iris), ("wine", load_wine), ("digits", load_digits)):
        ref, b = fn(), load(name)
        np.testing.assert_array_equal(b.data, ref.data)
        np.testing.assert_array_equal(b.target, ref.target)
        assert b.target_names == [str(t) for t in ref.target_names]


# --------------------------------------------------------------------------- 20 Newsgroups
@pytest.fixture(scope="module")
def newsgroups(data_home):
    return load("20newsgroups", data_home)


@pytest.mark.data
def test_newsgroups_all(newsgroups):
    b = newsgroups
    assert isinstance(b.data, list) and len(b.data) == 18846 and isinstance(b.data[0], str)
    assert b.target.dtype == np.int64 and len(b.target_names) == 20
    is_train = np.array([f.startswith("20news-bydate-train/") for f in b.filenames])
    assert is_train.sum() == 11314 and is_train[:11314].all()  # train part first
    train_counts = np.bincount(b.target[is_train])
    np.testing.assert_array_equal(train_counts[[0, 19]], [480, 377])
    np.testing.assert_array_equal(np.bincount(b.target[~is_train])[[0, 19]], [319, 251])
    for f, t in zip(b.filenames[:5], b.target[:5]):
        assert f.split("/")[1] == b.target_names[t]
    assert sum(not d.isascii() for d in b.data) == 73  # Latin-1 bytes kept


@pytest.mark.data
def test_newsgroups_subsets(data_home, newsgroups):
    # the only extra reads of the archive: the subsets must equal slices of "all"
    for subset, sl in (("train", slice(0, 11314)), ("test", slice(11314, None))):
        b = load("20newsgroups", data_home, subset=subset)
        assert b.data == newsgroups.data[sl] and b.filenames == newsgroups.filenames[sl]
        np.testing.assert_array_equal(b.target, newsgroups.target[sl])


# --------------------------------------------------------------------------- files on disk
@pytest.mark.data
def test_plain_and_gzip_copies_accepted(data_home, tmp_path):
    ref = load("vehicle", data_home)
    gz = _copy(data_home, tmp_path, "vehicle/vehicle.scale.gz")
    b = load("vehicle", tmp_path)
    assert b.files == [gz] and abs(b.data - ref.data).max() == 0
    plain = _gunzip(gz)
    b = load("vehicle", tmp_path)
    assert b.files == [plain] and abs(b.data - ref.data).max() == 0
    np.testing.assert_array_equal(b.target, ref.target)
    # a multi-file set with one part plain and one gzip'd
    _copy(data_home, tmp_path, "vowel/vowel.scale.gz")
    _gunzip(_copy(data_home, tmp_path, "vowel/vowel.scale.t.gz"))
    assert load("vowel", tmp_path).data.shape == (990, 10)
    # a gzip'd UCI file, gunzipped
    _gunzip(_copy(data_home, tmp_path, "ionosphere/ionosphere.data.gz"))
    assert load("ionosphere", tmp_path).data.shape == (351, 34)


@pytest.mark.data
@pytest.mark.parametrize("compressed", [True, False])
def test_corrupted_copy_raises(data_home, tmp_path, compressed):
    path = _copy(data_home, tmp_path, "vehicle/vehicle.scale.gz")
    if not compressed:
        path = _gunzip(path)
    raw = bytearray(path.read_bytes())
    i = len(raw) // 2
    raw[i] = ord("7") if raw[i] != ord("7") else ord("8")
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="checksum mismatch") as exc:
        load("vehicle", tmp_path)
    assert str(path) in str(exc.value)
    expected = info("vehicle").files[0]
    assert (expected.sha256 if compressed else expected.sha256_original) in str(exc.value)
    if not compressed:  # verify=False skips the hash (the plain file still parses)
        assert load("vehicle", tmp_path, verify=False).data.shape == (846, 18)


@pytest.mark.data
def test_verification_cached_and_invalidated(data_home, tmp_path, monkeypatch):
    path = _copy(data_home, tmp_path, "vehicle/vehicle.scale.gz")
    calls = []
    real = _base.sha256sum
    monkeypatch.setattr(_base, "sha256sum", lambda p: calls.append(p) or real(p))
    load("vehicle", tmp_path)
    load("vehicle", tmp_path)
    assert len(calls) == 1
    raw = bytearray(path.read_bytes())
    raw[100] ^= 1  # same size: the mtime must tell
    path.write_bytes(bytes(raw))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(ValueError, match="checksum"):
        load("vehicle", tmp_path)
    assert len(calls) == 2


def test_missing_set(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError) as exc:
        load("vehicle", tmp_path)
    msg = str(exc.value)
    assert str(tmp_path / "vehicle" / "vehicle.scale.gz") in msg
    assert str(tmp_path / "vehicle" / "vehicle.scale") in msg
    assert "tripletml.datasets.fetch('vehicle')" in msg and "TRIPLETML_DATA" in msg
    assert "data_home argument" in msg
    monkeypatch.setenv("TRIPLETML_DATA", str(tmp_path / "env"))
    with pytest.raises(FileNotFoundError, match="environment variable") as exc:
        load("dexter")
    assert str(tmp_path / "env" / "dexter") in str(exc.value)


def test_data_home_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TRIPLETML_DATA", raising=False)
    assert get_data_home() == tmp_path / "home" / "tripletml_data"
    monkeypatch.setenv("TRIPLETML_DATA", "")
    assert get_data_home() == tmp_path / "home" / "tripletml_data"
    monkeypatch.setenv("TRIPLETML_DATA", str(tmp_path / "env"))
    assert get_data_home() == tmp_path / "env"
    assert get_data_home(tmp_path / "arg") == tmp_path / "arg"
    assert get_data_home(str(tmp_path / "arg")) == tmp_path / "arg"
    assert get_data_home("~/x") == tmp_path / "home" / "x"
    assert not (tmp_path / "env").exists()  # resolving never creates the folder


def test_unknown_name_and_subset(tmp_path):
    with pytest.raises(ValueError, match="unknown data set 'nope'.*vehicle"):
        load("nope", tmp_path)
    with pytest.raises(ValueError, match="known data sets"):
        info("Vehicle")
    with pytest.raises(ValueError, match="no subset 'train'.*all"):
        load("vehicle", tmp_path, subset="train")


@pytest.mark.data
def test_registry_mismatch_raises(data_home, monkeypatch):
    r = info("vehicle")
    wrong_n = dataclasses.replace(r, subsets=(_registry.Subset("all", r.subsets[0].files, 845),))
    monkeypatch.setitem(_registry.REGISTRY, "vehicle", wrong_n)
    with pytest.raises(ValueError, match=r"vehicle.scale.gz.*expected shape \(845, 18\), found \(846, 18\)"):
        load("vehicle", data_home)
    monkeypatch.setitem(_registry.REGISTRY, "vehicle", dataclasses.replace(r, shape=(846, 17)))
    with pytest.raises(ValueError, match="17 features"):
        load("vehicle", data_home)
    r = info("vowel")
    monkeypatch.setitem(_registry.REGISTRY, "vowel", dataclasses.replace(r, n_classes=12))
    with pytest.raises(ValueError, match="expected 12 classes, found 11"):
        load("vowel", data_home)
    monkeypatch.setitem(_registry.REGISTRY, "vowel", dataclasses.replace(r, classes=r.classes[1:]))
    with pytest.raises(ValueError, match="unexpected class label '0'"):
        load("vowel", data_home, subset="test")


def test_public_api():
    for fn in ("get_data_home", "list_datasets", "info", "load", "fetch"):
        assert callable(getattr(datasets, fn))


# --------------------------------------------------------------------------- read_libsvm
def test_read_libsvm_huge_index_is_a_clear_error(tmp_path):
    # issue 13 item 8: index 10**12 gave a bare OverflowError from scikit-learn's reader
    p = tmp_path / "big.svm"
    p.write_text("1 1:0.5 1000000000000:1\n2 2:1\n")
    with pytest.raises(ValueError, match=r"read_libsvm: .*big.svm: a feature index"):
        datasets.read_libsvm(p)


def test_read_libsvm_plain_gz_and_bounds(tmp_path):
    text = "1 1:0.5 3:1\n2 2:1\n1 1:1\n"
    (tmp_path / "a.svm").write_text(text)
    (tmp_path / "a.svm.gz").write_bytes(gzip.compress(text.encode()))
    ref = np.array([[0.5, 0, 1], [0, 1, 0], [1, 0, 0]])
    for name in ("a.svm", "a.svm.gz"):
        X, y = datasets.read_libsvm(tmp_path / name)
        assert sp.isspmatrix_csr(X) and X.has_canonical_format
        np.testing.assert_array_equal(X.toarray(), ref)
        np.testing.assert_array_equal(y, [1, 2, 1])
    X, _ = datasets.read_libsvm(tmp_path / "a.svm", zero_based=True)
    assert X.shape == (3, 4)
    with pytest.raises(ValueError, match="cannot read as LIBSVM with 2 features"):
        datasets.read_libsvm(tmp_path / "a.svm", n_features=2)
    (tmp_path / "b.svm").write_text("1 1:nan\n")
    with pytest.raises(ValueError, match="NaN or infinity"):
        datasets.read_libsvm(tmp_path / "b.svm")
    with pytest.raises(FileNotFoundError):
        datasets.read_libsvm(tmp_path / "missing.svm")


# --------------------------------------------------------------------------- special files
def _special(tmp_path, kind, name):
    """A FIFO, a directory or a link to /dev/zero at ``tmp_path / name``."""
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(p)
        return p, r"a FIFO \(named pipe\)"
    if kind == "dir":
        p.mkdir()
        return p, "a directory"
    p.symlink_to("/dev/zero")
    return p, "a character device"


@pytest.fixture
def hang_guard():
    """Turns a blocked open into a failure instead of a hung test run."""
    def hung(signum, frame):
        raise TimeoutError("a reader blocked on a special file")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("kind", ["fifo", "dir", "dev"])
def test_readers_refuse_special_files_without_blocking(tmp_path, kind, hang_guard):
    p, what = _special(tmp_path, kind, "x.svm")
    with pytest.raises(ValueError, match=f"read_libsvm: .*x.svm is {what}, not a regular file"):
        datasets.read_libsvm(p)
    gz, what = _special(tmp_path, kind, "x.svm.gz")
    with pytest.raises(ValueError, match=f"read_libsvm: .*x.svm.gz is {what}"):
        datasets.read_libsvm(gz)
    with pytest.raises(ValueError, match=f"sha256sum: .*x.svm is {what}"):
        datasets.sha256sum(p)
    who = r"tripletml.datasets.load: .*x.svm is"
    with pytest.raises(ValueError, match=f"{who} {what}"):
        _base._read_uci_csv(p, info("ionosphere"))
    with pytest.raises(ValueError, match=f"{who} {what}"):
        _base._read_dexter_data(p, 20000)
    with pytest.raises(ValueError, match=f"{who} {what}"):
        _base._read_arff(p, info("yeast"))
    with pytest.raises(ValueError, match=f"{who} {what}"):
        _base._read_newsgroups(p, info("20newsgroups"), "all")


@pytest.mark.parametrize("kind", ["fifo", "dir", "dev"])
@pytest.mark.parametrize("verify", [True, False])
def test_load_refuses_a_special_data_file(tmp_path, kind, verify, hang_guard):
    _, what = _special(tmp_path, kind, "vehicle/vehicle.scale.gz")
    with pytest.raises(ValueError, match=f"data set 'vehicle': .*vehicle.scale.gz is {what}"):
        load("vehicle", tmp_path, verify=verify)


def test_compressed_tar_streams_still_read(tmp_path):
    import bz2
    import io
    import lzma
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        body = b"Subject: hi\n\nhello"
        ti = tarfile.TarInfo("20news-bydate-train/alt.atheism/1")
        ti.size = len(body)
        tf.addfile(ti, io.BytesIO(body))
    for name, pack in (("t.tar", bytes), ("t.tar.gz", gzip.compress),
                       ("t.tar.bz2", bz2.compress), ("t.tar.xz", lzma.compress)):
        (tmp_path / name).write_bytes(pack(buf.getvalue()))
        docs, y, names = _base._read_newsgroups(tmp_path / name, info("20newsgroups"), "all")
        assert docs == ["Subject: hi\n\nhello"] and list(y) == [0], name
