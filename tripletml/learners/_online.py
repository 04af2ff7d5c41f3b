"""Online-learner semantics shared by OASIS, SDCA and LORETA.

* ``fit(X, y | triplets)`` initialises the model and makes ``n_epochs``
  passes over the triplets, each in a fresh random order drawn from
  ``random_state``.
* ``partial_fit(X, triplets)`` performs exactly one step per given triplet,
  in the given order; the first call initialises the model.  A one-triplet
  call is therefore one update of the paper's algorithm.

Subclasses implement ``_init_model(d, rng)`` and
``_run_steps(Xcsr, triplets) -> (losses, margins)`` (per-step loss before
the update and margin ``S(q, p+) - S(q, p-)`` before the update), plus
``_model_finite()`` for the divergence check.
"""
from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._progress import progress
from .._validation import check_random_state, check_scalar_param, check_triplets, check_X
from ..base import History, TripletLearner
from ..linalg import as_csr

__all__ = ["OnlineTripletLearner"]


class OnlineTripletLearner(TripletLearner):
    """Base class of the online learners (see module docstring)."""

    _history_keys = ("loss", "avg_loss", "mistake_rate")

    def _validate_common(self) -> None:
        check_scalar_param(self.n_epochs, "n_epochs", self, kind="int", low=1)
        check_scalar_param(self.n_triplets, "n_triplets", self, kind="int", low=1)
        check_scalar_param(self.verbose, "verbose", self, kind="int", low=0)

    # model hooks -------------------------------------------------------
    def _init_model(self, n_features: int, rng: np.random.Generator) -> None:
        raise NotImplementedError

    def _run_steps(self, Xc, triplets):
        raise NotImplementedError

    def _model_finite(self) -> bool:
        raise NotImplementedError

    def _extra_record(self) -> dict:
        """Solver-specific values added to each history record."""
        return {}

    # driving loop ------------------------------------------------------
    def _diverged(self, step: int) -> FloatingPointError:
        return FloatingPointError(
            f"{type(self).__name__}: training diverged (non-finite margin, norm or model at "
            f"step {step}); scale the features down or lower the step size / "
            "aggressiveness.")

    def _record(self, hist: History, losses, margins, cumulative: dict | None = None,
                **extra) -> None:
        """Append one history record for the steps just taken.

        ``avg_loss`` and ``mistake_rate`` are running means over all steps
        so far (the curves of the OASIS and SDCA papers); ``cumulative`` maps
        further names to per-step arrays kept as running means the same way.
        """
        prev = self.n_steps_
        self.n_steps_ = T = prev + losses.shape[0]
        series = {"avg_loss": losses, "mistake_rate": (margins <= 0).astype(float)}
        series.update(cumulative or {})
        values = {}
        for name, per_step in series.items():
            before = hist.data[name][-1] * prev if prev else 0.0
            values[name] = (before + float(np.sum(per_step))) / T
        hist.record(T, loss=float(losses.mean()), **values, **extra)

    def _steps_and_record(self, Xc, triplets, hist: History) -> None:
        losses, margins = self._run_steps(Xc, triplets)
        if not self._model_finite():
            raise self._diverged(self.n_steps_ + triplets.shape[0])
        self._record(hist, losses, margins)

    def _fit(self, X, triplets, rng):
        self._init_model(X.shape[1], rng)
        self.n_steps_ = 0
        Xc = as_csr(X)
        hist = History(keys=self._history_keys)
        m = triplets.shape[0]
        for _ in progress(range(self.n_epochs), total=self.n_epochs, verbose=self.verbose,
                          desc=type(self).__name__, unit="epoch"):
            order = rng.permutation(m)
            self._steps_and_record(Xc, triplets[order], hist)
        self.history_ = hist.data

    def _check_resumable(self) -> None:
        """Raise if the fitted state cannot take more steps (override)."""

    def _partial_steps(self, Xc, triplets, hist: History, **kwargs) -> None:
        self._steps_and_record(Xc, triplets, hist)

    def partial_fit(self, X, triplets):
        """One step per given triplet, in order (the first call initialises).

        Parameters
        ----------
        X : array-like or CSR matrix of shape (n_samples, n_features)
        triplets : array-like of shape (m, 3)
            ``(query, positive, negative)`` row indices into X.

        Returns
        -------
        self
        """
        return self._partial(X, triplets)

    def _partial(self, X, triplets, **kwargs):
        self._validate_params()
        first = not hasattr(self, "n_features_in_")
        X = check_X(X, self, accept_sparse=self._accepts_sparse,
                    n_features=None if first else self.n_features_in_)
        triplets = check_triplets(triplets, X.shape[0], self)
        if first:
            self._init_model(X.shape[1], check_random_state(self.random_state, self))
            self.n_features_in_ = X.shape[1]
            self.n_steps_ = 0
            self.history_ = {}
        else:
            check_is_fitted(self, "n_features_in_")
            self._check_resumable()
        hist = History(self.history_, keys=self._history_keys)
        try:
            self._partial_steps(as_csr(X), triplets, hist, **kwargs)
        except Exception:
            if first:  # a failed first call leaves the model unfitted
                del self.n_features_in_
            raise
        self.history_ = hist.data
        return self
