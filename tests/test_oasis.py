"""OASIS against a plain dense loop written from Chechik et al. (2010)."""
import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import OASIS
from tripletml.triplets import random_class_triplets

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")


def reference_oasis(X, triplets, C, W0):
    """Dense PA-I loop: l = [1 - q'W p+ + q'W p-]_+, V = q (p+ - p-)',
    tau = min(C, l / ||V||_F^2), W += tau V."""
    W = W0.copy()
    trace = []
    for q, p, n in triplets:
        V = np.outer(X[q], X[p] - X[n])
        loss = max(0.0, 1.0 - X[q] @ W @ X[p] + X[q] @ W @ X[n])
        nrm = np.sum(V * V)
        if loss > 0 and nrm > 0:
            W = W + min(C, loss / nrm) * V
        trace.append(W.copy())
    return W, trace


def _data(seed=0, n=40, d=7, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if sparse:
        X[rng.random(X.shape) < 0.6] = 0.0
    y = rng.integers(0, 3, size=n)
    return X, y


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("C", [0.01, 1.0, 1e6])
def test_partial_fit_matches_reference_step_by_step(sparse, C):
    X, y = _data(sparse=sparse)
    t = random_class_triplets(y, 60, random_state=1)
    Xin = sp.csr_matrix(X) if sparse else X
    _, trace = reference_oasis(X, t, C, np.eye(X.shape[1]))
    model = OASIS(preprocessing=None, C=C)
    for i in range(t.shape[0]):
        model.partial_fit(Xin, t[i:i + 1])
        np.testing.assert_allclose(model.W_, trace[i], rtol=1e-10, atol=1e-12)
    assert model.t_ == t.shape[0]
    assert len(model.history_["step"]) == t.shape[0]


def test_single_step_is_one_pa_update():
    X, _ = _data(d=5)
    X[2] = X[0]  # margin q'(p - q) = q'p - ||q||^2 < 1: the step is not passive
    t = np.array([[0, 1, 2]])
    assert X[0] @ (X[1] - X[2]) < 1
    model = OASIS(preprocessing=None, C=10.0).partial_fit(X, t)
    W, _ = reference_oasis(X, t, 10.0, np.eye(5))
    np.testing.assert_allclose(model.W_, W, rtol=1e-12)
    assert not np.allclose(model.W_, np.eye(5))  # the step did something


def test_fit_equals_reference_in_fit_order():
    X, y = _data(seed=3)
    t = random_class_triplets(y, 80, random_state=2)
    model = OASIS(preprocessing=None, C=0.5, max_iter=2, random_state=7).fit(X, triplets=t)
    rng = np.random.default_rng(7)
    order = np.concatenate([rng.permutation(80), rng.permutation(80)])
    W, _ = reference_oasis(X, t[order], 0.5, np.eye(X.shape[1]))
    np.testing.assert_allclose(model.W_, W, rtol=1e-10, atol=1e-12)


def test_fit_averages_the_iterates_of_its_last_pass():
    """average=True (the default): W_ is the mean of the last pass's
    iterates taken at the ends of its blocks (1000 steps here: 1000, 1000,
    500), each weighted by its steps; average=False the last iterate."""
    X, y = _data(seed=4)
    t = random_class_triplets(y, 2500, random_state=5)
    fits = {a: OASIS(preprocessing=None, C=0.5, max_iter=2, average=a,
                     random_state=7).fit(X, triplets=t) for a in (True, False)}
    rng = np.random.default_rng(7)
    order = np.concatenate([rng.permutation(2500), rng.permutation(2500)])
    W, trace = reference_oasis(X, t[order], 0.5, np.eye(X.shape[1]))
    np.testing.assert_allclose(fits[False].W_, W, rtol=1e-10, atol=1e-12)
    ends = [2500 + 999, 2500 + 1999, 4999]
    avg = (1000 * trace[ends[0]] + 1000 * trace[ends[1]] + 500 * trace[ends[2]]) / 2500
    np.testing.assert_allclose(fits[True].W_, avg, rtol=1e-10, atol=1e-12)
    assert not np.allclose(avg, W)               # the test can tell them apart
    # partial_fit makes plain PA steps whatever ``average`` says
    m = OASIS(preprocessing=None, C=0.5, average=True).partial_fit(X, t[:50])
    np.testing.assert_allclose(m.W_, reference_oasis(X, t[:50], 0.5, np.eye(7))[0],
                               rtol=1e-10, atol=1e-12)


def test_dense_and_csr_give_same_model():
    X, y = _data(seed=4, sparse=True)
    a = OASIS(preprocessing=None, random_state=0, n_triplets=300, max_iter=2).fit(X, y)
    b = OASIS(preprocessing=None, random_state=0, n_triplets=300, max_iter=2).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-12, atol=1e-12)


