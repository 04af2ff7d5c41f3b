"""KISSME's closed form (Koestinger, Hirzer, Wohlhart, Roth & Bischof,
"Large scale metric learning from equivalence constraints", CVPR 2012).

The likelihood-ratio test between two zero-mean Gaussians of pair
differences, one for similar pairs (covariance ``Sigma_S``), one for
dissimilar pairs (``Sigma_D``), gives the Mahalanobis matrix of the
paper's eq. (12),

    M = Sigma_S^{-1} - Sigma_D^{-1},

re-projected onto the PSD cone by clipping its spectrum (Section 3).  A
triplet ``(q, p+, p-)`` holds one similar pair ``(q, p+)`` and one
dissimilar pair ``(q, p-)``, so

    Sigma_S = E[(q - p+)(q - p+)^T],    Sigma_D = E[(q - p-)(q - p-)^T].

Two ways to form them:

* :func:`pair_scatter_from_triplets`: the empirical means over given
  triplets (chunked; X dense or CSR);
* :func:`pair_scatter_from_labels`: the exact expectation over the class
  triplets :func:`tripletml.triplets.random_class_triplets` draws (query
  uniform over the rows of classes with >= 2 members, positive uniform over
  the rest of its class, negative uniform over the other classes' rows): the
  limit of the empirical means as the number of triplets grows, in O(n d^2)
  from class means and class scatters, without a single triplet.

:func:`shrunk_inverse` regularizes each covariance toward a scaled identity
(``shrinkage`` in [0, 1], as scikit-learn's LDA); :func:`kissme_matrix`
puts it together.
"""
from __future__ import annotations

import math

import numpy as np

from tripletml.engine.early_stopping import hash_folds, pair_keys
import scipy.sparse as sp

from tripletml.core.validation import check_scalar_param, check_triplets, check_X
from tripletml.linalg import project_psd
from tripletml.linalg.pairwise import pair_difference_scatter

__all__ = ["shrinkage_grid", "kissme_factor", "heldout_score", "heldout_counts", "answer_folds",
           "pair_keys", "covariance_rank", "usable_folds", "usable_counts", "fold_scatter_sums",
           "factor_distances", "row_images",
           "kissme_matrix_span", "shrunk_inverse_span", "pair_scatter_from_labels", "pair_scatter_from_triplets",
           "scatter_from_class_statistics", "shrunk_inverse", "kissme_matrix"]

#: rows per block of the class-centered scatter: blocks of this many matrix
#: entries (128 KiB) stay in cache and in the allocator's heap
_BLOCK_ELEMENTS = 16384

#: eigenvalues of a shrunk covariance below this fraction of its largest are
#: treated as zero (the pseudo-inverse drops them)
EIG_RTOL = 1e-12


