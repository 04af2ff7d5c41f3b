"""SDCA against a plain dense implementation of Algorithm 1 (Wu et al. 2015)."""
import numpy as np
import pytest
import scipy.sparse as sp

from _triplet_draws import distinct_triplets
from tripletml import SDCA
from tripletml.algorithms.sdca.estimator import sdca_objectives
from tripletml.linalg import as_csr
from tripletml.triplets import random_class_triplets


class DenseSDCA:
    """Algorithm 1 with explicit d x d dual matrices Theta_i (reference)."""

    def __init__(self, X, triplets, lam, n):
        self.X, self.t, self.lam, self.n = X, triplets, lam, n
        d = X.shape[1]
        self.M = np.zeros((d, d))
        self.alpha = np.zeros(len(triplets))
        self.Theta = np.zeros((len(triplets), d, d))

    def Xi(self, i):
        q, p, n = self.t[i]
        return np.outer(self.X[q], self.X[p] - self.X[n])

    def step(self, i):
        q, p, n = self.t[i]
        Xi = self.Xi(i)
        a = self.alpha[i]
        num = 1 - self.X[q] @ self.M @ (self.X[p] - self.X[n]) - a / 2
        da = max(num / (0.5 + np.sum(Xi * Xi) / (self.lam * self.n)), -a)
        self.alpha[i] += da
        self.Theta[i] += da * Xi
        self.M = self.M + da * Xi / (self.lam * self.n)

    def primal(self, M=None):
        M = self.M if M is None else M
        loss = sum(max(0.0, 1 - np.sum(M * self.Xi(i))) ** 2 for i in range(len(self.t)))
        return loss / self.n + self.lam / 2 * np.sum(M * M)

    def dual(self):
        # -l*(-Theta_i) = alpha - alpha^2/4 for Theta_i = alpha X_i (eq. after (6))
        conj = sum(a - a * a / 4 for a in self.alpha)
        M = self.Theta.sum(axis=0) / (self.lam * self.n)
        return conj / self.n - self.lam / 2 * np.sum(M * M)


