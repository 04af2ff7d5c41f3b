"""Resources: what a candidate's fit cannot avoid, decided before it starts.

A fit cannot be interrupted, so :func:`check_resources` decides before each
fit of the race whether its unavoidable dense d x d work (:data:`_DENSE_WORK`)
fits in the memory available now and in the seconds left of
``time_budget`` at this machine's measured speed (:func:`_machine_speed`).
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np
import scipy.sparse as sp

from tripletml.core.base import BilinearMixin, MahalanobisMixin
from tripletml.core.preprocessing import (CENTERING_MODES, MAX_DENSIFY_FEATURES,
                                          n_added_features, resolve_preprocessing)

__all__ = ["check_resources", "sparse_safe"]

#: what a centering preprocessing becomes on high-dimensional sparse X: the
#: two modes that keep the rows sparse (the rows as given, and the cosine)
SPARSE_SAFE_MODES = (None, "normalize")

#: Lower bounds on the dense d x d work of one fit, by learner class name:
#: ``(d x d float64 arrays held at once, symmetric eigendecompositions, d x
#: d matrix products[, rank-one updates of a d x d model])``; an item may be
#: a function of the candidate's parameters.  A rank-one update ``W += a
#: b^T`` touches ``nnz(a) nnz(b)`` entries: ``rho^2 d^2`` for rows of
#: density ``rho`` (1 once centered); OASIS makes one per triplet, SDCA one
#: per triplet and pass.  A learned Mahalanobis matrix is factored at least once
#: (``psd_factor``'s ``eigh`` for ``components_``) and held with that factor;
#: KISSME inverts two d x d covariances by ``eigh`` and a product each, then
#: factors M (it checks memory for six d x d arrays itself); RCA holds its
#: two scatters, M, its factor and the span's basis, with the eigh of the
#: total scatter and the generalized (Cholesky + eigh) whitening; SML factors its
#: d x d iterate at every iteration (the PSD projection / Lemma 3) and once
#: at the end; the bilinear learners hold one dense d x d ``W_`` (written in
#: full by every fit); the factored learners (a ``rank``) and the
#: no-learning baselines hold none.  A learner not listed is judged by its
#: kind: a Mahalanobis learner as ``(2, 1, 0)``, a bilinear one without a
#: ``rank`` parameter as ``(1, 0, 0)``, anything else as free.  A fifth item
#: counts passes over all ``n^2`` pairs of the ``n`` fit rows (``2 n^2 d``
#: flops each): NCA's softmax over every pair at each of its ``max_iter``
#: iterations (Goldberger et al. 2004, eq. 5), LMNN's search for target
#: neighbours and impostors among all rows (at least once per fit).  A sixth
#: counts d x d arrays written in full during the fit beyond those held:
#: OASIS's tail average (``average=True``) restarts at every pass and adds
#: the weighted model once per block (:func:`_average_writes`); SDCA
#: evaluates its objectives (eq. 4, 5) on the d x d model after every pass
#: and writes its output once.  SCML holds its ``M_`` and factors it through
#: its few weighted basis rows (:func:`~tripletml.linalg.psd_factor_of_rows`,
#: no d x d ``eigh``).
_DENSE_WORK: dict[str, tuple] = {
    "Euclidean": (0, 0, 0), "DotProduct": (0, 0, 0),
    "KISSME": (6, 3, 2), "RCA": (5, 2, 3), "ITML": (2, 1, 0),
    "SML": (2, lambda p: int(p.get("max_iter") or 1) + 1, 0),
    "OASIS": (1, 0, 0, lambda p: int(p.get("n_triplets") or 0), 0,
              lambda p: _average_writes(p)),
    "SDCA": (1, 0, 0, lambda p: int(p.get("n_triplets") or 0) * int(p.get("max_iter") or 1),
             0, lambda p: 1 + _passes(p)),
    "COMET": (1, 0, 0), "SparseCOMET": (1, 0, 0),
    # start="identity" holds a d x d factor ("auto" only on answers with at
    # most 8,192 features; its own memory check refuses it beyond the memory)
    "LowRankDML": (lambda p: 1 if p.get("start") == "identity" else 0, 0, 0),
    "LORETA": (0, 0, 0), "FactoredGD": (0, 0, 0),
    "IterativePA": (0, 0, 0), "NaivePA": (0, 0, 0),
    "NCA": (2, 1, 0, 0, lambda p: int(p.get("max_iter") or 1)),
    "LMNN": (2, 1, 0, 0, 1),
    "SCML": (1, 0, 0),
}
#: flops of a symmetric eigendecomposition with eigenvectors, at least: the
#: tridiagonal reduction (4/3 d^3) and the back-transformation of the
#: eigenvectors (a d x d product, 2 d^3); of a product: 2 d^3
_EIGH_FLOPS, _PRODUCT_FLOPS = 10.0 / 3.0, 2.0


def _average_writes(p: dict) -> int:
    """d x d arrays an online learner's tail average writes in full, at
    least: per pass the restarted sum and, per block of
    :func:`~tripletml.core.online.block_size` steps, the addition of the
    weighted model (one pass over memory,
    :func:`~tripletml.linalg.sparse_rows.add_scaled`); then the division
    by the steps (over :func:`_passes`)."""
    from tripletml.core.online import block_size

    m = int(p.get("n_triplets") or 0)
    if not p.get("average", True) or m <= 0:
        return 0
    return _passes(p) * (1 + -(-m // block_size(m))) + 1


def _passes(p: dict) -> int:
    """Passes a fit makes at least: ``max_iter`` with ``tol=None``, else at
    most two (its stopping test compares two passes)."""
    passes = max(int(p.get("max_iter") or 1), 1)
    return min(passes, 2) if p.get("tol") is not None else passes


def _dense_work(template, params: dict) -> tuple[int, int, int, int, int, int]:
    """``(d x d arrays, eigendecompositions, products, rank-one updates,
    passes over all row pairs, d x d arrays written during the fit)`` of one
    fit of ``template`` with ``params`` (see :data:`_DENSE_WORK`)."""
    p = {**template.get_params(), **params}
    for klass in type(template).__mro__:
        if klass.__name__ in _DENSE_WORK:
            work = tuple(int(v(p) if callable(v) else v)
                         for v in _DENSE_WORK[klass.__name__])
            return (work + (0, 0, 0))[:6]
    if isinstance(template, MahalanobisMixin):
        return 2, 1, 0, 0, 0, 0
    if isinstance(template, BilinearMixin) and "rank" not in p:
        return 1, 0, 0, 0, 0, 0
    return 0, 0, 0, 0, 0, 0


def _available_memory() -> Optional[float]:
    """Bytes of memory available now: the learners' own rule
    (:func:`tripletml.core.validation.available_memory`: ``MemAvailable``,
    lowered to the headroom under an address-space or cgroup limit), so the
    race skips up front what a learner's own memory check would refuse;
    None when unknown."""
    from tripletml.core.validation import available_memory

    avail = available_memory()
    return None if avail is None else float(avail)


#: side of the square matrices of the speed probe (2 x 512^3 flops: ~10 ms)
_PROBE_SIDE = 512

#: float64 entries of the fresh-array probe: at least 64 MiB (above glibc's
#: largest mmap threshold, 32 MiB, so every try maps new pages as a large
#: d x d array does: the kernel zeroes each page on first touch), at most
#: 256 MiB (well above the caches: the rate is the memory's), else d^2
_FRESH_PROBE = (1 << 23, 1 << 25)


def _machine_speed(d: float = 0.0) -> tuple[float, float, float]:
    """``(flops per second of a dense matrix product, d x d elements written
    per second in memory already mapped, elements written per second into
    a freshly allocated d x d array)`` measured on this machine now (the
    best of three tries of a ``_PROBE_SIDE``-square product and of an
    identity of that side, the best of two of ``np.ones`` of ``d^2``
    entries clipped to :data:`_FRESH_PROBE`): a product is the fastest
    dense O(d^3) kernel, so an eigendecomposition's flop count divided by
    its rate is a lower bound on its time; a large array is written no
    faster than a fresh mapping of its size is filled."""
    m = _PROBE_SIDE
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, m)), rng.standard_normal((m, m))
    t_mm = t_fill = t_fresh = np.inf
    n = int(min(max(d * d, _FRESH_PROBE[0]), _FRESH_PROBE[1]))
    for i in range(3):
        t0 = time.perf_counter()
        a @ b
        t1 = time.perf_counter()
        np.eye(m)
        t2 = time.perf_counter()
        t_mm, t_fill = min(t_mm, t1 - t0), min(t_fill, t2 - t1)
        if i < 2:
            big = np.ones(n)
            t_fresh = min(t_fresh, time.perf_counter() - t2)
            del big
    return (2.0 * m**3 / max(t_mm, 1e-9), float(m * m) / max(t_fill, 1e-9),
            float(n) / max(t_fresh, 1e-9))


def _fmt_bytes(v: float) -> str:
    return f"{v / 2**30:.3g} GiB" if v >= 2**30 else f"{v / 2**20:.3g} MiB"


def sparse_safe(cands: list, X, key=lambda c: c) -> tuple[list, list[dict]]:
    """The candidates as they can race on ``X``: on scipy.sparse X with more
    than :data:`~tripletml.core.preprocessing.MAX_DENSIFY_FEATURES` columns
    a centering preprocessing (``"standardize"``, ``"sphere"``, ...) would
    make the rows dense and is refused, so each such candidate is replaced
    by the same learner and parameters with each of
    :data:`SPARSE_SAFE_MODES` (duplicates of a candidate already in the race
    dropped), rather than lost.  ``key(c)`` is the ``_Candidate`` of an item
    of ``cands``; an item with a ``cand`` attribute is copied with it
    replaced.

    Returns
    -------
    cands : list
        The race's candidates, order kept (a replacement where the original was).
    notes : list of dict
        One per replaced candidate: ``{"candidate": None, "learner",
        "params", "reason"}`` (the entries of ``skipped_``).
    """
    if not (sp.issparse(X) and X.shape[1] > MAX_DENSIFY_FEATURES):
        return list(cands), []
    import copy

    def ident(item):
        c = key(item)
        return (c.name, repr(sorted(c.params.items(), key=lambda kv: kv[0])),
                repr(getattr(item, "rel", None)))

    out, notes, seen = [], [], set()
    for item in cands:
        c = key(item)
        if c.prep not in CENTERING_MODES:
            if ident(item) not in seen:
                seen.add(ident(item))
                out.append(item)
            continue
        for mode in SPARSE_SAFE_MODES:
            c2 = copy.copy(c)
            c2.params, c2.prep = {**c.params, "preprocessing": mode}, mode
            new = c2 if item is c else copy.copy(item)
            if new is not c2:
                new.cand = c2
            if ident(new) not in seen:
                seen.add(ident(new))
                out.append(new)
        notes.append({"candidate": None, "learner": c.name, "params": dict(c.params),
                      "reason": f"sparse X with {X.shape[1]} features: preprocessing="
                                f"{c.prep!r} would make it dense; raced with "
                                f"preprocessing None and 'normalize' instead"})
    return out, notes


def warn_sparse_safe(notes: list[dict], X, who: str) -> None:
    """One warning naming the candidates :func:`sparse_safe` replaced."""
    if notes:
        import warnings

        modes = sorted({str(n["params"].get("preprocessing")) for n in notes})
        warnings.warn(f"{who}: X is scipy.sparse with {X.shape[1]} features, which "
                      f"centering would make dense: {len(notes)} candidate(s) with "
                      f"preprocessing {modes} race with None and 'normalize' instead "
                      "(skipped_ lists them).", UserWarning, stacklevel=4)


def check_resources(ctx: dict, cand, budget_value) -> tuple[str, float]:
    """Whether ``cand`` may be fitted at ``budget_value`` now.

    Parameters
    ----------
    ctx : dict
        The race's state: ``X`` (the rows the learner will see), ``deadline``,
        ``n_workers``, and ``memory`` / ``speed`` (None until first measured,
        then cached there).
    cand : _Candidate
    budget_value : int or None

    Returns
    -------
    reason : str
        Empty when the fit may start, else why not (``"memory: ..."`` or
        ``"time: ..."``).
    seconds : float
        A lower bound on one fit's dense d x d work on this machine (0 when
        not measured, -1 for a free candidate); the candidate is skipped
        when that many seconds per validation split (``ctx["splits"]``,
        ``n_workers`` at a time) exceed the time left.

    Notes
    -----
    The rule (decided before the fit: a running fit cannot be
    interrupted): the unavoidable dense work of the learner
    (:func:`_dense_work`: ``k`` d x d arrays held, ``e`` symmetric
    eigendecompositions of ``(10/3) d^3`` flops at least each and ``p``
    products of ``2 d^3``, ``d`` the features the learner sees) is
    skipped when its arrays, times the parallel workers, exceed the
    memory available now, or when its flops at this machine's measured
    matrix-product rate plus its entries written (``k d^2`` and the
    arrays written in full during the fit, such as OASIS's tail average,
    at the rate a fresh large array is filled; ``rho^2 d^2`` per rank-one
    update of an online learner, ``rho`` the density of the rows it sees,
    at the rate of writes to mapped memory), times the validation fits it
    makes one after the other, exceed the seconds left of ``time_budget``.  Returns seconds
    -1 for a candidate with no dense work (fitted even after the
    deadline: the baselines always score).  Work no larger than the speed probe's own (a
    product of two 512 x 512 matrices) is not measured and never skipped,
    so small data sets race as before."""
    n_dd, n_eig, n_prod, n_upd, n_pp, n_full = _dense_work(cand.template,
                                                           cand.describe(budget_value))
    if not n_dd and not n_eig and not n_prod and not n_upd and not n_pp:
        return "", -1.0                  # free: always fitted
    X = ctx["X"]
    try:
        prep = resolve_preprocessing(cand.prep, X, cand.template)
    except ValueError:
        return "", 0.0                   # the fit refuses it itself (its error says why)
    d = float(X.shape[1] + n_added_features(prep))
    m = float(_PROBE_SIDE)
    nbytes = 8.0 * d * d * n_dd
    if nbytes > 8.0 * m * m:
        if ctx["memory"] is None:
            ctx["memory"] = _available_memory() or np.inf
        need = nbytes * ctx["n_workers"]
        if need > ctx["memory"]:
            return (f"memory: {cand.name} holds {n_dd} dense {int(d)} x {int(d)} "
                    f"array(s), {_fmt_bytes(need)} for {ctx['n_workers']} worker(s), "
                    f"more than the {_fmt_bytes(ctx['memory'])} available"), 0.0
    n_rows = float(X.shape[0])
    flops = (n_eig * _EIGH_FLOPS + n_prod * _PRODUCT_FLOPS) * d**3 + n_pp * 2.0 * n_rows**2 * d
    # entries written: the arrays once, each update's rho^2 d^2
    rho = 1.0 if prep is not None or not sp.issparse(X) else \
        X.nnz / max(1.0, float(X.shape[0]) * X.shape[1])
    fresh_writes = (n_dd + n_full) * d * d
    update_writes = n_upd * rho * rho * d * d
    if flops <= 2.0 * m**3 and fresh_writes + update_writes <= m * m:
        return "", 0.0
    if ctx["speed"] is None:
        ctx["speed"] = _machine_speed(d)
    rate, fill, *rest = ctx["speed"]
    fresh = rest[0] if rest else fill
    per_fit = flops / rate + fresh_writes / fresh + update_writes / fill
    # the race fits every validation split, n_workers at a time
    fits = -(-len(ctx.get("splits") or [None]) // max(int(ctx.get("n_workers") or 1), 1))
    secs = per_fit * fits
    left = ctx["deadline"] - time.time()
    if secs > left:
        pairs = f", {n_pp} pass(es) over {int(n_rows)}^2 row pairs" if n_pp else ""
        full = f" written {n_dd + n_full} time(s)" if n_full else ""
        return (f"time: {cand.name}'s dense work ({n_eig} eigendecomposition(s) and "
                f"{n_prod} product(s) of {int(d)} x {int(d)} matrices{pairs}, {flops:.3g} flops, "
                f"{n_dd} such array(s){full} and {n_upd} rank-one update(s) of rows of density "
                f"{rho:.3g}) takes at least {secs:.3g} s ({fits} fit(s) of {per_fit:.3g} s) at "
                f"this machine's measured {rate / 1e9:.3g} GFLOP/s, {fill / 1e9:.3g} G "
                f"writes/s and {fresh / 1e9:.3g} G writes/s into new arrays; "
                f"{max(left, 0.0):.3g} s of time_budget left"), per_fit
    return "", per_fit

