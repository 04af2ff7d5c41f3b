"""SDCA on a ShardedCollection: CoCoA+ (Ma, Smith, Jaggi et al., ICML 2015).

What is proven here:

* with one partition a round is one pass of the in-memory SDCA solver's step
  (:class:`tripletml.algorithms.sdca.kernels.SDCASolver`) in the round's order, to
  rounding, and the fit reaches the in-memory optimum;
* two rounds on tiny data (d = 3, two partitions) equal a dense reference
  written from the paper's formulas: each coordinate step maximizes the local
  subproblem G_k^{sigma'} (eq. 9, sigma' = gamma K, gamma = 1) numerically,
  the driver adds the updates;
* for K = 2, 4, 8 the dual never decreases, the gap shrinks, the objective
  reaches the single-process optimum P* (1e-3 relative) and every round's gap
  is a certificate (gap >= P(M^r) - P*, D <= P*); the averaged output's gap
  too; ``tol`` stops with the same model as a fixed budget of that many rounds;
* the local and Dask backends give identical models; a fixed random_state
  gives the same model; save/load round trip; the memory refusal;
* test mAP on digits within .02 of the single-process fit at equal passes
  for K = 1, 2, 4, 8.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from tripletml import SDCA
from tripletml.core.validation import as_generator
from tripletml.linalg.sparse_rows import as_csr
from tripletml.distributed.sharded import ShardedCollection
from tripletml.algorithms.sdca.kernels import SDCASolver, sdca_objectives


@pytest.fixture(autouse=True)
def _cluster_backend(monkeypatch):
    """These tests compare the cluster with the in-process fit on small
    data: keep them on the cluster (no cost model, issue 41 section 3)."""
    monkeypatch.setenv("TRIPLETML_PARTITIONED_BACKEND", "cluster")

LAM = 0.1
BLOCKS, BLOCK_ROWS, BLOCK_TRIPLETS = 8, 30, 40


def _seed(random_state: int) -> int:
    """The supervision seed fit_partitioned draws from random_state."""
    return int(as_generator(random_state).integers(2 ** 63 - 1))


@pytest.fixture(scope="module")
def problem():
    """240 unit-norm rows in 8 blocks of 30 with 40 triplets inside each
    block: the same global triplets for K = 1, 2, 4, 8 consecutive
    partitions."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, BLOCKS * BLOCK_ROWS)
    X = rng.normal(size=(y.size, 5)) + 0.8 * np.eye(5)[y]
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    blocks = []
    for b in range(BLOCKS):
        yb = y[b * BLOCK_ROWS:(b + 1) * BLOCK_ROWS]
        T = []
        while len(T) < BLOCK_TRIPLETS:
            q, p, n = rng.integers(0, BLOCK_ROWS, 3)
            if q != p and yb[q] == yb[p] and yb[q] != yb[n]:
                T.append((q, p, n))
        blocks.append(np.array(T, dtype=np.int64))
    T_all = np.vstack([t + b * BLOCK_ROWS for b, t in enumerate(blocks)])
    # the single-process optimum: in-memory SDCA run to a tiny gap
    ref = SDCA(start="zero", alpha=LAM, max_iter=3000, tol=1e-12, output="last", preprocessing=None,
               random_state=0).fit(X, triplets=T_all)
    Xs = ref.scaler_.transform(X)      # the rows the solver sees (feature unit)
    P_star = sdca_objectives(ref.M_last_, ref.alpha_, as_csr(Xs), T_all, LAM)[0]
    assert ref.history_["rel_gap"][-1] < 1e-11
    return X, y, blocks, T_all, P_star, Xs


def _collection(problem, K):
    X, _, blocks, _, _, _ = problem
    per = BLOCKS // K
    parts = [np.vstack([blocks[k * per + j] + j * BLOCK_ROWS for j in range(per)])
             for k in range(K)]
    return ShardedCollection.from_arrays(X, n_partitions=K).with_triplets(parts)


def _primal(problem, M):
    T_all, Xs = problem[3], problem[5]
    return sdca_objectives(M, np.zeros(T_all.shape[0]), as_csr(Xs), T_all, LAM)[0]