def _problem(seed=0, n=30, d=6, m=40, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    if sparse:
        X[rng.random(X.shape) < 0.5] = 0.0
    y = rng.integers(0, 3, size=n)
    return X, random_class_triplets(y, m, random_state=seed)


def test_single_partial_fit_is_one_closed_form_step():
    X, t = _problem()
    ref = DenseSDCA(X, t, lam=0.1, n=40)
    model = SDCA(start="zero", preprocessing=None, alpha=0.1, n_triplets=40)
    for k in [0, 5, 0, 7]:  # repeated id 0: the second step starts from alpha_0 > 0
        ref.step(k)
        model.partial_fit(X, t[[k]], triplet_ids=[k])
        np.testing.assert_allclose(model.M_last_, ref.M, rtol=1e-12, atol=1e-14)
        assert model.alpha_[np.searchsorted(model.dual_ids_, k)] == pytest.approx(ref.alpha[k])
    assert ref.alpha[0] > 0 and model.t_ == 4


def test_fit_matches_dense_algorithm_1_and_dual_ascends():
    X, t = _problem(seed=1)
    lam, n, epochs, seed = 0.05, t.shape[0], 3, 11
    model = SDCA(start="zero", preprocessing=None, alpha=lam, max_iter=epochs, output="last", tol=None, random_state=seed)
    model.fit(X, triplets=t)
    rng = np.random.default_rng(seed)
    ref = DenseSDCA(X, t, lam, n)
    duals = [ref.dual()]
    for _ in range(epochs):
        for i in rng.integers(0, n, size=n):
            ref.step(i)
            duals.append(ref.dual())
    np.testing.assert_allclose(model.W_, ref.M, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(model.alpha_, ref.alpha, rtol=1e-10, atol=1e-13)
    assert np.all(np.diff(duals) >= -1e-12)  # coordinate ascent never lowers D
    assert np.ptp(duals) > 0
    # the recorded objectives are the reference's P, D, and the gap is >= 0
    assert model.history_["primal"][-1] == pytest.approx(ref.primal(), rel=1e-9)
    assert model.history_["dual"][-1] == pytest.approx(ref.dual(), rel=1e-9)
    assert all(g >= -1e-12 for g in model.history_["gap"])
    # M(Theta) of eq. (7) equals the maintained M
    np.testing.assert_allclose(ref.Theta.sum(0) / (lam * n), model.M_last_, atol=1e-12)


def test_duality_gap_shrinks_below_1e3():
    X, t = _problem(seed=2, m=60)
    model = SDCA(start="zero", preprocessing=None, alpha=0.05, max_iter=200, tol=1e-4, random_state=0).fit(X, triplets=t)
    gaps = model.history_["gap"]
    assert gaps[-1] <= 1e-4 < gaps[0]
    assert len(gaps) < 200  # stopped on the tolerance, not on epochs
    P, D, gap = sdca_objectives(model.M_last_, model.alpha_, as_csr(X), t, 0.05)
    assert 0 <= gap < 1e-3 and P >= D


def test_average_output_matches_definition():
    X, t = _problem(seed=3)
    n, epochs, seed = t.shape[0], 2, 5
    model = SDCA(start="zero", preprocessing=None, alpha=0.1, max_iter=epochs, output="average", average_start=0.3, tol=None,
                 random_state=seed).fit(X, triplets=t)
    T = epochs * n
    T0 = int(np.floor(0.3 * T))
    rng = np.random.default_rng(seed)
    ref = DenseSDCA(X, t, 0.1, n)
    iterates = [ref.M.copy()]  # M^0
    for _ in range(epochs):
        for i in rng.integers(0, n, size=n):
            ref.step(i)
            iterates.append(ref.M.copy())
    expect = np.mean(iterates[T0:T], axis=0)  # M^{t-1}, t = T0+1..T
    np.testing.assert_allclose(model.W_, expect, rtol=1e-9, atol=1e-12)
    assert not np.allclose(model.W_, model.M_last_)


def test_random_output_is_a_uniform_window_iterate():
    X, t = _problem(seed=4, m=8)
    T, T0 = 16, 8
    hits = np.zeros(T + 1)
    for seed in range(300):
        model = SDCA(start="zero", preprocessing=None, alpha=0.1, max_iter=2, output="random", average_start=0.5, tol=None,
                     random_state=seed).fit(X, triplets=t)
        rng = np.random.default_rng(seed)
        ref = DenseSDCA(X, t, 0.1, 8)
        iterates = [ref.M.copy()]
        for _ in range(2):
            for i in rng.integers(0, 8, size=8):
                ref.step(i)
                iterates.append(ref.M.copy())
            rng.random(8)  # the reservoir draws of that epoch
        match = [s for s in range(T0 + 1, T + 1) if np.allclose(model.W_, iterates[s], atol=1e-13)]
        assert match, "random output is not an iterate M^t with T0 < t <= T"
        hits[match[-1]] += 1
    freq = hits[T0 + 1:] / hits.sum()
    assert np.all(np.abs(freq - 1 / 8) < 0.07)  # ~ uniform over the 8 window iterates


@pytest.mark.parametrize("output", ["average", "random", "last"])
def test_dense_and_csr_give_the_same_model(output):
    X, t = _problem(seed=5, sparse=True)
    a = SDCA(start="zero", preprocessing=None, alpha=0.02, max_iter=3, output=output, random_state=0).fit(X, triplets=t)
    b = SDCA(start="zero", preprocessing=None, alpha=0.02, max_iter=3, output=output, random_state=0).fit(sp.csr_matrix(X),
                                                                     triplets=t)
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.alpha_, b.alpha_, rtol=1e-12, atol=1e-14)


def test_partial_fit_stream_fresh_duals_and_errors():
    X, t = _problem(seed=6)
    model = SDCA(start="zero", preprocessing=None, alpha=0.1, n_triplets=40).partial_fit(X, t[:10]).partial_fit(X, t[10:20])
    assert model.alpha_.size == 20 and model.t_ == 20
    ref = DenseSDCA(X, t, 0.1, 40)
    for i in range(20):
        ref.step(i)
    np.testing.assert_allclose(model.M_last_, ref.M, rtol=1e-11, atol=1e-14)
    with pytest.raises(ValueError, match="SDCA: triplet_ids must be 2 integers"):
        model.partial_fit(X, t[:2], triplet_ids=[1])
    with pytest.raises(ValueError, match="SDCA: X has 5 features"):
        model.partial_fit(X[:, :5], t[:2])


def test_sdca_learns_on_real_structure():
    from sklearn.datasets import load_digits
    from tripletml import Euclidean
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    m = SDCA(start="zero", preprocessing=None, alpha=0.01, n_triplets=5000, max_iter=5, random_state=0).fit(X[:1000], y[:1000])
    e = Euclidean().fit(X[:1000])
    assert m.score(X[1000:], y[1000:]) > e.score(X[1000:], y[1000:]) + 0.05


def test_settings_of_the_dual_state_cannot_change_midstream():
    X, t = _problem(seed=7)
    m = SDCA(start="zero", preprocessing=None, output="last", n_triplets=40).partial_fit(X, t[:5])
    m.set_params(output="average")
    with pytest.raises(ValueError, match="SDCA: output/alpha were 'last'/0.01 when the model"):
        m.partial_fit(X, t[5:10])
    m.set_params(output="last", alpha=0.5)
    with pytest.raises(ValueError, match="SDCA: output/alpha were"):
        m.partial_fit(X, t[5:10])
    m.set_params(alpha=0.01)
    m.partial_fit(X, t[5:10])  # restored: fine
    assert m.t_ == 10


def test_overflowing_norm_stops_with_a_message():
    X, t = _problem(seed=8)
    with pytest.raises(FloatingPointError, match="SDCA: training diverged"):
        SDCA(start="zero", preprocessing=None).fit(X * 1e200, triplets=t)


def test_one_id_for_two_triplets_is_refused():
    X, t = _problem(seed=9)
    with pytest.raises(ValueError, match="one triplet_id names two different triplets"):
        SDCA(start="zero", preprocessing=None).partial_fit(X, t[:2], triplet_ids=[3, 3])
    SDCA(start="zero", preprocessing=None).partial_fit(X, t[[0, 0]], triplet_ids=[3, 3])  # same triplet twice: two steps


# ---------------------------------------------------- stopping rule (issue 12)
def test_relative_gap_tol_warns_when_not_met_and_stops_when_met():
    from sklearn.exceptions import ConvergenceWarning
    X, t = _problem(seed=10, m=60)
    with pytest.warns(ConvergenceWarning, match="SDCA: stopped at max_iter=1 .*relative duality"):
        m = SDCA(start="zero", preprocessing=None, alpha=0.05, max_iter=1, tol=1e-12, random_state=0).fit(X, triplets=t)
    assert (m.n_iter_, m.stop_reason_) == (1, "max_iter")
    m = SDCA(start="zero", preprocessing=None, alpha=0.05, max_iter=200, tol=1e-3, random_state=0).fit(X, triplets=t)
    P, gap = m.history_["primal"], m.history_["gap"]
    rel = [g / max(abs(p), 1e-12) for p, g in zip(P, gap)]
    assert m.stop_reason_ == "tol" and m.n_iter_ == len(rel) < 200
    assert rel[-1] <= 1e-3 < min(rel[:-1])
    assert m.history_["rel_gap"] == pytest.approx(rel, rel=1e-12)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SDCA(start="zero", preprocessing=None, alpha=0.05, max_iter=1, tol=None, random_state=0).fit(X, triplets=t)


def test_default_is_a_fixed_budget_with_the_gap_recorded():
    """tol=None by default: max_iter passes, no ConvergenceWarning although
    the relative gap is still far above 1e-3, and the gap of every pass is
    recorded (the same fit with tol=1e-3 warns)."""
    import warnings
    from sklearn.exceptions import ConvergenceWarning
    X, t = _problem(seed=12, m=80)
    assert SDCA(start="zero").get_params()["tol"] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = SDCA(start="zero", preprocessing=None, alpha=0.001, max_iter=2, random_state=0).fit(X, triplets=t)
    assert (m.n_iter_, m.stop_reason_) == (2, "max_iter")
    assert len(m.history_["rel_gap"]) == 2 and m.history_["rel_gap"][-1] > 1e-3
    with pytest.warns(ConvergenceWarning, match="relative duality gap"):
        SDCA(start="zero", preprocessing=None, alpha=0.001, max_iter=2, tol=1e-3, random_state=0).fit(X, triplets=t)


@pytest.mark.parametrize("output", ["average", "random"])
def test_a_loaded_state_with_missing_or_inconsistent_arrays_is_refused(output):
    from tripletml.algorithms.sdca.kernels import SDCASolver
    X, t = _problem(seed=11)
    m = SDCA(start="zero", preprocessing=None, alpha=0.1, max_iter=1, output=output, tol=None, random_state=0).fit(X, triplets=t)
    name = "avg_accum_" if output == "average" else "random_iterate_"
    kw = dict(M=m.M_last_, alpha=m.alpha_, dual_ids=m.dual_ids_, next_id=m.next_id_,
              lam=m.lambda_, n_scale=m.n_scale_, t=m.t_, T0=m.average_start_step_,
              output=m.output_)
    with pytest.raises(ValueError, match=f"needs {name}"):
        SDCASolver.from_state(**kw)
    with pytest.raises(ValueError, match="one length"):
        SDCASolver.from_state(**{**kw, "alpha": m.alpha_[:-1]}, avg=m.W_, rand=m.W_)
    with pytest.raises(ValueError, match="strictly increasing"):
        SDCASolver.from_state(**{**kw, "dual_ids": m.dual_ids_[::-1].copy()}, avg=m.W_,
                              rand=m.W_)
    # through the estimator: a resumed partial_fit checks the state first
    del m._solver
    setattr(m, name, np.zeros((2, 2)))
    with pytest.raises(ValueError, match=f"SDCA: output='{output}' needs {name}"):
        m.partial_fit(X, t[:2])


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(4, 12), d=st.integers(1, 5),
       m=st.integers(1, 25), alpha=st.floats(1e-3, 1.0), sparse=st.booleans())
