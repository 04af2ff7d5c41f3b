"""Comparison data: the Zappos loader (checksums, the features quirk) and
read_triplets (answer formats converted to (head, close, far) triplets)."""
from __future__ import annotations

import dataclasses
import gzip
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tripletml.datasets import load_comparisons, read_triplets
from tripletml.datasets import comparisons as cmp

ZAPPOS = ("zappos/deconflicted_triplets.csv.zip", "zappos/cnn_feats.csv.zip")


# --------------------------------------------------------------------------- zappos
@pytest.fixture(scope="module")
def zappos(data_home):
    return load_comparisons("zappos", data_home)


def test_zappos_shapes_and_meaning(zappos):
    assert zappos.triplets.shape == (283770, 3) and zappos.triplets.dtype == np.int64
    assert zappos.features.shape == (85, 4096) and zappos.features.dtype == np.float64
    assert zappos.n_items == 85
    assert zappos.triplets.min() == 0 and zappos.triplets.max() == 84
    assert "more like" in zappos.description
    np.testing.assert_array_equal(zappos.triplets[:2], [[28, 62, 7], [50, 68, 80]])
    # the manifest: 98753 distinct unordered triples, features non-negative, 26 % non-zero
    assert len(np.unique(np.sort(zappos.triplets, axis=1), axis=0)) == 98753
    assert zappos.features.min() == 0.0
    assert abs((zappos.features > 0).mean() - 0.26) < 0.01


def test_zappos_features_split_at_the_run_together_values(zappos):
    X = zappos.features
    # first values of the file and its last value
    np.testing.assert_array_equal(X[0, :4], [0.0, 2.31382, 0.0, 2.65568])
    assert X[84, -1] == 4.82187
    # the features agree with the people as the manifest measured (69.2 % / 71.8 %)
    t = zappos.triplets
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)             # 85 x 85
    assert round(float((D[t[:, 0], t[:, 1]] < D[t[:, 0], t[:, 2]]).mean()), 3) == 0.692
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    C = Xn @ Xn.T
    assert round(float((C[t[:, 0], t[:, 1]] > C[t[:, 0], t[:, 2]]).mean()), 3) == 0.718


def test_zappos_quirk_positions_from_the_raw_text(data_home, zappos):
    """Independently of the parser: each of the 84 run-together fields is the
    last value of one row and the first of the next."""
    raw = zipfile.ZipFile(data_home / ZAPPOS[1]).read("cnn_feats.csv").decode()
    fields = raw.strip().split(",")
    merged = [j for j, f in enumerate(fields) if f.count(".") == 2]
    assert merged == [4095 * (r + 1) for r in range(84)]
    X = zappos.features
    for r, j in enumerate(merged):
        f = fields[j]
        cuts = [s for s in range(1, len(f)) if _float_or_none(f[:s]) == X[r, -1]
                and _float_or_none(f[s:]) == X[r + 1, 0]]
        assert cuts, (r, f)


def _float_or_none(s):
    try:
        return float(s)
    except ValueError:
        return None


def _copy_zappos(data_home: Path, dest: Path) -> Path:
    (dest / "zappos").mkdir(parents=True)
    for rel in ZAPPOS:
        shutil.copyfile(data_home / rel, dest / rel)
    return dest


def test_zappos_checksum_mismatch_refused(data_home, tmp_path):
    home = _copy_zappos(data_home, tmp_path)
    with zipfile.ZipFile(home / ZAPPOS[0], "w") as zf:      # same name, other contents
        zf.writestr("deconflicted_triplets.csv", "0,1,2\n")
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_comparisons("zappos", home)
    with pytest.raises(ValueError, match="expected 283770 triplets"):
        load_comparisons("zappos", home, verify=False)


def test_zappos_missing_and_unknown(tmp_path):
    with pytest.raises(FileNotFoundError,
                       match="zappos.*deconflicted_triplets.csv.zip.*TRIPLETML_DATA"):
        load_comparisons("zappos", tmp_path)
    with pytest.raises(ValueError, match="unknown comparison data set"):
        load_comparisons("shoes", tmp_path)


