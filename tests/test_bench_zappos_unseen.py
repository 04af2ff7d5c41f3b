"""bench/bench_zappos_unseen.py (issue 30, unseen items): the item split, the
triplet split, the table scoring, and the gallery example
``examples/plot_zappos_comparisons.py`` (compiles; runs its no-data exit)."""
from __future__ import annotations

import importlib
import py_compile
import runpy
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plot_zappos_comparisons.py"


@pytest.fixture(scope="module")
def bz():
    """bench.bench_zappos_unseen, imported from the repository root."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT))
        return importlib.import_module("bench.bench_zappos_unseen")


@pytest.mark.parametrize("seed", [0, 1, 4])
def test_split_items_disjoint_sizes_seeded(bz, seed):
    tr, te = bz.split_items(seed)
    assert len(tr) == 57 and len(te) == 28
    assert not set(tr) & set(te) and set(tr) | set(te) == set(range(85))
    assert np.all(np.diff(tr) > 0) and np.all(np.diff(te) > 0)
    p = np.random.default_rng(seed).permutation(85)
    np.testing.assert_array_equal(tr, np.sort(p[:57]))
    tr2, _ = bz.split_items(seed)
    np.testing.assert_array_equal(tr, tr2)
    assert not np.array_equal(tr, bz.split_items(seed + 1)[0])


def test_split_triplets_membership(bz):
    rng = np.random.default_rng(0)
    T = np.array([rng.choice(10, 3, replace=False) for _ in range(500)])
    tr, te = bz.split_items(3, n_items=10, n_train=6)
    sp = bz.split_triplets(T, tr, te, n_items=10)
    is_tr = np.isin(T, tr)
    # train: all three items are train items, re-indexed into X[train]
    np.testing.assert_array_equal(sp["train_global"], T[is_tr.all(1)])
    np.testing.assert_array_equal(tr[sp["train"]], sp["train_global"])
    assert sp["train"].min() >= 0 and sp["train"].max() < len(tr)
    np.testing.assert_array_equal(sp["test-test"], T[(~is_tr).all(1)])
    np.testing.assert_array_equal(sp["test-head"], T[~is_tr[:, 0]])
    assert np.isin(sp["test-test"], te).all() and np.isin(sp["test-head"][:, 0], te).all()
    # every triplet is in exactly one of: train, test-head, neither (train head, mixed)
    assert len(sp["train"]) + len(sp["test-head"]) <= len(T)


def test_scoring_on_a_tiny_example(bz):
    """Items on a line; the cosine table of l2 rows and a fitted Euclidean
    score fabricated triplets as counted by hand, through triplet_accuracy."""
    import tripletml as tm

    X = np.array([[0.0], [1.0], [2.0], [10.0]])
    T = np.array([[0, 1, 3],      # right: 1 is nearer 0 than 3
                  [0, 3, 1],      # wrong
                  [2, 1, 3],      # right
                  [3, 2, 0]])     # right
    e = tm.Euclidean().fit(X, triplets=T[:1])
    S = bz.item_similarity(e, X, check=T)
    acc = bz.score_sets(S, X, {"all": T, "first two": T[:2]})
    assert acc == {"all": 0.75, "first two": 0.5}
    assert acc["all"] == pytest.approx(tm.metrics.triplet_accuracy(e, X, T))
    # l2 rows: the inner product ranks like the cosine
    Y = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    Yn = bz.l2_rows(Y)
    np.testing.assert_allclose(np.linalg.norm(Yn, axis=1), 1.0)
    assert bz.score_sets(Yn @ Yn.T, Yn, {"t": np.array([[0, 1, 2], [2, 1, 0]])})["t"] == 1.0


def test_fit_capped_reports_errors_and_timeouts(bz, monkeypatch):
    X = np.random.default_rng(0).normal(size=(6, 3))
    T = np.array([[0, 1, 2], [3, 4, 5], [1, 2, 3]])
    st, dt, S, note = bz.fit_capped("KISSME", {}, 0, X, T, X, T, timeout=60)
    assert st == "ok" and S.shape == (6, 6) and dt >= 0
    st, _, S, note = bz.fit_capped("OASIS", {"C": -1.0}, 0, X, T, X, T, timeout=60)
    assert st == "error" and S is None and "C" in note


def test_learner_names_are_the_registry_triplet_learners(bz):
    names = bz.learner_names()
    assert "OASIS" in names and "Euclidean" not in names and "DotProduct" not in names
    assert "LORETAMultilabel" not in names
    assert bz.learner_names(["SDCA", "OASIS", "nope"]) == ["SDCA", "OASIS"]


def test_example_compiles_and_exits_cleanly_without_data(tmp_path, monkeypatch, capsys):
    """Run as ``python plot_zappos_comparisons.py`` would (``runpy`` as
    ``__main__``), in this process: its exit status without data is 0."""
    py_compile.compile(str(EXAMPLE), doraise=True)
    monkeypatch.setenv("TRIPLETML_DATA", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    status = 0
    try:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    except SystemExit as exc:              # the exit status python would give
        status = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr().out
    assert status == 0, out
    assert "TRIPLETML_DATA" in out and "zappos" in out


def test_summarize_pairs_margins_per_seed(bz, tmp_path):
    import csv

    rows = [dict(section="main", learner="cosine", input="l2", params="", seed=s, status="ok",
                 fit_s="0.1", **{"test-test": tt, "test-head": th, "train": "0.7"})
            for s, tt, th in ((0, "0.70", "0.60"), (1, "0.80", "0.70"))]
    rows += [dict(section="main", learner="X", input="l2", params="", seed=s, status="ok",
                  fit_s="2", **{"test-test": tt, "test-head": th, "train": "0.9"})
             for s, tt, th in ((0, "0.72", "0.61"), (1, "0.84", "0.71"))]
    rows += [dict(section="main", learner="Y", input="raw", params="", seed=0, status="timeout",
                  fit_s="90.1", note="fit > 90 s")]
    path = tmp_path / "main.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, bz.FIELDS)
        w.writeheader()
        w.writerows(rows)
    md = bz.summarize(path, "main")
    x = next(line for line in md.splitlines() if line.startswith("| X |"))
    assert "0.780 ± 0.085" in x and "+0.030 ± 0.014" in x and "+0.010 ± 0.000" in x
    assert "| 0.900 |" in x
    y = next(line for line in md.splitlines() if line.startswith("| Y |"))
    assert "fit > 90 s" in y and "| 0 |" in y