def test_property_gap_nonnegative_and_dual_ascends(seed, n, d, m, alpha, sparse):
    # weak duality P >= D at every pass, and no dual step lowers D (eq. 5)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if sparse:
        X[rng.random(X.shape) < 0.4] = 0.0
    t = distinct_triplets(rng, n, m)
    model = SDCA(start="zero", preprocessing=None, alpha=alpha, max_iter=3, tol=None, output="last", random_state=seed)
    model.fit(sp.csr_matrix(X) if sparse else X, triplets=t)
    P, D = np.array(model.history_["primal"]), np.array(model.history_["dual"])
    assert np.all(P - D >= -1e-10 * np.maximum(1.0, np.abs(P)))
    ref = DenseSDCA(X, t, alpha, m)
    duals = [ref.dual()]
    for i in np.random.default_rng(seed).integers(0, m, size=m):
        ref.step(i)
        duals.append(ref.dual())
    assert np.all(np.diff(duals) >= -1e-10 * max(1.0, abs(duals[-1])))
    assert P[0] == pytest.approx(ref.primal(), rel=1e-9, abs=1e-12)  # same first pass


def test_W_is_the_matrix_and_files_with_M_load(tmp_path):
    """SDCA names its bilinear matrix W_ like every bilinear learner (the
    alias M_ was removed in 0.3); files saved with M_ (0.1) still load."""
    import zipfile

    from tripletml import SDCA, load_model
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 4))
    y = np.repeat(np.arange(3), 10)
    m = SDCA(start="zero", n_triplets=100, max_iter=2, random_state=0).fit(X, y)
    assert "W_" in vars(m) and "M_" not in vars(m)
    assert not hasattr(m, "M_")
    m.save(tmp_path / "new.npz")
    # a 0.1 file: the same archive with the member named M_
    with zipfile.ZipFile(tmp_path / "new.npz") as src, \
            zipfile.ZipFile(tmp_path / "old.npz", "w") as dst:
        names = src.namelist()
        assert "W_.npy" in names
        for name in names:
            dst.writestr("M_.npy" if name == "W_.npy" else name, src.read(name))
    for f in ("new.npz", "old.npz"):
        back = load_model(tmp_path / f)
        np.testing.assert_array_equal(back.W_, m.W_)
        np.testing.assert_array_equal(back.similarity(X[:3]), m.similarity(X[:3]))
    # a file with neither is refused
    with zipfile.ZipFile(tmp_path / "new.npz") as src, \
            zipfile.ZipFile(tmp_path / "none.npz", "w") as dst:
        for name in src.namelist():
            if name != "W_.npy":
                dst.writestr(name, src.read(name))
    with pytest.raises(ValueError, match="W_"):
        load_model(tmp_path / "none.npz")


