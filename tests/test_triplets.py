"""Statistical and contract tests of the triplet samplers, and their refusal
of hostile inputs (extreme magnitudes, impossible sizes)."""
import functools
import re

import numpy as np
import pytest
import scipy.sparse as sp

from tripletml.triplets import check_triplets, knn_triplets, random_class_triplets

import _fork_each


def test_random_class_triplets_classes_and_counts():
    y = np.repeat(["a", "b", "c", "d"], [5, 10, 20, 1])
    t = random_class_triplets(y, 5000, random_state=0)
    assert t.shape == (5000, 3) and t.dtype == np.int64
    q, p, n = t.T
    assert np.all(y[q] == y[p]) and np.all(q != p)
    assert np.all(y[q] != y[n])
    # the singleton class "d" is never a query but can be a negative
    assert not np.any(y[q] == "d") and np.any(y[n] == "d")


def test_random_class_triplets_uniformity():
    y = np.repeat([0, 1, 2], [4, 6, 10])
    t = random_class_triplets(y, 60000, random_state=1)
    q, p, n = t.T
    # queries uniform over the 20 eligible samples
    cq = np.bincount(q, minlength=20) / t.shape[0]
    np.testing.assert_allclose(cq, 1 / 20, atol=0.006)
    # positive uniform over the other members of the class
    sel = q == 0
    cp = np.bincount(p[sel], minlength=20)[1:4] / sel.sum()
    np.testing.assert_allclose(cp, 1 / 3, atol=0.03)
    # negative uniform over the samples of the other classes
    sel = y[q] == 0
    cn = np.bincount(n[sel], minlength=20)[4:] / sel.sum()
    np.testing.assert_allclose(cn, 1 / 16, atol=0.01)


