"""COMET's shortcuts for answers about few items (many triplets, few rows, wide
rows) against the per-triplet formulas they replace, and sparse COMET's
``group_alpha="auto"`` against its definition.

* the Gram form of the gradient row (``1/2 X^T B x_k``) and of the linear
  terms (``X W X^T``) against the per-triplet sums of eq. (12);
* the one-pass loss along a step against ``comet_loss``;
* ``W^-1`` from the root (potri) and the Schur coefficients from a known
  ``W^-1 u`` against numpy;
* a sparse COMET fit whose group steps reuse one product with ``W^-1``
  against the same fit with every product formed;
* refactorisations counted in applied updates;
* the auto lambda: the ``ceil(sqrt(d)) + 1``-th largest group gradient after
  the diagonal pass, the paper's 1 with class labels, scale-free.
"""
import numpy as np
import pytest
import scipy.sparse as sp

import tripletml as tm
from tripletml.algorithms.comet import kernels as K
from tripletml.linalg.pd_updates import schur_coefficients

pytestmark = pytest.mark.usefixtures("raw_rows")


def _answers(seed=0, n=9, d=14, m=400, sparse=False):
    """Answers about few items (m > n^2: the Gram route) on wide rows."""
    rng = np.random.default_rng(seed)
    X = np.abs(rng.normal(size=(n, d))) * rng.random(d)      # network-like, unequal columns
    if sparse:
        X[rng.random(X.shape) < 0.4] = 0.0
        X = sp.csr_matrix(X)
    t = np.array([rng.choice(n, 3, replace=False) for _ in range(m)])
    return X, t


def _spd(d, seed=3):
    A = np.random.default_rng(seed).normal(size=(d, d))
    return A @ A.T / d + np.eye(d)


def _gradient_by_triplets(X, W, t, alpha, beta, loss):
    """The full gradient of eq. (2), eq. (12) summed triplet by triplet."""
    Xd = X.toarray() if sp.issparse(X) else X
    G = -alpha * np.linalg.inv(W) + beta * W
    for q, p, s in t:
        lam = 1 - Xd[q] @ W @ Xd[p] + Xd[q] @ W @ Xd[s]
        c = K.comet_loss_derivative(np.array([lam]), loss)[0]
        dp = Xd[s] - Xd[p]
        G += 0.5 * c * (np.outer(Xd[q], dp) + np.outer(dp, Xd[q]))
    return G


@pytest.mark.parametrize("loss", K.LOSSES)
@pytest.mark.parametrize("sparse", [False, True])
def test_gram_route_gradient_rows_equal_eq_12(loss, sparse):
    X, t = _answers(sparse=sparse)
    W = _spd(X.shape[1])
    s = K.COMETSolver(X, t, alpha=0.7, beta=0.2, loss=loss, W=W)
    assert s._gram_form() is not None                 # 400 answers > 9^2 entries
    G = _gradient_by_triplets(X, W, t, 0.7, 0.2, loss)
    for k in (0, 5, 13):
        np.testing.assert_allclose(s.coordinate_gradient(k), G[k], rtol=1e-10,
                                   atol=1e-12 * np.abs(G).max())


def test_gram_form_is_recomputed_after_the_linear_terms_change():
    X, t = _answers(m=300)
    s = K.COMETSolver(X, t, alpha=0.5, beta=0.1, W=_spd(X.shape[1]), eta0=10.0)
    for k in (2, 7, 2, 11):
        s.coordinate_step(k)
    assert s._applied > 0
    G = _gradient_by_triplets(X, s.W, t, 0.5, 0.1, "hinge")
    np.testing.assert_allclose(s.coordinate_gradient(4), G[4], rtol=1e-8,
                               atol=1e-10 * np.abs(G).max())