def _features_zip(home: Path, text: str, member: str = "cnn_feats.csv",
                  extra: str | None = None) -> None:
    with zipfile.ZipFile(home / ZAPPOS[1], "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, text)
        if extra:
            zf.writestr(extra, "x")


def _fewer_triplets(home: Path, monkeypatch, n: int = 1000) -> None:
    """Keep the first ``n`` triplets of ``home``'s copy, and let the record
    expect ``n``: the features file (read after the triplets) is checked the
    same way without parsing all 283,770 triplets at every load."""
    with zipfile.ZipFile(home / ZAPPOS[0]) as zf:
        rows = zf.read("deconflicted_triplets.csv").decode().splitlines(keepends=True)
    with zipfile.ZipFile(home / ZAPPOS[0], "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("deconflicted_triplets.csv", "".join(rows[:n]))
    monkeypatch.setitem(cmp.COMPARISONS, "zappos",
                        dataclasses.replace(cmp.COMPARISONS["zappos"], n_triplets=n))


def test_zappos_bad_feature_files(data_home, tmp_path, monkeypatch):
    home = _copy_zappos(data_home, tmp_path)
    _fewer_triplets(home, monkeypatch)
    assert load_comparisons("zappos", home, verify=False).features.shape == (85, 4096)
    good = zipfile.ZipFile(data_home / ZAPPOS[1]).read("cnn_feats.csv").decode()
    _features_zip(home, good, extra="evil.sh")
    with pytest.raises(ValueError, match="holding only 'cnn_feats.csv'"):
        load_comparisons("zappos", home, verify=False)
    _features_zip(home, good, member="other.csv")
    with pytest.raises(ValueError, match="holding only"):
        load_comparisons("zappos", home, verify=False)
    _features_zip(home, good[: good.rindex(",")])                  # one value short
    with pytest.raises(ValueError, match="comma-separated fields"):
        load_comparisons("zappos", home, verify=False)
    _features_zip(home, good.replace("2.31382", "nan", 1))
    with pytest.raises(ValueError, match="NaN or infinity"):
        load_comparisons("zappos", home, verify=False)
    _features_zip(home, good.replace("2.31382", "2.3x", 1))
    with pytest.raises(ValueError, match="not a number"):
        load_comparisons("zappos", home, verify=False)
    (home / ZAPPOS[1]).write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a valid zip"):
        load_comparisons("zappos", home, verify=False)


def test_zappos_features_well_formed_table_also_read(data_home, tmp_path, zappos, monkeypatch):
    home = _copy_zappos(data_home, tmp_path)
    _fewer_triplets(home, monkeypatch)
    X = zappos.features
    _features_zip(home, "\n".join(",".join(repr(float(v)) for v in row) for row in X) + "\n")
    np.testing.assert_array_equal(load_comparisons("zappos", home, verify=False).features, X)


def test_zip_bomb_bounded(data_home, tmp_path, monkeypatch):
    """Each member is bounded before it is inflated: the triplets' file
    (20 triplets, under the bound) is read, the features' (8,000 bytes) is
    refused by name."""
    home = _copy_zappos(data_home, tmp_path)
    _fewer_triplets(home, monkeypatch, n=20)
    _features_zip(home, "0.0," * 2000)
    monkeypatch.setattr(cmp, "COMPARISON_MAX_BYTES", 1000)
    with pytest.raises(ValueError, match=r"cnn_feats\.csv declares 8000 bytes, more than "
                                         r"the 1000 bytes"):
        load_comparisons("zappos", home, verify=False)


def test_zappos_bad_triplet_files(data_home, tmp_path):
    home = _copy_zappos(data_home, tmp_path)
    rows = zipfile.ZipFile(data_home / ZAPPOS[0]).read("deconflicted_triplets.csv").decode()

    def put(text):
        with zipfile.ZipFile(home / ZAPPOS[0], "w") as zf:
            zf.writestr("deconflicted_triplets.csv", text)

    put(rows.replace("28,62,7\n", "28,62,85\n", 1))
    with pytest.raises(ValueError, match="out of range for 85 items"):
        load_comparisons("zappos", home, verify=False)
    put(rows.replace("28,62,7\n", "28,62,28\n", 1))
    with pytest.raises(ValueError, match="repeats an item id"):
        load_comparisons("zappos", home, verify=False)
    put(rows.replace("50,68,80\n", "50,6.8,80\n", 1))
    with pytest.raises(ValueError, match="line 2: item id '6.8' is not an integer"):
        load_comparisons("zappos", home, verify=False)
    put(rows.replace("50,68,80\n", "50,68\n", 1))
    with pytest.raises(ValueError, match="line 2: expected 3 item ids"):
        load_comparisons("zappos", home, verify=False)


# --------------------------------------------------------------------------- read_triplets
def _plain_odd(rows):
    out = []
    for r in rows:
        o, others = r[0], r[1:]
        out += [(x, y, o) for x in others for y in others if x != y]
    return np.array(out)


def _plain_central(rows):
    out = []
    for r in rows:
        c, others = r[0], r[1:]
        out += [(x, c, y) for x in others for y in others if x != y]
    return np.array(out)


def test_odd_one_out_three_items():
    t = read_triplets([[5, 1, 2]], "odd_one_out")
    assert {tuple(r) for r in t.tolist()} == {(1, 2, 5), (2, 1, 5)}


def test_most_central_three_items():
    t = read_triplets([[5, 1, 2]], "most_central")
    assert {tuple(r) for r in t.tolist()} == {(1, 5, 2), (2, 5, 1)}


@pytest.mark.parametrize("k", [3, 4, 6])
def test_conversions_against_plain_loops(k):
    rng = np.random.default_rng(k)
    rows = np.array([rng.permutation(20)[:k] for _ in range(7)])
    for fmt, plain in (("odd_one_out", _plain_odd), ("most_central", _plain_central)):
        t = read_triplets(rows, fmt)
        assert t.shape == (7 * (k - 1) * (k - 2), 3) and t.dtype == np.int64
        # same multiset, and one row's triplets consecutive
        assert sorted(map(tuple, t.tolist())) == sorted(map(tuple, plain(rows).tolist()))
        per = (k - 1) * (k - 2)
        for i in range(7):
            assert set(np.unique(t[i * per:(i + 1) * per])) == set(rows[i])
        # every converted triplet holds in a configuration where the answer is right
        assert len(np.unique(t, axis=0)) == len(t)


def test_conversion_consistent_with_geometry():
    """Points on a line: 0 and 1 close, 10 far.  The odd one out is 10, the most
    central of (0, 1, 2) is 1; every converted triplet must hold."""
    pos = np.array([0.0, 1.0, 2.0] + [0.0] * 7 + [10.0])
    def holds(t):
        return np.all(np.abs(pos[t[:, 0]] - pos[t[:, 1]]) < np.abs(pos[t[:, 0]] - pos[t[:, 2]]))
    assert holds(read_triplets([[10, 0, 1]], "odd_one_out"))
    assert holds(read_triplets([[1, 0, 2]], "most_central"))


def test_head_close_far_identity_and_files(tmp_path):
    t = np.array([[0, 1, 2], [3, 2, 1]])
    np.testing.assert_array_equal(read_triplets(t), t)
    p = tmp_path / "t.csv"
    p.write_text("head, b, c\n0,1,2\n\n# comment\n3, 2 ,1\r\n")
    np.testing.assert_array_equal(read_triplets(p), t)
    g = tmp_path / "t.tsv.gz"
    g.write_bytes(gzip.compress(b"0\t1\t2\n3\t2\t1\n"))
    np.testing.assert_array_equal(read_triplets(g), t)
    z = tmp_path / "t.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("x.csv", "0 1 2\n3 2 1\n")
    np.testing.assert_array_equal(read_triplets(str(z)), t)
    o = tmp_path / "odd.csv"
    o.write_text("4,0,1\n")
    np.testing.assert_array_equal(read_triplets(o, "odd_one_out"), [[0, 1, 4], [1, 0, 4]])
    # integral floats (np.loadtxt) are accepted
    np.testing.assert_array_equal(read_triplets(t.astype(float)), t)


@pytest.mark.parametrize("bad, match", [
    ([[0, -1, 2]], "must be >= 0; row 0"),
    ([[0, 1, 5]], "item id 5 in row 0 .* out of range for 5 items"),
    ([[0, 1, 2], [1, 1, 2]], "row 1 .* repeats an item id"),
    ([[0, 1.5, 2]], "must be integers; row 0"),
    ([[0, 1, np.nan]], "must be integers"),
    ([["a", "b", "c"]], "must be integers"),
    ([[True, False, True]], "must be integers"),
    ([[0, 1]], r"shape \(m, 3\)"),
    ([[0, 1, 2], [0, 1]], r"shape \(m, 3\)|different lengths"),
    (np.zeros((0, 3), int), "no rows"),
    (None, "got None"),
])
def test_bad_arrays(bad, match):
    with pytest.raises(ValueError, match=match):
        read_triplets(bad, n_items=5)


def test_bad_formats_and_files(tmp_path):
    with pytest.raises(ValueError, match="unknown format"):
        read_triplets([[0, 1, 2]], "pairs")
    with pytest.raises(ValueError, match="3 to 64 items per row"):
        read_triplets(np.zeros((1, 2), int), "odd_one_out")
    with pytest.raises(ValueError, match="n_items"):
        read_triplets([[0, 1, 2]], n_items=0)
    with pytest.raises(FileNotFoundError):
        read_triplets(tmp_path / "nope.csv")
    p = tmp_path / "bad.csv"
    p.write_text("0,1,2\n0,x,2\n")
    with pytest.raises(ValueError, match="line 2: item id 'x' is not an integer"):
        read_triplets(p)
    p.write_bytes(b"0,1,2\n\xff\xfe\n")
    with pytest.raises(ValueError, match="line 2: not ASCII"):
        read_triplets(p)
    p.write_text("0,1,2\n0,1,2,3\n")
    with pytest.raises(ValueError, match="line 2: expected 3 item ids"):
        read_triplets(p)
    p.write_text("# only a comment\n")
    with pytest.raises(ValueError, match="no comparisons"):
        read_triplets(p)
    with pytest.raises(ValueError, match="not a regular file|directory"):
        read_triplets(tmp_path)


# --------------------------------------------------------------------------- answer counts
def test_count_answers_plain():
    from tripletml.datasets import count_answers
    t = np.array([[0, 1, 2], [0, 2, 1], [0, 1, 2], [3, 1, 2], [0, 2, 3]])
    c = count_answers(t)
    q = {tuple(r): tuple(n) for r, n in zip(c.questions.tolist(), c.counts.tolist())}
    assert q == {(0, 1, 2): (2, 1), (3, 1, 2): (1, 0), (0, 2, 3): (1, 0)}
    assert c.n_questions == 3 and c.n_answers == 5 and c.n_conflicting == 1
    assert c.majority_ceiling == pytest.approx(4 / 5)
    with pytest.raises(ValueError, match="count_answers: .*repeats"):
        count_answers([[0, 0, 1]])


def test_zappos_answer_counts(zappos):
    from tripletml.datasets import count_answers
    c = count_answers(zappos.triplets)
    # each (head, pair) question answered once: nothing left to conflict
    assert c.n_questions == 283770 and c.n_answers == 283770
    assert c.n_conflicting == 0 and c.majority_ceiling == 1.0


def test_datasets_load_dispatches_to_the_comparison_loader(data_home):
    from tripletml import datasets
    b = datasets.load("zappos", data_home)
    assert b.triplets.shape == (283770, 3) and b.features.shape == (85, 4096)
    with pytest.raises(ValueError, match="has no subsets"):
        datasets.load("zappos", data_home, subset="train")


# --------------------------------------------------------------------------- split_items
def _brute_split(t, train):
    tr = set(int(i) for i in train)
    local = {item: k for k, item in enumerate(sorted(tr))}
    among = [[local[a], local[b], local[c]] for a, b, c in t if {a, b, c} <= tr]
    test = [list(r) for r in t if not ({int(x) for x in r} & tr)]
    head = [list(r) for r in t if int(r[0]) not in tr]
    return among, test, head


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_split_items_matches_a_brute_force_split(seed):
    from tripletml.datasets import split_items
    rng = np.random.default_rng(seed)
    t = np.array([rng.choice(20, 3, replace=False) for _ in range(500)])
    s = split_items(t, 20, test_size=0.3, random_state=seed)
    assert len(s.test_items) == 6 and len(s.train_items) == 14
    assert set(s.train_items).isdisjoint(s.test_items)
    assert sorted(set(s.train_items) | set(s.test_items)) == list(range(20))
    # the permutation rule the unseen-items benchmark documents
    p = np.random.default_rng(seed).permutation(20)
    np.testing.assert_array_equal(s.train_items, np.sort(p[:14]))
    among, test, head = _brute_split(t, s.train_items)
    assert s.train.tolist() == among and s.test.tolist() == test and s.test_head.tolist() == head
    assert len(among) and len(test) and len(head)
    # local ids index X[train_items]: back to the item ids
    np.testing.assert_array_equal(s.train_items[s.train], t[np.isin(t, s.train_items).all(1)])
    # the same split from the train items
    again = split_items(t, 20, train_items=s.train_items[::-1])
    for a, b in zip(again.__dict__.values(), s.__dict__.values()):
        np.testing.assert_array_equal(a, b)


def test_split_items_bad_arguments():
    from tripletml.datasets import split_items
    t = np.array([[0, 1, 2], [3, 4, 5]])
    with pytest.raises(ValueError, match="split_items: test_size=1.5"):
        split_items(t, test_size=1.5)
    with pytest.raises(ValueError, match="at least one item must stay on each side"):
        split_items(t, test_size=6)
    with pytest.raises(TypeError, match="split_items: test_size must be"):
        split_items(t, test_size="half")
    with pytest.raises(ValueError, match="split_items: triplets"):
        split_items([[0, 0, 1]])
    with pytest.raises(ValueError, match="split_items: train_items"):
        split_items(t, 6, train_items=[0, 9])
    with pytest.raises(ValueError, match="each side"):
        split_items(t, 6, train_items=range(6))
    for bad in (-1, 1, 2.5, True, "6"):
        with pytest.raises(ValueError, match="split_items: n_items=.* must be an integer >= 2"):
            split_items(t, bad)
    with pytest.raises(ValueError, match="split_items: train_items must be a 1-D array"):
        split_items(t, 6, train_items=[[0, 1], [2, 3]])
    for bad in ([[0, 1, np.nan]], [[0, 1, np.inf]], np.empty((0, 3)), [0, 1, 2]):
        with pytest.raises(ValueError, match="split_items: triplets"):
            split_items(bad)
    assert len(split_items(t, test_size=2, random_state=0).test_items) == 2
