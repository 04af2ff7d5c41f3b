"""Input validation (``tripletml.core.validation`` and the entry points that use
it): malformed sparse matrices, canonical CSR form, hostile values and shapes,
property tests of ``check_X``.

Whatever could crash the interpreter (a malformed CSR handed to a Numba kernel
or to SciPy's compiled conversions) runs in a subprocess, so a segfault fails
the test instead of killing the suite.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tripletml import OASIS
from tripletml.core.validation import MAX_ABS_VALUE, check_X
from tripletml.linalg import as_csr
import tripletml

import _fork_each

REPO = Path(__file__).resolve().parents[1]
SRC = Path(tripletml.__file__).resolve().parents[1]  # the tree under test, for subprocesses

# Builds malformed matrices without going through SciPy's checks (its
# constructor checks lengths, never the values of the indices; attributes
# set afterwards are not checked at all).
_CORRUPT = textwrap.dedent("""
    import numpy as np, scipy.sparse as sp

    def base(fmt="csr"):
        X = sp.random(24, 6, density=0.5, format="csr", random_state=0)
        X.sum_duplicates()
        return X.asformat(fmt)

    def col_too_large(fmt="csr"):
        X = base(fmt); X.indices[3] = X.shape[1 if fmt == "csr" else 0] + 50; return X

    def col_huge(fmt="csr"):
        X = base(fmt); X.indices = X.indices.astype(np.int64); X.indices[0] = 10**12; return X

    def negative_index(fmt="csr"):
        X = base(fmt); X.indices[5] = -1; return X

    def indptr_not_monotone(fmt="csr"):
        X = base(fmt); X.indptr[3], X.indptr[4] = X.indptr[4] + 2, X.indptr[3]; return X

    def indptr_past_end(fmt="csr"):
        X = base(fmt); X.indptr[-1] = X.indptr[-1] + 10; return X

    def indices_short(fmt="csr"):
        X = base(fmt); X.indices = X.indices[:-3]; return X

    def indptr_short(fmt="csr"):
        X = base(fmt); X.indptr = X.indptr[:-2]; return X

    CORRUPTIONS = [col_too_large, col_huge, negative_index, indptr_not_monotone,
                   indptr_past_end, indices_short, indptr_short]
    y = np.arange(24) % 3