@pytest.mark.parametrize("sparse", [False, True])
def test_linear_terms_gram_and_chunked_routes_agree(sparse):
    X, t = _answers(sparse=sparse)
    W = _spd(X.shape[1])
    Xd = X.toarray() if sparse else X
    expect = 1 + np.einsum("ij,ij->i", Xd[t[:, 0]] @ W, Xd[t[:, 2]] - Xd[t[:, 1]])
    np.testing.assert_allclose(K.linear_terms(X, W, t), expect, rtol=1e-12, atol=1e-12)
    few = t[:50]                                       # 50 < 81: the chunked route
    np.testing.assert_allclose(K.linear_terms(X, W, few), expect[:50], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("loss", K.LOSSES)
def test_shifted_loss_sum_equals_comet_loss(loss):
    rng = np.random.default_rng(1)
    lam = np.r_[rng.normal(size=1000) * 3, [0.0, 800.0, -800.0]]
    step = rng.normal(size=lam.size)
    for a in (0.0, 0.37, -2.0):
        expect = K.comet_loss(lam + a * step, loss).sum()
        assert K.shifted_loss_sum(lam, step, a, loss) == pytest.approx(expect, rel=1e-12)


def test_loss_sums_keep_infinite_terms():
    lam = np.array([np.inf, -np.inf, 0.5])
    for loss, expect in (("hinge", np.inf), ("squared_hinge", np.inf), ("log", np.inf)):
        assert K.shifted_loss_sum(lam, None, 0.0, loss) == expect
    assert K.shifted_loss_sum(lam[1:], None, 0.0, "hinge") == 0.5


def test_inverse_from_root_and_schur_coefficients_with_a_known_product():
    W = _spd(9)
    R = np.linalg.cholesky(W).T
    inv = K._inverse_from_root(R, "COMET")
    assert inv.flags.c_contiguous          # row access and the rank-2 pass run along rows
    np.testing.assert_allclose(inv, np.linalg.inv(W), rtol=1e-10, atol=1e-12)
    with pytest.raises(FloatingPointError, match="COMET"):
        K._inverse_from_root(np.diag([1.0, 0.0, 1.0]), "COMET")
    Winv = np.linalg.inv(W)
    u = np.random.default_rng(2).normal(size=9)
    plain = schur_coefficients(Winv, 4, u)
    known = schur_coefficients(Winv, 4, u, Winv @ u)
    np.testing.assert_allclose(known[:3], plain[:3], rtol=1e-12)
    np.testing.assert_allclose(known[3], plain[3], rtol=1e-12)


class _EveryProduct(K.SparseCOMETSolver):
    """Sparse COMET with every ``W^-1 d`` formed anew (the route before one
    product per step served all of them)."""

    def _delta_objective(self, k, d, Wd=None):
        return super()._delta_objective(k, d, None)

    def _apply_group(self, k, d, lam_new, Wd=None):
        return super()._apply_group(k, d, lam_new, None)


@pytest.mark.parametrize("sparse", [False, True])
def test_sparse_group_steps_equal_the_route_with_every_product(sparse):
    X, t = _answers(seed=4, sparse=sparse)
    runs = []
    for cls in (K.SparseCOMETSolver, _EveryProduct):
        s = cls(X, t, alpha=0.5, beta=0.05, group_alpha=0.3, eta0=5.0)
        s.start(np.random.default_rng(0))
        for _ in range(3):
            s.step()
        runs.append(s)
    a, b = runs
    assert 0 < a.active_features().size
    np.testing.assert_array_equal(a.active_features(), b.active_features())
    np.testing.assert_allclose(a.W, b.W, rtol=1e-9, atol=1e-12 * np.abs(b.W).max())
    inv = np.linalg.inv(a.W)
    assert np.abs(a.W_inv - inv).max() <= 1e-8 * np.abs(inv).max()


def test_refactorisations_count_applied_updates(monkeypatch):
    X, t = _answers(m=300)
    calls = []
    real = K.COMETSolver.refactor
    monkeypatch.setattr(K.COMETSolver, "refactor", lambda self: (calls.append(getattr(self, "_applied", None)),
                                                                 real(self)))
    # a lambda no gradient reaches: the diagonal pass only, W never drifts
    s = K.SparseCOMETSolver(X, t, alpha=0.5, beta=0.05, group_alpha=1e12)
    s.start(np.random.default_rng(0), refactor_every=2)
    for _ in range(3):
        s.step()
    assert s.active_features().size == 0 and calls == []
    # dense COMET, one refactorisation per 2 applied updates
    applied = []
    apply = K.COMETSolver._apply
    monkeypatch.setattr(K.COMETSolver, "_apply",
                        lambda self, *a, **kw: applied.append(apply(self, *a, **kw)) or applied[-1])
    s = K.COMETSolver(X, t, alpha=0.5, beta=0.1, W=_spd(X.shape[1]), eta0=10.0)
    calls.clear()                                      # the constructor's factorisation
    s.start(np.random.default_rng(0), refactor_every=2)
    s.step()
    assert sum(applied) >= 4 and set(calls) == {2}
    assert len(calls) == sum(applied) // 2
    np.testing.assert_allclose(s.W_inv, np.linalg.inv(s.W), rtol=1e-8,
                               atol=1e-10 * np.abs(s.W_inv).max())


def test_auto_lambda_on_answers_is_the_threshold_of_sqrt_d_groups(monkeypatch):
    X, t = _answers(n=10, d=30, m=500)
    seen = {}
    real = K.SparseCOMETSolver.start_threshold

    def spy(self, n_groups):
        # the group norms at the end of the diagonal pass, by eq. (12)
        G = _gradient_by_triplets(self.X, self.W, self.t, self.alpha, self.beta, self.loss)
        np.fill_diagonal(G, 0.0)
        seen["norms"], seen["n"] = np.sqrt(2) * np.linalg.norm(G, axis=1), n_groups
        return real(self, n_groups)

    monkeypatch.setattr(K.SparseCOMETSolver, "start_threshold", spy)
    m = tm.SparseCOMET(preprocessing="raw", max_iter=2, tol=None, random_state=0)
    m.fit(X, triplets=t)
    assert seen["n"] == 6                                  # ceil(sqrt(30))
    norms = np.sort(seen["norms"])[::-1]
    assert m.group_alpha_ == pytest.approx(norms[6], rel=1e-9)
    assert np.sum(seen["norms"] > m.group_alpha_ * (1 + 1e-9)) == 6
    assert 0 < m.density_ < 1


def test_auto_lambda_keeps_the_papers_value_with_labels_and_a_given_value():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 5)), np.repeat([0, 1], 20)
    kw = dict(preprocessing="raw", max_iter=1, tol=None, random_state=0)
    assert tm.SparseCOMET(**kw).fit(X, y).group_alpha_ == 1.0
    Xa, t = _answers()
    m = tm.SparseCOMET(group_alpha=0.4, beta=0.1, **kw).fit(Xa, triplets=t)
    assert m.group_alpha_ == 0.4


