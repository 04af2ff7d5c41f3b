"""Multi-label ranking (LORETA paper, section 5.2): loss, steps and metric
against brute-force references."""
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import label_ranking_average_precision_score

import tripletml as tm
from tripletml.losses import multilabel_hinge
from tripletml.metrics import label_ranking_map


def brute_hinge(scores, y):
    """sum_{i in y} [s_ybar - s_i + 1]_+, ybar = argmax over false labels;
    g = +1 at violators, -d at ybar (the negative subgradient)."""
    neg = [s for s in range(len(scores)) if s not in y]
    if not neg or not y:
        return 0.0, np.zeros(len(scores))
    ybar = max(neg, key=lambda s: (scores[s], -s))
    g = np.zeros(len(scores))
    loss = 0.0
    for i in y:
        h = scores[ybar] - scores[i] + 1
        if h > 0:
            loss += h
            g[i] += 1
    if loss > 0:
        g[ybar] -= np.count_nonzero(g)
    return loss, g


def test_multilabel_hinge_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(300):
        L = int(rng.integers(2, 9))
        scores = np.round(rng.normal(size=L), 1)  # ties happen
        y = sorted(set(rng.integers(0, L, size=rng.integers(0, L + 1)).tolist()))
        is_pos = np.zeros(L, bool)
        is_pos[y] = True
        gi, gv = np.zeros(L + 1, np.int64), np.zeros(L + 1)
        loss, nnz = multilabel_hinge(scores, np.array(y, np.int64), is_pos, gi, gv)
        ref_loss, ref_g = brute_hinge(scores, y)
        g = np.zeros(L)
        np.add.at(g, gi[:nnz], gv[:nnz])
        assert loss == pytest.approx(ref_loss)
        np.testing.assert_allclose(g, ref_g)


def test_label_ranking_map_against_sklearn_and_ties():
    rng = np.random.default_rng(1)
    Y = rng.random((50, 7)) < 0.3
    Y[0] = False                       # left out
    S = rng.normal(size=(50, 7))
    keep = Y.any(1)
    assert label_ranking_map(Y, S) == pytest.approx(
        label_ranking_average_precision_score(Y[keep], S[keep]))
    # ties: lower label index first.  Labels 0 and 1 tied, only label 1 true:
    assert label_ranking_map([[0, 1, 0]], [[1.0, 1.0, 0.0]]) == pytest.approx(0.5)
    assert label_ranking_map([[1, 0, 0]], [[1.0, 1.0, 0.0]]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="label_ranking_map: no sample has a true label"):
        label_ranking_map([[0, 0]], [[1.0, 2.0]])


