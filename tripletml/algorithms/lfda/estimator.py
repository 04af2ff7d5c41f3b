"""LFDA: Local Fisher Discriminant Analysis (Sugiyama, "Dimensionality
reduction of multimodal labeled data by local Fisher discriminant
analysis", JMLR 8, 2007).

A closed form from class labels: the local within-class and between-class
scatters (the paper's eqs. 11-14) with the local-scaling affinity (eq. 4),
then one symmetric-definite generalized eigenproblem (eq. 16).  The
affinities are formed one class at a time and, in a large class, one block
of rows at a time: no n x n matrix is ever held.
"""
from __future__ import annotations

import time
from numbers import Integral

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.params import Interval, StrOptions
from tripletml.core.validation import check_dense_memory
from tripletml.core.base import MahalanobisMixin, TripletLearner
from tripletml.core.preprocessing import document_preprocessing
from tripletml.triplets import AllLabels, ClassCodes
from tripletml.core.docstrings import document_transform

__all__ = ["LFDA", "lfda_scatters", "lfda_components"]

#: affinity entries per block (rows x class members): 4 Mi float64 = 32 MiB
_BLOCK_ENTRIES = 1 << 22


def _dense(B) -> np.ndarray:
    return np.asarray(B.toarray() if sp.issparse(B) else B, dtype=np.float64)


