"""NCA (Goldberger, Roweis, Hinton & Salakhutdinov, NIPS 2004): the objective
against a plain transcription of eqs. 1-3, the gradient by finite
differences, the triplet form against the label form, and the fitted
model's behavior."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.neighbors import KNeighborsClassifier

import tripletml as tm
import tripletml.linalg.pairwise as pw
import tripletml.algorithms.nca.kernels as solver
from tripletml import NCA
from tripletml.triplets import random_class_triplets


def reference_objective(L, X, y):
    """f(L) = sum_i p_i, p_i = sum_{j in C_i} p_ij, p_ij the softmax over
    k != i of -||L x_i - L x_k||^2 (eqs. 1-3), one row at a time."""
    n = len(X)
    f = 0.0
    for i in range(n):
        e = np.array([np.exp(-np.sum((L @ (X[i] - X[k])) ** 2)) if k != i else 0.0
                      for k in range(n)])
        p = e / e.sum()
        f += sum(p[j] for j in range(n) if y[j] == y[i] and j != i)
    return f


def _data(seed=0, n=40, d=4, classes=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    X = rng.normal(size=(n, d)) + 0.7 * y[:, None]
    return X, y


@pytest.mark.parametrize("elements", [None, 37])     # one block, many blocks
@pytest.mark.parametrize("r", [4, 2])
def test_objective_equals_the_paper(r, elements, monkeypatch):
    if elements:
        monkeypatch.setattr(pw, "BLOCK_ELEMENTS", elements)
    X, y = _data()
    f = solver.NCAObjective(X, y)
    rng = np.random.default_rng(1)
    for scale in (0.2, 0.6, 1.5):
        L = scale * rng.normal(size=(r, 4))
        ref = reference_objective(L, X, y)
        value, _, info = f(L)
        assert -value == pytest.approx(ref, rel=1e-10, abs=1e-10)
        assert info["expected_correct"] == pytest.approx(ref, rel=1e-10)


@pytest.mark.parametrize("elements", [None, 37])
def test_gradient_by_finite_differences(elements, monkeypatch):
    if elements:
        monkeypatch.setattr(pw, "BLOCK_ELEMENTS", elements)
    X, y = _data(seed=2)
    f = solver.NCAObjective(X, y)
    rng = np.random.default_rng(3)
    for r in (4, 2, 6):
        L = 0.5 * rng.normal(size=(r, 4))
        _, grad, _ = f(L)
        for _ in range(3):
            E = rng.normal(size=L.shape)
            h = 1e-6
            fd = (f(L + h * E)[0] - f(L - h * E)[0]) / (2 * h)
            assert fd == pytest.approx(float(np.sum(grad * E)), rel=1e-6, abs=1e-9)


def test_triplet_form_with_every_class_triplet_is_nca():
    X, y = _data(seed=4, n=18)
    n = len(X)
    t = np.array([(q, p, m) for q in range(n) for p in range(n) for m in range(n)
                  if p != q and y[p] == y[q] and y[m] != y[q]])
    L = np.random.default_rng(5).normal(size=(3, 4))
    a = solver.NCAObjective(X, y)(L)
    b = solver.NCATripletObjective(X, t)(L)
    # every row has a same-class row and one of another class here
    assert b[0] == pytest.approx(a[0], rel=1e-12)
    np.testing.assert_allclose(b[1], a[1], rtol=1e-10, atol=1e-12)


def test_triplet_form_gradient_and_conflicting_triplets():
    X, y = _data(seed=6)
    rng = np.random.default_rng(7)
    t = rng.integers(0, len(X), size=(80, 3))
    t = t[(t[:, 0] != t[:, 1]) & (t[:, 0] != t[:, 2]) & (t[:, 1] != t[:, 2])]
    t = np.r_[t, t[:3, [0, 2, 1]]]            # (q, j) both positive and negative
    f = solver.NCATripletObjective(X, t)
    L = rng.normal(size=(2, 4))
    value, grad, _ = f(L)
    # reference: softmax of q over its candidates, s_qj = share of positives
    Z = X @ L.T
    ref = 0.0
    for q in np.unique(t[:, 0]):
        rows = t[t[:, 0] == q]
        cand = sorted(set(rows[:, 1]) | set(rows[:, 2]))
        pos = {j: np.sum(rows[:, 1] == j) / (np.sum(rows[:, 1] == j) + np.sum(rows[:, 2] == j))
               for j in cand}
        e = np.array([np.exp(-np.sum((Z[q] - Z[j]) ** 2)) for j in cand])
        ref += float(np.sum(e / e.sum() * np.array([pos[j] for j in cand])))
    assert -value == pytest.approx(ref, rel=1e-10)
    E = rng.normal(size=L.shape)
    h = 1e-6
    fd = (f(L + h * E)[0] - f(L - h * E)[0]) / (2 * h)
    assert fd == pytest.approx(float(np.sum(grad * E)), rel=1e-6)


# ---------------------------------------------------------------- the learner
def _easy(seed=0, n=120):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    info = rng.normal(size=(n, 2)) * 0.3 + np.c_[np.cos(2 * y), np.sin(2 * y)]
    return np.c_[info, 3.0 * rng.normal(size=(n, 6))], y


def test_fit_raises_the_objective_and_knn_accuracy(raw_rows):
    X, y = _easy()
    Xt, yt = _easy(seed=1)
    m = NCA(preprocessing=None, init_scale=1.0).fit(X, y)       # the scikit-learn start
    f_end = reference_objective(m.components_, X, y)
    f_init = reference_objective(m.init_scale_ * np.eye(8), X, y)
    assert -m.objective_ == pytest.approx(f_end, rel=1e-10)
    assert -m.initial_objective_ == pytest.approx(f_init, rel=1e-10)
    assert f_end >= f_init + 10
    before = KNeighborsClassifier(3).fit(X, y).score(Xt, yt)
    after = KNeighborsClassifier(3).fit(m.transform(X), y).score(m.transform(Xt), yt)
    assert before < 0.8 and after > 0.9, (before, after)
    np.testing.assert_allclose(m.M_, m.components_.T @ m.components_)
    h = m.history_
    assert len(h["objective"]) == m.n_iter_ + 1
    assert all(b <= a + 1e-12 for a, b in zip(h["objective"], h["objective"][1:]))


def test_iterates_equal_scikit_learns(raw_rows):
    """scikit-learn's NeighborhoodComponentsAnalysis runs L-BFGS-B on the
    same objective from the same identity: the same iterates, to rounding."""
    from sklearn.neighbors import NeighborhoodComponentsAnalysis
    X, y = _easy(n=60)
    for it in (1, 5):
        sk = NeighborhoodComponentsAnalysis(init="identity", max_iter=it, tol=1e-12).fit(X, y)
        ours = NCA(init="identity", init_scale=None, preprocessing=None, max_iter=it,
                   tol=None).fit(X, y)
        np.testing.assert_allclose(ours.components_, sk.components_, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("load", [load_iris, load_wine])
def test_defaults_converge_without_warning(load):
    X, y = load(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = NCA().fit(X, y)
    assert m.stop_reason_ == "tol" and m.n_iter_ < m.max_iter
    assert m.objective_ <= m.initial_objective_


def test_max_iter_is_recorded_and_warns_only_with_tol():
    X, y = _easy(n=60)
    with pytest.warns(ConvergenceWarning, match="NCA: stopped at max_iter=2"):
        m = NCA(max_iter=2).fit(X, y)
    assert m.stop_reason_ == "max_iter" and m.n_iter_ == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert NCA(max_iter=2, tol=None).fit(X, y).stop_reason_ == "max_iter"


def test_invariant_to_permuted_features():
    X, y = _easy(n=60)
    perm = np.random.default_rng(0).permutation(X.shape[1])
    a = NCA().fit(X, y)
    b = NCA().fit(X[:, perm], y)
    np.testing.assert_allclose(b.get_mahalanobis_matrix(),
                               a.get_mahalanobis_matrix()[np.ix_(perm, perm)],
                               rtol=1e-6, atol=1e-8)


def test_bad_input_and_options(tmp_path):
    X, y = _easy(n=60)
    with pytest.raises(ValueError, match="NCA: every class has a single member"):
        NCA().fit(X[:6], np.arange(6))
    with pytest.raises(ValueError, match="NCA: y has 1 class"):
        NCA().fit(X, np.zeros(60))
    with pytest.raises(ValueError, match="NCA: n_components=9 exceeds"):
        NCA(n_components=9).fit(X, y)
    with pytest.raises(ValueError, match="NCA: parameter init="):
        NCA(init="svd").fit(X, y)
    for init in ("pca", "lda", "identity", "random"):
        m = NCA(n_components=2, init=init, random_state=0, max_iter=10, tol=None).fit(X, y)
        assert m.components_.shape == (2, 8) and m.init_ == init
    y2 = y.copy()
    y2[0] = 7                                    # a class of one member is allowed
    assert np.isfinite(NCA(max_iter=5, tol=None).fit(X, y2).components_).all()
    m = NCA(n_components=3, max_iter=10, tol=None).fit(X, y)
    m.save(tmp_path / "m.npz")
    b = tm.load_model(tmp_path / "m.npz")
    np.testing.assert_array_equal(b.transform(X), m.transform(X))
    data = dict(np.load(tmp_path / "m.npz", allow_pickle=False))
    data["components_"] = 2 * data["components_"]
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(ValueError, match="components_ is not a factor"):
        tm.load_model(tmp_path / "bad.npz")


# ------------------------------------------------------------ init_scale
def _nearest_sq_loop(Z):
    """Median over rows of the squared distance to the nearest other row."""
    out = []
    for i in range(len(Z)):
        d = [np.sum((Z[i] - Z[j]) ** 2) for j in range(len(Z)) if j != i]
        d = [v for v in d if v > 0]
        out.append(min(d))
    return float(np.median(out))


def test_init_scale_auto_puts_the_median_nearest_neighbour_at_one(raw_rows):
    X, y = _easy(n=90)
    X = np.vstack([X, X[:5]])                  # duplicates are not neighbours
    y = np.concatenate([y, y[:5]])
    m = NCA(preprocessing="raw", max_iter=1, tol=None).fit(X, y)
    assert _nearest_sq_loop(X * m.init_scale_) == pytest.approx(1.0, rel=1e-10)
    assert -m.initial_objective_ == pytest.approx(
        reference_objective(m.init_scale_ * np.eye(8), X, y), rel=1e-10)
    assert NCA(preprocessing="raw", init_scale=None, max_iter=1, tol=None).fit(
        X, y).init_scale_ == 1.0
    assert NCA(preprocessing="raw", init_scale=0.5, max_iter=1, tol=None).fit(
        X, y).init_scale_ == 0.5


def test_init_scale_auto_makes_the_start_scale_free():
    """Rows times 1e3 with the rows as given: the same start (the same
    neighbour probabilities, so the same objective), L0 divided by 1e3;
    scikit-learn's start (factor 1) is another one.  (L-BFGS itself is not
    invariant to a rescaled parameter, so later iterates are not compared.)"""
    X, y = _easy(n=90)
    kw = dict(preprocessing="raw", max_iter=1, tol=None)
    a = NCA(**kw).fit(X, y)
    b = NCA(**kw).fit(X * 1e3, y)
    assert b.init_scale_ == pytest.approx(a.init_scale_ * 1e-3, rel=1e-10)
    assert b.initial_objective_ == pytest.approx(a.initial_objective_, rel=1e-9)
    c = NCA(preprocessing="raw", init_scale=None, **{k: v for k, v in kw.items()
                                                      if k != "preprocessing"}).fit(X * 1e3, y)
    assert c.initial_objective_ != pytest.approx(b.initial_objective_, rel=1e-3)


def test_init_scale_on_the_span_route_is_the_plain_model():
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(20, 30)), np.arange(20) % 2
    a = NCA(max_iter=10, tol=None)
    a._span_route = False
    a.fit(X, y)
    b = NCA(max_iter=10, tol=None).fit(X, y)
    assert a.init_scale_ == pytest.approx(b.init_scale_, rel=1e-10) and b.rank_ == 30
    np.testing.assert_allclose(b.components_, a.components_, atol=1e-8)
    Xn = rng.normal(size=(4, 30))
    np.testing.assert_allclose(b.similarity(Xn, X), a.similarity(Xn, X), rtol=1e-8, atol=1e-8)


def test_init_scale_auto_is_one_on_answers(raw_rows):
    X, y = _easy(n=60)
    t = random_class_triplets(y, 200, random_state=0)
    m = NCA(preprocessing="raw", max_iter=2, tol=None, early_stopping=False).fit(X, triplets=t)
    assert m.init_scale_ == 1.0
    m = NCA(preprocessing="raw", init_scale=0.3, max_iter=2, tol=None,
            early_stopping=False).fit(X, triplets=t)
    assert m.init_scale_ == 0.3


def test_a_failed_fit_leaves_no_start_factor_behind():
    rng = np.random.default_rng(0)
    m = NCA(max_iter=2, tol=None)
    with pytest.raises(ValueError, match="single member"):   # span route, singleton classes
        m.fit(rng.normal(size=(4, 10)) * 100, np.arange(4))
    X, y = rng.normal(size=(60, 6)), np.arange(60) % 3
    assert m.set_params(init_scale=None).fit(X, y).init_scale_ == 1.0
    assert m.set_params(init_scale="auto").fit(X, y).init_scale_ == \
        NCA(max_iter=2, tol=None).fit(X, y).init_scale_


def test_neighbor_scale_is_exact_under_a_large_offset():
    from tripletml.algorithms.nca.estimator import neighbor_scale

    X, _ = _easy(n=50)
    assert neighbor_scale(X + 1e6) == pytest.approx(1.0 / np.sqrt(_nearest_sq_loop(X)), rel=1e-6)


def test_neighbor_scale_refuses_bad_rows():
    from tripletml.algorithms.nca.estimator import neighbor_scale

    for Z, msg in [(np.zeros((0, 2)), "non-empty 2-D"), (np.ones(3), "non-empty 2-D"),
                   (np.array([[0.0, np.nan], [1.0, 2.0]]), "NaN or infinity")]:
        with pytest.raises(ValueError, match=f"neighbor_scale: .*{msg}"):
            neighbor_scale(Z)
    assert neighbor_scale(np.ones((4, 2))) == 1.0               # every row the same
