"""Hardening, round 4 (issue 42), sections 3, 5 and 6: sizes a user names are
bounded before anything is allocated, no silent wrong answers, clear
messages.  Memory is measured with tracemalloc, never with timings."""
import gzip
import json
import tracemalloc
import zipfile

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

import tripletml as tm
import tripletml.core.validation as val
from tripletml.cli import main
from tripletml.datasets import read_triplets, split_items
from tripletml.datasets.comparisons import check_n_items_bound
from tripletml.embedding import SOE, STE, TSTE, BilinearEmbedding
from tripletml.distributed.sharded import ShardedCollection

MB = 2 ** 20
#: 5 triplets naming 12 items
T12 = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [0, 4, 8]])


def _peak(f):
    """(result or exception, peak traced bytes) of ``f()``."""
    tracemalloc.start()
    try:
        try:
            out = f()
        except Exception as exc:  # noqa: BLE001 - returned for the caller to check
            out = exc
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---------------------------------------------------------------- 3. sizes
@pytest.mark.parametrize("Est", [SOE, STE, TSTE, BilinearEmbedding])
def test_embeddings_refuse_n_items_far_above_the_items_named(Est):
    exc, peak = _peak(lambda: Est(n_items=10 ** 8).fit(T12))
    assert isinstance(exc, ValueError), exc
    assert f"{Est.__name__}: n_items=100000000 but the triplets name only 12 items" in str(exc)
    assert "np.unique(triplets, return_inverse=True)" in str(exc)
    assert peak < 2 * MB                      # nothing of size n_items was allocated
    # a largest id far above the items named (n_items=None): the same bound
    far = T12 + np.array([0, 0, 10 ** 7])
    exc, peak = _peak(lambda: Est().fit(far))
    assert isinstance(exc, ValueError) and "largest item id is 10000011" in str(exc)
    assert "name only 12 items" in str(exc) and peak < 2 * MB


def test_n_items_bound_is_inclusive_and_items_in_no_triplet_stay_legitimate():
    bound = 10 * 12 + 10 ** 5
    check_n_items_bound(T12, bound, "x", given=True)
    with pytest.raises(ValueError, match=f"at most 10 x 12 \\+ 100000 = {bound} items"):
        check_n_items_bound(T12, bound + 1, "x", given=True)
    # BilinearEmbedding (time per step grows with n_items): 2 x named + 1000
    from tripletml.embedding import bilinear
    kw = dict(factor=bilinear._UNNAMED_FACTOR, slack=bilinear._UNNAMED_SLACK)
    check_n_items_bound(T12, 1024, "x", given=True, **kw)
    with pytest.raises(ValueError, match="= 1024 items are accepted .*in proportion to "
                                         "n_items"):
        BilinearEmbedding(n_items=1025).fit(T12)
    # unnamed items within the bound: fitted, with the warning saying so
    with pytest.warns(UserWarning, match="appear in no triplet"):
        SOE(n_items=40, n_init=1, max_iter=200, random_state=0).fit(T12)


def test_split_items_n_items_bounded_before_allocating():
    exc, peak = _peak(lambda: split_items(T12, n_items=10 ** 8, random_state=0))
    assert isinstance(exc, ValueError) and "split_items: n_items=100000000" in str(exc)
    assert peak < 2 * MB
    s = split_items(T12, n_items=50, random_state=0)     # unnamed items are split too
    assert len(s.train_items) + len(s.test_items) == 50


