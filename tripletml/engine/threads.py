"""One thread for small work: BLAS / OpenMP and Numba thread limits (issue 40).

Every ``fit``, every prediction (``similarity``, ``pair_score``,
``transform``, ...) and every search runs inside :func:`limit_threads` with
an estimate of its dense work; below :data:`SMALL_WORK` the BLAS and OpenMP
libraries (through :mod:`threadpoolctl`, as scikit-learn does in
``KMeans``) and Numba's parallel kernels run on one thread, and the previous
counts are restored on exit.

Why: a multi-threaded BLAS call hands its blocks to worker threads that must
be scheduled on other cores; on a machine whose other cores are busy (a
laptop, a shared server) every call then waits for a scheduler slice.  On the
2-core machine of issue 40 with other jobs running, the 1,257 x 64 Gram
product ``X^T X`` of digits took a median of 204 ms with OpenBLAS's two
threads and 0.34 ms with one; the demo's learners make thousands of such
calls.  Two threads can save at most half of a call's time, so threads are
worth their risk only for calls much longer than a scheduler slice
(milliseconds).

The rule: the work of a fit on ``n`` rows of ``d`` features is
``w = d^2 (n + d)`` -- one Gram product of the data (``n d^2``
multiply-adds) plus one decomposition of a ``d x d`` matrix (``~d^3``), the
largest dense products a learner makes in one step; a prediction's is the
size of its product (``n_X x n_Y x d`` for a similarity matrix, ``n d^2``
for a transform).  Numba's top-k pass over a block of scores
(:class:`tripletml.linalg.TopK`) runs on one thread below
:data:`SMALL_SCAN` entries.
Below ``SMALL_WORK = 2**28`` multiply-adds (~0.27 G, ~15-30 ms on one core
of the machine above) no single product of the call can save more than a
few milliseconds with a second thread, less than one lost scheduler slice on
a busy machine: one thread.  Above it the thread counts are left as they
are.  Examples: digits (1,257 x 64: ``w = 5.4e6``), a 2,230 x 180 set
(``7.8e7``) and 5,000 x 200 (``2.1e8``) run on one thread; 10,000 x 256
(``6.7e8``), 1,000 x 1,000 (``2e9``) and any sparse text set with thousands
of columns keep the library's threads.

A fit is priced in two parts: what surrounds its solve (validation, the
span route's basis and checks) by :func:`prelude_work`,
the rule on the span of its rows (``fit_work`` itself when ``n >= d``), and
the solve by ``fit_work`` of the rows it receives (the span's coordinates
on the span route) or by the learner's own ``_solve_work`` where its calls
are smaller (RCA: ``d^2 min(n, d)``), its large products priced where they
are made; the preprocessing by ``n d^2`` (a covariance and its map), the
sampling of triplets by ``n^2 d`` (k-NN's Gram).  On 70 rows of 1,088
features the plain problem's rule (``1.4e9``) kept the threads for every
small call of the fit.

A blocked factorization (QR, Cholesky, ``eigh``, SVD) is a sequence of
synchronised calls, one a panel, with single-threaded panel work between
them while OpenBLAS's idle workers spin (about ``2^28`` clock cycles after
each threaded call, on the core the caller's own thread needs beside a busy
one): it is priced by one panel's update (:func:`factor_work`), not by its
total.  Tiny work is limited too: OpenBLAS does not keep every small call
on one thread (LowRankDML at its defaults on 30 x 4 rows, 50 iterations:
22.7 s with two threads on the busy machine, 1.06 s with one); setting and
restoring the counts costs ~0.1 ms a call.

A setting of the user always wins: nothing is changed

* when one of ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
  ``MKL_NUM_THREADS``, ``BLIS_NUM_THREADS``, ``VECLIB_MAXIMUM_THREADS``
  (for BLAS / OpenMP) or ``NUMBA_NUM_THREADS`` (for Numba) was set when
  tripletml was imported (the libraries read these variables once, when they
  load, so a variable written later -- Dask's nanny writes
  ``OMP/OPENBLAS/MKL_NUM_THREADS=1`` into the driver's ``os.environ`` when a
  ``LocalCluster`` starts a worker process -- sets nothing and is not the
  user's setting), or
* when a library's current thread count differs from its count when
  tripletml was imported (a ``threadpoolctl.threadpool_limits`` context of
  the user, :class:`tripletml.AutoSimilarity`'s per-job limit, or an
  enclosing :func:`limit_threads`); for Numba, when
  ``numba.get_num_threads()`` differs from ``NUMBA_NUM_THREADS``'s default
  (a ``numba.set_num_threads`` of the user).

A ``threadpool_limits`` of the user that sets exactly the count the library
started with cannot be told apart from no setting; it is then treated as no
setting (small work runs on one thread, which the limit allows).

Numba's thread pool is only limited when it is already running (or by
:class:`tripletml.linalg.TopK`, whose kernel starts it anyway): starting it
for nothing would make a later ``fork`` of the process unsafe under GNU
OpenMP's layer.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from typing import Callable, Optional

__all__ = ["SMALL_WORK", "SMALL_SCAN", "PANEL", "limit_threads", "limit_numba", "threads_for",
           "fit_work", "factor_work", "prelude_work", "rows_work"]

#: work (multiply-adds) below which a call runs on one thread
SMALL_WORK = 1 << 28
#: the panel width of a blocked factorization (LAPACK's block size for QR,
#: Cholesky and the tridiagonal reduction, ``ILAENV``'s 32)
PANEL = 32
#: entries of a score block below which Numba's top-k pass runs on one
#: thread (a compare per entry: 4M entries are a few ms on one core)
SMALL_SCAN = 1 << 22

_BLAS_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "GOTO_NUM_THREADS")
_NUMBA_ENV = "NUMBA_NUM_THREADS"

_lock = threading.Lock()
#: ``depth``: the one-thread limits :func:`_blas_one` holds in this thread
#: (so that :func:`_blas_granted` lifts only a limit of its own thread)
_ours = threading.local()

#: the variables that set a thread count, as they were at import (see the
#: module's docstring: read once, as the libraries read them)
_ENV_BLAS = any(v in os.environ for v in _BLAS_ENV)
_ENV_NUMBA = _NUMBA_ENV in os.environ


@contextlib.contextmanager
def kept_thread_environment():
    """Restore the BLAS / OpenMP / Numba thread variables of ``os.environ``
    on exit.  Dask's nanny writes ``OMP/OPENBLAS/MKL_NUM_THREADS=1`` into
    the driver's ``os.environ`` when it starts a local worker and leaves
    them there; this module reads the variables as they were at import (so
    they do not switch its limits off), but a process the user starts later
    would inherit them.  :func:`tripletml.distributed.use_cluster` runs
    inside it."""
    before = {k: os.environ.get(k) for k in _BLAS_ENV + (_NUMBA_ENV,)}
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            elif os.environ.get(k) != v:
                os.environ[k] = v
_state: dict = {}


def _controller():
    """threadpoolctl's controllers of the BLAS / OpenMP libraries loaded now
    and each one's thread count when tripletml first saw it (the process
    default).  Cached, and looked up again when modules were imported since
    (a library such as faiss brings its own OpenBLAS and OpenMP, which must
    be limited too)."""
    n_mod = len(sys.modules)
    if _state.get("n_mod") != n_mod:
        with _lock:
            if _state.get("n_mod") != n_mod:
                known = _state.setdefault("known", {})
                try:
                    from threadpoolctl import ThreadpoolController
                    libs = list(ThreadpoolController().lib_controllers)
                    for lib in libs:
                        known.setdefault(lib.filepath, lib.num_threads)
                    defaults = [known[lib.filepath] for lib in libs]
                except Exception:  # pragma: no cover - threadpoolctl cannot read this process
                    libs, defaults = [], []
                _state["libs"], _state["defaults"] = libs, defaults
                _state["n_mod"] = n_mod
    return _state["libs"], _state["defaults"]


def _numba_default() -> Optional[int]:
    try:
        from numba import config
        return int(config.NUMBA_NUM_THREADS)
    except Exception:  # pragma: no cover
        return None


def _counts_now():
    """``(libs, defaults, current counts)``, or None when the module leaves
    the libraries alone (none loaded, a *_NUM_THREADS variable of the user,
    counts that cannot be read)."""
    libs, defaults = _controller()
    if not libs or _ENV_BLAS:
        return None
    try:
        return libs, defaults, [lib.num_threads for lib in libs]
    except Exception:  # pragma: no cover
        return None


@contextlib.contextmanager
def _blas_one():
    now = _counts_now()
    if now is None:
        yield
        return
    libs, defaults, current = now
    if current != defaults or all(c == 1 for c in current):
        yield                       # a setting of the user (or ours, enclosing): keep it
        return
    changed = []
    _ours.depth = getattr(_ours, "depth", 0) + 1
    try:
        for lib, c in zip(libs, current):
            if c != 1:
                lib.set_num_threads(1)
                changed.append((lib, c))
        yield
    finally:
        _ours.depth -= 1
        for lib, c in changed:
            lib.set_num_threads(c)


@contextlib.contextmanager
def _blas_granted():
    """The libraries' own thread counts back inside a one-thread limit that
    *this* thread's :func:`_blas_one` set (a large call inside a small
    fit's loop: COMET's refactorisation among its coordinate steps); no
    change under any other setting (the user's, AutoSimilarity's)."""
    now = None if getattr(_ours, "depth", 0) == 0 else _counts_now()
    if now is None:
        yield
        return
    libs, defaults, current = now
    if any(c != 1 for c in current) or current == defaults:
        yield                       # not (only) our limit in force: keep it
        return
    depth, _ours.depth = _ours.depth, 0      # a small call inside limits again
    try:
        for lib, c in zip(libs, defaults):
            lib.set_num_threads(c)
        yield
    finally:
        _ours.depth = depth
        for lib in libs:
            lib.set_num_threads(1)


def _numba_running() -> bool:
    try:
        from numba.np.ufunc import parallel
        return bool(getattr(parallel, "_is_initialized", False))
    except Exception:  # pragma: no cover
        return False


@contextlib.contextmanager
def _numba_one(start: bool):
    """Numba's threads (thread-local) to 1, restored; ``start``: also when
    the pool is not running yet (the caller runs a parallel kernel anyway)."""
    if _ENV_NUMBA or not (start or _numba_running()):
        yield
        return
    try:
        import numba
        before = numba.get_num_threads()
    except Exception:  # pragma: no cover
        yield
        return
    if before != _numba_default() or before == 1:
        yield
        return
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(before)


@contextlib.contextmanager
def limit_threads(work: Optional[float], *, numba_start: bool = False):
    """One BLAS / OpenMP and Numba thread inside, when ``work`` (an estimate
    in multiply-adds, see the module's rule) is below :data:`SMALL_WORK` and
    the user set no limit; no change otherwise (``work`` None: unknown).

    Large work inside a one-thread limit of this module (set by this
    thread) gets the BLAS libraries' own counts back for its scope, so a
    loop of small steps can run under one limit while its rare large call
    (a refactorisation) keeps its threads; a limit of the user is never
    lifted."""
    if work is None:
        yield
        return
    if work >= SMALL_WORK:
        with _blas_granted():
            yield
        return
    with _blas_one(), _numba_one(numba_start):
        yield


@contextlib.contextmanager
def limit_numba(entries: int):
    """One Numba thread inside for a parallel pass over fewer than
    :data:`SMALL_SCAN` entries, unless the user set Numba's threads."""
    if entries >= SMALL_SCAN:
        yield
        return
    with _numba_one(True):
        yield


def factor_work(n_rows: int, n_cols: int, reflectors: Optional[int] = None) -> float:
    """The rule's work of a blocked LAPACK factorization (QR, Cholesky,
    ``eigh``, SVD) of an ``n_rows x n_cols`` matrix: its largest
    synchronised call, one panel's trailing update (``n_rows n_cols p``
    multiply-adds, ``p = min(PANEL, n_rows, n_cols)`` the panel's width;
    ``reflectors``: forming an ``n_rows x n_cols`` orthogonal factor from
    that many Householder reflectors, whose panels are at most that wide),
    not its total.

    A factorization is about ``min(n_rows, n_cols) / PANEL`` such calls,
    each ended by a wait for every thread and separated by single-threaded
    panel work during which the idle BLAS workers spin (OpenBLAS: about
    ``2^28`` clock cycles after every threaded call).  Beside a busy core
    each wait can cost a scheduler slice and each spin takes the core the
    caller's own thread needs, so the rule applies to each synchronised
    call: a 1,088 x 1,088 QR (``1.3e9`` multiply-adds in all, ``3.8e7`` a
    panel) runs on one thread, a 4,096 x 4,096 one (``5.4e8`` a panel)
    keeps the library's threads."""
    p = min(PANEL, int(n_rows), int(n_cols))
    if reflectors is not None:
        p = min(p, int(reflectors))
    return float(n_rows) * float(n_cols) * max(p, 0)


def fit_work(n_rows: int, n_features: int) -> float:
    """The rule's work of a fit: ``d^2 (n + d)``."""
    d = float(n_features)
    return d * d * (float(n_rows) + d)


def rows_work(n_rows: int, n_features: int) -> float:
    """The rule's work of ``n_rows`` rows through a ``d x d`` map, or of
    their ``d x d`` scatter: ``n d^2``."""
    d = float(n_features)
    return float(n_rows) * d * d


def prelude_work(n_rows: int, n_features: int) -> float:
    """The rule's work of a fit around its solve (validation, the span
    route's basis and checks, the tuple calibration):
    ``max(fit_work(n, min(n, d)), factor_work(n, d))``.

    Its dense calls are passes over the rows, products of the rows with
    matrices of their span's width and factorizations of the rows, so with
    fewer rows than features it is the work of a fit on the span's
    ``min(n, d)`` coordinates or one panel of a factorization of the rows,
    whichever is larger; with ``n >= d`` it is :func:`fit_work` itself.
    The solve (``_fit``) runs inside a limit of its own problem's work:
    :func:`fit_work` of the rows it receives (the span's coordinates on
    the span route), so a fit of few rows of many features makes its
    small calls on one thread and its ``d x d`` solve keeps the threads it
    is worth."""
    k = min(int(n_rows), int(n_features))
    return max(fit_work(n_rows, k), factor_work(n_rows, n_features))


def _shape(a):
    """(rows, columns) of an array-like, None when it has no 2-D shape."""
    s = getattr(a, "shape", None)
    if s is None or len(s) < 2:
        return None
    n = 1
    for v in s[:-1]:
        n *= int(v)
    return n, int(s[-1])


def threads_for(work: Callable) -> Callable:
    """Decorator: run the method inside :func:`limit_threads` with
    ``work(self, *args, **kwargs)`` (None when it cannot tell)."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            try:
                w = work(self, *args, **kwargs)
            except Exception:
                w = None            # bad input: the method itself says so
            with limit_threads(w):
                return fn(self, *args, **kwargs)
        return wrapper
    return deco


def work_fit(self, X, *args, **kwargs):
    """A fit's work from its X (rows x features); a point-tuple form counts
    its points."""
    s = _shape(X)
    return None if s is None else fit_work(*s)


def work_fit_prelude(self, X, *args, **kwargs):
    """:func:`prelude_work` of a fit's X (rows x features)."""
    s = _shape(X)
    return None if s is None else prelude_work(*s)


def work_rows(self, X, *args, **kwargs):
    """``n d^2``: the rows of X (all tuple points) through a d x d map."""
    s = _shape(X)
    return None if s is None else rows_work(*s)


def work_pairs(self, X1, X2=None, *args, **kwargs):
    """Pair scores: both sides through a d x d map."""
    s1, s2 = _shape(X1), _shape(X2) if X2 is not None else None
    if s1 is None:
        return None
    n = s1[0] + (s2[0] if s2 is not None else 0)
    return float(n) * s1[1] * s1[1]


def work_triplets(self, X, triplets=None, *args, **kwargs):
    """Triplet margins: three rows per triplet through a d x d map."""
    sx, st = _shape(X), _shape(triplets)
    if sx is None or st is None:
        return None
    return 3.0 * st[0] * sx[1] * sx[1]


def work_similarity(self, X, Y=None, *args, **kwargs):
    """A similarity matrix: ``n_X x n_Y x d`` plus the d x d maps."""
    sx = _shape(X)
    if sx is None:
        return None
    sy = _shape(Y) if Y is not None else sx
    if sy is None:
        return None
    d = sx[1]
    return float(sx[0]) * sy[0] * d + float(sx[0] + sy[0]) * d * d


# the helpers are part of the rule: importing tripletml records the defaults
_controller()
