"""The defaults protocol, importable by any bench script (public names only).

For one data set and seed: a stratified 70/30 split
(``train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)``),
``fit`` on the training part (timed with ``time.perf_counter``), and the
test-vs-test retrieval mAP ``tripletml.metrics.evaluate_retrieval(model, Xte,
yte)["map"]`` (each test row queries the other test rows).
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Callable

import numpy as np
from sklearn.model_selection import train_test_split

import tripletml
from tripletml import datasets
from tripletml.metrics import evaluate_retrieval

__all__ = ["DEFAULT_SETS", "BASELINES", "triplet_learners", "load_set", "split",
           "fit_timed", "retrieval_map", "run_one", "warm_up", "WARMUP_ROWS"]

#: the shipped data sets of issue 14 (LIBSVM sets as stored: CSR)
DEFAULT_SETS = ("vehicle", "vowel", "svmguide4", "segment", "letter", "balance-scale",
                "ionosphere", "iris", "wine", "digits")
#: the no-learning baselines every learner is compared with
BASELINES = ("Euclidean", "DotProduct")


def triplet_learners() -> dict[str, type]:
    """Every public triplet learner class of tripletml, by name, in the
    order of ``tripletml.__all__`` (baselines first)."""
    out = {}
    for name in tripletml.__all__:
        obj = getattr(tripletml, name, None)
        if (isinstance(obj, type) and issubclass(obj, tripletml.TripletLearner)
                and obj is not tripletml.TripletLearner):
            out[name] = obj
    return out


def load_set(name: str):
    """``(X, y)`` of a registered data set (``tripletml.datasets.load``)."""
    b = datasets.load(name)
    return b.data, np.asarray(b.target)


def split(X, y, seed: int):
    """The stratified 70/30 split of the protocol: ``Xtr, Xte, ytr, yte``."""
    return train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)


def standardized_split(X, y, seed: int):
    """:func:`split`, then the train rows' standardization (constant columns
    left at scale 1) applied to both sides, and the median norm of the
    standardized train rows (the sphere radius of the sphere benchmarks):
    ``(Ztr, Zte, ytr, yte, s0)``."""
    Xtr, Xte, ytr, yte = split(X, y, seed)
    mu = Xtr.mean(0)
    sd = Xtr.std(0)
    sd[sd == 0] = 1
    Ztr, Zte = (Xtr - mu) / sd, (Xte - mu) / sd
    return Ztr, Zte, ytr, yte, float(np.median(np.linalg.norm(Ztr, axis=1)))


def fit_timed(model, X, y) -> float:
    """Fit ``model`` on ``(X, y)``; the wall-clock seconds of ``fit``
    (ConvergenceWarnings silenced: the defaults are what is measured)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        model.fit(X, y)
        return time.perf_counter() - t0


def retrieval_map(model, X, y) -> float:
    """Test-vs-test retrieval mAP of a fitted model."""
    return float(evaluate_retrieval(model, X, y)["map"])


#: rows of the untimed warm-up fit before each timed fit
WARMUP_ROWS = 50


def warm_up(make: Callable[[int], Any], X, y, seed: int) -> None:
    """An untimed fit of ``make(seed)`` on the first :data:`WARMUP_ROWS`
    rows (Numba compiles the kernels on a learner's first fit in a process;
    that time must not land in the timed fit).  Errors are ignored: the
    timed fit reports them."""
    n = min(WARMUP_ROWS, X.shape[0])
    if len(np.unique(y[:n])) < 2:          # a stratified handful of rows
        _, idx = train_test_split(np.arange(X.shape[0]), test_size=n, stratify=y,
                                  random_state=seed)
    else:
        idx = np.arange(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            make(seed).fit(X[idx], y[idx])
        except Exception:  # noqa: BLE001 - the timed fit reports errors
            pass


def run_one(make: Callable[[int], Any], X, y, seed: int) -> dict:
    """Split with ``seed``, fit ``make(seed)`` (after an untimed warm-up fit,
    :func:`warm_up`), measure: ``{"map", "seconds", "error"}`` (``error``:
    the message when fit or scoring raised)."""
    Xtr, Xte, ytr, yte = split(X, y, seed)
    warm_up(make, Xtr, ytr, seed)
    model = make(seed)
    try:
        secs = fit_timed(model, Xtr, ytr)
        return {"map": retrieval_map(model, Xte, yte), "seconds": secs, "error": None}
    except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
        return {"map": float("nan"), "seconds": float("nan"),
                "error": f"{type(exc).__name__}: {exc}"[:200]}
