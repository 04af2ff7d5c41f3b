"""Shared fixtures.

Data-backed tests use the ``data_home`` fixture.  It resolves, in order, the
``TRIPLETML_DATA`` environment variable and ``../shared/data`` beside the
repository.  When neither exists the test is skipped with the reason, unless
``TRIPLETML_REQUIRE_DATA=1`` (set by ``.ci/run``), in which case it fails:
CI must run the data-backed tests, never skip them.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _numba_cache_dir() -> str:
    """Numba's on-disk cache does not notice when a kernel that a cached
    function calls has changed (tripletml.linalg edited, caller untouched), so
    the tests' cache is keyed by the sources: one folder per digest of every
    ``.py`` file of the package (and Numba's and NumPy's versions; the tests
    compile no kernel of their own).  An edit anywhere gives a fresh cache, so the tests always run
    the current code; a run of unchanged sources reuses the kernels the last
    run compiled (about 40 s of CPU for the learners' kernels, issue 40).

    The ``pytest -n 2`` workers (and the subprocesses they start, which
    inherit the variable) share the folder; Numba writes cache files under a
    temporary name and renames them, so concurrent writers are safe."""
    import hashlib

    import numba
    import numpy
    digest = hashlib.sha256(f"{numba.__version__} {numpy.__version__}".encode())
    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "tripletml").rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    path = Path(tempfile.gettempdir()) / f"tripletml-numba-src-{digest.hexdigest()[:20]}"
    path.mkdir(mode=0o700, exist_ok=True)
    return str(path)


os.environ["NUMBA_CACHE_DIR"] = _numba_cache_dir()


def _compile_once_across_workers() -> None:
    """One compilation of each kernel for all the ``pytest -n`` workers.

    The workers start the same test files at the same time, so without this
    both compile each kernel (cold cache: about 30 s of CPU each for the
    learners' kernels, a busy core's worth of the suite).  Numba's
    ``Dispatcher.compile`` looks in the on-disk cache before it compiles; a
    file lock per kernel (in the cache folder) around it makes the second
    worker wait for the first one's compilation and then load it from the
    cache.  Numba's own (in-process, reentrant) compiler lock is taken
    first, as its ``compile`` takes it, so threads of one process cannot
    hold the two in opposite orders; kernels call kernels, never in a cycle,
    so the file locks cannot deadlock across processes; a kernel already
    locked by this thread (its compilation asking for another signature of
    itself) is not locked again."""
    import fcntl
    import hashlib
    import threading

    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.dispatcher import Dispatcher

    compile_ = Dispatcher.compile
    held = threading.local()
    folder = Path(os.environ["NUMBA_CACHE_DIR"])

    def compile(self, sig):
        fn = self.py_func
        key = hashlib.sha1(f"{fn.__module__}.{fn.__qualname__}".encode()).hexdigest()[:16]
        mine = getattr(held, "keys", None)
        if mine is None:
            mine = held.keys = set()
        if key in mine:
            return compile_(self, sig)
        with global_compiler_lock, open(folder / f".compile-{key}.lock", "a+b") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            mine.add(key)
            try:
                return compile_(self, sig)
            finally:
                mine.discard(key)
                fcntl.flock(fh, fcntl.LOCK_UN)

    Dispatcher.compile = compile


if os.name == "posix":
    _compile_once_across_workers()

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _find_data_home() -> Path | None:
    env = os.environ.get("TRIPLETML_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data")
    for c in candidates:
        if (c / "MANIFEST.md").is_file() or (c / "vehicle").is_dir():
            return c.resolve()
    return None


@pytest.fixture(scope="session")
def data_home() -> Path:
    home = _find_data_home()
    if home is None:
        msg = ("real data not found: set TRIPLETML_DATA or place the data sets in "
               f"{REPO.parent / 'shared' / 'data'}")
        if os.environ.get("TRIPLETML_REQUIRE_DATA") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return home


@pytest.fixture
def raw_rows(monkeypatch):
    """Train on the rows as given: the feature unit of ``preprocessing=None``
    and ``"center"`` (:func:`tripletml.core.preprocessing.feature_unit`) is 1.

    For the tests that compare a solver with its paper's formulas on raw
    rows (step sizes, margins and duality gaps in the caller's numbers);
    the unit itself is tested in test_preprocessing.py and
    test_scale_equivariance.py."""
    import tripletml.core.preprocessing as prep
    monkeypatch.setattr(prep, "feature_unit", lambda X, mean=None: 1.0)


_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "GOTO_NUM_THREADS",
               "NUMBA_NUM_THREADS")


@pytest.fixture(autouse=True)
def _restore_thread_variables():
    """Dask's nanny writes OMP/OPENBLAS/MKL_NUM_THREADS=1 into this process's
    ``os.environ`` when a test starts a local cluster, and leaves them there;
    the BLAS already loaded keeps its threads, but
    :mod:`tripletml.engine.threads` then reads a user's setting and stops
    limiting small work, so every later fit in that xdist worker ran on
    OpenBLAS's spinning threads (issue 40: LMNN's scale test 2.9 CPU s alone,
    60.8 in the full suite).  Restored after every test."""
    before = {k: os.environ.get(k) for k in _THREAD_ENV}
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        elif os.environ.get(k) != v:
            os.environ[k] = v


@pytest.fixture(scope="session")
def dask_client():
    """A Client on one 2-worker ``LocalCluster`` (one-thread worker
    processes, tripletml preloaded), shared by every test module that
    compares a Dask fit with the in-process one (tests/test_partitioned*.py,
    tests/test_cluster.py): built by the same code as ``use_cluster(2)``
    (``dask_search._connect``), started once per xdist worker instead of
    once per test or module (a few seconds each, more under load; issue 40).
    Tests use it as ``with use_cluster(dask_client):`` -- a Client is used
    as is and not closed.  The nanny's thread variables are kept out of
    ``os.environ`` (:func:`tripletml.engine.threads.kept_thread_environment`,
    as inside ``use_cluster``)."""
    pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    from tripletml.distributed.dask_search import _connect
    from tripletml.engine.threads import kept_thread_environment
    with kept_thread_environment():
        client, to_close = _connect(2, distributed)
    assert to_close and to_close[0] is client
    try:
        yield client
    finally:
        with kept_thread_environment():
            for obj in to_close:
                obj.close()