def _data(seed=0, n=40, d=8, L=5, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if sparse:
        X[rng.random(X.shape) < 0.5] = 0.0
    Y = (rng.random((n, L)) < 0.35).astype(int)
    Y[np.arange(n), rng.integers(0, L, n)] = 1
    return X, Y


def dense_retraction(A, B, Z):
    L, d = A.shape[0], B.shape[0]
    x = A @ B.T
    PA, PB = A @ np.linalg.pinv(A), B @ np.linalg.pinv(B)
    xS, xl, xr = PA @ Z @ PB, PA @ Z @ (np.eye(d) - PB), (np.eye(L) - PA) @ Z @ PB
    xp = np.linalg.pinv(x)
    w1 = x + 0.5 * xS + xr - xS @ xp @ xS / 8 - 0.5 * xr @ xp @ xS
    w2 = x + 0.5 * xS + xl - xS @ xp @ xS / 8 - 0.5 * xS @ xp @ xl
    return w1 @ xp @ w2


@pytest.mark.parametrize("sparse", [False, True])
def test_loreta_multilabel_step_is_theorem_1(sparse):
    X, Y = _data(sparse=sparse)
    Xin = sp.csr_matrix(X) if sparse else X
    m = tm.LORETAMultilabel(rank=2, eta0=0.2, init="random", fit_intercept=False,
                            random_state=0)
    m.partial_fit(Xin[:1], np.zeros((1, 5), int) + np.eye(5, dtype=int)[:1] * 0 + [[1, 1, 1, 1, 1]])
    A, B = m.A_.copy(), m.B_.copy()   # all labels true: no false label, no step
    steps = 0
    for r in range(10):
        W = A @ B.T
        loss, g = brute_hinge(W @ X[r], list(np.flatnonzero(Y[r])))
        m.partial_fit(Xin[r:r + 1], Y[r:r + 1])
        if loss > 0:
            R = dense_retraction(A, B, 0.2 * np.outer(g, X[r]))
            assert np.linalg.norm(m.A_ @ m.B_.T - R) <= 1e-8 * np.linalg.norm(R)
            steps += 1
        else:
            np.testing.assert_allclose(m.A_ @ m.B_.T, W)
        A, B = m.A_.copy(), m.B_.copy()
    assert steps >= 3
    np.testing.assert_allclose(m.pinv_A_.T, np.linalg.pinv(m.A_), atol=1e-9)


@pytest.mark.parametrize("sparse", [False, True])
def test_perceptron_and_iterative_pa_match_loops(sparse):
    X, Y = _data(seed=2, sparse=sparse)
    Xin = sp.csr_matrix(X) if sparse else X
    per = tm.MatrixPerceptron(eta0=0.3, fit_intercept=False).partial_fit(Xin, Y)
    W = np.zeros((5, X.shape[1]))
    for r in range(X.shape[0]):
        _, g = brute_hinge(W @ X[r], list(np.flatnonzero(Y[r])))
        W += 0.3 * np.outer(g, X[r])
    np.testing.assert_allclose(per.W_, W, atol=1e-12)

    pa = tm.IterativePAMultilabel(rank=3, C=0.5, init="random", fit_intercept=False,
                                  random_state=0)
    pa.partial_fit(Xin[:1], [[1, 1, 1, 1, 1]])  # no false label: no step
    A, B = pa.A_.copy(), pa.B_.copy()
    pa.partial_fit(Xin, Y)
    for r in range(X.shape[0]):
        y = list(np.flatnonzero(Y[r]))
        loss, g = brute_hinge(A @ B.T @ X[r], y)
        if loss <= 0:
            continue
        bp = B.T @ X[r]
        A = A + min(loss / (g @ g * (bp @ bp)), 0.5) * np.outer(g, bp)
        loss2, g2 = brute_hinge(A @ B.T @ X[r], y)
        if loss2 > 0:
            ag = A.T @ g2
            B = B + min(loss2 / (X[r] @ X[r] * (ag @ ag)), 0.5) * np.outer(X[r], ag)
    np.testing.assert_allclose(pa.A_, A, atol=1e-10)
    np.testing.assert_allclose(pa.B_, B, atol=1e-10)


def test_multilabel_api_and_errors():
    X, Y = _data(seed=3)
    m = tm.LORETAMultilabel(rank=2, random_state=0, max_iter=np.int64(2)).fit(X, Y)
    assert m.decision_function(X).shape == (40, 5) and m.n_features_in_ == 8
    assert 0 < m.score(X, Y) <= 1
    assert len(m.history_["step"]) == 2
    with pytest.raises(ValueError, match="LORETAMultilabel: rank=6 exceeds"):
        tm.LORETAMultilabel(rank=6).fit(X, Y)
    with pytest.raises(ValueError, match="MatrixPerceptron: Y has 39 rows but X has 40"):
        tm.MatrixPerceptron().fit(X, Y[:-1])
    with pytest.raises(ValueError, match="MatrixPerceptron: Y must hold only 0 and 1"):
        tm.MatrixPerceptron().fit(X, Y * 2)
    with pytest.raises(ValueError, match="IterativePAMultilabel: .*NaN"):
        tm.IterativePAMultilabel(rank=2).fit(np.full((3, 2), np.nan), [[1, 0], [0, 1], [1, 0]])
    with pytest.raises(ValueError, match="LORETAMultilabel: X has 7 features"):
        m.decision_function(X[:, :7])


@pytest.mark.parametrize("cls", [tm.LORETAMultilabel, tm.IterativePAMultilabel])
def test_default_rank_follows_the_labels(cls, tmp_path):
    """rank=None is the paper's rank 5 where the labels allow it and
    min(n_labels, n_features) below that (three labels: rank 3, not a
    refusal); an explicit rank above the cap is still refused; rank_ is saved,
    checked on load, and rebuilt for a file or pickle written without it."""
    import json
    import pickle
    import zipfile

    X, Y = _data(seed=4, L=3)
    m = cls(max_iter=1, random_state=0).fit(X, Y)
    assert m.rank is None and m.rank_ == 3 and m.A_.shape == (3, 3)
    assert cls(max_iter=1, random_state=0).fit(*_data(seed=4, L=7)).rank_ == 5
    assert cls(max_iter=1, fit_intercept=False, random_state=0).fit(
        X[:, :2], Y).rank_ == 2
    with pytest.raises(ValueError, match=f"{cls.__name__}: rank=4 exceeds "
                                         r"min\(n_labels=3"):
        cls(rank=4).fit(X, Y)
    path = tmp_path / "m.npz"
    m.save(path)
    back = tm.load_model(path)
    assert back.rank_ == 3
    np.testing.assert_array_equal(back.decision_function(X), m.decision_function(X))
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    meta = json.loads(np.load(path)["__meta__"].tobytes())

    def rewrite(attrs):
        meta["attributes"] = attrs
        blob = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        import io
        buf = io.BytesIO()
        np.save(buf, blob)
        with zipfile.ZipFile(path, "w") as zf:
            for n, data in members.items():
                zf.writestr(n, buf.getvalue() if n == "__meta__.npy" else data)

    attrs = dict(meta["attributes"])
    rewrite({k: v for k, v in attrs.items() if k != "rank_"})     # written before rank_
    assert tm.load_model(path).rank_ == 3
    rewrite({**attrs, "rank_": 2})
    with pytest.raises(ValueError, match="rank_=2 with factors of rank 3"):
        tm.load_model(path)
    state = m.__getstate__()
    del state["rank_"]
    old = cls.__new__(cls)
    old.__setstate__(state)
    assert old.rank_ == 3 and pickle.loads(pickle.dumps(old)).rank_ == 3


@pytest.mark.data
def test_low_rank_learns_yeast(data_home):
    from tripletml import datasets
    tr = datasets.load("yeast", data_home=data_home, subset="train")
    te = datasets.load("yeast", data_home=data_home, subset="test")
    m = tm.LORETAMultilabel(rank=4, eta0=0.05, max_iter=5, random_state=0)
    m.fit(tr.data, tr.target)
    # label ranking beats ranking every label by its training frequency
    freq = np.tile(tr.target.mean(0), (te.target.shape[0], 1))
    assert m.score(te.data, te.target) > label_ranking_map(te.target, freq) - 0.02


@pytest.mark.parametrize("cls, params", [
    (tm.LORETAMultilabel, {"rank": 2, "eta0": 0.05, "max_iter": 2, "init": "random",
                           "fit_intercept": False, "pinv_check_every": 7, "pinv_tol": 1e-6,
                           "random_state": 1, "verbose": 0}),
    (tm.IterativePAMultilabel, {"rank": 2, "C": 0.05, "max_iter": 2, "tol": 0.5,
                                "init": "random", "fit_intercept": False, "random_state": 1,
                                "verbose": 0}),
    (tm.MatrixPerceptron, {"eta0": 0.05, "max_iter": 2, "fit_intercept": False,
                           "random_state": 1, "verbose": 0}),
])
def test_multilabel_params_numpy_ints_and_persistence(cls, params, tmp_path):
    from sklearn.base import clone
    X, Y = _data(seed=4)
    est = cls().set_params(**params)
    assert {k: est.get_params()[k] for k in params} == params
    assert clone(est).get_params() == est.get_params()
    ints = {k: np.int64(v) for k, v in params.items()
            if isinstance(v, int) and not isinstance(v, bool) and k != "verbose"}
    est.set_params(**ints).fit(X, Y)
    est.save(tmp_path / "m.npz")
    back = tm.load_model(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.decision_function(X), est.decision_function(X))
    back.partial_fit(X[:5], Y[:5])  # resumes


# ------------------------------------------- stopping, divergence, state (12, 13)
@pytest.mark.parametrize("make", [lambda **kw: tm.LORETAMultilabel(rank=2, eta0=0.01, **kw),
                                  lambda **kw: tm.IterativePAMultilabel(rank=2, **kw),
                                  lambda **kw: tm.MatrixPerceptron(eta0=0.01, **kw)])
def test_multilabel_stopping_rule(make):
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    X, Y = _data(seed=5)
    name = type(make()).__name__
    with pytest.warns(ConvergenceWarning, match=f"{name}: stopped at max_iter=1"):
        m = make(max_iter=1, tol=1e-6, random_state=0).fit(X, Y)
    assert (m.n_iter_, m.stop_reason_, m.t_) == (1, "max_iter", 40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = make(max_iter=2, random_state=0).fit(X, Y)       # tol=None: fixed budget
    assert (m.n_iter_, m.stop_reason_, m.t_) == (2, "max_iter", 80)
    assert len(m.history_["step"]) == 2                        # one record per pass
    m = make(max_iter=200, tol=0.9, random_state=0).fit(X, Y)
    assert m.stop_reason_ == "tol" and m.n_iter_ < 200


def test_multilabel_divergence_stops_with_advice():
    X, Y = _data(seed=6)
    with pytest.raises(FloatingPointError, match="LORETAMultilabel: training diverged.*eta0"):
        tm.LORETAMultilabel(rank=3, eta0=50.0, max_iter=50, random_state=0).fit(X * 10, Y)


def test_matrix_perceptron_without_its_matrix_is_refused():
    X, Y = _data(seed=7)
    m = tm.MatrixPerceptron(eta0=0.1, max_iter=1).fit(X, Y)
    assert m.n_columns_ == 9 and m.W_.shape == (5, 9)
    del m.W_                                  # e.g. a crafted model file without W_
    with pytest.raises(ValueError, match=r"MatrixPerceptron: W_ has shape None, expected \(5, 9\)"):
        m.partial_fit(X[:2], Y[:2])
    assert tm.MatrixPerceptron._fitted_arrays["W_"].shape == ("n_labels_", "n_columns_")
    assert not tm.MatrixPerceptron._fitted_arrays["W_"].optional


# ---------------------------------------------------- eta0="auto" (LORETAMultilabel)
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_loreta_multilabel_eta0_auto_is_the_formula_on_the_first_rows(sparse, fit_intercept):
    """eta_ = c / (2 median ||p||^2) over the first 1000 rows as the kernel
    sees them (with the intercept feature), from a plain loop; c = 0.3."""
    from tripletml.core.online import AUTO_ETA_HEAD
    from tripletml.algorithms.multilabel.estimator import auto_step_size_multilabel
    from tripletml.linalg.sparse_rows import as_csr
    rng = np.random.default_rng(7)
    X = rng.normal(size=(1200, 6)) * 3.0 + 1.0
    X[rng.random(X.shape) < 0.3] = 0.0
    X[1100:] *= 5.0                            # rows past the head do not count
    Y = (rng.random((1200, 4)) < 0.4).astype(int)
    Y[np.arange(1200), rng.integers(0, 4, 1200)] = 1
    rows = [np.append(x, 1.0) if fit_intercept else x for x in X[:AUTO_ETA_HEAD]]
    ref = 0.3 / (2.0 * np.median([r @ r for r in rows]))
    m = tm.LORETAMultilabel(rank=2, max_iter=1, fit_intercept=fit_intercept, random_state=0)
    m.fit(sp.csr_matrix(X) if sparse else X, Y)
    assert m.eta0 == "auto" and tm.LORETAMultilabel._auto_eta_c == 0.3
    assert m.eta_ == pytest.approx(ref, rel=1e-12)
    assert auto_step_size_multilabel(as_csr(np.zeros((3, 2))), 0.7) == 0.7   # no variation
    # partial_fit resolves it at the first call, from that call's rows
    p = tm.LORETAMultilabel(rank=2, fit_intercept=fit_intercept, random_state=0)
    p.partial_fit(X[:50], Y[:50])
    rows = rows[:50]
    assert p.eta_ == pytest.approx(0.3 / (2.0 * np.median([r @ r for r in rows])), rel=1e-12)
    eta = p.eta_
    p.partial_fit(X[1100:], Y[1100:])          # later calls keep the step
    assert p.eta_ == eta


def test_loreta_multilabel_eta0_auto_follows_the_scale_and_explicit_eta0_is_used():
    X, Y = _data(seed=8, n=60)
    a = tm.LORETAMultilabel(rank=2, max_iter=2, fit_intercept=False, random_state=0).fit(X, Y)
    b = tm.LORETAMultilabel(rank=2, max_iter=2, fit_intercept=False,
                            random_state=0).fit(X * 100.0, Y)
    assert b.eta_ == pytest.approx(a.eta_ * 1e-4, rel=1e-9)
    assert np.isfinite(b.A_).all() and np.isfinite(b.B_).all()
    # a constant step of 0.1 diverges on these large features; "auto" does not
    with pytest.raises(FloatingPointError, match="LORETAMultilabel: training diverged"):
        tm.LORETAMultilabel(rank=2, eta0=0.1, max_iter=2, fit_intercept=False,
                            random_state=0).fit(X * 100.0, Y)
    c = tm.LORETAMultilabel(rank=2, eta0=0.005, max_iter=2, random_state=0).fit(X, Y)
    assert c.eta_ == 0.005
    for bad in ("fast", -1.0, 0.0, None):
        with pytest.raises((TypeError, ValueError), match="LORETAMultilabel: parameter eta0"):
            tm.LORETAMultilabel(eta0=bad).fit(X, Y)
    # the perceptron keeps a numeric eta0 only
    with pytest.raises((TypeError, ValueError), match="MatrixPerceptron: parameter eta0"):
        tm.MatrixPerceptron(eta0="auto").fit(X, Y)


def test_loreta_multilabel_eta_survives_save_and_resume(tmp_path):
    X, Y = _data(seed=9, n=60)
    m = tm.LORETAMultilabel(rank=2, max_iter=2, random_state=0).fit(X, Y)
    m.save(tmp_path / "m.npz")
    back = tm.load_model(tmp_path / "m.npz")
    assert back.eta_ == m.eta_
    m.partial_fit(X[:20] * 50.0, Y[:20])
    back.partial_fit(X[:20] * 50.0, Y[:20])
    assert back.eta_ == m.eta_
    np.testing.assert_allclose(back.A_, m.A_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(back.B_, m.B_, rtol=1e-12, atol=1e-14)


def test_perceptron_defaults_on_raw_pixel_counts_fit_and_rank():
    """MatrixPerceptron at its defaults on digits' raw counts (0-16): the
    hinge of a mistake grows with ||W|| by design, which the loss-ratio
    divergence watch of the other learners took for divergence (a
    FloatingPointError at the defaults); the fit ends and ranks the true
    label first on held-out rows far above chance."""
    from sklearn.datasets import load_digits
    from tripletml import MatrixPerceptron
    X, y = load_digits(return_X_y=True)
    Y = np.eye(10)[y]
    m = MatrixPerceptron(random_state=0).fit(X[:1200], Y[:1200])
    assert m.stop_reason_ == "max_iter" and np.isfinite(m.W_).all()
    top = np.argmax(m.decision_function(X[1200:]), axis=1)
    assert (top == y[1200:]).mean() > 0.85