""")


def _run(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", _CORRUPT + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


def _run_each(prelude: str, cases: dict[str, str]) -> dict[str, tuple]:
    """``prelude`` once in a fresh interpreter (after _CORRUPT), then every
    ``{name: code}`` of ``cases`` in a forked copy of it (tests/_fork_each.py);
    ``{name: (exit status, stdout of the case)}`` for every case (status None:
    the case never ended, the interpreter itself died -- its stderr is in the text)."""
    proc = _run(_fork_each.script(prelude, cases), timeout=120 + 60 * len(cases))
    tail = f"interpreter exit status {proc.returncode}; stderr:\n{proc.stderr[-2000:]}"
    return {n: (status, "\n".join(lines) + "\n", tail)
            for n, (status, lines) in _fork_each.parse(proc.stdout, cases).items()}


def _assert_all_refused(proc: subprocess.CompletedProcess, n: int) -> None:
    assert proc.returncode == 0, (f"subprocess died with code {proc.returncode} "
                                  f"(-11/139 = segfault)\n{proc.stdout}\n{proc.stderr}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REFUSED ")]
    assert len(lines) == n, proc.stdout + proc.stderr


_ENTRY_POINTS = {
    "OASIS.fit": "from tripletml import OASIS\ncall = lambda X: OASIS(preprocessing=None, random_state=0).fit(X, y)",
    "LORETA.fit": ("from tripletml import LORETA\n"
                   "call = lambda X: LORETA(preprocessing=None, rank=2, random_state=0).fit(X, y)"),
    "MatrixPerceptron.fit": ("from tripletml import MatrixPerceptron\n"
                             "call = lambda X: MatrixPerceptron(random_state=0).fit(X, np.eye(3, dtype=int)[y])"),
    "Euclidean.similarity": ("from tripletml import Euclidean\n"
                             "m = Euclidean().fit(base().toarray(), y)\n"
                             "call = lambda X: m.similarity(X, X)"),
    "OASIS.partial_fit": ("from tripletml import OASIS\n"
                          "m = OASIS(preprocessing=None, random_state=0).fit(base(), y)\n"
                          "t = np.array([[0, 3, 1], [1, 4, 2]])\n"
                          "call = lambda X: m.partial_fit(X, triplets=t)"),
    "knn_triplets": ("from tripletml.triplets import knn_triplets\n"
                     "call = lambda X: knn_triplets(X, y)"),
    "information_gain": ("from tripletml.datasets.text import information_gain\n"
                         "call = lambda X: information_gain(X, y)"),
    # was test_evaluate_retrieval_malformed_csc_is_refused (CSC only, any ValueError)
    "evaluate_retrieval": ("from tripletml import Euclidean\n"
                           "from tripletml.metrics import evaluate_retrieval\n"
                           "m = Euclidean().fit(base().toarray(), y)\n"
                           "call = lambda X: evaluate_retrieval(m, X, y)"),
}


#: run after an entry point's code (which defines ``call``): every corruption,
#: as CSR and as CSC, must be refused and leave the caller's matrix as it was
_ENTRY_CHECK = """
for fmt in ("csr", "csc"):
    for corrupt in CORRUPTIONS:
        X = corrupt(fmt)
        before = (X.indices.copy(), X.indptr.copy(), X.data.copy())
        try:
            call(X)
        except ValueError as exc:
            msg = str(exc)
            assert "malformed sparse matrix" in msg, msg
            print("REFUSED", f"{corrupt.__name__}/{fmt}", msg)
        else:
            print("ACCEPTED", f"{corrupt.__name__}/{fmt}")
        # the caller's matrix is not modified by the check
        assert all(np.array_equal(a, b) for a, b in
                   zip(before, (X.indices, X.indptr, X.data))), corrupt.__name__
"""


def test_malformed_sparse_is_refused_not_a_segfault():
    """Every corruption, as CSR and as CSC, for every entry point: one fresh
    interpreter, each entry point in its own forked copy of it (_run_each: a
    segfault fails that entry point and names it, the others still run)."""
    results = _run_each(
        "from tripletml import OASIS, LORETA, MatrixPerceptron, Euclidean\n"
        "import tripletml.triplets, tripletml.datasets.text, tripletml.metrics\n",
        {entry: _ENTRY_POINTS[entry] + _ENTRY_CHECK for entry in sorted(_ENTRY_POINTS)})
    failures = []
    for entry, (status, out, tail) in results.items():
        owner = entry.split(".")[0]
        refused = [ln for ln in out.splitlines() if ln.startswith("REFUSED ")]
        if status != 0:
            failures.append(f"{entry}: died with exit status {status} (-11/139 = segfault)")
        elif len(refused) != 14:
            failures.append(f"{entry}: {len(refused)} of the 14 malformed matrices refused")
        elif not ("REFUSED col_too_large/csr" in out and "REFUSED col_too_large/csc" in out):
            failures.append(f"{entry}: col_too_large not refused")
        elif not all(ln.split(" ", 2)[2].startswith(owner) for ln in refused):
            failures.append(f"{entry}: a message does not start with {owner!r}")
        else:
            continue
        failures[-1] += f"\n{out}{tail}"
    assert not failures, "\n\n".join(failures)


def test_malformed_coo_and_bsr_refused_before_conversion():
    proc = _run("""
from tripletml.core.validation import check_X
X = base("coo"); X.col[2] = 99
try:
    check_X(X, "probe")
except ValueError as exc:
    print("REFUSED coo", exc)
X = base("coo"); X.row[0] = -4
try:
    check_X(X, "probe")
except ValueError as exc:
    print("REFUSED coo-neg", exc)
X = sp.bsr_matrix(base().toarray(), blocksize=(2, 2)); X.indices[1] = 40
try:
    check_X(X, "probe")
except ValueError as exc:
    print("REFUSED bsr", exc)
