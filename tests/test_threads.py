"""Thread limits for small work (issue 40, :mod:`tripletml.engine.threads`): one
BLAS / OpenMP thread inside a small fit, the previous counts restored, and a
setting of the user (a ``threadpool_limits`` context, an environment
variable) kept."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_info, threadpool_limits

from tripletml import Euclidean
from tripletml.engine import threads as _threads
from tripletml.linalg import TopK


def _counts():
    return [i["num_threads"] for i in threadpool_info()]


class _Probe(Euclidean):
    """Records the thread counts its solver runs with."""

    def _fit(self, X, triplets, rng):
        type(self).seen = _counts()
        return super()._fit(X, triplets, rng)


def _data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, d)), np.arange(n) % 3


def _defaults():
    return _threads._controller()[1]


@pytest.fixture(autouse=True)
def _library_defaults(monkeypatch):
    """Each test starts from the process's default thread counts and no
    *_NUM_THREADS variable (an earlier test in the same worker may have left
    others: importing distributed sets OMP/MKL/OPENBLAS_NUM_THREADS=1 in
    os.environ for the worker processes it spawns) and leaves what it found."""
    for v in _threads._BLAS_ENV:
        monkeypatch.delenv(v, raising=False)
    libs, defaults = _threads._controller()
    found = [lib.num_threads for lib in libs]
    for lib, c in zip(libs, defaults):
        lib.set_num_threads(c)
    yield
    for lib, c in zip(libs, found):
        lib.set_num_threads(c)


needs_threads = pytest.mark.skipif(
    not _defaults() or max(_defaults()) < 2 or _threads._ENV_BLAS,
    reason="needs a multi-threaded BLAS / OpenMP and no *_NUM_THREADS variable")


@needs_threads
@pytest.mark.parametrize("shape", [(30, 4), (600, 40)])
def test_small_fit_runs_on_one_thread_and_restores(shape):
    before = _counts()
    X, y = _data(*shape)             # w = 40^2 (600 + 40) ~ 1e6 < SMALL_WORK
    assert _threads.SMALL_WORK > _threads.fit_work(*X.shape)
    _Probe().fit(X, y)
    assert all(c == 1 for c in _Probe.seen)
    assert _counts() == before


@needs_threads
def test_large_fit_keeps_the_library_threads():
    before = _counts()
    X, y = _data(2500, 330)          # w = 330^2 (2500 + 330) ~ 3.1e8 > SMALL_WORK
    assert _threads.fit_work(*X.shape) > _threads.SMALL_WORK
    _Probe().fit(X, y)
    assert _Probe.seen == before


@needs_threads
@pytest.mark.parametrize("limit", [2, 3])
@pytest.mark.parametrize("shape", [(600, 40), (2500, 330)])
def test_user_threadpool_limits_wins(limit, shape):
    """A fit inside the user's ``threadpool_limits`` keeps the user's count.
    A limit equal to every library's count at import cannot be told apart
    from no limit (see tripletml.engine.threads): skipped there."""
    if all(c == limit for c in _defaults()):
        pytest.skip(f"limits={limit} equals the libraries' own count here")
    X, y = _data(*shape)
    with threadpool_limits(limits=limit):
        inside = _counts()
        _Probe().fit(X, y)
        assert _Probe.seen == inside
        assert _counts() == inside


@needs_threads
def test_similarity_and_transform_small_work_one_thread():
    X, y = _data(600, 40)
    est = _Probe().fit(X, y)
    seen = []
    orig = type(est)._similarity

    def spy(self, A, B):
        seen.append(_counts())
        return orig(self, A, B)

    type(est)._similarity = spy
    try:
        est.similarity(X[:300])
    finally:
        type(est)._similarity = orig
    assert seen and all(c == 1 for c in seen[0])


def test_environment_variable_wins():
    """OPENBLAS_NUM_THREADS set by the user: the fit keeps the library's count."""
    code = (
        "import numpy as np\n"
        "from threadpoolctl import threadpool_info\n"
        "from tripletml import Euclidean\n"
        "class P(Euclidean):\n"
        "    def _fit(self, X, t, rng):\n"
        "        P.seen = [i['num_threads'] for i in threadpool_info() if i['internal_api'] == 'openblas']\n"
        "        return super()._fit(X, t, rng)\n"
        "X = np.random.default_rng(0).random((600, 40))\n"
        "P().fit(X, np.arange(600) % 3)\n"
        "print(P.seen)\n")
    env = {k: v for k, v in os.environ.items() if k not in _threads._BLAS_ENV}
    env["OPENBLAS_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    seen = eval(out.stdout.strip())
    if not seen:
        pytest.skip("no OpenBLAS here")
    assert all(c == 2 for c in seen)


def test_work_rule():
    # digits and a 2,230 x 180 set: one thread; 1,000 x 1,000: the library's
    assert _threads.fit_work(1257, 64) < _threads.SMALL_WORK
    assert _threads.fit_work(2230, 180) < _threads.SMALL_WORK
    assert _threads.fit_work(1000, 1000) > _threads.SMALL_WORK
    with _threads.limit_threads(None):          # unknown work: nothing changes
        pass


def test_numba_threads_restored_and_user_setting_kept():
    numba = pytest.importorskip("numba")
    if "NUMBA_NUM_THREADS" in os.environ or numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs Numba's default of >= 2 threads")
    S = np.random.default_rng(0).random((50, 100))
    top = TopK(50, 5)
    top.add(S)                                   # a small block: one thread inside
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    with _threads.limit_numba(10):
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    numba.set_num_threads(2 if numba.config.NUMBA_NUM_THREADS != 2 else 1)
    try:
        user = numba.get_num_threads()
        if user != 1:
            with _threads.limit_numba(10):
                assert numba.get_num_threads() == user
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    s, i = top.finalize()
    ref = np.argsort(-S, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(i, ref)


@needs_threads
def test_a_variable_written_after_import_is_not_a_setting(monkeypatch):
    """Dask's nanny writes OMP/OPENBLAS/MKL_NUM_THREADS=1 into the driver's
    os.environ when a LocalCluster starts (also a cluster the user starts
    without ``use_cluster``); the BLAS already loaded ignores it, so small
    work is still limited (the CI failure of stop 47: an earlier module's
    cluster fixture switched the limit off for every later test)."""
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(v, "1")
    X, y = _data(200, 20)
    _Probe().fit(X, y)
    assert all(c == 1 for c in _Probe.seen)



@needs_threads
@pytest.mark.parametrize("name", ["LORETA", "SDCA", "LowRankDML", "KISSME"])
def test_partitioned_fit_of_small_work_runs_on_one_thread(name, monkeypatch):
    """A partitioned ``fit(collection)`` follows the in-memory fit's rule on
    the collection's rows (one place, tripletml.distributed.partitioned): the
    strategy of each kind (mixing, CoCoA+, gradient sums, statistics) runs
    on one BLAS thread for small work, and the counts are restored."""
    import dataclasses

    import tripletml as tm
    from tripletml.distributed.sharded import ShardedCollection

    cls = getattr(tm, name)
    orig = cls._partitioned_strategy
    seen = []

    def fit(learner, plan):
        seen.append(_counts())
        return orig.fit(learner, plan)

    monkeypatch.setattr(cls, "_partitioned_strategy", dataclasses.replace(orig, fit=fit))
    X, y = _data(60, 6)
    before = _counts()
    cls(random_state=0).fit(ShardedCollection.from_arrays(X, y, n_partitions=2))
    assert seen and all(c == 1 for c in seen[0]), seen
    assert _counts() == before


@needs_threads
def test_span_route_fit_runs_its_small_problem_on_one_thread(monkeypatch):
    """Few rows, many features: the rule's work of the plain problem
    (``d^2 (n + d)``) is large, but the span route solves n rows of r <= n
    coordinates: that fit runs on one thread (the lift of a small model
    too), the counts restored after; with a user's limit, the user's."""
    from tripletml import MMC
    seen = []
    inner = MMC._fit

    def spy(self, X, sup, rng):
        seen.append((X.shape[1], _counts()))
        return inner(self, X, sup, rng)
    monkeypatch.setattr(MMC, "_fit", spy)
    rng = np.random.default_rng(0)
    X = rng.random((40, 1500))
    t = np.array([rng.choice(40, 3, replace=False) for _ in range(300)])
    assert _threads.fit_work(*X.shape) > _threads.SMALL_WORK > _threads.fit_work(40, 40)
    before = _counts()
    MMC().fit(X, triplets=t)
    widths = [w for w, _ in seen]
    assert widths and max(widths) <= 40                       # the span route was taken
    assert all(c == 1 for _, counts in seen for c in counts)
    assert _counts() == before
    # the user's limit: one BLAS thread, OpenMP's own count kept -- neither the
    # defaults nor the module's all-ones.  (A uniform limit above the defaults,
    # 3 threads on a 2-core machine, oversubscribes the BLAS: 13 s instead of
    # 0.3 s; test_user_threadpool_limits_wins covers that kind of limit.)
    user = {"limits": 1, "user_api": "blas"}
    if not any(i["user_api"] != "blas" and i["num_threads"] > 1 for i in threadpool_info()):
        user = {"limits": 3 if all(c == 2 for c in _defaults()) else 2}
    seen.clear()
    with threadpool_limits(**user):
        inside = _counts()
        assert inside != before and not all(c == 1 for c in inside)
        MMC().fit(X, triplets=t)
    assert seen and all(counts == inside for _, counts in seen)


@needs_threads
def test_large_call_inside_our_small_limit_gets_the_threads_back():
    """``limit_threads(large)`` inside a one-thread limit of the module (a
    refactorisation among small coordinate steps) runs with the libraries'
    own counts; a small call inside it is limited again; every count is
    restored on the way out; the user's limit is never lifted."""
    big, small = 2.0 * _threads.SMALL_WORK, 1.0
    defaults = _defaults()
    with _threads.limit_threads(small):
        assert all(c == 1 for c in _counts())
        with _threads.limit_threads(big):
            assert [lib.num_threads for lib in _threads._controller()[0]] == defaults
            with _threads.limit_threads(small):
                assert all(c == 1 for c in _counts())
            assert [lib.num_threads for lib in _threads._controller()[0]] == defaults
        assert all(c == 1 for c in _counts())
    assert [lib.num_threads for lib in _threads._controller()[0]] == defaults
    with threadpool_limits(limits=1):
        with _threads.limit_threads(small), _threads.limit_threads(big):
            assert all(c == 1 for c in _counts())
    with _threads.limit_threads(big):         # no limit of ours: nothing to lift
        assert [lib.num_threads for lib in _threads._controller()[0]] == defaults


def _now():
    """The libraries' counts now (cheaper than threadpool_info, for spies
    called on every step)."""
    return [lib.num_threads for lib in _threads._controller()[0]]


def _answers(n, d, m, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    t = np.array([rng.choice(n, 3, replace=False) for _ in range(m)])
    return X, t


@needs_threads
def test_sparse_comet_steps_on_one_thread_its_refactorisation_by_its_panels(monkeypatch):
    """SparseCOMET on few rows of many features: the plain problem's rule
    (``d^2 (n + d)``) keeps the threads, but its coordinate steps are
    level-2 work, run on one thread (issue 40: 6.9 s against 4.0 s beside a
    busy core with the steps threaded); the refactorisation's Cholesky
    factorization is priced by its panels: one thread at ``d = 700``, the
    libraries' threads back among the one-thread steps where a panel is
    above the rule (SMALL_WORK lowered)."""
    from tripletml import SparseCOMET
    from tripletml.algorithms.comet import kernels as ck
    X, t = _answers(30, 700, 2000)
    assert _threads.fit_work(*X.shape) > _threads.SMALL_WORK > _threads.factor_work(700, 700)
    steps, factors = [], []
    step, cholesky = ck.COMETSolver.coordinate_step, np.linalg.cholesky

    def spy_step(self, k):
        steps.append(_now())
        return step(self, k)

    def spy_cholesky(a, *args, **kwargs):
        if a.shape[0] > 30:             # W (d x d, d = 700 and a bias coordinate)
            factors.append(_now())
        return cholesky(a, *args, **kwargs)
    monkeypatch.setattr(ck.SparseCOMETSolver, "coordinate_step", spy_step)
    monkeypatch.setattr(np.linalg, "cholesky", spy_cholesky)
    monkeypatch.setattr(ck.SparseCOMETSolver, "_refactor_due", lambda self: len(steps) == 5)
    before = _counts()
    for small_work, want in ((_threads.SMALL_WORK, [1] * len(before)),
                             (_threads.factor_work(701, 701), _defaults())):
        monkeypatch.setattr(_threads, "SMALL_WORK", small_work)
        steps.clear()
        factors.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)        # one epoch: enough
            SparseCOMET(max_iter=1, random_state=0).fit(X, triplets=t)
        assert steps and all(c == 1 for counts in steps for c in counts)
        assert factors and all(f == want for f in factors), factors
        assert _counts() == before


@needs_threads
@pytest.mark.parametrize("name", ["SCML", "KISSME"])
def test_few_rows_small_calls_run_on_one_thread(name, monkeypatch):
    """SCML's triplet-difference batches and KISSME's fit on the span's
    coordinates are small products although the plain problem's rule keeps
    the threads: their eigendecompositions run on one thread."""
    import tripletml
    X, t = _answers(30, 700, 600)
    seen, eigh = [], np.linalg.eigh

    def spy(a, *args, **kwargs):
        if a.shape[0] <= 30:
            seen.append(_now())
        return eigh(a, *args, **kwargs)
    monkeypatch.setattr(np.linalg, "eigh", spy)
    before = _counts()
    getattr(tripletml, name)(random_state=0).fit(X, triplets=t)
    assert seen and all(c == 1 for counts in seen for c in counts)
    assert _counts() == before


def test_factorizations_are_priced_by_their_panels():
    """A blocked factorization is priced by one panel's update, not its
    total: a 1,088 x 1,088 QR (``1.3e9`` multiply-adds) runs on one thread,
    a 4,096 x 4,096 one keeps the threads."""
    assert _threads.factor_work(1088, 1088) == 1088 * 1088 * _threads.PANEL
    assert _threads.factor_work(1088, 1088) < _threads.SMALL_WORK < 1088.0 ** 3
    assert _threads.factor_work(4096, 4096) >= _threads.SMALL_WORK
    # a panel is never wider than the matrix (one panel: the whole n^2 d),
    # nor than the reflectors a complete Q is formed from
    assert _threads.factor_work(10**6, 10) == 10**6 * 10 * 10 == 1e6 * 10 ** 2
    assert _threads.factor_work(1088, 1088, 5) == 1088 * 1088 * 5
    assert _threads.factor_work(100, 0) == 0.0


@needs_threads
def test_large_factorization_inside_our_small_limit_keeps_the_threads(monkeypatch):
    """Above the rule (SMALL_WORK lowered for a small matrix), the complete
    QR of :func:`complement_basis` gets the libraries' threads back inside
    a one-thread limit of the module; below it, it runs on one thread."""
    from tripletml.linalg import span
    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((200, 5)))
    seen, qr = [], np.linalg.qr

    def spy(a, *args, **kwargs):
        seen.append(_now())
        return qr(a, *args, **kwargs)
    monkeypatch.setattr(np.linalg, "qr", spy)
    with _threads.limit_threads(1.0):
        span.complement_basis(Q)
        monkeypatch.setattr(_threads, "SMALL_WORK", _threads.factor_work(200, 200, 5))
        span.complement_basis(Q)
    assert seen == [[1] * len(_defaults()), _defaults()]


@needs_threads
def test_scml_factorizations_and_steps_on_one_thread(monkeypatch):
    """SCML on few rows of many features (the fit's rule keeps the threads):
    the SVD and QR of its factor, and the objective between its compiled
    steps, run on one thread (each threaded call leaves OpenBLAS's workers
    spinning beside the steps: 2.8-3.5 s against 1.3 s beside a busy core)."""
    import tripletml
    from tripletml.algorithms.scml import kernels as sk
    X, t = _answers(30, 700, 600)
    assert _threads.fit_work(*X.shape) > _threads.SMALL_WORK
    seen = []

    def spy(fn):
        def run(*args, **kwargs):
            seen.append((fn.__name__, _now()))
            return fn(*args, **kwargs)
        return run
    for name in ("svd", "qr"):
        monkeypatch.setattr(np.linalg, name, spy(getattr(np.linalg, name)))
    monkeypatch.setattr(sk, "scml_objective", spy(sk.scml_objective))
    before = _counts()
    tripletml.SCML(random_state=0).fit(X, triplets=t)
    names = {name for name, _ in seen}
    assert {"svd", "qr", "scml_objective"} <= names, names
    assert all(c == 1 for _, counts in seen for c in counts), seen
    assert _counts() == before


@needs_threads
def test_rca_small_factorizations_and_scatters_on_one_thread(monkeypatch):
    """RCA on few rows of many features (the fit's rule keeps the threads):
    the SVDs of the held-out folds' rows and the pairs' scatter over the
    few rows they name run on one thread."""
    import tripletml
    from tripletml.linalg import pairwise
    X, t = _answers(30, 700, 600)
    seen, svd = [], np.linalg.svd

    def spy(a, *args, **kwargs):
        seen.append(("svd", _now()))
        return svd(a, *args, **kwargs)
    monkeypatch.setattr(np.linalg, "svd", spy)
    before = _counts()
    tripletml.RCA().fit(X, triplets=t)
    assert seen and all(c == 1 for _, counts in seen for c in counts), seen
    assert _counts() == before
    # the scatter's own product, priced by the rows it names
    with _threads.limit_threads(_threads.SMALL_WORK):     # threads on, as the fit's rule
        probe = []
        monkeypatch.setattr(pairwise, "limit_threads",
                            lambda w: (probe.append(w), _threads.limit_threads(w))[1])
        pairwise.pair_difference_scatter(X, t[:, 0], t[:, 1])
    assert probe and probe[0] == 30.0 * 700 * 700 < _threads.SMALL_WORK


@needs_threads
def test_fit_priced_around_its_solve_by_the_rows_span(monkeypatch):
    """Few rows, many features: what surrounds the solve (the preprocessing,
    the span route's checks) is priced by the rows' span
    (:func:`prelude_work`) and runs on one thread; the solve by its own
    problem: a plain ``d^2 (n + d)`` solve keeps the threads; RCA's
    ``d^2 min(n, d)`` products, LinearTSTE's span-route check, KISSME's
    preprocessing and SCML's basis and steps (their large products priced
    on their own) run on one (before: every call of these fits threaded,
    the workers spinning beside the compiled steps)."""
    import tripletml
    from tripletml.core.preprocessing import Preprocessor
    X, t = _answers(40, 1500, 300)
    assert _threads.prelude_work(*X.shape) < _threads.SMALL_WORK < _threads.fit_work(*X.shape)
    assert _threads.prelude_work(2500, 330) == _threads.fit_work(2500, 330)   # n >= d: the fit's
    seen = []

    def spy(name, fn):
        def run(*args, **kwargs):
            seen.append((name, _now()))
            return fn(*args, **kwargs)
        return run
    monkeypatch.setattr(Preprocessor, "fit", spy("preprocessing", Preprocessor.fit))
    monkeypatch.setattr(np.linalg, "matrix_rank", spy("rank", np.linalg.matrix_rank))
    monkeypatch.setattr(tripletml.RCA, "_fit", spy("rca", tripletml.RCA._fit))
    monkeypatch.setattr(tripletml.KISSME, "_preprocess", spy("kissme",
                                                             tripletml.KISSME._preprocess))
    monkeypatch.setattr(tripletml.SCML, "_learn", spy("scml", tripletml.SCML._learn))
    before = _counts()
    _Probe().fit(X, triplets=t)
    assert _Probe.seen == before                       # the plain d x d solve: threads
    tripletml.LinearTSTE(random_state=0, max_iter=5).fit(X, triplets=t)
    tripletml.RCA().fit(X, triplets=t)
    tripletml.KISSME().fit(X, triplets=t)
    tripletml.SCML(random_state=0, max_iter=200).fit(X, triplets=t)
    assert {"preprocessing", "rank", "rca", "kissme", "scml"} <= {name for name, _ in seen}
    assert all(c == 1 for _, counts in seen for c in counts), seen
    assert _counts() == before
