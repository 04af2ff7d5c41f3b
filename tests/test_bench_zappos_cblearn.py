"""bench/bench_zappos_cblearn.py without its cblearn environment: the splits
are bench_zappos' own, the accuracy formula, the summary and the verdict."""
from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bz():
    """bench.bench_zappos_cblearn, imported from the repository root."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT))
        return importlib.import_module("bench.bench_zappos_cblearn")


def test_splits_are_bench_zappos_splits(bz, data_home):
    """The same indices as bench/bench_zappos.py's loop (KFold over the
    triplets, shuffled with seed 0, 20,000 drawn with default_rng(fold))."""
    from sklearn.model_selection import KFold

    from tripletml.datasets import load_comparisons
    T = load_comparisons("zappos", data_home).triplets
    got = list(bz.splits(len(T)))
    assert len(got) == 5
    for f, (tr_i, te_i) in enumerate(KFold(5, shuffle=True, random_state=0).split(T)):
        rng = np.random.default_rng(f)
        g_f, g_tr, g_te = got[f]
        assert g_f == f
        np.testing.assert_array_equal(g_tr, rng.choice(tr_i, 20000, replace=False))
        np.testing.assert_array_equal(g_te, te_i)
    assert len(list(bz.splits(len(T), 2))) == 2


def test_splits_without_data(bz):
    """Shape and disjointness on a synthetic count (no data needed)."""
    for f, tr, te in bz.splits(1000, 5, 100):
        assert len(tr) == 100 and len(np.unique(tr)) == 100
        assert len(te) == 200 and not np.intersect1d(tr, te).size


def test_triplet_accuracy_hand_made(bz):
    Y = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [0.0, 1.0]])
    t = np.array([[0, 1, 2],      # 1 < 9: right
                  [0, 2, 1],      # 9 > 1: wrong
                  [0, 1, 3],      # 1 == 1: tie counts as wrong
                  [2, 1, 0]])     # 4 < 9: right
    assert bz.triplet_accuracy(Y, t) == 0.5
    assert bz.triplet_accuracy(Y[:, 0], t[:2]) == 0.5          # a 1-D embedding (MLDS)


def _rows(bz, lib, method, dim, accs, times, status="ok"):
    return [{"library": lib, "method": method, "backend": "x", "dim": dim, "fold": f,
             "seed": s, "status": status, "accuracy": a if status == "ok" else None,
             "lib_accuracy": None, "fit_s": times[s], "message": ""}
            for f, a in enumerate(accs) for s in range(len(times))]


def test_summary_and_verdict(bz):
    rows = (_rows(bz, bz.TML, "SOE (tripletml)", 5, [0.86, 0.88], [0.1, 0.2, 0.3])
            + _rows(bz, bz.TML, "TSTE (tripletml)", 2, [0.80, 0.80], [0.05, 0.05, 0.05])
            + _rows(bz, bz.CBL, "SOE (cblearn)", 5, [0.85, 0.87], [2.0, 1.0, 3.0])
            + _rows(bz, bz.CBL, "STE (cblearn)", 5, [0.80, 0.80], [0.1, 0.1, 0.1])
            + _rows(bz, bz.CBL, "STE (cblearn, torch)", 5, [0, 0], [120.0], "timeout"))
    S = bz.summarize(rows)
    soe = next(s for s in S if s["method"] == "SOE (tripletml)")
    assert soe["acc_mean"] == pytest.approx(0.87) and soe["acc_sd"] == pytest.approx(0.01)
    assert soe["fit_s"] == pytest.approx(0.2) and soe["n_folds"] == 2
    torch_row = next(s for s in S if s["method"] == "STE (cblearn, torch)")
    assert torch_row["acc_mean"] is None and "timeout" in torch_row["note"]
    assert bz.best(S, bz.CBL)["method"] == "SOE (cblearn)"       # the timeout is not a candidate
    ok, line = bz.verdict(S)
    assert ok and line.startswith("VERDICT: MET") and "ratio 0.100" in line
    tab = bz.table(S)
    assert "| SOE (cblearn) | x | 5 | 2 | 0.8600 ± 0.0100 | 2.000 | 1.000 |" in tab
    assert "timeout (> 120 s)" in tab

    # accuracy below theirs -> not met, even when much faster
    slow = [dict(r, accuracy=r["accuracy"] - 0.02) if r["library"] == bz.TML
            and r["accuracy"] is not None else r for r in rows]
    ok, line = bz.verdict(bz.summarize(slow))
    assert not ok and "accuracy < theirs" in line
    # accuracy enough but fit time above 1/5 -> not met
    slower = [dict(r, fit_s=r["fit_s"] * 5) if r["library"] == bz.TML else r for r in rows]
    ok, line = bz.verdict(bz.summarize(slower))
    assert not ok and "ratio 0.500 (> 0.2)" in line
    # a library without a complete result: not decidable
    ok, line = bz.verdict(bz.summarize([r for r in rows if r["library"] == bz.TML]))
    assert not ok and "not decidable" in line


def test_csv_round_trip(bz, tmp_path):
    rows = _rows(bz, bz.TML, "SOE (tripletml)", 2, [0.8], [0.1, 0.2])
    for r in rows:
        r.update(n_train=20000, n_test=56754, versions="tripletml=x")
    bz.write_csv(tmp_path / "h.csv", rows)
    back = bz.read_csv(tmp_path / "h.csv")
    assert [(r["fold"], r["seed"], r["accuracy"], r["fit_s"]) for r in back] == \
        [(r["fold"], r["seed"], r["accuracy"], r["fit_s"]) for r in rows]


def test_worker_needs_no_tripletml():
    """The cblearn worker runs in cblearn's environment: it must not import
    tripletml or the repository's bench package."""
    src = (ROOT / "bench" / "_cblearn_worker.py").read_text()
    assert "import tripletml" not in src and "from tripletml" not in src
    assert "from bench" not in src and "from ." not in src