def test_history_statistics_match_reference():
    X, y = _data(seed=5)
    t = random_class_triplets(y, 50, random_state=0)
    W = np.eye(X.shape[1])
    losses, mistakes = [], []
    for q, p, n in t:
        m = X[q] @ W @ (X[p] - X[n])
        losses.append(max(0, 1 - m))
        mistakes.append(m <= 0)
        W, _ = reference_oasis(X, [(q, p, n)], 0.1, W)
    model = OASIS(preprocessing=None, C=0.1).partial_fit(X, t[:20]).partial_fit(X, t[20:])
    h = model.history_
    assert h["step"] == [20, 50]
    assert h["avg_loss"][-1] == pytest.approx(np.mean(losses), rel=1e-10)
    assert h["mistake_rate"][-1] == pytest.approx(np.mean(mistakes))
    assert h["loss"][0] == pytest.approx(np.mean(losses[:20]), rel=1e-10)


def test_oasis_improves_triplet_accuracy_on_held_out():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    m = OASIS(preprocessing=None, n_triplets=20000, random_state=0).fit(X[:1200], y[:1200])
    t = random_class_triplets(y[1200:], 3000, random_state=1)
    acc = np.mean(m.triplet_score(X[1200:], t) > 0)
    base = np.mean(np.einsum("ij,ij->i", X[1200:][t[:, 0]],
                             X[1200:][t[:, 1]] - X[1200:][t[:, 2]]) > 0)
    assert acc > base + 0.02


def test_divergence_stops_with_message():
    # ||q||^2 overflows: the PA step becomes inf - inf and W leaves the reals
    X = np.array([[1e155, 0.0], [0.0, 1e155], [1e155, 0.0]])
    with pytest.raises(FloatingPointError, match="OASIS: training diverged"):
        OASIS(preprocessing=None, C=1.0).partial_fit(X, [[0, 1, 2]])