@pytest.mark.parametrize("k", [1e-3, 1e3])
def test_auto_lambda_is_scale_free(k):
    """Rows times k: lambda follows the gradient (k^2 / k^-2 ... the same
    groups), the same similarities up to rounding."""
    X, t = _answers(n=10, d=16, m=500)
    kw = dict(preprocessing="raw", max_iter=3, tol=None, random_state=0)
    a = tm.SparseCOMET(**kw).fit(X, triplets=t)
    b = tm.SparseCOMET(eta0=k ** -4, **kw).fit(X * k, triplets=t)
    assert 0 < a.density_ < 1
    np.testing.assert_array_equal(b.active_features_, a.active_features_)
    S = a.similarity(X)
    np.testing.assert_allclose(b.similarity(X * k), S, rtol=1e-6, atol=1e-9 * np.abs(S).max())


def test_auto_lambda_fit_ignores_rows_no_answer_names():
    """Rows that no answer names (here duplicates of the items, which also
    move the fit off the Gram route: 18^2 > 300 answers) change nothing but
    rounding: the same lambda, groups and similarities."""
    X, t = _answers(n=9, d=12, m=300)
    kw = dict(preprocessing="raw", max_iter=3, tol=None, random_state=0)
    a = tm.SparseCOMET(**kw).fit(X, triplets=t)
    b = tm.SparseCOMET(**kw).fit(np.vstack([X, X]), triplets=t)
    assert b.group_alpha_ == pytest.approx(a.group_alpha_, rel=1e-9)
    np.testing.assert_array_equal(b.active_features_, a.active_features_)
    S = a.similarity(X)
    np.testing.assert_allclose(b.similarity(X), S, rtol=1e-8, atol=1e-10 * np.abs(S).max())


