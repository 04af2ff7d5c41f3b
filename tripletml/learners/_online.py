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
    def _steps_and_record(self, Xc, triplets, hist: History) -> None:
        losses, margins = self._run_steps(Xc, triplets)
        if not self._model_finite():
            raise FloatingPointError(
                f"{type(self).__name__}: training diverged (the model became NaN/inf after "
                f"step {self.n_steps_ + triplets.shape[0]}); scale the features down or "
                "lower the step size / aggressiveness.")
        prev_steps = self.n_steps_
        prev_loss = (hist.data["avg_loss"][-1] * prev_steps) if prev_steps else 0.0
        prev_mist = (hist.data["mistake_rate"][-1] * prev_steps) if prev_steps else 0.0
        self.n_steps_ = prev_steps + triplets.shape[0]
        hist.record(self.n_steps_,
                    loss=float(losses.mean()),
                    avg_loss=(prev_loss + float(losses.sum())) / self.n_steps_,
                    mistake_rate=(prev_mist + float((margins <= 0).sum())) / self.n_steps_,
                    **self._extra_record())

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
            if self._converged():
                break
        self.history_ = hist.data
        self._finalize()

    def _converged(self) -> bool:
        """Early-stopping hook (e.g. a duality-gap tolerance)."""
        return False

    def _finalize(self) -> None:
        """Hook run after fit (e.g. forming an averaged output)."""

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
        self._validate_params()
        first = not hasattr(self, "n_features_in_")
        X = check_X(X, self, accept_sparse=self._accepts_sparse,
                    n_features=None if first else self.n_features_in_)
        triplets = check_triplets(triplets, X.shape[0], self)
        if first:
            rng = check_random_state(self.random_state, self)
            self.n_features_in_ = X.shape[1]
            self._init_model(X.shape[1], rng)
            self.n_steps_ = 0
            self.history_ = {}
        else:
            check_is_fitted(self, "n_features_in_")
        hist = History(self.history_, keys=self._history_keys)
        self._steps_and_record(as_csr(X), triplets, hist)
        self.history_ = hist.data
        return self