def _gzip_text(path, line: bytes, n_bytes: int) -> None:
    block = line * (MB // len(line))
    with gzip.open(path, "wb", compresslevel=9) as fh:
        for _ in range(n_bytes // len(block)):
            fh.write(block)


def test_read_triplets_gzip_expanding_64mb_is_refused_in_bounded_memory(tmp_path):
    path = tmp_path / "bomb.csv.gz"
    _gzip_text(path, b"0,1,2\n", 64 * MB)
    stored = path.stat().st_size
    assert stored < MB
    exc, peak = _peak(lambda: read_triplets(path))
    assert isinstance(exc, ValueError), exc
    assert "over 100 times its stored size" in str(exc) and str(path) in str(exc)
    assert peak < 100 * stored + 8 * MB       # the allowed text, not 64 MB and its parse
    # a zip member declaring such an expansion is refused before it is inflated
    zpath = tmp_path / "bomb.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("t.csv", b"0,1,2\n" * (4 * MB // 6))
    exc, peak = _peak(lambda: read_triplets(zpath))
    assert isinstance(exc, ValueError) and "times its compressed size" in str(exc)
    assert peak < 2 * MB


@pytest.mark.parametrize("line", [b"10,11,12\n", b"10 11 12\n"])
def test_read_triplets_parse_memory_follows_the_text(tmp_path, line):
    path = tmp_path / "t.txt"
    # half a megabyte (8 chunks of lines): the bound below is 20 bytes a
    # character, twice the ~10 measured, half the ~45-52 of parsing it whole
    n = MB // 2
    path.write_bytes(b"head,close,far\n" + line * (n // len(line)))
    t, peak = _peak(lambda: read_triplets(path))
    assert t.shape == (n // len(line), 3) and (t == [10, 11, 12]).all()
    # the text, the ids (8 bytes each, 1 per 3 bytes here) and copies of
    # them, one chunk of lines: not ~50 bytes a character
    assert peak < 12 * n + 4 * MB, peak / n


def test_read_triplets_checks_memory_before_parsing_and_converting(tmp_path, monkeypatch):
    path = tmp_path / "t.txt"
    path.write_bytes(b"0,1,2,3,4,5,6,7\n" * 1000)
    monkeypatch.setattr(val, "available_memory", lambda: 1000)
    exc, peak = _peak(lambda: read_triplets(path))
    assert isinstance(exc, MemoryError) and "item ids of 16000 bytes" in str(exc)
    assert peak < 2 * MB
    monkeypatch.setattr(val, "available_memory", lambda: 200_000)    # parses, no expansion
    with pytest.raises(MemoryError, match="1000 odd_one_out answers of 8 items give 42000 "
                                          "triplets"):
        read_triplets(path, format="odd_one_out")


# ------------------------------------------------------ 5. no silent wrong answers
def _toy(tmp_path, n=60, one_class=False):
    rng = np.random.default_rng(0)
    y = np.zeros(n) if one_class else np.arange(n) % 3
    X = np.abs(rng.normal(size=(n, 4)) + (np.arange(n) % 3)[:, None]) + 0.1
    name = "one.svm" if one_class else "db.svm"
    dump_svmlight_file(X, y, str(tmp_path / name), zero_based=False)
    return str(tmp_path / name)


_FIT = ["--param", "n_triplets=200", "--seed", "0"]


@pytest.mark.parametrize("k", ["0", "-3"])
def test_fit_partitions_must_be_positive(tmp_path, capsys, k):
    db = _toy(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["fit", "sdca", db, "-o", str(tmp_path / "m.npz"), "--partitions", k] + _FIT)
    assert info.value.code == 2
    assert f"--partitions: must be a positive integer (>= 1), got {k}" in \
        capsys.readouterr().err
    assert not (tmp_path / "m.npz").exists()


def _index(tmp_path, capsys, kind="flat"):
    db = _toy(tmp_path)
    model, index = tmp_path / "m.npz", tmp_path / f"idx-{kind}"
    if not model.exists():
        assert main(["fit", "oasis", db, "-o", str(model)] + _FIT) == 0
    extra = ["--backend", "numpy"] if kind == "flat" else ["--kind", kind, "--nlist", "2"]
    assert main(["index", "build", str(model), db, "-o", str(index)] + extra) == 0
    capsys.readouterr()
    return db, model, index


@pytest.mark.parametrize("option", ["--ef-search", "--nprobe"])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_search_settings_must_be_positive(tmp_path, capsys, option, value):
    db, _, index = _index(tmp_path, capsys)
    with pytest.raises(SystemExit) as info:
        main(["search", str(index), db, "-k", "3", option, value])
    assert info.value.code == 2
    assert f"{option}: must be a positive integer (>= 1), got {value}" in \
        capsys.readouterr().err
    # the library checks them at search time too (set as attributes)
    ix = tm.search.index.load_index(index)
    setattr(ix, option[2:].replace("-", "_"), int(value))
    with pytest.raises(ValueError, match=f"SimilarityIndex.search: parameter "
                                         f"{option[2:].replace('-', '_')}={value} must be >= 1"):
        ix.search(np.ones((1, 4)), 3)


def test_search_nprobe_on_a_faiss_ivf_index_is_a_clear_error(tmp_path, capsys):
    pytest.importorskip("faiss")
    db, _, index = _index(tmp_path, capsys, kind="ivf")
    ix = tm.search.index.load_index(index)
    for bad in (0, -1):
        ix.nprobe = bad
        with pytest.raises(ValueError, match=f"nprobe.*got {bad}|nprobe={bad}"):
            ix.search(np.ones((1, 4)), 3)
    ix.nprobe = 1
    assert ix.search(np.ones((1, 4)), 3)[1].shape == (1, 3)


def test_evaluate_on_one_class_data_says_the_scores_are_trivial(tmp_path, capsys):
    db = _toy(tmp_path)
    one = _toy(tmp_path, one_class=True)
    assert main(["fit", "oasis", db, "-o", str(tmp_path / "m.npz")] + _FIT) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "m.npz"), one]) == 0
    out = capsys.readouterr()
    assert "map                1.0000" in out.out
    assert "tripletml: note: the rows scored hold one class (0.0)" in out.err
    assert "whatever the model" in out.err
    assert main(["evaluate", str(tmp_path / "m.npz"), db]) == 0
    assert "one class" not in capsys.readouterr().err


@pytest.mark.parametrize("text, line", [
    ("0,,1,2\n", 1), ("0,1,2\n3,,4,5\n", 2), ("0,1,2,\n", 1), (",0,1,2\n", 1),
    ("0;;1;2\n", 1), ("0\t\t1\t2\n", 1), ("0, ,1,2\n", 1), ("# c\nh,c,f\n0,1,2\n5,,6,7\n", 4)])
def test_read_triplets_refuses_an_empty_field_naming_the_line(tmp_path, text, line):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"t.csv, line {line}: an empty field"):
        read_triplets(path)


def test_read_triplets_keeps_blank_separated_and_headed_files(tmp_path):
    path = tmp_path / "t.csv"
    for text in ("0 1  2\n3\t4\t5\n", "head, close, far\n0, 1, 2\r\n3,4,5", "h,,f\n0,1,2\n3,4,5\n"):
        path.write_text(text)
        assert read_triplets(path).tolist()[:1] == [[0, 1, 2]]


def test_index_hashes_catch_accidents_not_an_attacker(tmp_path, capsys):
    """Documented limit: a model swapped together with its hash loads."""
    import hashlib

    from tripletml.search.index import load_index
    doc = " ".join((load_index.__doc__ + tm.search.index.__doc__).split())
    assert "not an attacker" in doc and "not signed" in doc
    _, _, index = _index(tmp_path, capsys)
    other = tm.OASIS(n_triplets=100, random_state=5).fit(
        np.random.default_rng(1).normal(size=(30, 4)), np.arange(30) % 3)
    other.save(tmp_path / "other.npz")
    (index / "model.npz").write_bytes((tmp_path / "other.npz").read_bytes())
    with pytest.raises(ValueError, match="model.npz"):        # an accident is caught
        load_index(index)
    meta = json.loads((index / "index.json").read_text())
    meta["hashes"]["model.npz"] = hashlib.sha256(
        (index / "model.npz").read_bytes()).hexdigest()
    (index / "index.json").write_text(json.dumps(meta))
    assert load_index(index).ntotal == 60                       # the documented limit


# ---------------------------------------------------------- 6. clear messages
RNG = np.random.default_rng(0)
X30 = RNG.normal(size=(30, 4))
Y30 = np.arange(30) % 3


@pytest.mark.parametrize("make", [
    lambda: tm.OASIS(preprocessor=X30).fit(np.array([[0, 1, 2], [3, 4, 2 ** 64 - 1]],
                                                    dtype=np.uint64)),
    lambda: tm.ITML(preprocessor=X30).fit(np.array([[0, 1], [3, 2 ** 64 - 1]], dtype=np.uint64),
                                          [1, -1]),
    lambda: tm.KISSME(preprocessor=X30).fit(np.array([0, 2 ** 64 - 1, 1] * 3, dtype=np.uint64),
                                            [0, 1, 1] * 3),
    lambda: tm.OASIS().fit(X30, triplets=np.array([[0, 1, 2 ** 64 - 1]], dtype=np.uint64)),
    lambda: tm.ITML().fit(X30, pairs=np.array([[0, 2 ** 64 - 1]], dtype=np.uint64), y=[1]),
])
def test_uint64_index_past_int64_is_reported_as_itself(make):
    with pytest.raises(ValueError, match="index 18446744073709551615 is out of range"):
        make()


def test_ragged_preprocessor_output_is_a_clear_error():
    def ragged(idx):
        return [X30[i] if i % 2 else X30[i][:2] for i in idx]

    def strings(idx):
        return [["a", "b"] if i % 2 else [1, 2, 3] for i in idx]
    for pre in (ragged, strings):
        with pytest.raises(ValueError, match="OASIS: the preprocessor returned (rows of "
                                             "different lengths|an object array)"):
            tm.OASIS(preprocessor=pre).fit(np.array([[0, 1, 2], [3, 4, 5]]))
    with pytest.raises(ValueError, match="ITML: the preprocessor returned rows of different"):
        tm.ITML(preprocessor=ragged).fit(np.array([[0, 1], [3, 4]]), [1, -1])


def test_boolean_or_object_index_tuples_with_a_preprocessor():
    pairs = np.array([[0, 1], [1, 2], [2, 0], [3, 4], [5, 9], [9, 12]])
    lab = [1, -1, 1, -1, 1, -1]
    with pytest.raises(TypeError, match="ITML: with a preprocessor, X holds index pairs .* "
                                        "boolean array"):
        tm.ITML(preprocessor=X30).fit(pairs.astype(bool), lab)
    with pytest.raises(TypeError, match="OASIS: with a preprocessor, X holds index triplets"):
        tm.OASIS(preprocessor=X30).fit(np.array([[0, 1, 2], [3, 4, 5]]).astype(bool))
    odd = pairs.astype(object)
    odd[2, 1] = "2"
    with pytest.raises(TypeError, match="object array holding str '2'"):
        tm.KISSME(preprocessor=X30).fit(odd, lab)
    # an object array of integers is what it says: the same fit as int64 ids
    a = tm.KISSME(preprocessor=X30).fit(pairs.astype(object), lab)
    b = tm.KISSME(preprocessor=X30).fit(pairs, lab)
    assert np.allclose(a.get_mahalanobis_matrix(), b.get_mahalanobis_matrix())
    # 1-D row ids with class labels: likewise
    ids = np.arange(30)
    a = tm.KISSME(preprocessor=X30).fit(ids.astype(object), Y30)
    assert np.allclose(a.get_mahalanobis_matrix(),
                       tm.KISSME(preprocessor=X30).fit(ids, Y30).get_mahalanobis_matrix())
    for dtype in (bool, float):
        with pytest.raises(TypeError, match=f"KISSME: with a preprocessor, a 1-D X holds "
                                            f"integer row ids .* got dtype {np.dtype(dtype)}"):
            tm.KISSME(preprocessor=X30).fit(ids.astype(dtype), Y30)


@pytest.mark.parametrize("labels, match", [
    ([Y30[:15], np.where(np.arange(15) == 2, np.nan, Y30[15:])],
     "the labels of partition 1 hold NaN or infinity"),
    ([Y30[:15].astype(float), np.full(15, np.inf)], "partition 1 hold NaN or infinity"),
    ([Y30[:15], np.array(["a", "b", "c"] * 5)],
     "partition 0 has numbers as labels but partition 1 has strings"),
    ([Y30[:15], np.array([None] * 15)], "the labels of partition 1 cannot be sorted"),
    ([Y30[:15], np.array([1, "a", 2] * 5, dtype=object)],
     "the labels of partition 1 cannot be sorted|partition 1 has numbers and strings"),
])
@pytest.mark.parametrize("name", ["OASIS", "SDCA"])
def test_bad_labels_across_partitions_are_named(labels, match, name):
    coll = ShardedCollection([X30[:15], X30[15:]], [15, 15], labels)
    with pytest.raises(ValueError, match=f"{name}: .*({match})"):
        getattr(tm, name)(n_triplets=50, random_state=0).fit(coll)


@pytest.mark.parametrize("seeds", ["-3", "0"])
def test_reproduce_seeds_must_be_positive(tmp_path, capsys, seeds):
    from tripletml import reproduce
    with pytest.raises(SystemExit) as info:
        main(["reproduce", "sdca-table2", "--seeds", seeds, "--out", str(tmp_path / "r")])
    assert info.value.code == 2
    assert f"--seeds: must be a positive integer (>= 1), got {seeds}" in capsys.readouterr().err
    with pytest.raises(ValueError, match=f"seeds={seeds} must be a positive integer"):
        reproduce.run("sdca-table2", tmp_path / "r", seeds=int(seeds))
    assert not (tmp_path / "r").exists()
    # a neighbor: an output folder that is a file
    (tmp_path / "afile").write_text("mine")
    assert main(["reproduce", "sdca-table2", "--out", str(tmp_path / "afile" / "x")]) == 2
    assert "afile is a file, not a folder" in capsys.readouterr().err


def test_fit_output_in_a_missing_folder_fails_before_the_fit(tmp_path, capsys, monkeypatch):
    import tripletml.cli as cli
    db = _toy(tmp_path)
    (tmp_path / "afile").write_text("x")

    def no_load(*a, **k):
        raise AssertionError("the data was loaded before the output was checked")
    monkeypatch.setattr(cli, "_load_data", no_load)
    for out, msg in ((tmp_path / "no" / "dir" / "m.npz", "the folder .*no/dir does not exist"),
                     (tmp_path / "afile" / "m.npz", "afile is not a folder")):
        assert main(["fit", "oasis", db, "-o", str(out)] + _FIT) == 2
        err = capsys.readouterr().err
        assert err.startswith("tripletml: error: -o ") and "nothing was computed" in err
        import re
        assert re.search(msg, err), err
    # search results: likewise before the search
    assert main(["search", str(tmp_path / "idx"), db, "-o",
                 str(tmp_path / "no" / "r.tsv")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("out", ["", ".", "..", " "])
def test_output_that_is_not_a_file_name(tmp_path, capsys, monkeypatch, out):
    db = _toy(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "oasis", db, "-o", out] + _FIT) == 2
    err = capsys.readouterr().err
    assert f"-o {out!r}: not a file name" in err and "model.npz" in err, err
    assert main(["index", "build", "m.npz", db, "-o", out]) == 2
    assert "not a file name" in capsys.readouterr().err


def test_model_or_binary_file_where_data_is_expected(tmp_path, capsys):
    db, model, index = _index(tmp_path, capsys)
    cases = [["search", str(index), str(model)], ["evaluate", str(model), str(model)],
             ["fit", "oasis", str(model), "-o", str(tmp_path / "m2.npz")],
             ["index", "build", str(model), str(model), "-o", str(tmp_path / "i2")]]
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"{model} is a tripletml model file, not data" in err, err
        assert err.count("\n") == 1
    # another binary file: a clear LIBSVM error, not numpy's bytes
    assert main(["search", str(index), str(index / "vectors.npy")]) == 2
    err = capsys.readouterr().err
    assert "is not a readable LIBSVM file" in err and err.count("\n") == 1


def test_fetch_data_home_that_is_a_file(tmp_path, capsys):
    from tripletml import datasets
    f = tmp_path / "afile"
    f.write_text("mine")
    for home, msg in ((f, "is a file, not a folder"),
                      (f / "sub", "would be inside .*afile, which is a file")):
        assert main(["fetch", "vehicle", "--data-home", str(home)]) == 2
        err = capsys.readouterr().err
        assert "check the connection" not in err and "data home" in err
        with pytest.raises(ValueError, match=msg):
            datasets.fetch("vehicle", data_home=home)
    assert f.read_text() == "mine"
