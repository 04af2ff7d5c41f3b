"""What LMNN and NCA share: the initial linear map and the L-BFGS loop.

Both learn ``L`` (r x d) by minimizing a smooth (NCA) or piecewise smooth
(LMNN) function of ``L`` with scipy's L-BFGS-B, from the initial map of
scikit-learn's ``NeighborhoodComponentsAnalysis`` (``init="auto"``: LDA when
``r <= min(d, classes - 1)``, PCA when ``r < min(d, n)``, else the
identity).  :func:`minimize_lbfgs` runs the optimizer with a cap on the
iterations and the function evaluations, records one history record per
iteration and maps scipy's exit to tripletml's stop reasons.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.optimize

from tripletml.engine.history import History


__all__ = ["INIT_OPTIONS", "initial_components", "minimize_lbfgs", "LBFGSResult"]

INIT_OPTIONS = ("auto", "pca", "lda", "identity", "random")


def resolve_init(init: str, n_components: int, d: int, n: int, n_classes: int) -> str:
    """``init`` itself, or for ``"auto"`` scikit-learn's rule: ``"lda"`` when
    ``n_components <= min(d, n_classes - 1)``, ``"pca"`` when
    ``n_components < min(d, n)``, else ``"identity"``."""
    if init != "auto":
        return init
    if n_classes >= 2 and n_components <= min(d, n_classes - 1):
        return "lda"
    if n_components < min(d, n):
        return "pca"
    return "identity"


def initial_components(init: str, X: np.ndarray, codes: np.ndarray | None, n_components: int,
                       rng: np.random.Generator, who: str) -> tuple[np.ndarray, str]:
    """The initial ``L`` (n_components x d) and the init used.

    ``"identity"``: the first ``n_components`` rows of the identity;
    ``"random"``: standard normal entries; ``"pca"``: the top principal axes
    of X (orthonormal rows, so distances shrink, never grow); ``"lda"``:
    scikit-learn's ``LinearDiscriminantAnalysis(...).scalings_`` (rows scaled
    to unit within-class variance), which needs class labels.
    """
    n, d = X.shape
    n_classes = int(codes.max()) + 1 if codes is not None and codes.size else 0
    used = resolve_init(init, n_components, d, n, n_classes if codes is not None else 0)
    if used == "identity":
        return np.eye(n_components, d), used
    if used == "random":
        return rng.standard_normal((n_components, d)), used
    if used == "pca":
        if n_components > min(n, d):
            raise ValueError(f"{who}: init='pca' needs n_components <= min(n_samples, "
                             f"n_features) = {min(n, d)}, got {n_components}.")
        Xc = X - X.mean(axis=0)
        _, s, Vt = np.linalg.svd(Xc, full_matrices=False)
        V = Vt[:n_components]
        big = np.abs(V).argmax(axis=1)             # deterministic signs, as svd_flip
        V *= np.where(V[np.arange(V.shape[0]), big] < 0, -1.0, 1.0)[:, None]
        return np.ascontiguousarray(V), used
    # lda
    if codes is None:
        raise ValueError(f"{who}: init='lda' needs class labels; with explicit triplets use "
                         "init='pca', 'identity' or 'random'.")
    if n_components > min(d, n_classes - 1):
        raise ValueError(f"{who}: init='lda' gives at most min(n_features, n_classes - 1) = "
                         f"{min(d, n_classes - 1)} components, got n_components="
                         f"{n_components}; use init='pca' or 'identity'.")
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    try:
        lda = LinearDiscriminantAnalysis(n_components=n_components).fit(X, codes)
    except (ValueError, np.linalg.LinAlgError) as exc:
        raise ValueError(f"{who}: init='lda' failed ({exc}); use init='pca' or "
                         "'identity'.") from None
    S = lda.scalings_.T[:n_components]
    if S.shape[0] < n_components:
        raise ValueError(f"{who}: init='lda' found only {S.shape[0]} discriminant directions "
                         f"(n_components={n_components}); use init='pca' or 'identity'.")
    return np.ascontiguousarray(S, dtype=np.float64), used


@dataclass
class LBFGSResult:
    """What :func:`minimize_lbfgs` returns."""
    L: np.ndarray
    n_iter: int
    reason: str
    message: str
    objective: float
    initial_objective: float
    criterion: float
    history: dict = field(default_factory=dict)


class _Converged(Exception):
    """Raised by the callback to end the run (any scipy >= 1.10)."""


class _Monitored(Exception):
    """Raised by the callback when the monitor says stop."""


def minimize_lbfgs(fun: Callable[[np.ndarray], tuple[float, np.ndarray, dict]],
                   L0: np.ndarray, *, max_iter: int, tol: float | None, verbose: int,
                   who: str, record_keys: tuple[str, ...] = (), window: int = 1,
                   monitor: Callable[[int, np.ndarray], bool] | None = None) -> LBFGSResult:
    """Minimize ``fun(L) -> (value, gradient (r x d), info)`` with L-BFGS-B.

    The stopping rule (tripletml's): ``"tol"`` when the relative decrease of
    the value over the last ``window`` iterations (fewer at the start),
    ``(f_k-w - f_k) / (w max(|f_k-w|, |f_k|))``, is at most ``tol``, or
    when the line search can decrease it no further (a kink of a piecewise
    smooth objective, or the limit of float64); ``"max_iter"`` after
    ``max_iter`` iterations or ``20 max_iter`` evaluations.  ``tol=None``
    runs ``max_iter`` iterations.  A window of several iterations averages
    the decrease of a piecewise smooth objective, whose single steps
    fluctuate.  A value or gradient that is not finite raises
    FloatingPointError.  ``history`` has one record per iteration (the
    initial point is record 0): ``step``, ``seconds``, ``objective`` and the
    ``record_keys`` of ``info``.  ``monitor(it, L)``, when given, is called
    with the start (``it`` 0) and after every iteration; True ends the run
    with reason ``"monitor"`` (early stopping,
    :mod:`tripletml.engine.early_stopping`).
    """
    shape = L0.shape
    cache: dict = {}

    def f(x):
        L = x.reshape(shape)
        with np.errstate(over="ignore", invalid="ignore"):
            value, grad, info = fun(L)
        if not (math.isfinite(value) and np.isfinite(grad).all()):
            raise FloatingPointError(f"{who}: training diverged (the objective or its gradient "
                                     "is not finite); scale the features down (e.g. "
                                     "preprocessing='standardize') or use init='pca'.")
        cache["x"], cache["value"], cache["info"] = x.copy(), float(value), info
        return float(value), grad.ravel()

    hist = History(keys=("objective",) + tuple(record_keys))

    def record(step, value, info):
        hist.record(step, objective=float(value),
                    **{k: (float(info[k]) if info.get(k) is not None else None)
                       for k in record_keys})
        if verbose:
            extra = " ".join(f"{k} {info.get(k)}" for k in record_keys)
            print(f"[{who}] iter {step:4d} objective {value:.10g} {extra}".rstrip(), flush=True)

    def criterion() -> float:
        obj = hist.data["objective"]
        w = min(int(window), len(obj) - 1)
        if w < 1:
            return math.inf
        old, new = obj[-1 - w], obj[-1]
        return (old - new) / (w * max(abs(old), abs(new), 1e-12))

    x0 = np.ascontiguousarray(L0, dtype=np.float64).ravel()
    v0, _ = f(x0)
    record(0, v0, cache["info"])
    state = {"it": 0, "x": x0}
    if monitor is not None:
        monitor(0, x0.reshape(shape))

    def callback(xk):
        state["it"] += 1
        if not ("x" in cache and np.array_equal(cache["x"], xk)):
            f(xk)
        state["x"] = np.array(xk, copy=True)
        record(state["it"], cache["value"], cache["info"])
        if monitor is not None and monitor(state["it"], state["x"].reshape(shape)):
            raise _Monitored
        if tol is not None and criterion() <= tol:
            raise _Converged

    try:
        res = scipy.optimize.minimize(
            f, x0, jac=True, method="L-BFGS-B", callback=callback,
            options={"maxiter": int(max_iter), "maxfun": 20 * int(max_iter) + 20,
                     "ftol": 0.0, "gtol": 0.0, "maxcor": 10})
    except _Converged:
        x, n_iter, reason, msg = state["x"], state["it"], "tol", "tol met"
    except _Monitored:
        x, n_iter, reason, msg = state["x"], state["it"], "monitor", "stopped by the monitor"
    else:
        x, n_iter = res.x, int(res.nit)
        msg = res.message if isinstance(res.message, str) else str(res.message)
        if res.status == 1 or n_iter >= max_iter:
            reason = "max_iter"
        else:
            reason = "tol"          # no further decrease (line search) or a zero gradient
    L = np.ascontiguousarray(np.asarray(x).reshape(shape))
    crit = criterion()
    if not ("x" in cache and np.array_equal(cache["x"], x)):
        f(np.asarray(x))
    final = cache["value"]
    if verbose:
        print(f"[{who}] stopped after {n_iter} iterations ({reason}): {msg}", flush=True)
    return LBFGSResult(L=L, n_iter=n_iter, reason=reason, message=msg, objective=final,
                       initial_objective=v0, criterion=crit, history=hist.data)