# ---------------------------------------------------- stopping rule (issue 12)
def test_tol_none_is_a_fixed_budget_without_warning():
    import warnings
    X, y = _data(seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = OASIS(preprocessing=None, max_iter=1, n_triplets=100, random_state=0).fit(X, y)
    assert (m.n_iter_, m.stop_reason_, m.t_) == (1, "max_iter", 100)


def test_tol_not_met_warns_and_tol_met_stops():
    from sklearn.exceptions import ConvergenceWarning
    X, y = _data(seed=7)
    with pytest.warns(ConvergenceWarning, match="OASIS: stopped at max_iter=1"):
        m = OASIS(preprocessing=None, max_iter=1, tol=1e-3, n_triplets=100, random_state=0).fit(X, y)
    assert m.stop_reason_ == "max_iter" and m.n_iter_ == 1
    m = OASIS(preprocessing=None, max_iter=50, tol=0.5, n_triplets=100, random_state=0).fit(X, y)
    losses = m.history_["loss"]
    assert m.stop_reason_ == "tol" and m.n_iter_ == len(losses) < 50
    assert abs(losses[-1] - losses[-2]) / max(losses[-1], losses[-2]) <= 0.5
    assert all(abs(b - a) / max(a, b) > 0.5 for a, b in zip(losses[:-2], losses[1:-1]))
    assert m.t_ == 100 * m.n_iter_


def test_history_is_per_pass_and_the_watch_sees_blocks():
    # one history record per pass even when a pass runs in several blocks
    X, y = _data(seed=8)
    m = OASIS(preprocessing=None, max_iter=2, n_triplets=2500, random_state=0).fit(X, y)
    assert m.history_["step"] == [2500, 5000]


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("d", [6, 600])     # 600: many features, one BLAS product
def test_initial_loss_is_the_mean_hinge_of_the_initial_W_on_the_first_triplets(sparse, d):
    """The divergence watch's reference: mean ``[1 - q^T W (p+ - p-)]_+`` of
    the initial W over the first 100 triplets (a plain loop), for both
    inits."""
    import scipy.sparse as sp
    from tripletml.linalg.sparse_rows import as_csr
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, d)) / np.sqrt(d)
    X[rng.random(X.shape) < 0.3] = 0.0
    t = rng.integers(0, 40, size=(150, 3))
    for init in ("identity", "zeros", "random"):
        m = OASIS(preprocessing=None, init="zeros" if init == "random" else init)
        m._init_model(d, rng)
        if init == "random":
            m.W_ = rng.normal(size=(d, d))
        W = m.W_.copy()
        ref = np.mean([max(0.0, 1.0 - X[q] @ W @ (X[p] - X[n])) for q, p, n in t[:100]])
        got = m._initial_loss(as_csr(sp.csr_matrix(X) if sparse else X), t)
        assert got == pytest.approx(ref, rel=1e-12, abs=1e-12)
    assert m._initial_loss(as_csr(X), t[:0]) is None


# --------------------------------------------------------------------------- Gram route
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("C", [0.01, 1.0, 1e6])
def test_gram_route_equals_the_plain_route_and_the_reference(sparse, C):
    """Few rows, many features: the steps in the Gram space of the block's
    rows give the paper's iterates (every block, every margin and loss)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(15, 40))
    if sparse:
        X[rng.random(X.shape) < 0.7] = 0.0
    y = rng.integers(0, 3, size=15)
    t = random_class_triplets(y, 2500, random_state=2)
    Xin = sp.csr_matrix(X) if sparse else X
    fits = {}
    for route in (True, False):
        m = OASIS(preprocessing=None, C=C, max_iter=2, random_state=0)
        m._gram_route = route
        fits[route] = m.fit(Xin, triplets=t)
    np.testing.assert_allclose(fits[True].W_, fits[False].W_, rtol=1e-9, atol=1e-9)
    for key in ("loss", "avg_loss", "mistake_rate"):
        np.testing.assert_allclose(fits[True].history_[key], fits[False].history_[key],
                                   rtol=1e-9, atol=1e-12)
    assert not np.allclose(fits[True].W_, np.eye(40))
    # step by step against the dense loop of the paper, from a non-identity W
    W0 = np.eye(40) + 0.1 * rng.normal(size=(40, 40))
    Wref, _ = reference_oasis(X, t[:300], C, W0)
    m = OASIS(preprocessing=None, C=C)
    m._gram_route = True
    m.partial_fit(Xin, t[:1])
    m.W_ = W0.copy()
    m.partial_fit(Xin, t[:300])
    np.testing.assert_allclose(m.W_, Wref, rtol=1e-9, atol=1e-9)


def test_gram_route_is_taken_only_where_it_pays():
    from tripletml.algorithms.oasis.kernels import gram_route_pays
    assert gram_route_pays(57, 57 * 4096, 1000, 4096)        # zappos: 57 items, 4096-D
    assert not gram_route_pays(2000, 2000 * 50, 1000, 50)     # many rows, few features
    assert not gram_route_pays(1500, 1500 * 30, 1000, 20000)  # sparse text rows