# ---------------------------------------------------------------------------
def test_one_partition_round_is_an_sdca_pass(problem):
    T_all, Xs = problem[3], problem[5]
    n = T_all.shape[0]
    m = SDCA(start="zero", keep_duals=True, alpha=LAM, max_iter=3, output="last", preprocessing=None,
             random_state=5).fit(_collection(problem, 1))
    np.testing.assert_array_equal(m.scaler_.transform(problem[0]), Xs)
    s = SDCASolver(Xs.shape[1], LAM, n, "last")
    s.slots_for(np.arange(n))
    Xc, seed = as_csr(Xs), _seed(5)
    for r in range(3):
        order = np.random.default_rng([seed, 0, r + 1]).permutation(n)
        s.step(Xc, T_all[order], order)
    np.testing.assert_allclose(m.M_last_, s.M, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(m.alpha_, s.alpha, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(m.W_, m.M_last_)
    P, D, gap = s.objective(Xc, T_all)
    assert m.history_["primal"][-1] == pytest.approx(P, rel=1e-12)
    assert m.history_["dual"][-1] == pytest.approx(D, rel=1e-12)
    assert m.history_["gap"][-1] == pytest.approx(gap, rel=1e-9)
    assert m.partitioned_["sigma"] == 1.0 and m.partitioned_["rounds"] == 3
    assert m.history_["step"] == [n, 2 * n, 3 * n]


def test_one_partition_reaches_the_in_memory_optimum(problem):
    P_star = problem[4]
    m = SDCA(start="zero", alpha=LAM, max_iter=200, tol=1e-10, output="last", preprocessing=None,
             random_state=0).fit(_collection(problem, 1))
    assert m.stop_reason_ == "tol"
    assert _primal(problem, m.W_) == pytest.approx(P_star, rel=1e-8)


def _dense_round(X, T_parts, alpha_parts, M, lam, n, sigma, orders):
    """One CoCoA+ round from the paper's formulas, with dense X_i = x_i v_i^T:
    on each partition every coordinate step maximizes (numerically, no
    closed form) the local subproblem

        G_k(dA) = (1/n) sum_{i in k} (a_i - a_i^2/4), a_i = alpha_i + dalpha_i
                  - (1/n) <M, A_k dA> - (lambda/2) sigma ||(lambda n)^-1 A_k dA||^2

    (eq. 9 without its constant); the driver adds (lambda n)^-1 A_k dA_k."""
    new_alpha, total = [], np.zeros_like(M)
    for Xk, Tk, ak, order in zip(X, T_parts, alpha_parts, orders):
        Xi = [np.outer(Xk[q], Xk[p] - Xk[m]) for q, p, m in Tk]
        da = np.zeros(len(Tk))

        def G(dA):
            a = ak + dA
            A_dA = sum(dA[i] * Xi[i] for i in range(len(Tk)))
            return (np.sum(a - a * a / 4) / n - np.sum(M * A_dA) / n
                    - lam / 2 * sigma * np.sum((A_dA / (lam * n)) ** 2))

        for i in order:
            def neg(delta, i=i):
                e = da.copy()
                e[i] += delta
                return -G(e)
            lo = -(ak[i] + da[i])
            res = minimize_scalar(neg, bounds=(lo, lo + 50.0), method="bounded",
                                  options={"xatol": 1e-13})
            da[i] += res.x
        new_alpha.append(ak + da)
        total += sum(da[i] * Xi[i] for i in range(len(Tk))) / (lam * n)
    return new_alpha, M + total


def test_two_rounds_equal_a_dense_reference_from_the_paper():
    rng = np.random.default_rng(11)
    X = [rng.normal(size=(5, 3)), rng.normal(size=(6, 3))]
    T = [np.array([[0, 1, 2], [3, 4, 0], [2, 0, 4]]),
         np.array([[0, 1, 2], [5, 3, 1], [4, 2, 0], [1, 5, 3]])]
    n, lam, K = 7, 0.3, 2
    coll = ShardedCollection([X[0], X[1]], [5, 6]).with_triplets(T)
    pre = SDCA(start="zero", alpha=lam, max_iter=1, preprocessing=None).fit(coll).scaler_
    X = [pre.transform(x) for x in X]          # divided by the feature unit
    seed = _seed(2)
    alpha = [np.zeros(3), np.zeros(4)]
    M = np.zeros((3, 3))
    for r in range(2):
        orders = [np.random.default_rng([seed, k, r + 1]).permutation(len(T[k]))
                  for k in range(K)]
        alpha, M = _dense_round(X, T, alpha, M, lam, n, float(K), orders)
        m = SDCA(start="zero", keep_duals=True, alpha=lam, max_iter=r + 1, output="last", preprocessing=None,
                 random_state=2).fit(coll)
        np.testing.assert_allclose(m.alpha_, np.concatenate(alpha), atol=1e-8)
        np.testing.assert_allclose(m.W_, M, atol=1e-8)
        # the reported objectives, from eq. (4)-(5) with dense matrices
        a = np.concatenate(alpha)
        mg = np.array([Xk[q] @ M @ (Xk[p] - Xk[o]) for Xk, Tk in zip(X, T) for q, p, o in Tk])
        P = np.sum(np.maximum(1 - mg, 0) ** 2) / n + lam / 2 * np.sum(M * M)
        D = np.sum(a - a * a / 4) / n - lam / 2 * np.sum(M * M)
        assert m.history_["primal"][-1] == pytest.approx(P, rel=1e-8)
        assert m.history_["dual"][-1] == pytest.approx(D, rel=1e-8)
        assert m.partitioned_["sigma"] == 2.0


@pytest.mark.parametrize("K,rounds", [(2, 60), (4, 100), (8, 200)])
def test_gap_decreases_to_the_single_process_optimum(problem, K, rounds):
    P_star = problem[4]
    m = SDCA(start="zero", alpha=LAM, max_iter=rounds, output="last", preprocessing=None,
             random_state=1).fit(_collection(problem, K))
    h = m.history_
    P, D, gap = (np.array(h[k]) for k in ("primal", "dual", "gap"))
    assert m.partitioned_["sigma"] == K and len(P) == rounds
    # the dual never decreases (sigma' = gamma K: the subproblems bound it)
    assert np.all(np.diff(D) >= -1e-13)
    assert gap[-1] < 0.02 * gap[0]
    np.testing.assert_allclose(P, np.array(D) + gap, rtol=1e-12)
    # the gap is a certificate against the single-process optimum
    assert np.all(gap >= P - P_star - 1e-12)
    assert np.all(D <= P_star + 1e-12)
    assert P[-1] == pytest.approx(P_star, rel=1e-3)
    assert _primal(problem, m.W_) == pytest.approx(P[-1], rel=1e-12)


def test_average_output_and_its_certificate(problem):
    P_star = problem[4]
    coll = _collection(problem, 4)
    kw = dict(alpha=LAM, preprocessing=None, random_state=4)
    m = SDCA(start="zero", max_iter=6, output="average", **kw).fit(coll)
    # the round iterates are the same whatever max_iter: the last-iterate
    # fits of 4, 5, 6 rounds give the window R0 + 1 .. R (R0 = 3)
    lasts = [SDCA(start="zero", max_iter=r, output="last", **kw).fit(coll).W_ for r in (4, 5, 6)]
    np.testing.assert_allclose(m.W_, np.mean(lasts, axis=0), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(m.M_last_, lasts[-1])
    rep = m.partitioned_
    assert rep["output_primal"] == pytest.approx(_primal(problem, m.W_), rel=1e-12)
    assert rep["output_gap"] >= rep["output_primal"] - P_star - 1e-12
    assert rep["output_dual"] <= P_star + 1e-12
    # the solver's average formula gives W_ (partial_fit continues the average)
    assert m.average_start_step_ == 3 * m.n_scale_ and m.t_ == 6 * m.n_scale_
    np.testing.assert_allclose(m._solver.output_matrix(), m.W_, rtol=1e-10, atol=1e-14)


def test_tol_stops_with_the_model_of_that_many_rounds(problem):
    coll = _collection(problem, 4)
    kw = dict(alpha=LAM, preprocessing=None, random_state=6, output="last")
    m = SDCA(start="zero", keep_duals=True, max_iter=100, tol=1e-2, **kw).fit(coll)
    assert m.stop_reason_ == "tol" and 1 < m.n_iter_ < 100
    assert m.history_["rel_gap"][-1] <= 1e-2 < m.history_["rel_gap"][-2]
    assert len(m.history_["gap"]) == m.n_iter_
    fixed = SDCA(start="zero", keep_duals=True, max_iter=m.n_iter_, **kw).fit(coll)
    np.testing.assert_array_equal(m.W_, fixed.W_)
    np.testing.assert_array_equal(m.alpha_, fixed.alpha_)
    assert fixed.history_["gap"] == m.history_["gap"]


def test_same_fitted_attributes_determinism_and_save_load(tmp_path):
    from tripletml.persistence import load_model
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 150)
    X = rng.normal(size=(150, 4)) + np.eye(4)[y]
    coll = ShardedCollection.from_arrays(X, y, n_partitions=3)
    kw = dict(n_triplets=500, max_iter=4)
    a = SDCA(start="zero", keep_duals=True, random_state=7, **kw).fit(coll)
    b = SDCA(start="zero", keep_duals=True, random_state=7, **kw).fit(coll)
    c = SDCA(start="zero", keep_duals=True, random_state=8, **kw).fit(coll)
    np.testing.assert_array_equal(a.W_, b.W_)
    np.testing.assert_array_equal(a.alpha_, b.alpha_)
    assert not np.array_equal(a.W_, c.W_)
    mem = SDCA(start="zero", random_state=7, **kw).fit(X, y)
    fitted = {k for k in vars(mem) if k.endswith("_") and not k.startswith("_")}
    assert fitted | {"partitioned_"} == {k for k in vars(a) if k.endswith("_")
                                         and not k.startswith("_")}
    for k in fitted:
        va, vm = getattr(a, k), getattr(mem, k)
        if isinstance(vm, np.ndarray):
            assert va.shape == vm.shape and va.dtype == vm.dtype, k
    assert a.alpha_.shape == (500,) and a.n_iter_ == 4
    path = tmp_path / "sdca.npz"
    a.save(path)
    got = load_model(path)
    np.testing.assert_array_equal(got.W_, a.W_)
    np.testing.assert_array_equal(got.similarity(X), a.similarity(X))
    got.partial_fit(X, [[0, 1, 2]])             # the dual state resumes
    assert got.t_ == a.t_ + 1


def test_duals_stay_on_the_workers_unless_a_continuation_is_asked_for(tmp_path, monkeypatch):
    """keep_duals="auto" (default): the same model as keep_duals=True, but
    the driver never gathers the n dual variables (the gather would fail
    here), the model holds none and partial_fit refuses to continue it;
    keep_duals=False drops an in-memory fit's duals."""
    from tripletml.algorithms.sdca import distributed as dist
    from tripletml.persistence import load_model
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 150)
    X = rng.normal(size=(150, 4)) + np.eye(4)[y]
    kw = dict(start="zero", n_triplets=500, max_iter=4, random_state=7)
    coll = ShardedCollection.from_arrays(X, y, n_partitions=3)
    kept = SDCA(keep_duals=True, **kw).fit(coll)
    assert kept.duals_kept_ and kept.alpha_.shape == (500,)

    def no_gather(state):
        raise AssertionError("the driver gathered the dual variables")

    monkeypatch.setattr(dist, "_alpha_of", no_gather)
    left = SDCA(**kw).fit(coll)
    for k in ("W_", "M_last_", "avg_accum_"):
        np.testing.assert_array_equal(getattr(left, k), getattr(kept, k), err_msg=k)
    assert left.duals_kept_ is False and left.alpha_.shape == left.dual_ids_.shape == (0,)
    assert left.history_["gap"] == kept.history_["gap"]
    with pytest.raises(ValueError, match="keep_duals=True"):
        left.partial_fit(X, [[0, 1, 2]])
    left.save(tmp_path / "left.npz")
    back = load_model(tmp_path / "left.npz")
    assert back.duals_kept_ is False
    np.testing.assert_array_equal(back.W_, left.W_)
    with pytest.raises(ValueError, match="not kept"):
        back.partial_fit(X, [[0, 1, 2]])
    kept.duals_kept_ = False                      # a file contradicting its own duals
    kept.save(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="duals_kept_"):
        load_model(tmp_path / "bad.npz")
    mem = SDCA(keep_duals=False, **kw).fit(X, y)
    full = SDCA(**kw).fit(X, y)
    assert full.duals_kept_ and full.alpha_.shape == (500,)
    assert mem.duals_kept_ is False and mem.alpha_.size == 0
    np.testing.assert_array_equal(mem.W_, full.W_)
    full.partial_fit(X, [[0, 1, 2]])                 # kept: the dual state resumes


def test_memory_refusal_points_to_low_rank_learners(problem, monkeypatch):
    import tripletml.core.validation as v
    d = problem[0].shape[1]
    # room for the model's 4 arrays, not for 8 updates + 4
    monkeypatch.setattr(v, "available_memory", lambda: 6 * 8 * d * d)
    with pytest.raises(MemoryError, match="LORETA.*LowRankDML"):
        SDCA(start="zero", alpha=LAM, max_iter=2, preprocessing=None).fit(_collection(problem, 8))


def test_digits_map_close_to_single_process():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from tripletml.metrics import validation_score
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    # 2,000 triplets (the default 10,000 cost 3 s a fit: single process 0.8207;
    # K=1 0.8092, 2 0.8205, 4 0.8236, 8 0.8316); 10 passes each (the default)
    kw = dict(start="zero", n_triplets=2000, random_state=0)
    base = validation_score(SDCA(**kw).fit(Xtr, ytr), Xte, yte)
    # measured (seed 0): single process 0.7607; K=1 0.7568, 2 0.7664, 4 0.7766,
    # 8 0.7907.  With only partition 0's update added in each round (the
    # others dropped): K=2 0.7372, 4 0.6875, 8 0.6190, so the test fails
    for K in (1, 2, 4, 8):
        m = SDCA(**kw).fit(ShardedCollection.from_arrays(Xtr, ytr, n_partitions=K))
        assert m.n_iter_ == 10
        assert validation_score(m, Xte, yte) >= base - 0.02, K


def test_dask_backend_gives_the_local_model(problem, dask_client):
    pytest.importorskip("dask")
    pytest.importorskip("distributed")
    from tripletml.distributed.dask_search import use_cluster
    coll = _collection(problem, 4)
    kw = dict(alpha=LAM, max_iter=5, preprocessing=None, random_state=9)
    local = SDCA(start="zero", keep_duals=True, **kw).fit(coll)
    with use_cluster(dask_client):
        dist = SDCA(start="zero", keep_duals=True, **kw).fit(coll)
    assert dist.partitioned_["backend"] == "dask" and local.partitioned_["backend"] == "local"
    for k in ("W_", "M_last_", "alpha_", "avg_accum_"):
        np.testing.assert_array_equal(getattr(dist, k), getattr(local, k))
    assert dist.history_["gap"] == local.history_["gap"]


def test_random_output_and_tol_with_average(problem):
    coll = _collection(problem, 2)
    kw = dict(alpha=LAM, preprocessing=None, random_state=3)
    m = SDCA(start="zero", max_iter=6, output="random", **kw).fit(coll)
    lasts = [SDCA(start="zero", max_iter=r, output="last", **kw).fit(coll).W_ for r in (4, 5, 6)]
    hit = [r for r, W in zip((4, 5, 6), lasts) if np.array_equal(W, m.W_)]
    assert len(hit) == 1
    assert m.partitioned_["output_gap"] == m.history_["gap"][hit[0] - 1]
    np.testing.assert_array_equal(m.random_iterate_, m.W_)
    # tol inside the window with the average output: the average of the kept rounds
    a = SDCA(start="zero", max_iter=40, tol=1e-2, output="average", **kw).fit(coll)
    R = a.n_iter_
    assert a.stop_reason_ == "tol" and 20 < R < 40
    kept = [SDCA(start="zero", max_iter=r, output="last", **kw).fit(coll).W_ for r in range(21, R + 1)]
    np.testing.assert_allclose(a.W_, np.mean(kept, axis=0), rtol=1e-11, atol=1e-15)
    assert a.partitioned_["output_gap"] >= _primal(problem, a.W_) - problem[4] - 1e-12


@pytest.mark.parametrize("output", ["average", "random", "last"])
def test_driver_crash_resumes_from_the_round_checkpoint(tmp_path, output):
    """A driver that dies after round 3 of 6 and is run again with the same
    checkpoint_dir ends with the uninterrupted model (bit for bit)."""
    from sklearn.datasets import load_digits

    from tripletml.distributed.sharded import ShardedCollection
    from tripletml.distributed.partitioned import fit_partitioned

    X, y = load_digits(return_X_y=True)
    coll = ShardedCollection.from_arrays(X[:600], y[:600], n_partitions=3)

    def make():
        return SDCA(start="zero", keep_duals=True, n_triplets=1000, max_iter=6, tol=None,
                    output=output, random_state=1)

    ref = make().fit(coll)
    from _crash import crash_then_resume
    got = crash_then_resume(make, coll, tmp_path, after_round=3)
    np.testing.assert_array_equal(got.W_, ref.W_)
    np.testing.assert_array_equal(got.alpha_, ref.alpha_)
    assert got.history_["gap"] == ref.history_["gap"]
    # the finished run's checkpoint answers at once with the same model
    again = fit_partitioned(make(), coll, checkpoint_dir=tmp_path)
    np.testing.assert_array_equal(again.W_, ref.W_)
    with pytest.raises(ValueError, match="written by another run"):
        fit_partitioned(SDCA(start="zero", keep_duals=True, n_triplets=1000, max_iter=7,
                             tol=None, output=output, random_state=1),
                        coll, checkpoint_dir=tmp_path)