@pytest.mark.parametrize("loss", K.LOSSES)
@pytest.mark.parametrize("sparse", [False, True])
def test_group_gradient_norms_by_blocks_equal_eq_12(loss, sparse, monkeypatch):
    """Every group's ``sqrt(2) ||g_k||`` (diagonal entry out) from the
    blocked Gram-form product equals eq. (12) summed triplet by triplet,
    over several blocks of rows."""
    X, t = _answers(seed=4, sparse=sparse)
    s = K.SparseCOMETSolver(X, t, alpha=0.7, beta=0.2, loss=loss, group_alpha=0.1)
    for k in range(X.shape[1]):                      # the diagonal pass: W diagonal, not I
        s.diagonal_step(k)
    assert s._gram_form() is not None and np.ptp(np.diag(s.W)) > 0
    monkeypatch.setattr(K, "_NORM_BLOCK_ENTRIES", 5 * X.shape[1])   # blocks of 5 rows
    G = _gradient_by_triplets(X, s.W, t, 0.7, 0.2, loss)
    np.fill_diagonal(G, 0.0)
    want = np.sqrt(2.0) * np.linalg.norm(G, axis=1)
    np.testing.assert_allclose(s.group_gradient_norms(), want, rtol=1e-10,
                               atol=1e-12 * want.max())


def _objective_dense(X, W, t, alpha, beta, loss):
    """Eq. (2) from its formula: sum_t l(lambda_t) - alpha log det W + beta/2 ||W||^2."""
    Xd = X.toarray() if sp.issparse(X) else X
    lam = 1.0 - np.einsum("ij,ij->i", Xd[t[:, 0]] @ W, Xd[t[:, 1]] - Xd[t[:, 2]])
    return (K.comet_loss(lam, loss).sum() - alpha * np.linalg.slogdet(W)[1]
            + 0.5 * beta * np.sum(W * W))


@pytest.mark.parametrize("loss", K.LOSSES)
@pytest.mark.parametrize("sparse", [False, True])
def test_diagonal_pass_is_algorithm_2_line_3(loss, sparse):
    """Each diagonal step against the dense objective: its gradient
    ``dF/dW_kk`` by central differences (smooth losses) or eq. (3) (the
    hinge), the step ``-eta0 g / 2`` (at most ``step_fraction`` of the way to
    0) halved until F does not increase, and ``W_kk += 2 d_k``."""
    X, t = _answers(seed=5, sparse=sparse, m=300)
    alpha, beta, eta0 = 0.7, 0.2, 3.0
    s = K.SparseCOMETSolver(X, t, alpha=alpha, beta=beta, loss=loss, group_alpha=0.1, eta0=eta0)
    W = np.eye(X.shape[1])
    Xd = X.toarray() if sp.issparse(X) else X
    moved = 0
    for k in range(X.shape[1]):
        w = W[k, k]
        if loss == "hinge":
            lam = 1.0 - np.einsum("ij,ij->i", Xd[t[:, 0]] @ W, Xd[t[:, 1]] - Xd[t[:, 2]])
            qd = Xd[t[:, 0], k] * (Xd[t[:, 2], k] - Xd[t[:, 1], k])
            g = K.comet_loss_derivative(lam, loss) @ qd - alpha / w + beta * w
        else:
            h = 1e-6 * w
            E = np.zeros_like(W)
            E[k, k] = h
            g = (_objective_dense(X, W + E, t, alpha, beta, loss)
                 - _objective_dense(X, W - E, t, alpha, beta, loss)) / (2 * h)
        dk = max(-0.5 * eta0 * g, -0.5 * 0.5 * w)
        F0 = _objective_dense(X, W, t, alpha, beta, loss)
        for _ in range(40):
            W1 = W.copy()
            W1[k, k] = w + 2 * dk
            if _objective_dense(X, W1, t, alpha, beta, loss) <= F0 + 1e-12 * abs(F0):
                W = W1
                moved += dk != 0
                break
            dk *= 0.5
        s.diagonal_step(k)
        np.testing.assert_allclose(np.diag(s.W), np.diag(W), rtol=1e-6)
    assert moved >= X.shape[1] // 2
    np.testing.assert_allclose(s.linear_terms, 1.0 - np.einsum(
        "ij,ij->i", Xd[t[:, 0]] @ W, Xd[t[:, 1]] - Xd[t[:, 2]]), atol=1e-10)
    assert s.loss_sum() == pytest.approx(K.comet_loss(s.linear_terms, loss).sum(), rel=1e-12)


