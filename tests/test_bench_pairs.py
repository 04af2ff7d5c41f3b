"""bench/bench_pairs.py and bench/bench_classic.py (issue 29's metric-learn head to
heads): pair drawing, the evaluation path with a fake pair learner, the
summaries and goals on fake rows, the report, the command lines.  No
metric-learn, no virtual environment, no data set files."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _import(name):
    # ``pytest`` alone does not put the repository root on sys.path
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT))
        return importlib.import_module(name)


@pytest.fixture(scope="module")
def bpairs():
    return _import("bench.bench_pairs")


@pytest.fixture(scope="module")
def bclassic():
    return _import("bench.bench_classic")


# --------------------------------------------------------------------------------------
# pair drawing
# --------------------------------------------------------------------------------------
def _check_pairs(y, pairs, labels, n_expected):
    assert pairs.dtype == np.int64 and pairs.shape == (n_expected, 2)
    assert labels.dtype == np.int8 and labels.shape == (n_expected,)
    assert np.all(pairs[:, 0] < pairs[:, 1])                        # distinct rows, i < j
    assert len({tuple(p) for p in pairs.tolist()}) == n_expected    # no pair twice
    same = y[pairs[:, 0]] == y[pairs[:, 1]]
    np.testing.assert_array_equal(labels == 1, same)                # labels from the classes
    assert set(np.unique(labels).tolist()) == {-1, 1}
    assert int((labels == 1).sum()) == n_expected // 2               # balanced


@pytest.mark.parametrize("enumerate_limit", [None, 0])   # listing all pairs / rejection
def test_draw_pairs_reproducible_and_balanced(bpairs, monkeypatch, enumerate_limit):
    if enumerate_limit is not None:
        monkeypatch.setattr(bpairs, "_ENUMERATE_LIMIT", enumerate_limit)
    y = np.random.default_rng(0).integers(0, 5, size=300)
    p1, l1 = bpairs.draw_pairs(y, 400, seed=3, salt=1)
    p2, l2 = bpairs.draw_pairs(y, 400, seed=3, salt=1)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(l1, l2)
    _check_pairs(y, p1, l1, 400)
    p3, _ = bpairs.draw_pairs(y, 400, seed=4, salt=1)
    p4, _ = bpairs.draw_pairs(y, 400, seed=3, salt=2)
    assert not np.array_equal(p1, p3) and not np.array_equal(p1, p4)
    # the order is shuffled: the labels are not one block of +1 then -1
    assert np.any(l1[:200] == -1) and np.any(l1[200:] == 1)


def test_draw_pairs_caps_at_the_scarcer_kind(bpairs):
    y = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])      # 3 + 1 + 6 = 10 similar pairs
    pairs, labels = bpairs.draw_pairs(y, 1000, seed=0)
    _check_pairs(y, pairs, labels, 20)                 # every similar pair, 10 dissimilar
    with pytest.raises(ValueError, match="no similar or no dissimilar"):
        bpairs.draw_pairs(np.zeros(10), 10, seed=0)


@pytest.mark.parametrize("enumerate_limit", [None, 0])
def test_draw_pairs_skips_identical_points(bpairs, monkeypatch, enumerate_limit):
    if enumerate_limit is not None:
        monkeypatch.setattr(bpairs, "_ENUMERATE_LIMIT", enumerate_limit)
    rng = np.random.default_rng(5)
    X = rng.integers(0, 2, size=(60, 2)).astype(float)     # 4 distinct points, many copies
    y = rng.integers(0, 2, size=60)
    g = bpairs.identical_rows(X)
    assert g.shape == (60,) and len(np.unique(g)) == len(np.unique(X, axis=0))
    pairs, labels = bpairs.draw_pairs(y, 200, seed=0, groups=g)
    _check_pairs(y, pairs, labels, 200)
    assert not np.any(np.all(X[pairs[:, 0]] == X[pairs[:, 1]], axis=1))


def test_default_n_pairs(bpairs):
    assert bpairs.default_n_pairs(2) == 1000
    assert bpairs.default_n_pairs(10) == 2000
    assert bpairs.default_n_pairs(26) == 4000


def test_make_split_standardizes_on_training_rows(bpairs):
    rng = np.random.default_rng(1)
    y = np.repeat(np.arange(3), 40)
    X = rng.normal(size=(120, 4)) * [1, 10, 100, 0.1] + 5
    sp = bpairs.make_split(X, y, seed=0, n_pairs=200)
    tr, te = sp["train"], sp["test"]
    assert tr["rows"] == 84 and te["rows"] == 36 and sp["n_classes"] == 3
    np.testing.assert_allclose(tr["X"].mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(tr["X"].std(0), 1, atol=1e-12)
    assert abs(te["X"].mean()) > 1e-6                  # not re-fitted on the test rows
    for part in (tr, te):
        assert part["P3"].shape == (part["idx"].shape[0], 2, 4)
        np.testing.assert_array_equal(part["P3"], part["X"][part["idx"]])
        assert int((part["y"] == 1).sum()) == part["y"].size // 2
    sp2 = bpairs.make_split(X, y, seed=0, n_pairs=200)
    np.testing.assert_array_equal(sp2["test"]["idx"], te["idx"])


# --------------------------------------------------------------------------------------
# the evaluation path, with a fake pair learner (the Euclidean distance)
# --------------------------------------------------------------------------------------
class EuclideanPairs:
    """metric-learn's / tripletml's pair API on the plain Euclidean distance."""

    def __init__(self, score_offset=0.0):
        self.score_offset = score_offset

    def get_params(self, deep=True):
        return {"score_offset": self.score_offset}

    def set_params(self, **p):
        self.__dict__.update(p)
        return self

    def fit(self, P, y=None, pairs=None):
        if pairs is not None:                       # fit(X, pairs=, y=)
            P = P[pairs]
        self.n_fit_ = len(P)
        self.threshold_ = 0.0
        return self

    def decision_function(self, P):
        return -np.linalg.norm(P[:, 0] - P[:, 1], axis=1)

    def calibrate_threshold(self, P, y, strategy="accuracy"):
        assert strategy == "accuracy"
        s = self.decision_function(P)
        cands = np.sort(s)
        accs = [np.mean(np.where(s >= c, 1, -1) == y) for c in cands]
        self.threshold_ = float(cands[int(np.argmax(accs))])
        return self

    def predict(self, P):
        return np.where(self.decision_function(P) >= self.threshold_, 1, -1)

    def score(self, P, y):
        from sklearn.metrics import roc_auc_score
        return roc_auc_score(y, self.decision_function(P)) + self.score_offset


def _auc(y, s):
    # Mann-Whitney: the share of (similar, dissimilar) pairs ranked right
    pos, neg = s[y == 1], s[y == -1]
    return float(((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean())


@pytest.mark.parametrize("form", ["points", "indices"])
def test_evaluate_with_a_fake_pair_learner(bpairs, form):
    rng = np.random.default_rng(2)
    y = np.repeat(np.arange(3), 30)
    X = rng.normal(size=(90, 3)) + 3 * y[:, None]
    sp = bpairs.make_split(X, y, seed=1, n_pairs=300)
    est = EuclideanPairs()
    res = bpairs.evaluate(est, sp["train"], sp["test"], form=form, warm_up=True,
                          check_score=True)
    te = sp["test"]
    d = np.linalg.norm(te["P3"][:, 0] - te["P3"][:, 1], axis=1)
    assert res["auc"] == pytest.approx(_auc(te["y"], -d), abs=1e-12)
    assert 0.9 < res["auc"] <= 1.0                    # well separated classes
    pred = np.where(-d >= est.threshold_, 1, -1)
    assert res["acc"] == pytest.approx(np.mean(pred == te["y"]))
    assert res["threshold"] == est.threshold_ and res["message"] == ""
    assert res["fit_s"] >= 0 and res["calib_s"] >= 0
    assert est.n_fit_ == sp["train"]["idx"].shape[0]   # the scored model saw every pair


def test_evaluate_flags_a_score_that_is_not_the_auc(bpairs):
    rng = np.random.default_rng(3)
    y = np.repeat(np.arange(2), 30)
    X = rng.normal(size=(60, 2)) + y[:, None]
    sp = bpairs.make_split(X, y, seed=0, n_pairs=100)
    res = bpairs.evaluate(EuclideanPairs(score_offset=0.1), sp["train"], sp["test"],
                          check_score=True)
    assert "is not the ROC AUC" in res["message"]


def test_evaluate_refuses_bad_predictions(bpairs):
    class ZeroOne(EuclideanPairs):
        def predict(self, P):
            return (np.arange(len(P)) % 2).astype(int)     # 1/0 labels
    y = np.repeat(np.arange(2), 20)
    X = np.random.default_rng(4).normal(size=(40, 2))
    sp = bpairs.make_split(X, y, seed=0, n_pairs=60)
    with pytest.raises(ValueError, match="not \\+1/-1"):
        bpairs.evaluate(ZeroOne(), sp["train"], sp["test"])


# --------------------------------------------------------------------------------------
# summary, goals and report (fake rows)
# --------------------------------------------------------------------------------------
def _prow(set_name, method, seed, auc, fit=1.0, status="ok", message=""):
    fam = "metric-learn" if method.endswith("(metric-learn)") else "tripletml"
    return {"set": set_name, "method": method, "family": fam, "seed": seed, "status": status,
            "auc": auc, "acc": None if auc is None else auc - 0.1, "fit_s": fit, "calib_s": 0.0,
            "threshold": 0.0, "n_train_pairs": 1000, "n_test_pairs": 600, "n_train": 105,
            "n_test": 45, "n_features": 4, "n_classes": 3, "form": "points",
            "message": message}


def _pair_rows():
    rows = []
    for seed, j in ((0, -0.01), (1, 0.0), (2, 0.01)):
        # set a: metric-learn best ITML .90; tripletml KISSME .92; Euclidean .95 is a
        # baseline (never "best tripletml"); SDML fails
        rows += [_prow("a", "ITML (metric-learn)", seed, 0.90 + j, 5.0),
                 _prow("a", "MMC (metric-learn)", seed, 0.85 + j, 1.0),
                 _prow("a", "SDML (metric-learn)", seed, None, None, "error", "not PD"),
                 _prow("a", "KISSME", seed, 0.92 + j, 0.001),
                 _prow("a", "OASIS", seed, 0.80 + j, 0.01),
                 _prow("a", "Euclidean", seed, 0.95 + j, 0.0)]
        # set b: tripletml below (miss); one seed of ITML timed out
        rows += [_prow("b", "MMC (metric-learn)", seed, 0.88, 2.0),
                 _prow("b", "ITML", seed, 0.87, 0.1) if seed else
                 _prow("b", "ITML", seed, None, None, "timeout", "no result after 300 s"),
                 _prow("b", "Euclidean", seed, 0.70, 0.0)]
    return rows


def test_pair_goals(bpairs):
    s = bpairs.summarize(_pair_rows())
    g = bpairs.goals(s)
    assert g["a"]["ml_best"] == "ITML (metric-learn)" and g["a"]["tml_best"] == "KISSME"
    assert g["a"]["ok"] is True and g["a"]["delta"] == pytest.approx(0.02)
    assert g["b"]["tml_best"] == "ITML" and g["b"]["ok"] is False
    assert g["b"]["delta"] == pytest.approx(-0.01)
    assert s["b"]["ITML"]["n_ok"] == 2 and s["b"]["ITML"]["bad"] == ["timeout"]
    assert s["a"]["SDML (metric-learn)"]["auc"] is None


def test_pair_report_round_trip(bpairs, tmp_path):
    out = tmp_path / "pairs"
    (out / "rows").mkdir(parents=True)
    import json
    (out / "rows" / "a.jsonl").write_text("\n".join(json.dumps(r) for r in _pair_rows()) +
                                          "\n{cut line")
    prov = {"runs": [{"command": "python -m bench.bench_pairs"}], "protocol": "test"}
    bpairs.report(out, prov)
    assert not (out / "rows").exists()
    md = (out / "pairs.md").read_text()
    assert "| a | 150 / 4 / 3 | 1000 / 600 |" in md
    assert "KISSME 0.920, 0.820" in md and "+0.0200 | **yes** |" in md
    assert "-0.0100 | no |" in md and "Goal met on 1 of 2 set(s); missed on b." in md
    assert "not PD" in md and "## Provenance" in md
    rows = bpairs.read_rows(out)                      # the CSV reads back the same rows
    assert len(rows) == len(_pair_rows())
    assert rows[("a", "KISSME", 1)]["auc"] == pytest.approx(0.92)
    assert rows[("b", "ITML", 0)]["status"] == "timeout"
    bpairs.report(out, prov)                          # from the CSV alone
    assert (out / "pairs.md").read_text() == md
    # metric-learn's rows copied into a folder of tripletml rows (--ml-rows-from)
    other = tmp_path / "indices"
    (other / "rows").mkdir(parents=True)
    (other / "rows" / "a.jsonl").write_text("\n".join(
        json.dumps(r) for r in _pair_rows() if r["family"] == "tripletml"))
    assert bpairs.copy_ml_rows(out, other) == 12
    bpairs.report(other, prov)
    got = bpairs.read_rows(other)
    assert len(got) == len(_pair_rows())
    assert "copied from" in got[("a", "ITML (metric-learn)", 0)]["message"]
    assert "Goal met on 1 of 2 set(s)" in (other / "pairs.md").read_text()


# --------------------------------------------------------------------------------------
# bench_classic: goals
# --------------------------------------------------------------------------------------
def _st(m, k1, k3, fit, n=3, bad=()):
    return {"family": "x", "map": m, "knn1": k1, "knn3": k3, "fit_s": fit, "n": n,
            "n_ok": n - len(bad), "bad": sorted(set(bad)), "messages": []}


def test_classic_compare(bclassic):
    c = bclassic.compare
    # iterative, metric-learn slow: 1/5 of its time
    r = c(_st(.5, .8, .8, 10.0), _st(.5, .8, .8, 1.9), "LMNN")
    assert r["quality"] is True and r["time"] is True and r["ratio"] == pytest.approx(0.19)
    r = c(_st(.5, .8, .8, 10.0), _st(.51, .8, .8, 2.1), "NCA")
    assert r["time"] is False
    # iterative, metric-learn under a second: no time goal
    r = c(_st(.5, .8, .8, 0.5), _st(.5, .8, .8, 0.4), "SCML")
    assert r["time"] is None and r["ratio"] == pytest.approx(0.8)
    # quality: each metric within TOL, else a miss naming the deltas
    r = c(_st(.5, .8, .8, 1.0), _st(.496, .8, .8, 0.1), "MMC")
    assert r["quality"] is True
    r = c(_st(.5, .8, .8, 1.0), _st(.6, .79, .8, 0.1), "MMC")
    assert r["quality"] is False and "Δknn1 -0.010" in r["quality_text"]
    # closed forms: no slower
    assert c(_st(.5, .8, .8, 0.010), _st(.5, .8, .8, 0.011), "RCA")["time"] is False
    assert c(_st(.5, .8, .8, 0.010), _st(.5, .8, .8, 0.009), "LFDA")["time"] is True
    # metric-learn timed out: tripletml within 1/5 of the timeout
    r = c(_st(None, None, None, None, bad=("timeout",) * 3), _st(.5, .8, .8, 10.0), "LMNN",
          timeout=300)
    assert r["time"] is True and r["quality"] is None and "timeout" in r["time_text"]
    r = c(_st(None, None, None, None, bad=("timeout",) * 3), _st(.5, .8, .8, 61.0), "LMNN",
          timeout=300)
    assert r["time"] is None and "not decided" in r["time_text"]
    # tripletml absent: n/a; tripletml failed: a miss
    r = c(_st(.5, .8, .8, 1.0), None, "LMNN")
    assert r["quality"] is None and r["time"] is None
    r = c(_st(.5, .8, .8, 1.0), _st(None, None, None, None, bad=("error",) * 3), "LMNN")
    assert r["quality"] is False and r["time"] is False


def test_classic_report(bclassic, tmp_path):
    import json
    rows = []
    for seed in (0, 1, 2):
        for meth, (m, fit) in {"LMNN (metric-learn)": (0.70, 10.0), "LMNN": (0.72, 1.0),
                               "RCA_Supervised (metric-learn)": (0.60, 0.01),
                               "RCA": (0.60, 0.02)}.items():
            rows.append({"set": "iris", "method": meth, "family": "", "seed": seed,
                         "status": "ok", "map": m, "knn1": 0.9, "knn3": 0.9, "fit_s": fit,
                         "n_components": 4, "n_train": 105, "n_test": 45, "n_features": 4,
                         "n_classes": 3, "message": ""})
    out = tmp_path / "classic"
    (out / "rows").mkdir(parents=True)
    (out / "rows" / "iris.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    bclassic.report(out, {"runs": [{"sets": ["iris"], "timeout_s": 300}]})
    md = (out / "classic.md").read_text()
    assert ("| LMNN | LMNN | 1 | 1/1 | 1/1 | +0.020 / +0.000 / +0.000 | 0.1 (0.1 – 0.1) | "
            "none |") in md
    assert ("| RCA | RCA_Supervised | 1 | 1/1 | 0/1 | +0.000 / +0.000 / +0.000 | 2 (2 – 2) | "
            "time: iris |") in md
    assert "| iris | 0.600 / 0.600 |" in md and "no (20 ms vs 10 ms)" in md
    assert (out / "classic.csv").read_text().count("\n") == 13


def test_classic_pairs_and_methods(bclassic):
    assert bclassic.ml_method("MMC") == "MMC_Supervised (metric-learn)"
    assert bclassic.learner_of("SCML_Supervised (metric-learn)") == "SCML"
    assert bclassic.learner_of("NCA") == "NCA"
    assert bclassic.methods_for(["RCA"]) == ["RCA_Supervised (metric-learn)", "RCA"]
    assert set(bclassic.ITERATIVE) | set(bclassic.CLOSED) == set(bclassic.PAIRS)


# --------------------------------------------------------------------------------------
# command lines
# --------------------------------------------------------------------------------------
def test_help_and_argument_errors(bpairs, bclassic, capsys):
    for mod in (bpairs, bclassic):
        with pytest.raises(SystemExit) as e:
            mod.main(["--help"])
        assert e.value.code == 0
        text = capsys.readouterr().out
        assert "--timeout" in text and "--resume" in text and "metric-learn" in text
    with pytest.raises(SystemExit) as e:
        bpairs.parse_args(["--sets", "nope"])
    assert e.value.code == 2 and "unknown data set" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bclassic.parse_args(["--learners", "LMNN,Foo"])
    assert "unknown learner" in capsys.readouterr().err
    a = bclassic.parse_args(["--learners", "RCA", "--seeds", "0,1", "--large-seeds", "0"])
    assert a.methods == ["RCA_Supervised (metric-learn)", "RCA"] and a.seeds == [0, 1]
    a = bpairs.parse_args(["--methods", "ITML (metric-learn),Euclidean", "--form", "indices"])
    assert a.methods == ["ITML (metric-learn)", "Euclidean"] and a.form == "indices"


def test_cli_help_as_a_module():
    res = subprocess.run([sys.executable, "-m", "bench.bench_pairs", "--help"], cwd=str(ROOT),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "pair verification" in res.stdout.lower()
