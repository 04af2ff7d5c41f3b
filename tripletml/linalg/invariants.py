"""Invariant checks of fitted matrices (used when a model is loaded).

A model file is untrusted: its arrays have the declared shapes (see
:mod:`tripletml.core.arrayspec`) but may still contradict each other or the
learner's promises.  These checks raise ValueError naming the array:

* :func:`check_symmetric` -- ``M = M^T`` up to rounding;
* :func:`check_positive_definite` -- a Cholesky factorisation exists;
* :func:`check_psd` -- no eigenvalue below ``-tol`` times the largest;
* :func:`check_factor` -- ``L^T L`` equals ``M`` up to a relative tolerance
  (a factor stored beside its matrix, e.g. ``components_`` beside ``M_``);
* :func:`check_inverse` -- ``A B = I`` up to rounding scaled by the
  condition of the pair.

Tolerances are relative to the matrices' own norms, so a check holds at any
feature scale.
"""
from __future__ import annotations

import numpy as np

__all__ = ["check_symmetric", "check_positive_definite", "check_psd", "check_factor",
           "check_inverse", "SYMMETRY_RTOL"]

#: relative asymmetry ``||M - M^T||_F / ||M||_F`` tolerated (rounding of a
#: symmetric update)
SYMMETRY_RTOL = 1e-8


def _fro(A: np.ndarray) -> float:
    return float(np.linalg.norm(A))


def _check_finite_2d(A: np.ndarray, name: str) -> None:
    if not isinstance(A, np.ndarray) or A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array, got {getattr(A, 'shape', type(A))}")
    if not np.isfinite(A).all():
        raise ValueError(f"{name} has non-finite entries (NaN or inf)")


def check_symmetric(M: np.ndarray, name: str, rtol: float = SYMMETRY_RTOL) -> None:
    """ValueError unless M is a finite square matrix with
    ``||M - M^T||_F <= rtol ||M||_F``."""
    _check_finite_2d(M, name)
    if M.shape[0] != M.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {M.shape}")
    if _fro(M - M.T) > rtol * _fro(M):
        raise ValueError(f"{name} is not symmetric")


def check_positive_definite(M: np.ndarray, name: str) -> None:
    """ValueError unless the symmetric ``M`` is positive definite (Cholesky)."""
    check_symmetric(M, name)
    try:
        np.linalg.cholesky(0.5 * (M + M.T))
    except np.linalg.LinAlgError:
        raise ValueError(f"{name} is not positive definite") from None


def check_psd(M: np.ndarray, name: str, rtol: float = 1e-8) -> None:
    """ValueError unless the symmetric ``M`` has no eigenvalue below
    ``-rtol`` times its largest absolute eigenvalue."""
    check_symmetric(M, name)
    ev = np.linalg.eigvalsh(0.5 * (M + M.T))
    top = float(np.max(np.abs(ev), initial=0.0))
    if ev.size and ev[0] < -rtol * top:
        raise ValueError(f"{name} is not positive semi-definite (eigenvalue {ev[0]:.3g}, "
                         f"largest {top:.3g})")


def check_factor(L: np.ndarray, M: np.ndarray, name: str, rtol: float) -> None:
    """ValueError unless ``||L^T L - M||_F <= rtol ||M||_2 + 1e-12 ||M||_F``
    (``L``: r x d, ``M``: d x d; ``rtol`` covers the eigenvalues a truncated
    factor leaves out, e.g. ``sqrt(d) * rank_tol``)."""
    _check_finite_2d(L, name)
    _check_finite_2d(M, "the model's matrix")
    if L.shape[1] != M.shape[0]:
        raise ValueError(f"{name} has shape {L.shape}, not (r, {M.shape[0]})")
    top = float(np.linalg.norm(M, 2)) if M.size else 0.0
    if _fro(L.T @ L - M) > rtol * top + 1e-12 * _fro(M):
        raise ValueError(f"{name} is not a factor of the model's matrix (L^T L != M)")


def check_inverse(A: np.ndarray, B: np.ndarray, name: str, rtol: float = 1e-8) -> None:
    """ValueError unless ``||A B - I||_F <= rtol ||A||_F ||B||_F`` (B is A's
    inverse up to rounding scaled by the pair's condition)."""
    _check_finite_2d(A, "the model's matrix")
    _check_finite_2d(B, name)
    d = A.shape[0]
    if B.shape != A.shape:
        raise ValueError(f"{name} has shape {B.shape}, not {A.shape}")
    if _fro(A @ B - np.eye(d)) > rtol * _fro(A) * _fro(B):
        raise ValueError(f"{name} is not the inverse of the model's matrix")