""")
    _assert_all_refused(proc, 3)


# --------------------------------------------------------------------------- canonical form
def _unsorted_with_duplicates():
    rng = np.random.default_rng(3)
    D = rng.normal(size=(30, 7)) * (rng.random((30, 7)) < 0.5)
    C = sp.csr_matrix(D)
    rows = np.repeat(np.arange(30), np.diff(C.indptr))
    # split every entry in two halves (duplicates), then shuffle inside each row
    idx = np.concatenate([C.indices, C.indices])
    val = np.concatenate([C.data / 2, C.data / 2])
    r = np.concatenate([rows, rows])
    order = np.lexsort((rng.random(r.size), r))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=30))])
    X = sp.csr_matrix((val[order], idx[order], indptr), shape=(30, 7))
    return X, D


def test_unsorted_duplicate_csr_is_canonicalised_on_a_copy():
    X, D = _unsorted_with_duplicates()
    assert not X.has_canonical_format
    before = X.indices.copy(), X.data.copy()
    Y = check_X(X, "probe")
    assert Y.has_canonical_format and Y.has_sorted_indices
    # brute force: strictly increasing column indices in every row
    for i in range(Y.shape[0]):
        assert np.all(np.diff(Y.indices[Y.indptr[i]:Y.indptr[i + 1]]) > 0)
    np.testing.assert_allclose(Y.toarray(), D, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(X.indices, before[0])
    np.testing.assert_array_equal(X.data, before[1])
    # a learner fitted on the messy matrix equals one fitted on the clean one
    y = np.arange(30) % 3
    a = OASIS(preprocessing=None, random_state=0).fit(X, y)
    b = OASIS(preprocessing=None, random_state=0).fit(sp.csr_matrix(D), y)
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-12, atol=1e-12)


def test_stale_sorted_flag_is_not_trusted():
    X, D = _unsorted_with_duplicates()
    X.sum_duplicates()
    assert X.has_sorted_indices                    # cached flag now True
    i0, i1 = X.indptr[0], X.indptr[1]
    X.indices[i0:i1] = X.indices[i0:i1][::-1].copy()   # scramble behind SciPy's back
    X.data[i0:i1] = X.data[i0:i1][::-1].copy()
    assert X.has_sorted_indices                    # the stale flag lies
    Y = check_X(X, "probe")
    assert np.all(np.diff(Y.indices[Y.indptr[0]:Y.indptr[1]]) > 0)
    np.testing.assert_allclose(Y.toarray(), D, atol=1e-15)


def test_as_csr_verifies_structure():
    X = sp.random(5, 4, density=0.5, format="csr", random_state=0)
    X.indices[0] = 9
    with pytest.raises(ValueError, match="as_csr: X is a malformed sparse matrix"):
        as_csr(X)
    D = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(as_csr(D).toarray(), D)


# --------------------------------------------------------------------------- values and shapes
@pytest.mark.parametrize("X, exc, match", [
    (np.array([[1.0, np.nan]]), ValueError, "NaN or infinity"),
    (sp.csr_matrix(np.array([[1.0, np.inf]])), ValueError, "NaN or infinity"),
    (np.array([[1, "a"]], dtype=object), TypeError, "strings"),
    (np.array([[1, None]], dtype=object), ValueError, "NaN or infinity"),  # None -> nan
    (np.array([[1, {}]], dtype=object), TypeError, "object array"),
    (np.array([[10**400, 1]], dtype=object), ValueError, "too large for float64"),
    (np.ones((2, 2), dtype=complex), TypeError, "complex"),
    (sp.csr_matrix(np.ones((2, 2), dtype=complex)), TypeError, "complex"),
    (np.ones((2, 2, 2)), ValueError, "2-D"),
    (np.ones(3), ValueError, "reshape"),
    (np.ones((0, 3)), ValueError, "0 sample"),
    (np.ones((3, 0)), ValueError, "0 features"),
    (sp.csr_matrix((0, 3)), ValueError, "0 sample"),
    (sp.csr_matrix((3, 0)), ValueError, "0 features"),
    (np.array([[1e155, 0.0]]), ValueError, "Scale the features"),
    (np.array([[-1e101, 0.0]]), ValueError, "Scale the features"),
    (sp.csr_matrix(np.array([[0.0, 1e200]])), ValueError, "Scale the features"),
    (np.array([[1.0, 2.0]], dtype=np.longdouble) * np.longdouble(1e300) ** 2, ValueError,
     "NaN or infinity"),
])
def test_check_X_refuses_with_a_clear_message(X, exc, match):
    with pytest.raises(exc, match=match) as info:
        check_X(X, "SomeLearner", max_abs=MAX_ABS_VALUE)
    assert str(info.value).startswith("SomeLearner: ")


def test_check_X_accepts_the_limit_and_sparse_3d_is_refused():
    lim = np.array([[MAX_ABS_VALUE, -MAX_ABS_VALUE]])
    assert check_X(lim, "p", max_abs=MAX_ABS_VALUE).shape == (1, 2)
    assert check_X(lim * 1e200, "p").shape == (1, 2)      # no max_abs: finite is enough
    coo3 = sp.coo_array((np.ones(2), (np.array([0, 1]), np.array([0, 1]), np.array([0, 1]))),
                        shape=(2, 2, 2))
    with pytest.raises(ValueError, match="2-D"):
        check_X(coo3, "p")


# --------------------------------------------------------------------------- property tests
@st.composite
def _csr(draw):
    n = draw(st.integers(1, 8))
    d = draw(st.integers(1, 8))
    # the stored positions (row by row), then one value for each of them only:
    # a value drawn for an absent position would be thrown away
    mask = np.array(draw(st.lists(st.booleans(), min_size=n * d, max_size=n * d)),
                    dtype=bool).reshape(n, d)
    k = int(mask.sum())
    vals = draw(st.lists(st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False),
                         min_size=k, max_size=k))
    D = np.zeros((n, d))
    D[mask] = [v if v != 0 else 1.0 for v in vals]
    X = sp.csr_matrix(D)
    idx_dtype = draw(st.sampled_from([np.int32, np.int64]))
    X.indices = X.indices.astype(idx_dtype)
    X.indptr = X.indptr.astype(idx_dtype)
    return X, D


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_csr(), st.booleans())
def test_property_every_valid_csr_is_accepted(case, shuffle):
    X, D = case
    if shuffle and X.nnz:  # reverse every row: still valid, not sorted
        for i in range(X.shape[0]):
            a, b = X.indptr[i], X.indptr[i + 1]
            X.indices[a:b] = X.indices[a:b][::-1].copy()
            X.data[a:b] = X.data[a:b][::-1].copy()
        X.has_sorted_indices = False
    Y = check_X(X, "prop")
    assert Y.has_canonical_format
    np.testing.assert_array_equal(Y.toarray(), D)
    for fmt in ("csc", "coo", "lil"):
        np.testing.assert_array_equal(check_X(sp.csr_matrix(D).asformat(fmt), "p").toarray(), D)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_csr(), st.sampled_from(["index_high", "index_negative", "indptr_swap", "indptr_end",
                                "indptr_first", "indices_len", "indptr_len"]),
       st.integers(0, 10**6), st.integers(1, 10**9))
def test_property_every_corrupted_csr_is_refused(case, how, where, amount):
    X, _ = case
    n, d = X.shape
    nnz = X.nnz
    if how in ("index_high", "index_negative"):
        if nnz == 0:
            return
        X.indices = X.indices.astype(np.int64)
        k = where % nnz
        X.indices[k] = d + amount % 10**6 if how == "index_high" else -(amount % 10**6) - 1
    elif how == "indptr_swap":
        # make indptr decrease somewhere: needs a row with entries
        rows = np.flatnonzero(np.diff(X.indptr) > 0)
        if rows.size == 0:
            return
        i = rows[where % rows.size]
        X.indptr[i + 1] = X.indptr[i] - 1 if X.indptr[i] > 0 else X.indptr[i]
        if X.indptr[i] == 0:
            X.indptr[i], X.indptr[i + 1] = 1, 0
    elif how == "indptr_end":
        X.indptr = X.indptr.astype(np.int64)
        X.indptr[-1] = nnz + 1 + amount % 1000
    elif how == "indptr_first":
        X.indptr = X.indptr.astype(np.int64)
        X.indptr[0] = 1 + amount % 1000
    elif how == "indices_len":
        X.indices = np.concatenate([X.indices, X.indices[:1] if nnz else [0]]).astype(np.int64)
    else:
        X.indptr = X.indptr[:-1] if where % 2 else np.append(X.indptr, X.indptr[-1])
    with pytest.raises(ValueError, match="prop: X is a malformed sparse matrix"):
        check_X(X, "prop")


# ---------------------------------------------------------------------------
# degenerate triplets (q = p+, q = p-, p+ = p-): refused by training, accepted
# by scoring (issue 29)
# ---------------------------------------------------------------------------
from tripletml import registry as _registry                                      # noqa: E402
from tripletml.core.validation import check_triplets                      # noqa: E402


def _deg_data(n=12, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.arange(n) % 3


@pytest.mark.parametrize("row, kind", [
    ([0, 0, 5], "q = p+"), ([0, 5, 0], "q = p-"), ([1, 5, 5], "p+ = p-"),
    ([3, 3, 3], "q = p+"),                     # all three: the first kind named
])
def test_check_triplets_names_the_kind(row, kind):
    T = [[0, 1, 2], row]
    np.testing.assert_array_equal(check_triplets(T, 6, "f"), T)        # default: accepted
    with pytest.raises(ValueError) as e:
        check_triplets(T, 6, "f", allow_degenerate=False)
    msg = str(e.value)
    assert msg.startswith("f: 1 of the 2 rows of triplets is degenerate (row 1);")
    assert f"row 1 = ({row[0]}, {row[1]}, {row[2]}), has {kind} " in msg


def test_check_triplets_row_numbers_and_cap():
    T = np.array([[0, 1, 2]] * 30)
    T[[4, 7]] = [[2, 2, 1], [0, 1, 1]]
    with pytest.raises(ValueError, match=r"2 of the 30 rows of triplets are degenerate "
                                         r"\(rows 4, 7\); the first, row 4 = \(2, 2, 1\), "
                                         r"has q = p\+"):
        check_triplets(T, 3, "g", allow_degenerate=False)
    bad = np.arange(3, 30, 2)                                          # 14 rows
    T = np.array([[0, 1, 2]] * 30)
    T[bad] = [0, 2, 2]
    with pytest.raises(ValueError) as e:
        check_triplets(T, 3, "g", allow_degenerate=False)
    listed = ", ".join(str(r) for r in bad[:10])
    assert f"14 of the 30 rows of triplets are degenerate (rows {listed}, ... (4 more));" \
        in str(e.value)
    assert f"{bad[10]}" not in str(e.value).split("(4 more)")[0].split("rows ")[1]
    assert "has p+ = p-" in str(e.value)
    # distinct indices of identical points are not degenerate
    check_triplets([[0, 1, 2]], 3, "g", allow_degenerate=False)


_TRIPLET_ENTRIES = [e for e in _registry.entries("triplet") if e.cls._needs_triplets]


@pytest.mark.parametrize("entry", _TRIPLET_ENTRIES, ids=lambda e: e.name)
def test_fit_refuses_degenerate_triplets(entry):
    X, _ = _deg_data()
    T = [[0, 1, 2], [3, 4, 5], [6, 6, 7], [8, 9, 8]]
    with pytest.raises(ValueError, match=rf"^{entry.name}: 2 of the 4 rows of triplets are "
                                         r"degenerate \(rows 2, 3\); the first, row 2 = "
                                         r"\(6, 6, 7\), has q = p\+"):
        entry.make().fit(X, triplets=T)


@pytest.mark.parametrize("entry", [e for e in _TRIPLET_ENTRIES
                                   if hasattr(e.cls, "partial_fit")], ids=lambda e: e.name)
def test_partial_fit_refuses_degenerate_triplets(entry):
    X, _ = _deg_data()
    m = entry.make()
    with pytest.raises(ValueError, match=rf"^{entry.name}: 1 of the 1 rows .* row 0 = "
                                         r"\(1, 5, 5\), has p\+ = p-"):
        m.partial_fit(X, [[1, 5, 5]])
    assert not hasattr(m, "n_features_in_")            # a refused first call leaves it unfitted
    m.partial_fit(X, [[0, 1, 2]])
    assert m.t_ == 1
    with pytest.raises(ValueError, match=r"row 0 = \(4, 3, 4\), has q = p-"):
        m.partial_fit(X, [[4, 3, 4], [0, 1, 2]])
    assert m.t_ == 1                                   # refused before any step


def test_partitioned_training_refuses_degenerate_triplets():
    from tripletml import ITML, SDCA
    from tripletml.distributed.sharded import ShardedCollection

    X, _ = _deg_data(n=20)
    good, bad = np.array([[0, 1, 2], [3, 4, 5]]), np.array([[0, 1, 2], [9, 9, 9]])
    coll = ShardedCollection.from_arrays(X, n_partitions=2)
    for est in (OASIS(max_iter=1, random_state=0), SDCA(max_iter=1, random_state=0),
                ITML(max_iter=2)):
        name = type(est).__name__
        with pytest.raises(ValueError, match=rf"{name} \(partition 1\): 1 of the 2 rows of "
                                             r"triplets is degenerate \(row 1\)"):
            est.fit(coll.with_triplets([good, bad]))
    OASIS(max_iter=1, random_state=0).fit(coll.with_triplets([good, good]))


def test_fit_stream_refuses_degenerate_triplets():
    from tripletml.distributed.streaming import fit_stream

    X, _ = _deg_data()
    shards = [(X, None, np.array([[0, 1, 2]])),
              (X, None, np.array([[0, 1, 2], [3, 4, 5], [7, 8, 8]]))]
    with pytest.raises(ValueError, match=r"fit_stream \(OASIS, shard 1\): 1 of the 3 rows of "
                                         r"triplets is degenerate \(row 2\); .* has p\+ = p-"):
        fit_stream(OASIS(random_state=0), shards, random_state=0)


def test_scoring_accepts_degenerate_triplets():
    from tripletml.metrics import triplet_accuracy

    X, y = _deg_data()
    m = OASIS(max_iter=1, n_triplets=50, random_state=0).fit(X, y)
    T = [[0, 1, 2], [0, 0, 5], [0, 5, 0], [1, 5, 5]]
    margins = m.triplet_score(X, T)
    assert margins.shape == (4,) and np.isfinite(margins).all()
    assert margins[3] == 0.0                              # p+ = p-: margin exactly 0
    np.testing.assert_allclose(margins[1], -margins[2])   # the same pair, swapped
    assert 0.0 <= triplet_accuracy(m, X, T) <= 1.0


@pytest.mark.parametrize("seed", range(3))
def test_samplers_never_produce_degenerate_triplets(seed):
    """Small classes (two members) and duplicated rows: every sampler
    draws three distinct indices per triplet."""
    from tripletml.triplets import knn_triplets, random_class_triplets, semihard_triplets

    rng = np.random.default_rng(seed)
    base = rng.normal(size=(4, 3))
    X = np.repeat(base, 2, axis=0)                        # each point twice
    y = np.array([0, 0, 1, 1, 2, 2, 0, 1])
    Xd = np.vstack([X, X[:2]])                            # and rows 0, 1 again
    yd = np.concatenate([y, y[:2]])
    for T in (random_class_triplets(y, 200, random_state=seed),
              random_class_triplets(y, per_query=3, random_state=seed),
              knn_triplets(Xd, yd, n_neighbors=2, n_impostors=4, random_state=seed),
              knn_triplets(X, y, n_neighbors=1, n_impostors=2, random_state=seed),
              semihard_triplets(Xd, yd, 200, random_state=seed),
              semihard_triplets(X, y, 100, n_candidates=None, random_state=seed)):
        T = np.asarray(T)
        assert T.shape[0] > 0
        check_triplets(T, Xd.shape[0], "sampler", allow_degenerate=False)