def _class_local_scatter(Xc: np.ndarray, k: int) -> np.ndarray:
    """``G = (1/2) sum_{i,j} A_ij (x_i - x_j)(x_i - x_j)^T`` over the rows of
    one class (``Xc``, centered), ``A_ij = exp(-||x_i - x_j||^2 / (s_i s_j))``
    with ``s_i`` the distance from ``x_i`` to its ``k``-th nearest neighbor
    in the class (eq. 4; ``A_ij = 0`` where ``s_i s_j = 0``).

    ``G = Xc^T (diag(A 1) - A) Xc``, accumulated over blocks of rows so that
    at most ``_BLOCK_ENTRIES`` affinities exist at once."""
    nc, d = Xc.shape
    sq = np.einsum("ij,ij->i", Xc, Xc)
    step = max(1, _BLOCK_ENTRIES // max(nc, 1))

    def dist(s0):
        B = Xc[s0:s0 + step]
        D = sq[s0:s0 + step, None] + sq[None, :] - 2.0 * (B @ Xc.T)
        np.maximum(D, 0.0, out=D)
        r = np.arange(D.shape[0])
        D[r, s0 + r] = 0.0
        return D

    blocks = {}
    sigma = np.empty(nc)
    for s0 in range(0, nc, step):
        D = dist(s0)
        sigma[s0:s0 + step] = np.sqrt(np.partition(D, k, axis=1)[:, k])
        if step >= nc:
            blocks[s0] = D
    G = np.zeros((d, d))
    for s0 in range(0, nc, step):
        D = blocks.pop(s0) if s0 in blocks else dist(s0)
        scale = sigma[s0:s0 + step, None] * sigma[None, :]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            A = np.exp(-D / scale)
        A[scale == 0] = 0.0
        B = Xc[s0:s0 + step]
        G += (B * A.sum(axis=1)[:, None]).T @ B - B.T @ (A @ Xc)
    return 0.5 * (G + G.T)


def lfda_scatters(X, codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(S_lw, S_lb, S_t)``: the local within-class and local between-class
    scatters of the paper (eqs. 11-14) and the total scatter, for the rows
    with ``codes >= 0`` (dense or CSR X).

    With ``W_lw_ij = A_ij / n_c`` and ``W_lb_ij = A_ij (1/n - 1/n_c)`` for
    ``i, j`` of one class c, ``W_lw_ij = 0`` and ``W_lb_ij = 1/n`` across
    classes, ``S = (1/2) sum_ij W_ij (x_i - x_j)(x_i - x_j)^T``.  Per class c,
    ``G_c = (1/2) sum_{i,j in c} A_ij (x_i - x_j)(x_i - x_j)^T`` and its
    scatter ``C_c = sum_{i in c} (x_i - m_c)(x_i - m_c)^T``; then
    ``S_lw = sum_c G_c / n_c`` and, as ``(1/2) sum_{ij} (x_i - x_j)(x_i -
    x_j)^T = n S_t``, ``S_lb = S_t - (1/n) sum_c (n_c C_c - G_c) - S_lw``.
    A class of one member contributes only to ``S_t``.  ``k`` is capped at
    ``n_c - 1`` in a smaller class.
    """
    codes = np.asarray(codes)
    rows = np.flatnonzero(codes >= 0)
    n = rows.size
    d = X.shape[1]
    order = rows[np.argsort(codes[rows], kind="stable")]
    cls, starts, sizes = np.unique(codes[order], return_index=True, return_counts=True)
    Sw = np.zeros((d, d))
    within = np.zeros((d, d))               # sum_c (n_c C_c - G_c)
    Cpool = np.zeros((d, d))
    means = np.zeros((cls.size, d))
    for c in range(cls.size):
        idx = order[starts[c]:starts[c] + sizes[c]]
        Xc = _dense(X[idx])
        m = Xc.mean(axis=0)
        means[c] = m
        Xc = Xc - m
        C = Xc.T @ Xc
        Cpool += C
        nc = idx.size
        if nc < 2:
            continue
        G = _class_local_scatter(Xc, min(k, nc - 1))
        Sw += G / nc
        within += nc * C - G
    mean = sizes @ means / n
    Z = means - mean
    St = Cpool + (Z * sizes[:, None]).T @ Z
    St = 0.5 * (St + St.T)
    Sw = 0.5 * (Sw + Sw.T)
    Sb = St - within / n - Sw
    return Sw, 0.5 * (Sb + Sb.T), St


def lfda_components(Sw: np.ndarray, Sb: np.ndarray, St: np.ndarray, n_components: int | None,
                    embedding_type: str, who: str = "LFDA") -> tuple[np.ndarray, np.ndarray]:
    """``(T^T, eigenvalues)``: the LFDA transform (eq. 16) as rows.

    On the span ``U`` of the total scatter (eigenvalues above ``d eps`` times
    its largest; no training point varies along the other directions), the
    generalized eigenvectors ``phi`` of ``S_lb phi = lambda S_lw phi`` with
    ``phi^T S_lw phi = 1``, in decreasing order of ``lambda``, the top
    ``n_components``.  ``"weighted"``: ``sqrt(lambda) phi`` (the paper's
    weighted LFDA, negative ``lambda`` given weight 0); ``"orthonormalized"``:
    an orthonormal basis of their span (QR); ``"plain"``: ``phi``.  Where
    ``S_lw`` is singular on the span (a direction with no local within-class
    variance) a ridge of ``1e-10 tr(S_lw) / s`` is added.  Each row's largest
    entry is made positive."""
    d = St.shape[0]
    ev, Ut = np.linalg.eigh(St)
    top = float(ev.max()) if ev.size else 0.0
    keep = ev > max(d, 1) * np.finfo(float).eps * top if top > 0 else np.zeros(d, bool)
    U = Ut[:, keep]
    s = U.shape[1]
    if s == 0:
        raise ValueError(f"{who}: every row is identical (the data span no direction).")
    A = U.T @ Sb @ U
    B = U.T @ Sw @ U
    A, B = 0.5 * (A + A.T), 0.5 * (B + B.T)
    tr = float(np.trace(B))
    if not tr > 0:
        raise ValueError(f"{who}: the classes have no local within-class scatter (every class "
                         "has a single member or identical members); nothing to learn.")
    try:
        lam, V = scipy.linalg.eigh(A, B)
    except np.linalg.LinAlgError:
        B = B + (1e-10 * tr / s) * np.eye(s)
        try:
            lam, V = scipy.linalg.eigh(A, B)
        except np.linalg.LinAlgError:
            raise ValueError(f"{who}: the local within-class scatter is singular on the span "
                             "of the data.") from None
    order = np.argsort(lam)[::-1]
    if n_components is not None:
        order = order[:n_components]
    lam = lam[order]
    T = U @ V[:, order]
    if embedding_type == "weighted":
        T = T * np.sqrt(np.maximum(lam, 0.0))
    elif embedding_type == "orthonormalized":
        T, _ = np.linalg.qr(T)
    L = np.ascontiguousarray(T.T)
    big = np.abs(L).argmax(axis=1)
    L *= np.where(L[np.arange(L.shape[0]), big] < 0, -1.0, 1.0)[:, None]
    return L, lam


def _triplet_classes(triplets: np.ndarray, n: int) -> np.ndarray:
    """Pseudo-labels from index triplets: the connected components of the
    graph whose edges are the ``(query, positive)`` pairs; rows in no
    triplet get -1."""
    t = np.asarray(triplets)
    g = sp.coo_matrix((np.ones(len(t)), (t[:, 0], t[:, 1])), shape=(n, n))
    _, comp = connected_components(g, directed=False)
    used = np.zeros(n, bool)
    used[t.ravel()] = True
    comp = np.where(used, comp, -1)
    _, codes = np.unique(comp[used], return_inverse=True)
    out = np.full(n, -1, dtype=np.int64)
    out[used] = codes
    return out


@document_transform
@document_preprocessing
class LFDA(MahalanobisMixin, TripletLearner):
    """Local Fisher Discriminant Analysis: Fisher's criterion on affinity-
    weighted pairs, which keeps the local (multimodal) structure of each
    class.

    With the local-scaling affinity (Sugiyama 2007, eq. 4)

        A_ij = exp(-||x_i - x_j||^2 / (s_i s_j)),

    ``s_i`` the distance from ``x_i`` to its ``k``-th nearest neighbor in
    its class, the local within-class and between-class scatters (eqs.
    11-14) are ``S = (1/2) sum_ij W_ij (x_i - x_j)(x_i - x_j)^T`` with

        W_lw_ij = A_ij / n_c,          W_lb_ij = A_ij (1/n - 1/n_c)   (same class c)
        W_lw_ij = 0,                   W_lb_ij = 1/n                  (different classes)

    and the transform ``T`` maximizes ``tr((T^T S_lw T)^-1 T^T S_lb T)``
    (eq. 15): the generalized eigenvectors of ``S_lb phi = lambda S_lw phi``
    (eq. 16).  Far-apart pairs of a class get small weights, so a class
    made of separate clusters is not forced together (the failure of plain
    Fisher discriminant analysis).  ``M = T T^T``.

    The affinities are computed one class at a time, and within a large
    class one block of rows at a time (at most 4 Mi affinities at once, the
    k-th-neighbor distances in a first pass): memory O(n d + d^2) beside
    the blocks, time O(sum_c n_c^2 d).

    From labels ``fit(X, y)`` the classes are the labels' (a class of one
    member contributes to the total scatter only).  From explicit index
    triplets ``fit(X, triplets=T)`` LFDA needs classes, so the classes are
    the connected components of the graph of the ``(query, positive)``
    pairs (rows in no triplet are left out); triplets whose positives
    connect everything give a single class and a ValueError.

    Parameters
    ----------
    n_components : int or None, default=None
        Dimension of the embedding (rows of ``components_``); None keeps
        every direction of the data's span.
    k : int, default=7
        The neighbor of the local scaling ``s_i`` (the paper's choice, 7);
        a class of ``n_c <= k`` members uses its ``(n_c - 1)``-th.
    embedding_type : {"weighted", "orthonormalized", "plain"}, default="weighted"
        ``"weighted"``: ``T = (sqrt(lambda_1) phi_1 | ...)`` (the paper's
        weighted LFDA, eq. 17: directions weighted by their discriminability);
        ``"orthonormalized"``: an orthonormal basis of the same span;
        ``"plain"``: the eigenvectors, ``phi^T S_lw phi = 1``.
    {preprocessing}
    {preprocessor}

    Attributes
    ----------
    M_ : ndarray of shape (d, d)
        ``T T^T`` (PSD; d = ``n_features_preprocessed_``).
    components_ : ndarray of shape (``rank_``, d)
        ``T^T``; ``transform`` embeds into the LFDA space.
    rank_ : int
        Rows of ``components_``.
    eigenvalues_ : ndarray of shape (``rank_``,)
        The generalized eigenvalues ``lambda`` of the kept directions,
        decreasing.
    local_within_scatter_, local_between_scatter_, total_scatter_ : ndarray of shape (d, d)
        ``S_lw``, ``S_lb`` and ``S_t``.
    history_ : dict of lists
        One record: ``step`` 0 and the ``seconds`` of the fit.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from tripletml import LFDA
    >>> X, y = load_iris(return_X_y=True)
    >>> LFDA(n_components=2).fit(X, y).transform(X[:3]).shape
    (3, 2)
    """

    _fitted_arrays = {
        "M_": ArraySpec(("d", "d")),
        "components_": ArraySpec(("rank_", "d")),
        "eigenvalues_": ArraySpec(("rank_",)),
        "local_within_scatter_": ArraySpec(("d", "d")),
        "local_between_scatter_": ArraySpec(("d", "d")),
        "total_scatter_": ArraySpec(("d", "d")),
    }
    _square_arrays = 6

    def __init__(self, n_components=None, *, k=7, embedding_type="weighted",
                 preprocessing="auto", preprocessor=None):
        self.n_components = n_components
        self.k = k
        self.embedding_type = embedding_type
        self.preprocessing = preprocessing
        self.preprocessor = preprocessor

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "k": [Interval(Integral, 1, None, closed="left")],
        "embedding_type": [StrOptions({"weighted", "orthonormalized", "plain"})],
        "preprocessing": ["no_validation"],
        "preprocessor": ["no_validation"],   # resolved by the base class
    }

    def _sampler(self):
        """Labels are used as they are: :class:`~tripletml.triplets.AllLabels`."""
        return AllLabels()

    def _check_loaded(self) -> None:
        """``M_`` PSD with ``components_`` its factor, and ``components_``
        the LFDA transform of the stored scatters (recomputed)."""
        super()._check_loaded()
        self._check_loaded_metric(self.M_)
        L, lam = lfda_components(self.local_within_scatter_, self.local_between_scatter_,
                                 self.total_scatter_, self.n_components, self.embedding_type)
        M = L.T @ L
        if L.shape != self.components_.shape or \
                np.linalg.norm(M - self.M_) > 1e-6 * np.linalg.norm(M) + 1e-300:
            raise ValueError("M_ is not the LFDA matrix of the stored scatters")

    def _fit(self, X, got, rng):
        t0 = time.perf_counter()
        n, d = X.shape
        if isinstance(got, ClassCodes):
            codes = np.asarray(got.codes, dtype=np.int64)
            what = "class"
        else:
            codes = _triplet_classes(got, n)
            what = "connected component of the triplets' (query, positive) pairs"
        sizes = np.bincount(codes[codes >= 0])
        if sizes.size < 2:
            raise ValueError(f"LFDA: needs at least two classes; got one {what} (LFDA "
                             "separates classes: give class labels y with two or more "
                             "classes).")
        if sizes.max() < 2:
            raise ValueError("LFDA: every class has a single member; the local within-class "
                             "scatter is empty.")
        check_dense_memory(8 * (sizes.max() * d + min(sizes.max() ** 2, _BLOCK_ENTRIES)),
                           self, f"the rows of the largest class ({sizes.max()} x {d}) and "
                           "their affinity block")
        Sw, Sb, St = lfda_scatters(X, codes, int(self.k))
        if not (np.isfinite(Sw).all() and np.isfinite(Sb).all() and np.isfinite(St).all()):
            raise FloatingPointError("LFDA: training diverged (the scatters are not finite: the "
                                     "features overflow float64); scale them down (e.g. "
                                     "preprocessing='standardize').")
        L, lam = lfda_components(Sw, Sb, St, self.n_components, self.embedding_type)
        self.local_within_scatter_, self.local_between_scatter_, self.total_scatter_ = Sw, Sb, St
        self.eigenvalues_ = np.ascontiguousarray(lam)
        self.components_, self.rank_ = L, int(L.shape[0])
        self.M_ = L.T @ L
        self.history_ = {"step": [0], "seconds": [time.perf_counter() - t0]}
