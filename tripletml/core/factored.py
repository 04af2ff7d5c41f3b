"""The factored model kind ``W = A B^T`` (rank k): scoring without forming W
(:class:`FactoredBilinearMixin`), the rank rule and the initial factors, and
the spectrum of the training rows they start from.

Shared by the factored learners (:mod:`tripletml.algorithms.factored`,
:mod:`tripletml.algorithms.loreta`, :mod:`tripletml.algorithms.multilabel`)
and by the partitioned fits (:mod:`tripletml.distributed.mixing` merges the
partitions' second moments into the same :class:`Spectrum`), so the rule is
written once and an in-memory and a partitioned fit start alike.
"""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.base import BilinearMixin
from tripletml.core.params import Interval, StrOptions

__all__ = ["DEFAULT_RANK", "RANK_CAP", "ENERGY_SHARE", "MOMENT_MAX_FEATURES", "DEAD_AXIS_RTOL",
           "resolve_rank", "FactoredBilinearMixin", "init_factors", "LOWRANK_PARAMS",
           "PINV_PARAMS", "column_energy", "live_axes", "Spectrum", "spectrum_from",
           "data_spectrum", "second_moment", "moment_product", "spectral_rank"]


#: a coordinate axis whose energy (sum of squares over the training rows) is
#: below this fraction of the largest is dead for the identity initialization
DEAD_AXIS_RTOL = 1e-3


def column_energy(X) -> np.ndarray:
    """``sum_i x_ij^2`` per column of X (dense or CSR): what
    :func:`live_axes` ranks (a partitioned fit sums it over partitions)."""
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=0), dtype=np.float64).ravel()
    Xd = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->j", Xd, Xd)


def live_axes(X, k: int, *, energy: np.ndarray | None = None) -> np.ndarray:
    """The k coordinate axes of the identity initialization: the first k
    columns of X (the paper's ``[I_k; 0]``) whose energy ``sum_i x_ij^2`` is
    at least :data:`DEAD_AXIS_RTOL` times the largest, then, if fewer than k
    are, the other columns in order.

    Why: a factored model ``x^T A B^T y`` initialized on an axis that carries
    nothing (a constant column, 0 after centering: MNIST's border pixels)
    scores every pair 0 and its gradient ``B^T y`` vanishes on every row, so
    it never moves (LORETA, IterativePA, NaivePA and FactoredGD sat at
    chance on MNIST, 1-NN .11).  Where the first k columns carry energy
    (every standardized or lifted set) the axes are the paper's."""
    if energy is None:
        energy = column_energy(X)
    energy = np.asarray(energy, dtype=np.float64)
    top = float(np.max(energy, initial=0.0))
    live = energy >= DEAD_AXIS_RTOL * top if np.isfinite(top) and top > 0 else \
        np.ones(energy.shape, bool)
    order = np.concatenate([np.flatnonzero(live), np.flatnonzero(~live)])
    return order[:k]


