"""Estimator glue of the LORETA drift control, shared by :class:`LORETA` and
:class:`LORETAMultilabel`: the fitted attributes ``A_, B_, pinv_A_,
pinv_B_, n_pinv_refresh_`` mirror one :class:`tripletml.linalg.pinv.PinvFactors`
(the solver state), rebuilt from them when a model was loaded or set by hand."""
from __future__ import annotations

import numpy as np

from tripletml.linalg.pinv import PinvFactors, pinv_drift

__all__ = ["PinvFactorsOwner"]


class PinvFactorsOwner:
    """Mixin: ``_new_factors(A, B)`` at initialization, ``_store()`` after
    steps, ``_resume_factors()`` before more steps, ``_record_extra()`` for
    the history's ``pinv_drift``.  Needs the parameters ``pinv_check_every``
    and ``pinv_tol``."""

    #: the model a partitioned fit mixes (:func:`tripletml.distributed.mixing.model_kind`):
    #: factors with their maintained pseudo-inverses
    _model_kind = "pinv"

    def _new_factors(self, A: np.ndarray, B: np.ndarray) -> None:
        self._factors = PinvFactors(A, B, check_every=self.pinv_check_every,
                                    tol=self.pinv_tol, owner=type(self).__name__)
        self._store()

    def _span_lift_spec(self, X, supervision):
        """The span route (:mod:`tripletml.linalg.span`, ``"factor"``): each
        step moves the factors' rows at a query and a difference of rows
        (``A += q a^T``, the retraction's corrections along ``A``, ``A^+``'s
        span), with step sizes from inner products (``q^T A``, ``||q||``),
        so on the span of the rows and of the initial factors the run is
        the same; the pseudo-inverses follow their factors."""
        return {"A_": "factor", "B_": "factor", "pinv_A_": "rows", "pinv_B_": "rows"}

    def _span_set_init(self, init) -> None:
        self._new_factors(init["A_"], init["B_"])

    def _span_lift_extra(self, Q, spec) -> None:
        # the solver state is rebuilt from the lifted arrays (_resume_factors)
        self.__dict__.pop("_factors", None)

    def _store(self) -> None:
        f = self._factors
        self.A_, self.B_, self.pinv_A_, self.pinv_B_ = f.A, f.B, f.PA, f.PB
        self.n_pinv_refresh_ = f.n_refresh

    def _resume_factors(self) -> None:
        f = getattr(self, "_factors", None)
        if f is None or any(a is not b for a, b in zip(
                (f.A, f.B, f.PA, f.PB), (self.A_, self.B_, self.pinv_A_, self.pinv_B_))):
            # loaded from a file, or the factors were set by hand
            self._factors = PinvFactors(self.A_, self.B_, self.pinv_A_, self.pinv_B_,
                                        check_every=self.pinv_check_every, tol=self.pinv_tol,
                                        owner=type(self).__name__,
                                        n_refresh=self.n_pinv_refresh_)
        self._factors.check_every = int(self.pinv_check_every)
        self._factors.tol = float(self.pinv_tol)

    def _check_loaded(self) -> None:
        """The stored pseudo-inverses are those of the stored factors, to the
        drift the model tolerates (``||A^+ A - I||_F <= max(10 pinv_tol,
        1e-6)``), and the refresh counter is a count."""
        super()._check_loaded()
        limit = max(10.0 * float(self.pinv_tol), 1e-6)
        for name, F, P in (("pinv_A_", self.A_, self.pinv_A_), ("pinv_B_", self.B_, self.pinv_B_)):
            drift = pinv_drift(F, P)
            if not drift <= limit:
                raise ValueError(f"{name} is not the pseudo-inverse of its factor (drift "
                                 f"{drift:.3g} > {limit:.3g})")

    def _record_extra(self) -> dict:
        drift = self._factors.drift
        self._factors.reset_drift()
        return {"pinv_drift": drift}