# --------------------------------------------------------------------------- Gram route
def _wide_problem(seed=0, n=12, d=30, m=60, sparse=False):
    """Few rows, many features: the Gram route's case."""
    return _problem(seed=seed, n=n, d=d, m=m, sparse=sparse)


@pytest.fixture
def gram_route(monkeypatch):
    from tripletml.algorithms.sdca.kernels import SDCASolver

    def force(route):
        monkeypatch.setattr(SDCASolver, "gram_route", route)
    return force


@pytest.mark.parametrize("sparse", [False, True])
def test_gram_route_is_dense_algorithm_1(gram_route, sparse):
    """Steps in the Gram space of the block's rows (H = R M R^T, M's update
    as R^T A R) are the paper's steps: the last iterate and every dual
    variable equal the dense loop's."""
    X, t = _wide_problem(seed=4, sparse=sparse)
    lam, n, epochs, seed = 0.05, t.shape[0], 3, 11
    gram_route(True)
    model = SDCA(start="zero", preprocessing=None, alpha=lam, max_iter=epochs, output="last",
                 tol=None, random_state=seed).fit(sp.csr_matrix(X) if sparse else X, triplets=t)
    rng = np.random.default_rng(seed)
    ref = DenseSDCA(X, t, lam, n)
    for _ in range(epochs):
        for i in rng.integers(0, n, size=n):
            ref.step(i)
    np.testing.assert_allclose(model.W_, ref.M, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(model.alpha_, ref.alpha, rtol=1e-10, atol=1e-13)
    assert np.ptp(ref.alpha) > 0


@pytest.mark.parametrize("output,kw", [("average", {"average_start": 0.3}),
                                       ("average", {"average_start": 0.0}),
                                       ("random", {"average_start": 0.3}),
                                       ("last", {})])
@pytest.mark.parametrize("start", ["zero", "identity"])
def test_gram_route_equals_the_plain_route(gram_route, output, kw, start):
    """Every output on both routes: the average's accumulator (its start
    ``T0 M^{T0}`` falls inside a block) and the reservoir's kept iterate."""
    X, t = _wide_problem(seed=5, m=80)
    fits = {}
    for route in (True, False):
        gram_route(route)
        fits[route] = SDCA(start=start, preprocessing=None, alpha=0.05, max_iter=3,
                           output=output, tol=None, random_state=3, **kw).fit(X, triplets=t)
    a, b = fits[True], fits[False]
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(a.alpha_, b.alpha_, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(a.history_["primal"], b.history_["primal"], rtol=1e-10)
    if output != "last":
        assert not np.allclose(a.W_, a.M_last_)


def test_gram_route_stops_a_diverging_fit(gram_route):
    X, t = _wide_problem(seed=8)
    gram_route(True)
    with pytest.raises(FloatingPointError, match="SDCA: training diverged"):
        SDCA(start="zero", preprocessing=None).fit(X * 1e200, triplets=t)


def test_gram_route_is_taken_only_where_it_pays():
    from tripletml.algorithms.sdca.kernels import sdca_gram_pays
    assert sdca_gram_pays(57, 57 * 57, 4000, 57, True)          # zappos on its span
    assert sdca_gram_pays(57, 57 * 57, 4000, 57, False)
    assert not sdca_gram_pays(57, 57 * 57, 50, 57, True)         # the set-up outweighs
    assert not sdca_gram_pays(2000, 2000 * 50, 4000, 50, True)   # many rows, few features
    assert not sdca_gram_pays(1500, 1500 * 30, 4000, 20000, True)  # sparse text rows
    # dense rows, more distinct rows than features: faster, but H, G, A, B (k x k) would
    # outgrow the solver's own d x d arrays
    assert sdca_gram_pays(150, 150 * 150, 6000, 150, True)
    assert not sdca_gram_pays(250, 250 * 150, 6000, 150, True)


def test_start_margins_are_kept_only_during_the_fit():
    """The start's margins are computed once per fit and not kept after it
    (the estimator must not hold the training rows)."""
    import pickle
    X, t = _wide_problem(seed=6)
    m = SDCA(start="identity", preprocessing=None, alpha=0.05, max_iter=3, tol=None,
             random_state=0).fit(X, triplets=t)
    assert "_kept_margins" not in vars(m)
    P, _, _ = sdca_objectives(m.M_last_, m.alpha_, as_csr(m.scaler_.transform(X)), t, 0.05,
                              start_scale=m.start_scale_)
    assert m.start_scale_ > 0
    assert m.history_["primal"][-1] == pytest.approx(P, rel=1e-10)
    assert len(pickle.dumps(m)) < 40 * X.nbytes


@pytest.mark.parametrize("output,T0", [("random", 0), ("random", 3), ("average", 0),
                                       ("average", 6), ("average", 10), ("last", 0)])
def test_gram_route_diverging_mid_block_keeps_every_output(output, T0):
    """A non-finite step inside a block: M, the duals, the average's
    accumulator and the reservoir's sample hold exactly the steps before it
    on both routes (the reservoir picks before the divergence included)."""
    from tripletml.algorithms.sdca.kernels import SDCASolver
    rng = np.random.default_rng(1)
    n, d = 8, 20
    X = rng.normal(size=(n, d))
    X[7] *= 1e160                                  # ||x_7||^2 overflows: step 8 diverges
    T = np.array([[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 6], [5, 6, 0], [6, 0, 1],
                  [0, 2, 4], [7, 1, 2], [1, 3, 5], [2, 4, 6], [3, 5, 0]])
    m = T.shape[0]
    u = np.full(m, 0.99)
    u[[1, 4, 6, 10]] = 0.0                         # the reservoir's picks
    got = {}
    for route in (True, False):
        s = SDCASolver(d, 0.05, m, output=output, T0=T0)
        s.gram_route = route
        s.slots_for(np.arange(m))
        with pytest.raises(FloatingPointError, match="step 9"):
            s.step(sp.csr_matrix(X), T, np.arange(m), u if output == "random" else None)
        got[route] = s
    a, b = got[True], got[False]
    assert a.t == b.t == 8
    for name in ("M", "alpha", "avg", "rand"):
        if getattr(b, name) is not None:
            np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=0,
                                       atol=1e-14 * max(1.0, np.abs(getattr(b, name)).max()))
    if output == "random":
        assert np.abs(b.rand).max() > 0