def init_factors(n: int, m: int, k: int, init: str, rng, *,
                 axes: np.ndarray | None = None,
                 basis: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Initial factors: ``"pca"`` gives ``A = B = U_k`` with ``basis = U_k``
    (n x k, orthonormal columns: the top-k principal directions of the
    training rows, see :func:`data_spectrum`), i.e. ``W = U_k U_k^T``;
    ``"identity"`` gives ``A = [I_k; 0]`` (n x k) and
    ``B = [I_k; 0]`` (m x k), i.e. ``W`` with k ones on the diagonal (the
    LORETA paper), on the coordinate axes ``axes`` when given (see
    :func:`live_axes`; the first k otherwise); ``"random"`` gives standard
    normal entries scaled by ``(n m)^(-1/4)`` (the paper's "product of
    rank-k random matrices")."""
    if init == "pca":
        if basis is None:
            raise ValueError("init_factors: init='pca' needs the principal basis")
        U = np.ascontiguousarray(basis[:, :k], dtype=np.float64)
        return U.copy(), U.copy()
    if init == "identity":
        A = np.zeros((n, k))
        B = np.zeros((m, k))
        rows = np.arange(k) if axes is None else np.asarray(axes, dtype=np.intp)
        A[rows, np.arange(k)] = 1.0
        B[rows, np.arange(k)] = 1.0
        return A, B
    scale = (n * m) ** -0.25
    return rng.standard_normal((n, k)) * scale, rng.standard_normal((m, k)) * scale


# ---------------------------------------------------------------------------
# the spectrum of the training rows: the "pca" start and the default rank
# ---------------------------------------------------------------------------
#: up to this many features the d x d second moment ``X^T X`` is formed (32 MiB
#: at the cap) and decomposed exactly; above it, subspace iteration on the
#: product ``X^T (X Q)`` (never a d x d array)
MOMENT_MAX_FEATURES = 2048
#: the largest default rank (``rank=None``): memory ``4 d k`` floats for
#: LORETA's factors and pseudo-inverses, ``O(d k)`` per step; 16 keeps a
#: default fit within 1.6 times the cost of the former fixed rank 10.
#: Measured (seed 0, defaults, rank 10 / 16 / 32): semeion LORETA .727 /
#: .706 / .689, IterativePA .699 / .701 / .694; mnist-test (5,000 rows)
#: LORETA .523 / .529 / .521, IterativePA .498 / .538 / .582 (Euclidean
#: .461, .429): no rank is best throughout, the cost grows with k
RANK_CAP = 16
#: ``rank=None`` keeps this share of the energy ``trace(X^T X)``
ENERGY_SHARE = 0.8
#: subspace iteration above :data:`MOMENT_MAX_FEATURES`: extra columns, sweeps
SUBSPACE_OVERSAMPLE = 10
SUBSPACE_ITERS = 8


class Spectrum:
    """The top eigenpairs of the uncentred second moment ``M = X^T X`` of
    the (preprocessed) training rows: ``vectors`` (d x p, orthonormal
    columns, each signed so that its largest-magnitude entry is positive),
    ``values`` (p, decreasing, >= 0) and ``trace`` (``trace(M)``, the total
    energy ``sum_i ||x_i||^2``)."""

    def __init__(self, vectors: np.ndarray, values: np.ndarray, trace: float):
        self.vectors, self.values, self.trace = vectors, values, float(trace)


def _signed(U: np.ndarray) -> np.ndarray:
    """Columns signed so that their largest-magnitude entry is positive (the
    eigenvectors' sign is arbitrary; ``U_k U_k^T`` does not depend on it)."""
    if U.size == 0:
        return U
    j = np.argmax(np.abs(U), axis=0)
    sgn = np.where(U[j, np.arange(U.shape[1])] < 0, -1.0, 1.0)
    return U * sgn


def spectrum_from(d: int, p: int, trace: float, *, moment: np.ndarray | None = None,
                  matmat=None) -> Spectrum:
    """:class:`Spectrum` with the top ``p`` eigenpairs, from the d x d second
    moment ``moment`` (exact ``eigh``) or, without it, from ``matmat(Q) =
    M Q`` by subspace iteration (:data:`SUBSPACE_ITERS` sweeps of a block of
    ``p +`` :data:`SUBSPACE_OVERSAMPLE` columns from a fixed Gaussian start,
    seed 0, then Rayleigh-Ritz): the same rule for an in-memory fit
    (:func:`data_spectrum`) and a partitioned one (``M`` summed over the
    partitions), so both start from the same subspace."""
    p = int(min(p, d))
    if moment is not None:
        M = np.asarray(moment, dtype=np.float64)
        M = np.ascontiguousarray(0.5 * (M + M.T))
        with threadpool_limits(1, user_api="blas"):   # the same bits whatever the threads
            w, V = np.linalg.eigh(M)
        w, V = w[::-1][:p], V[:, ::-1][:, :p]
    else:
        b = min(d, p + SUBSPACE_OVERSAMPLE)
        Q = np.random.default_rng(0).standard_normal((d, b))
        with threadpool_limits(1, user_api="blas"):
            Q, _ = np.linalg.qr(Q)
        for _ in range(SUBSPACE_ITERS):
            Y = np.asarray(matmat(Q), dtype=np.float64)
            with threadpool_limits(1, user_api="blas"):
                Q, _ = np.linalg.qr(Y)
        H = Q.T @ np.asarray(matmat(Q), dtype=np.float64)
        with threadpool_limits(1, user_api="blas"):
            w, V = np.linalg.eigh(0.5 * (H + H.T))
            w, V = w[::-1][:p], Q @ V[:, ::-1][:, :p]
            V, _ = np.linalg.qr(V)                       # orthonormal to rounding
    return Spectrum(_signed(np.ascontiguousarray(V)), np.maximum(w, 0.0), trace)


def second_moment(X) -> np.ndarray:
    """``X^T X`` (d x d, float64) of dense or CSR rows, with one BLAS
    thread on C-ordered rows: the same bits in every process (a partitioned
    fit's workers and its driver; a multi-threaded GEMM or another memory
    layout may round differently)."""
    if sp.issparse(X):
        return np.asarray((X.T @ X).toarray(), dtype=np.float64)
    Xd = np.ascontiguousarray(X, dtype=np.float64)        # one memory layout, one kernel
    with threadpool_limits(1, user_api="blas"):
        return Xd.T @ Xd


def moment_product(X, Q: np.ndarray) -> np.ndarray:
    """``X^T (X Q)`` (d x b) of dense or CSR rows, with one BLAS thread (as
    :func:`second_moment`)."""
    if not sp.issparse(X):
        X = np.ascontiguousarray(X, dtype=np.float64)
    Q = np.ascontiguousarray(Q, dtype=np.float64)
    with threadpool_limits(1, user_api="blas"):
        return np.asarray(X.T @ np.asarray(X @ Q), dtype=np.float64)


def data_spectrum(X, p: int) -> Spectrum:
    """The top ``p`` eigenpairs of ``X^T X`` for the training rows X (dense
    or CSR): exact up to :data:`MOMENT_MAX_FEATURES` features, subspace
    iteration on ``X^T (X Q)`` above (see :func:`spectrum_from`)."""
    d = X.shape[1]
    trace = float(column_energy(X).sum())
    if d <= MOMENT_MAX_FEATURES:
        return spectrum_from(d, p, trace, moment=second_moment(X))
    return spectrum_from(d, p, trace, matmat=lambda Q: moment_product(X, Q))


def spectral_rank(spec: Spectrum, cap: int) -> int:
    """The default rank: the smallest k whose top-k eigenvalues hold
    :data:`ENERGY_SHARE` of ``trace(X^T X)``, at most ``cap`` (and at least
    1)."""
    if not (spec.trace > 0 and np.isfinite(spec.trace)) or spec.values.size == 0:
        return max(1, min(cap, spec.values.size or 1))
    share = np.cumsum(spec.values) / spec.trace
    k = int(np.searchsorted(share, ENERGY_SHARE * (1 - 1e-12)) + 1)
    return max(1, min(int(cap), k))


#: the rank used when ``rank=None`` without the data's spectrum (a model
#: initialized without rows; capped at the number of features)
DEFAULT_RANK = 10


def resolve_rank(est, n_features: int, spectrum: Spectrum | None = None) -> int:
    """The rank to fit: for ``rank=None`` the spectral rule
    (:func:`spectral_rank`, capped at the class's ``_rank_cap(d)``) when the
    data's ``spectrum`` is given, else the class's ``_default_rank(d)``; an
    explicit ``rank`` as it is, ValueError when it exceeds ``n_features``."""
    if est.rank is None:
        if spectrum is not None:
            return spectral_rank(spectrum, type(est)._rank_cap(int(n_features)))
        return int(type(est)._default_rank(int(n_features)))
    if est.rank > n_features:
        raise ValueError(f"{type(est).__name__}: rank={est.rank} exceeds the number of "
                         f"features ({n_features}).")
    return int(est.rank)


#: the declarations of ``rank`` and ``init`` of the factored learners
LOWRANK_PARAMS = {
    "rank": [Interval(Integral, 1, None, closed="left"), None],
    "init": [StrOptions({"pca", "identity", "random"})],
}
#: the declarations of the pseudo-inverse drift controls (LORETA)
PINV_PARAMS = {
    "pinv_check_every": [Interval(Integral, 1, None, closed="left")],
    "pinv_tol": [Interval(Real, 0, None, closed="neither")],
}


class FactoredBilinearMixin(BilinearMixin):
    """Scoring for ``W = A_ B_^T`` without forming W:
    ``S(x, y) = (x^T A_) (B_^T y)``."""

    #: the model a partitioned fit mixes (:func:`tripletml.distributed.mixing.model_kind`)
    _model_kind = "factors"

    def _apply(self, X):
        return np.asarray(X @ self.A_) @ self.B_.T

    def _similarity(self, X, Y):
        return np.asarray(X @ self.A_) @ np.asarray(Y @ self.B_).T

    def _pair_score(self, X1, X2):
        return np.einsum("ij,ij->i", np.asarray(X1 @ self.A_), np.asarray(X2 @ self.B_))

    def _embed_queries(self, X):
        """``S(q, x) = (A^T q) . (B^T x)``: queries become rows of ``X A``
        (k dims; a CSR X stays sparse until this product, W is never formed)."""
        return X @ self.A_

    def _embed_database(self, X):
        """Database rows become rows of ``X B`` (k dims)."""
        return X @ self.B_

    def _bilinear_matrix(self) -> np.ndarray:
        """``W = A_ B_^T`` (d x d: large for many features; prefer the factors)."""
        return self.A_ @ self.B_.T

    def _bilinear_factors(self):
        """``(A_, B_)``: ``transform`` embeds the PSD part of ``A_ B_^T``
        from the factors (thin QR, a 2k x 2k eigenproblem), never forming W."""
        return self.A_, self.B_

    _fitted_arrays = {"A_": ArraySpec(("d", "rank_")), "B_": ArraySpec(("d", "rank_"))}

    def _check_loaded(self) -> None:
        """``rank_`` is what ``rank`` resolves to on the model's width (for
        ``rank=None``, chosen from the training rows' spectrum: between 1
        and the class's cap); a file whose parameters say one rank and whose
        factors another is refused."""
        super()._check_loaded()
        d = self.n_features_preprocessed_
        if self.rank is None:
            cap = max(type(self)._rank_cap(d), type(self)._default_rank(d))
            if not 1 <= self.rank_ <= cap:
                raise ValueError(f"rank_={self.rank_} but rank=None gives a rank between 1 "
                                 f"and {cap} on {d} features")
            return
        want = resolve_rank(self, d)
        if self.rank_ != want:
            raise ValueError(f"rank_={self.rank_} but the parameters give rank {want} "
                             f"(rank={self.rank!r})")

    @staticmethod
    def _default_rank(n_features: int) -> int:
        """The rank used for ``rank=None`` when no training rows are seen
        (never by ``fit``): ``min(10, n_features)``."""
        return min(DEFAULT_RANK, n_features)

    @staticmethod
    def _rank_cap(n_features: int) -> int:
        """The largest rank ``rank=None`` picks: ``min(RANK_CAP, d)``."""
        return min(RANK_CAP, n_features)

    def _needs_spectrum(self) -> bool:
        return self.init == "pca" or self.rank is None

    def _spectrum_size(self, n_features: int) -> int:
        """Eigenpairs the initialization needs (the cap of the rank rule, or
        the explicit rank)."""
        return int(min(n_features, self.rank if self.rank is not None
                       else type(self)._rank_cap(n_features)))

    def _init_factors(self, n_features, rng, X=None, energy=None, spectrum=None):
        """``rank_`` and the initial ``A_, B_``: ``init="pca"`` from the top
        principal directions of the training rows X (or of the given
        ``spectrum``, a partitioned fit's, from the merged second moments);
        ``"identity"`` on the live axes of X (or of the column ``energy``)."""
        if spectrum is None and X is not None and self._needs_spectrum():
            spectrum = data_spectrum(X, self._spectrum_size(n_features))
        self.rank_ = resolve_rank(self, n_features, spectrum)
        axes = None
        if self.init == "identity" and (X is not None or energy is not None):
            axes = live_axes(X, self.rank_, energy=energy)
        init = self.init
        if init == "pca" and spectrum is None:        # no rows seen: the paper's start
            init = "identity"
        self.A_, self.B_ = init_factors(n_features, n_features, self.rank_, init, rng,
                                        axes=axes, basis=None if spectrum is None
                                        else spectrum.vectors)

    def _model_finite(self):
        return bool(np.isfinite(self.A_).all() and np.isfinite(self.B_).all())

    def _span_lift_spec(self, X, supervision):
        """The span route (:mod:`tripletml.linalg.span`, ``"factor"``): the
        steps ``A += eta q (B^T v)^T``, ``B += eta v (A^T q)^T`` move the
        factors' rows along the rows only, with step sizes from ``q^T A``,
        ``B^T v`` and row norms, so on the span of the rows and of the
        initial factors the run is the same."""
        return {"A_": "factor", "B_": "factor"}