def _sparse_class_gram(X: sp.csr_matrix, codes: np.ndarray, w_class: np.ndarray,
                       means: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``sum_c w_c sum_{i in c} (x_i - mu_c)(x_i - mu_c)^T`` for CSR X:
    ``X^T diag(w) X - sum_c w_c n_c mu_c mu_c^T`` (w_c per class), without
    densifying X.  The subtraction cancels when a class's mean is large
    against its spread; :func:`_sparse_gram_is_accurate` guards it."""
    w = w_class[codes]
    G = (X.T @ X.multiply(w[:, None]).tocsr()).toarray()
    return G - (means.T * (w_class * counts)) @ means


def _sparse_gram_is_accurate(X: sp.csr_matrix, onehot: sp.csr_matrix, means: np.ndarray,
                             counts: np.ndarray) -> bool:
    """Whether the expanded class scatter of :func:`_sparse_class_gram` keeps
    about 7 digits: every class's second moment of every column is at most
    :data:`_SPARSE_CANCEL_RATIO` times its scatter about the class mean (the
    rounding error of the expansion grows as eps times that ratio)."""
    sq = onehot @ X.multiply(X)
    sq = sq.toarray() if sp.issparse(sq) else np.asarray(sq)
    scatter = sq - counts[:, None] * means ** 2
    used = sq > 0
    return bool(np.all(sq[used] <= _SPARSE_CANCEL_RATIO * np.maximum(scatter[used], 0.0)))


#: largest second moment / scatter ratio the sparse expansion accepts
#: (eps * 1e6 ~ 2e-10 relative error); above it, class-centered dense blocks
_SPARSE_CANCEL_RATIO = 1e6


def _blocked_class_gram(X, codes: np.ndarray, raw_means: np.ndarray, wS: np.ndarray,
                        wD: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sum_i w_{c_i} (x_i - mu_{c_i})(x_i - mu_{c_i})^T`` for the two class
    weightings ``wS`` (>= 0) and ``wD``, on class-centered rows formed a block
    of rows at a time (dense X, or CSR X densified block by block)."""
    n, d = X.shape
    S = np.zeros((d, d))
    C = np.zeros((d, d))
    rS = np.sqrt(wS)
    step = max(1, _BLOCK_ELEMENTS // max(d, 1))
    for s0 in range(0, n, step):
        c = codes[s0:s0 + step]
        B = X[s0:s0 + step]
        Z = (B.toarray() if sp.issparse(B) else B) - raw_means[c]
        W = Z * rS[c][:, None]
        S += W.T @ W
        np.multiply(Z, wD[c][:, None], out=W)
        C += Z.T @ W
    return S, C


def pair_scatter_from_labels(X, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``(Sigma_S, Sigma_D)`` over random class triplets.

    With ``n_c`` rows in class c (mean ``mu_c`` and covariance ``C_c``,
    both after centering X on its mean), ``m_c = n - n_c``, ``N`` the rows
    whose class has >= 2 members, ``T = sum_i x_i x_i^T`` the total scatter::

        Sigma_S = sum_c 2 n_c^2 / ((n_c - 1) N) C_c,
        Sigma_D = sum_c (n_c / N) [(1 - n_c / m_c) C_c + T / m_c
                                   + (n / m_c) mu_c mu_c^T],

    sums over the classes with >= 2 members.  (For a query q of class c the
    positive's term is ``n_c / (n_c - 1) ((q - mu_c)(q - mu_c)^T + C_c)``;
    the negative's is ``(q - nu_c)(q - nu_c)^T + D_c`` with ``nu_c, D_c``
    the mean and covariance of the other classes' rows, which the total
    scatter gives in closed form.)

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n, d)
    codes : ndarray of shape (n,), int
        Non-negative class codes (re-encoded to 0..k-1 when some value is
        unused); at least two classes and one class with two members.

    Returns
    -------
    Sigma_S, Sigma_D : ndarray of shape (d, d)
    """
    who = "pair_scatter_from_labels"
    X = check_X(X, who)
    n = X.shape[0]
    codes = np.asarray(codes)
    if codes.shape != (n,) or codes.dtype.kind not in "iu":
        raise TypeError(f"{who}: codes must be a 1-D integer array of length {n}, got dtype "
                        f"{codes.dtype} and shape {codes.shape}")
    if codes.min() < 0:
        raise ValueError(f"{who}: codes must be >= 0")
    counts = np.bincount(codes)
    if (counts == 0).any():                       # re-encode to 0..k-1
        codes = np.unique(codes, return_inverse=True)[1].ravel()
        counts = np.bincount(codes)
    if counts.size < 2 or counts.max() < 2:
        raise ValueError(f"{who}: needs two classes and a class with two members")
    return _scatter_from_labels(X, codes.astype(np.int64, copy=False))


def _label_weights(counts: np.ndarray) -> dict:
    """The class weights of :func:`pair_scatter_from_labels` from the class
    sizes ``counts`` (every class non-empty, two classes, a class with two
    members): ``a`` (``Sigma_S``'s weight of each class scatter), ``c``
    (``Sigma_D``'s, the total scatter's ``tT`` included), ``tT`` and ``gM``
    (the weights of ``mu_c mu_c^T`` in ``Sigma_D``)."""
    n = float(counts.sum())
    elig = counts >= 2
    N = float(counts[elig].sum())
    nc = counts.astype(float)
    mc = n - nc                                   # > 0: at least two classes
    # per-class weights of C_c (times n_c: C_c = scatter_c / n_c)
    a = np.where(elig, 2.0 * nc / ((nc - 1.0).clip(1.0) * N), 0.0)           # Sigma_S
    b = np.where(elig, nc / N, 0.0)
    bC = b * (1.0 - nc / mc) / nc                                           # Sigma_D's C_c
    tT = float(np.sum(b / mc))                                              # Sigma_D's T
    gM = b * (n / mc)                                                       # mu_c mu_c^T
    return {"a": a, "c": bC + tT, "tT": tT, "gM": gM}


def scatter_from_class_statistics(counts: np.ndarray, raw_means: np.ndarray, S_w: np.ndarray,
                                  C_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Sigma_S, Sigma_D)`` of :func:`pair_scatter_from_labels` from the
    class sizes ``counts`` (k,), the class means ``raw_means`` (k, d) and the
    two weighted class scatters ``S_w = sum_c a_c scatter_c`` and ``C_w =
    sum_c c_c scatter_c`` (``scatter_c = sum_{i in c} (x_i - mu_c)(x_i -
    mu_c)^T``, weights of :func:`_label_weights`): the driver's last step of
    a partitioned fit (:mod:`tripletml.distributed.class_stats`)."""
    w = _label_weights(counts)
    nc = counts.astype(float)
    mean = (nc @ raw_means) / float(counts.sum())
    means = raw_means - mean                      # class means of the centered rows
    between = (means.T * nc) @ means          # sum_c n_c mu_c mu_c^T; T = within + between
    D = C_w + w["tT"] * between + (means.T * w["gM"]) @ means
    return _sym(S_w), _sym(D)


def _scatter_from_labels(X, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pair_scatter_from_labels` on validated X and codes 0..k-1 (every
    code used, two classes, a class with two members)."""
    n, d = X.shape
    counts = np.bincount(codes)
    k = counts.size
    onehot = sp.csr_matrix((np.ones(n), (codes, np.arange(n))), shape=(k, n))
    sums = onehot @ X
    sums = sums.toarray() if sp.issparse(sums) else np.asarray(sums)
    nc = counts.astype(float)
    raw_means = sums / nc[:, None]
    w = _label_weights(counts)
    if sp.issparse(X) and _sparse_gram_is_accurate(X, onehot, raw_means, nc):
        S = _sparse_class_gram(X, codes, w["a"], raw_means, nc)
        Cpart = _sparse_class_gram(X, codes, w["c"], raw_means, nc)
    else:
        S, Cpart = _blocked_class_gram(X, codes, raw_means, w["a"], w["c"])
    return scatter_from_class_statistics(counts, raw_means, S, Cpart)


def pair_scatter_from_triplets(X, triplets: np.ndarray,
                               chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Empirical ``(Sigma_S, Sigma_D)``: the means of ``(q - p+)(q - p+)^T``
    and ``(q - p-)(q - p-)^T`` over the triplets, ``chunk`` triplets at a
    time (X dense or CSR; only (chunk, d) differences are formed)."""
    who = "pair_scatter_from_triplets"
    X = check_X(X, who)
    triplets = check_triplets(triplets, X.shape[0], who)
    chunk = check_scalar_param(chunk, "chunk", who, kind="int", low=1)
    return _scatter_from_triplets(X, triplets, chunk)


#: largest ``n x n`` pair-count matrix (bytes) of the Laplacian form of the
#: pair scatters (:func:`tripletml.linalg.pairwise.pair_difference_scatter`)
_LAPLACIAN_BYTES = 1 << 26


def _laplacian_pays(n: int, m: int, d: int) -> bool:
    """Whether ``X^T L X`` (``O(n^2 d + n d^2)``, an ``n x n`` count matrix)
    costs less than the ``m`` outer products of differences
    (``O(m d^2)``): few rows under many answers (crowd answers about items)."""
    return 8 * n * n <= _LAPLACIAN_BYTES and n * n + n * d < m * d


def _scatter_from_triplets(X, triplets: np.ndarray,
                           chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pair_scatter_from_triplets` on validated X and triplets (by the
    pair counts' Laplacian where that pays, :func:`_laplacian_pays`)."""
    d = X.shape[1]
    if triplets.shape[0] and _laplacian_pays(X.shape[0], triplets.shape[0], d):
        t = np.asarray(triplets, dtype=np.int64)
        m = t.shape[0]
        return (_sym(pair_difference_scatter(X, t[:, 0], t[:, 1]) / m),
                _sym(pair_difference_scatter(X, t[:, 0], t[:, 2]) / m))
    S = np.zeros((d, d))
    D = np.zeros((d, d))
    m = triplets.shape[0]
    for s in range(0, m, chunk):
        t = triplets[s:s + chunk]
        Q = X[t[:, 0]]
        for acc, col in ((S, 1), (D, 2)):
            E = Q - X[t[:, col]]
            G = E.T @ E
            acc += G.toarray() if sp.issparse(G) else G
    return _sym(S / m), _sym(D / m)


def scatter_from_pairs(X, pairs: np.ndarray, similar: np.ndarray,
                       chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Empirical ``(Sigma_S, Sigma_D)`` of labeled pairs (the paper's eq. 10-11):
    the mean of ``(x_i - x_j)(x_i - x_j)^T`` over the similar pairs and over
    the dissimilar ones, ``chunk`` pairs at a time (X dense or CSR).  Either
    is zero when its set is empty."""
    d = X.shape[1]
    out = []
    for mask in (similar, ~similar):
        P = pairs[mask]
        C = np.zeros((d, d))
        for s in range(0, P.shape[0], chunk):
            c = P[s:s + chunk]
            E = X[c[:, 0]] - X[c[:, 1]]
            G = E.T @ E
            C += G.toarray() if sp.issparse(G) else G
        out.append(_sym(C / max(P.shape[0], 1)))
    return out[0], out[1]


def shrunk_inverse(C: np.ndarray, shrinkage: float) -> np.ndarray:
    """Pseudo-inverse of ``(1 - shrinkage) C + shrinkage (tr C / d) I``.

    Eigenvalues below :data:`EIG_RTOL` times the largest count as zero (the
    directions a covariance does not see get no weight); ``shrinkage > 0``
    makes the matrix positive definite whenever ``tr C > 0``.
    """
    C = _check_square(C, "shrunk_inverse", "C")
    shrinkage = check_scalar_param(shrinkage, "shrinkage", "shrunk_inverse", kind="real",
                                   low=0, high=1)
    d = C.shape[0]
    A = (1.0 - shrinkage) * C
    if shrinkage:
        A = A + (shrinkage * float(np.trace(C)) / d) * np.eye(d)
    w, V = np.linalg.eigh(_sym(A))
    top = float(w.max()) if w.size else 0.0
    keep = w > EIG_RTOL * top if top > 0 else np.zeros(w.shape, bool)
    Vk = V[:, keep]
    return (Vk / w[keep]) @ Vk.T


def kissme_matrix(Sigma_S: np.ndarray, Sigma_D: np.ndarray, shrinkage: float) -> np.ndarray:
    """``M = P_psd(Sigma_S^{-1} - Sigma_D^{-1})`` (eq. 12 and the paper's
    spectrum clipping), each inverse by :func:`shrunk_inverse`."""
    Sigma_S = _check_square(Sigma_S, "kissme_matrix", "Sigma_S")
    Sigma_D = _check_square(Sigma_D, "kissme_matrix", "Sigma_D")
    if Sigma_S.shape != Sigma_D.shape:
        raise ValueError(f"kissme_matrix: Sigma_S {Sigma_S.shape} and Sigma_D "
                         f"{Sigma_D.shape} differ in shape")
    M = shrunk_inverse(Sigma_S, shrinkage) - shrunk_inverse(Sigma_D, shrinkage)
    return project_psd(M)


def shrunk_inverse_span(C_r: np.ndarray, shrinkage: float, d: int) -> tuple[np.ndarray, float]:
    """:func:`shrunk_inverse` of ``C = Q C_r Q^T`` (``Q`` an orthonormal
    ``d x r`` basis, ``r < d``) without forming it: ``(1 - s) C + (s tr C /
    d) I`` has the eigenvalues of ``(1 - s) C_r + lam I_r`` on the span and
    ``lam = s tr C / d`` on its complement, so its (pseudo-)inverse is
    ``Q Inv_r Q^T + c (I - Q Q^T)``.  Returns ``(Inv_r, c)``, with the
    eigenvalue cut of :data:`EIG_RTOL` taken over the whole spectrum (``c``
    = 0 when ``lam`` falls under it, e.g. without shrinkage)."""
    C_r = _check_square(C_r, "shrunk_inverse_span", "C_r")
    r = C_r.shape[0]
    if not int(d) > r:
        raise ValueError(f"shrunk_inverse_span: d={d} must exceed the span's dimension {r}")
    lam = float(shrinkage) * float(np.trace(C_r)) / int(d)
    A = (1.0 - shrinkage) * C_r
    if shrinkage:
        A = A + lam * np.eye(r)
    w, V = np.linalg.eigh(_sym(A))
    top = max(float(w.max()), lam)
    keep = w > EIG_RTOL * top if top > 0 else np.zeros(w.shape, bool)
    Vk = V[:, keep]
    c = 1.0 / lam if (top > 0 and lam > EIG_RTOL * top) else 0.0
    return (Vk / w[keep]) @ Vk.T, c


def kissme_matrix_span(S_r: np.ndarray, D_r: np.ndarray, shrinkage: float, d: int
                       ) -> tuple[np.ndarray, float]:
    """:func:`kissme_matrix` of ``Sigma_S = Q S_r Q^T`` and ``Sigma_D = Q
    D_r Q^T`` (pair differences in the span of the rows ``Q``, ``d x r``):
    ``M = Q M_r Q^T + c (I - Q Q^T)``, returned as ``(M_r, c)``.  The
    difference of the inverses is ``Q (S_r^-1 - D_r^-1) Q^T + (c_S - c_D)
    (I - Q Q^T)`` (:func:`shrunk_inverse_span`), and the PSD projection
    clips each part: ``M_r = P_psd(S_r^-1 - D_r^-1)``, ``c = max(c_S - c_D,
    0)``."""
    S_inv, c_s = shrunk_inverse_span(S_r, shrinkage, d)
    D_inv, c_d = shrunk_inverse_span(D_r, shrinkage, d)
    return project_psd(S_inv - D_inv), max(c_s - c_d, 0.0)


def _sym(A: np.ndarray) -> np.ndarray:
    return 0.5 * (A + A.T)


def _check_square(C, who: str, name: str) -> np.ndarray:
    """A finite square float64 matrix, or a ValueError naming ``who``."""
    try:
        C = np.asarray(C, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{who}: {name} must be a numeric square matrix") from None
    if C.ndim != 2 or C.shape[0] != C.shape[1] or C.shape[0] == 0:
        raise ValueError(f"{who}: {name} must be a non-empty square matrix, got shape "
                         f"{C.shape}")
    if not np.isfinite(C).all():
        raise ValueError(f"{who}: {name} contains NaN or infinity")
    return C


# ------------------------------------------------ the held-out shrinkage
#: the ridges the held-out choice of ``shrinkage="auto"`` compares, in units
#: of the mean eigenvalue of the pair differences' covariance over the
#: directions where they vary (its span): ``inf`` is the scaled identity
#: alone (``shrinkage = 1``, the Euclidean distance); the first, 1 / 99, is
#: the previous fixed ``shrinkage = 0.01`` where the pair differences span
#: every dimension
SHRINKAGE_KAPPAS = (1.0 / 99.0, 0.1, 1.0, 10.0, 100.0, math.inf)
#: folds of the held-out choice (each constraint held out once)
SHRINKAGE_FOLDS = 3
#: fewer constraints than this (of either kind, for pairs) per fold: too few
#: answers to compare the grid; the fixed :data:`FALLBACK_SHRINKAGE` is used
MIN_HELDOUT = 5
#: the shrinkage without a held-out choice (the previous default)
FALLBACK_SHRINKAGE = 0.01


def shrinkage_grid(rank: int, d: int, kappas=SHRINKAGE_KAPPAS) -> np.ndarray:
    """The shrinkages ``s`` whose ridge ``s tr C / d`` is ``kappa`` times the
    mean non-zero eigenvalue ``(1 - s) tr C / rank`` of the shrunk
    ``(1 - s) C`` (``C`` a covariance of rank ``rank`` in ``d``
    dimensions): ``s = kappa rho / (1 + kappa rho)``, ``rho = d / rank``;
    ``kappa = inf`` gives 1.  Scale-free (ratios of eigenvalues) and the
    same on the span's coordinates as in ``d`` dimensions; with ``rank =
    d``, ``kappa = 1 / 99`` is ``s = 0.01``, the previous fixed default."""
    rank, d = int(rank), int(d)
    if not 0 < rank <= d:
        raise ValueError(f"shrinkage_grid: need 0 < rank <= d, got rank={rank}, d={d}")
    rho = d / rank
    out = [1.0 if math.isinf(k) else (k * rho) / (1.0 + k * rho) for k in kappas]
    return np.asarray(out, dtype=np.float64)


def covariance_rank(C: np.ndarray) -> int:
    """Eigenvalues of the symmetric PSD ``C`` above :data:`EIG_RTOL` times
    the largest (0 for a zero matrix)."""
    w = np.linalg.eigvalsh(_sym(C))
    top = float(w.max()) if w.size else 0.0
    return int(np.sum(w > EIG_RTOL * top)) if top > 0 else 0


def kissme_factor(S: np.ndarray, D: np.ndarray, shrinkage: float, d: int | None = None
                  ) -> np.ndarray:
    """``L`` (``k x w``) with ``L^T L`` = :func:`kissme_matrix` of ``S, D``
    (``w x w``); with ``d > w`` (the span route, ``S, D`` on the span's
    coordinates) the span block of :func:`kissme_matrix_span` (the
    complement's ``c I`` does not act on differences of the rows)."""
    if d is not None and int(d) > S.shape[0]:
        A = shrunk_inverse_span(S, shrinkage, d)[0] - shrunk_inverse_span(D, shrinkage, d)[0]
    else:
        A = shrunk_inverse(S, shrinkage) - shrunk_inverse(D, shrinkage)
    mu, V = np.linalg.eigh(_sym(A))
    keep = mu > 0
    return np.ascontiguousarray((V[:, keep] * np.sqrt(mu[keep])).T)


def answer_folds(keys: np.ndarray, n_folds: int = SHRINKAGE_FOLDS) -> np.ndarray:
    """The fold (``0..n_folds-1``) of each answer from its content alone: a
    hash of the row ids in ``keys`` (``(m, k)`` non-negative ints: a
    triplet ``(q, p+, p-)``, or a pair ``(min, max, label)``).  The same
    answer always lands in the same fold, whatever the order of the answers,
    the random state or the partition it comes from, so repeated answers are
    never split between the fitted and the held-out part, and an in-memory
    and a partitioned fit hold out the same answers."""
    return hash_folds(keys, n_folds)


#: distances equal to this relative accuracy are ties in the held-out scores
#: (the same distance computed in another order, on the span's coordinates
#: or in another partition, must score the same)
TIE_RTOL = 1e-10


def heldout_counts(dist_a: np.ndarray, dist_b: np.ndarray) -> float:
    """Triplets with ``d(q, p+) < d(q, p-)``, ties (equal to
    :data:`TIE_RTOL` relative) one half: the numerator of
    :func:`heldout_score`'s triplet accuracy."""
    diff = dist_b - dist_a
    tie = np.abs(diff) <= TIE_RTOL * (np.abs(dist_a) + np.abs(dist_b))
    return float(np.sum((diff > 0) & ~tie) + 0.5 * np.sum(tie))


def heldout_score(dist_a: np.ndarray, dist_b: np.ndarray | None = None,
                  similar: np.ndarray | None = None) -> float:
    """Held-out agreement of learned squared distances with the answers.

    Triplets (``dist_a = d(q, p+)``, ``dist_b = d(q, p-)``): the share with
    ``d(q, p+) < d(q, p-)``, ties counting one half (triplet accuracy).
    Pairs (``dist_a`` the pairs' distances, ``similar`` their labels): the
    ROC AUC of ``-dist_a`` for the similar pairs, ties one half."""
    if dist_b is not None:
        return heldout_counts(dist_a, dist_b) / max(dist_a.size, 1)
    from scipy.stats import rankdata

    top = float(np.abs(dist_a).max()) if dist_a.size else 0.0
    r = rankdata(-(np.round(dist_a / top / TIE_RTOL) if top > 0 else dist_a))
    n_pos = int(similar.sum())
    n_neg = similar.size - n_pos
    return float((r[similar].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def usable_folds(folds: np.ndarray, kinds) -> bool:
    """Whether every fold holds out at least :data:`MIN_HELDOUT` answers of
    each kind (``kinds``: boolean masks, e.g. similar and dissimilar pairs)
    and leaves at least one of each kind to fit on."""
    return all(usable_counts(np.bincount(folds[mask], minlength=SHRINKAGE_FOLDS))
               for mask in kinds)


def usable_counts(counts: np.ndarray) -> bool:
    """:func:`usable_folds` from the answers per fold of one kind."""
    counts = np.asarray(counts)
    return bool(counts.min() >= MIN_HELDOUT and (counts.sum() - counts).min() >= 1)


def fold_scatter_sums(X, triplets: np.ndarray, folds: np.ndarray, n_folds: int = SHRINKAGE_FOLDS
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per fold, the answers and the unnormalised sums of ``(q - p+)(q -
    p+)^T`` and ``(q - p-)(q - p-)^T`` over its triplets: ``(counts (K,),
    S (K, d, d), D (K, d, d))`` (the partitioned fit's first pass)."""
    d = X.shape[1]
    counts = np.bincount(folds, minlength=n_folds).astype(np.int64)
    S = np.zeros((n_folds, d, d))
    D = np.zeros((n_folds, d, d))
    for f in range(n_folds):
        t = triplets[folds == f]
        if len(t):
            Sf, Df = _scatter_from_triplets(X, t)
            S[f], D[f] = Sf * len(t), Df * len(t)
    return counts, S, D


def row_images(Z, L: np.ndarray, n_pairs: int, chunk: int = 4096):
    """``Z L^T`` (``n x k``), the rows' images, when there are no more rows
    than the pairs to measure (each distance is then ``O(k)``); None
    otherwise.  ``Z``: dense or CSR rows, or an object with ``shape`` and
    row slices (the raw rows read through a preprocessing)."""
    n = Z.shape[0]
    if n > n_pairs:
        return None
    Y = np.empty((n, L.shape[0]))
    for s0 in range(0, n, chunk):
        B = Z[s0:s0 + chunk]
        Y[s0:s0 + chunk] = np.asarray(B @ L.T)
    return Y


def factor_distances(Z, a: np.ndarray, b: np.ndarray, L: np.ndarray,
                     Y: np.ndarray | None = None, chunk: int = 4096) -> np.ndarray:
    """``||L (z_a - z_b)||^2`` for rows ``a, b`` of Z (dense or CSR; dense
    chunks of ``chunk`` differences), or of the images ``Y = Z L^T``
    (:func:`row_images`) when given."""
    out = np.zeros(len(a))
    if not L.shape[0]:
        return out
    for s0 in range(0, len(a), chunk):
        ia, ib = a[s0:s0 + chunk], b[s0:s0 + chunk]
        if Y is not None:
            P = Y[ia] - Y[ib]
        else:
            E = Z[ia] - Z[ib]
            E = E.toarray() if sp.issparse(E) else np.asarray(E)
            P = E @ L.T
        out[s0:s0 + chunk] = np.einsum("ij,ij->i", P, P)
    return out