def test_the_threshold_group_stays_zero_whichever_way_its_norm_is_summed(monkeypatch):
    """``group_alpha="auto"`` sets lambda to the (ceil(sqrt d) + 1)-th group's
    norm from the blocked product; the group's own step sums its gradient
    row otherwise (a rounding apart), and must leave it at zero."""
    X, t = _answers(n=10, d=30, m=500)
    s = K.SparseCOMETSolver(X, t, alpha=0.7, beta=0.2, group_alpha=1.0)
    for k in range(X.shape[1]):
        s.diagonal_step(k)
    norms = s.group_gradient_norms()
    k = int(np.argsort(norms)[::-1][6])
    s.group_alpha = float(norms[k]) * (1.0 - 4e-16)       # the step's sum a rounding above
    assert s.coordinate_step(k) == np.inf and not s.V[k].any()
    s.group_alpha = float(norms[k]) * (1.0 - 1e-9)        # a real excess enters
    s.coordinate_step(k)
    assert s.V[k].any()


@pytest.mark.parametrize("sparse", [False, True])
def test_screened_zero_groups_give_the_unscreened_fit(sparse, monkeypatch):
    """The epoch's zero tests from blocks of group norms (recomputed after
    every change of W): the same groups enter and the same W as a fit
    that forms every gradient row, with fewer rows formed."""
    X, t = _answers(n=10, d=40, m=600, sparse=sparse)
    kw = dict(preprocessing="raw", max_iter=3, tol=None, random_state=0)
    rows = []
    grad = K.SparseCOMETSolver.coordinate_gradient
    monkeypatch.setattr(K.SparseCOMETSolver, "coordinate_gradient",
                        lambda self, k: rows.append(k) or grad(self, k))
    a = tm.SparseCOMET(**kw).fit(X, triplets=t)
    n_screened = len(rows)
    monkeypatch.setattr(K.SparseCOMETSolver, "_screened_norm", lambda self, k: np.inf)
    rows.clear()
    b = tm.SparseCOMET(**kw).fit(X, triplets=t)
    assert 0 < a.density_ < 1 and a.n_iter_ == b.n_iter_ == 3
    np.testing.assert_array_equal(a.active_features_, b.active_features_)
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-10, atol=1e-12 * np.abs(b.W_).max())
    assert n_screened < len(rows) / 2


def test_screened_norm_follows_every_change_of_w():
    """The screen's norm of a group is eq. (12)'s at the current W, also
    after a group entered (W, W^-1 and the linear terms changed)."""
    X, t = _answers(n=10, d=30, m=500)
    s = K.SparseCOMETSolver(X, t, alpha=0.7, beta=0.2, group_alpha=1e-6)
    for k in range(X.shape[1]):
        s.diagonal_step(k)
    s._order = np.arange(X.shape[1])[::-1].copy()
    s._place = np.argsort(s._order)

    def exact(k):
        G = _gradient_by_triplets(X, s.W, t, 0.7, 0.2, "hinge")
        G[k, k] = 0.0
        return np.sqrt(2.0) * np.linalg.norm(G[k])
    assert s._screened_norm(20) == pytest.approx(exact(20), rel=1e-10)
    assert s.coordinate_step(29) < np.inf and s.V[29].any()        # group 29 entered
    assert s._screened_norm(19) == pytest.approx(exact(19), rel=1e-10)
    assert s._screened_norm(20) == pytest.approx(exact(20), rel=1e-10)