def test_random_class_triplets_reproducible_and_seed_sensitive():
    y = np.arange(50) % 4
    a = random_class_triplets(y, 100, random_state=3)
    b = random_class_triplets(y, 100, random_state=np.int64(3))
    c = random_class_triplets(y, 100, random_state=4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_per_query_and_unique():
    y = np.arange(30) % 3
    t = random_class_triplets(y, per_query=4, random_state=0)
    np.testing.assert_array_equal(np.bincount(t[:, 0], minlength=30), np.full(30, 4))
    u = random_class_triplets(y, 2000, unique=True, random_state=0)
    assert np.unique(u, axis=0).shape[0] == 2000
    with pytest.raises(ValueError, match="distinct triplets"):
        random_class_triplets([0, 0, 1], 10, unique=True, random_state=0)


@pytest.mark.parametrize("y, msg", [
    ([1, 1, 1, 1], "1 class"),
    ([0, 1, 2, 3], "single member"),
    ([], "empty"),
    (np.zeros((3, 2)), "1-D"),
])
def test_random_class_triplets_errors(y, msg):
    with pytest.raises(ValueError, match=msg):
        random_class_triplets(y, 10, random_state=0)


def test_n_triplets_validation():
    with pytest.raises(ValueError, match="n_triplets"):
        random_class_triplets([0, 0, 1, 1], 0)
    with pytest.raises(TypeError, match="n_triplets"):
        random_class_triplets([0, 0, 1, 1], 2.5)
    assert random_class_triplets([0, 0, 1, 1], np.int32(3), random_state=0).shape == (3, 3)


@pytest.mark.parametrize("sparse", [False, True])
def test_knn_triplets_are_true_neighbors(sparse):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = rng.integers(0, 3, 60)
    t = knn_triplets(sp.csr_matrix(X) if sparse else X, y, n_neighbors=2, n_impostors=3)
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    for i in range(0, 60, 7):
        rows = t[t[:, 0] == i]
        same = np.flatnonzero((y == y[i]) & (np.arange(60) != i))
        other = np.flatnonzero(y != y[i])
        expect_j = set(same[np.argsort(D[i, same])[:2]])
        expect_l = set(other[np.argsort(D[i, other])[:3]])
        assert set(rows[:, 1]) == expect_j
        assert set(rows[:, 2]) == expect_l
        assert rows.shape[0] == 6
    sub = knn_triplets(X, y, 2, 3, n_triplets=50, random_state=0)
    assert sub.shape == (50, 3) and np.unique(sub, axis=0).shape[0] == 50


def test_check_triplets():
    assert check_triplets([[0, 1, 2]], 3).dtype == np.int64
    with pytest.raises(ValueError, match="out of range"):
        check_triplets([[0, 1, 3]], 3)
    with pytest.raises(ValueError, match="out of range"):
        check_triplets([[0, -1, 2]], 3)
    with pytest.raises(ValueError, match="shape"):
        check_triplets([[0, 1]], 3)
    with pytest.raises(TypeError, match="integer"):
        check_triplets([[0, 1, 1.5]], 3)
    with pytest.raises(ValueError, match="empty"):
        check_triplets(np.zeros((0, 3), int), 3)


# --------------------------------------------------------------------------- hostile inputs
@pytest.mark.parametrize("scale", [1e155, 1e300, 1e-200])
@pytest.mark.parametrize("sparse", [False, True])
def test_knn_triplets_on_extreme_magnitudes(scale, sparse):
    # issue 13 items 3/8: values >= 1e155 gave an unnamed broadcast error; the
    # neighbors of c * X are those of X, so the sampler rescales exactly
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    y = np.arange(30) % 3
    ref = knn_triplets(X, y, 2, 3)
    Xs = X * scale
    got = knn_triplets(sp.csr_matrix(Xs) if sparse else Xs, y, 2, 3)
    np.testing.assert_array_equal(got, ref)


def _run(code: str, timeout: float = 240):
    """Run ``code`` in a subprocess importing the tree under test."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    import tripletml
    src = Path(tripletml.__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(src) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", "import numpy as np\n" + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=Path(__file__).resolve().parents[1])


# --------------------------------------------------------------------------- sizes
# In a subprocess under a 3 GiB address-space limit: on code without the check
# these requests would try to allocate tens of GiB (or petabytes).
_LIMITED = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from tripletml.triplets import knn_triplets, random_class_triplets
def attempt(f, *a, **k):
    try:
        f(*a, **k)
    except ValueError as exc:
        print("REFUSED", exc)
    except MemoryError as exc:
        print("BARE MemoryError", exc)
"""

#: the requests, each run in its own forked copy of one limited interpreter
#: (tests/_fork_each.py: the limit is inherited; a crash ends only its case)
_SIZE_CASES = {
    "random_class_triplets": """
y = np.arange(10) % 2
attempt(random_class_triplets, y, 10**15, random_state=0)
attempt(random_class_triplets, np.arange(10**4) % 2, per_query=10**12, random_state=0)
""",
    # 2000 samples, 1000 neighbors x 1000 impostors each: 2e9 triplets (about 180 GiB)
    "knn_triplets": """
X = np.random.default_rng(0).normal(size=(2000, 2))
attempt(knn_triplets, X, np.arange(2000) % 2, n_neighbors=1000, n_impostors=1000)
""",
}


@functools.lru_cache(maxsize=None)
def _limited_run():
    """One interpreter for both tests below (its start and imports are most
    of their time): ``{case: (exit status, output)}``."""
    proc = _run(_fork_each.script(_LIMITED, _SIZE_CASES))
    tail = f"interpreter exit status {proc.returncode}; stderr:\n{proc.stderr[-3000:]}"
    return {name: (status, "\n".join(lines) + "\n" + tail)
            for name, (status, lines) in _fork_each.parse(proc.stdout, _SIZE_CASES).items()}


def _refused(case: str, n: int) -> list[str]:
    """The ``n`` REFUSED lines of ``case``, which must have ended normally."""
    status, out = _limited_run()[case]
    assert status == 0, f"{case}: exit status {status} (-11 = segfault)\n{out}"
    lines = [ln for ln in out.splitlines() if ln.startswith("REFUSED ")]
    assert len(lines) == n, out
    return lines


def test_random_class_triplets_refuses_impossible_sizes():
    first, second = _refused("random_class_triplets", 2)
    assert re.search(r"random_class_triplets: n_triplets=1000000000000000 .*GiB", first)
    assert re.search(r"random_class_triplets: per_query=.*GiB", second)


def test_knn_triplets_refuses_impossible_sizes():
    (line,) = _refused("knn_triplets", 1)
    assert re.search(r"knn_triplets: n_neighbors=1000, n_impostors=1000 on 2000 samples "
                     r"gives 1,998,000,000 triplets.*GiB", line), line
    # capped at the class sizes, so large but harmless values still work
    X, y = np.random.default_rng(0).normal(size=(40, 2)), np.arange(40) % 2
    t = knn_triplets(X, y, n_neighbors=100, n_impostors=100)
    assert t.shape == (40 * 19 * 20, 3)
