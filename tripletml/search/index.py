"""Nearest-neighbor search with a learned similarity.

A fitted triplet learner maps queries and database items to dense vectors
(:meth:`~tripletml.core.base.BilinearMixin.embed_queries`,
``embed_database``) whose inner product -- or minus squared Euclidean
distance, for Mahalanobis learners (``model.embedding_similarity``) -- is the
learned similarity.  :class:`SimilarityIndex` stores the database embeddings
and finds, for each query, the ``k`` items of highest similarity:

* ``backend="faiss"`` (``pip install tripletml[index]``): ``kind="flat"``
  (exact, ``IndexFlatIP`` / ``IndexFlatL2``), ``"ivf"`` (``IndexIVFFlat``:
  ``nlist`` k-means cells, ``nprobe`` visited per query) or ``"hnsw"``
  (``IndexHNSWFlat``: ``hnsw_m`` links, ``ef_construction``, ``ef_search``).
  Vectors are stored as float32, so scores are float32-rounded.  With
  ``ip_to_l2=True`` an inner-product model is searched as an L2 problem:
  each database vector ``x`` gets one more coordinate
  ``sqrt(M^2 - ||x||^2)`` (``M``: the largest database norm, ``max_norm``)
  and each query ``q`` a 0, so that ``||q' - x'||^2 = ||q||^2 + M^2 - 2 <q,
  x>`` ranks items exactly as the inner product does (maximum inner-product
  search as nearest-neighbor search; Bachrach et al., RecSys 2014).  Scores
  are returned as inner products.  By default (``ip_to_l2=None``):

  - IVF over an inner-product model uses it: k-means cells and the
    assignment of rows to them are then Euclidean, where on the raw inner
    product large-norm centroids swallow the rows;
  - HNSW decides at the first ``add`` from the database embeddings ``E``
    (its first ``batch_size`` rows, at least :data:`IP_TO_L2_MIN_ROWS` = 32;
    a smaller first ``add`` keeps the raw inner product): the augmentation
    when they lie in a narrow cone, ``||mean(E)|| / mean(||E||) >``
    :data:`IP_TO_L2_CONE` (0.5), as for a model fitted on raw non-negative
    features (``preprocessing=None`` on pixels or counts), where a graph on
    the raw inner product plateaus; the raw inner product for centered
    embeddings (the learners' default ``"sphere"``), where it is the better
    graph.  The recalls measured for both rules are in BENCHMARKS.md
    (``bench/bench_index.py``).

  Measure recall against ``kind="flat"`` on your data.
* ``backend="numpy"``: exact search, ``kind="flat"`` only.  The database is
  scanned in blocks: one GEMM per block of queries x block of items, then a
  compiled pass keeps each query's running top k
  (:class:`tripletml.linalg.topk.TopK`, the accumulator of every exact search).  Exact under
  :mod:`tripletml.metrics`' tie rule (equal scores: lower index first), so
  with float64 storage (the default) ``search`` returns the top k of
  ``model.similarity``.
* ``backend="auto"`` (default): faiss when it can be imported, else numpy
  (``kind="flat"`` only).

Every method takes raw feature rows (dense or CSR): the model's validation
and embedding are applied inside.  Memory is ``O(n_total * n_dims)`` for the
database plus one block of scores; for a factored model (LORETA, rank k) the
embeddings have k dimensions and a d x d matrix is never formed.

``save(path)`` writes a directory: the model (``model.npz``, tripletml's own
format), ``index.json`` (metadata) and the vectors (``vectors.npy``, read
back with ``allow_pickle=False``) or the faiss index (``index.faiss``, faiss's
own format).  :func:`load_index` reads it back.  No pickle anywhere.

Integrity: ``index.json`` records the SHA-256 of every other file of the
directory (``hashes``: the vectors or faiss index, and the model that
embedded them).  :func:`load_index` hashes each file before using it and
refuses a mismatch (a flipped byte in the vectors, a ``model.npz`` replaced
by another model), opening regular files only.  The hashes catch accidents
(a damaged copy, a file replaced by mistake), not an attacker: whoever can
write the directory can replace a file *and* its hash in ``index.json``, and
the index then loads.  Keep index directories where only you can write, or
check them against a digest kept elsewhere (e.g. ``sha256sum`` of the three
files); the model is still read without pickle, so a swapped model gives
wrong answers, not code execution.  An index written before
hashes were recorded (format version 1 or 2) is refused unless
``allow_unverified=True`` (then loaded with a warning); ``save`` it again
to record them.
"""
from __future__ import annotations

import hashlib
import json
import numbers
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from tripletml.linalg.topk import KERNEL_MAX_K, TopK
from tripletml.engine.threads import threads_for

from tripletml.engine.progress import progress_bar
from tripletml.core.validation import as_generator, check_choice_param, check_scalar_param
from tripletml.core.base import EMBEDDING_SIMILARITIES
from tripletml.core.files import check_regular_file, open_regular, read_json
from tripletml.persistence import load_model

__all__ = ["SimilarityIndex", "build", "load_index", "is_index_dir", "faiss_available",
           "embedding_cone",
           "IP_TO_L2_CONE", "IP_TO_L2_MIN_ROWS", "KINDS", "BACKENDS"]

KINDS = ("flat", "ivf", "hnsw")
BACKENDS = ("auto", "faiss", "numpy")
FORMAT_NAME = "tripletml-index"
FORMAT_VERSION = 3          # 2: ip_to_l2 / max_norm (a version-1 file reads as ip_to_l2=False)
#: 3: ``hashes`` (SHA-256 of model.npz and of the vectors / faiss index)
HASHED_VERSION = 3
_META_MAX_BYTES = 1 << 20
_HASH_CHUNK = 1 << 20
_INSTALL = "pip install tripletml[index]  (or: pip install faiss-cpu)"
#: rows per query block and per database block of the exact NumPy scan
_Q_BLOCK = 256
_DB_BLOCK = 16384
#: above this k the exact scan ranks whole rows instead of a running top k
_LARGE_K = KERNEL_MAX_K
#: a database block is merged with the next added rows while smaller than this
_MERGE_ROWS = 1 << 16
_SCORE_BYTES = 64 * 2**20


#: ``ip_to_l2=None`` uses the augmentation when the first database
#: embeddings' ``||mean|| / mean ||.||`` (:func:`embedding_cone`) exceeds this
IP_TO_L2_CONE = 0.5
#: ... measured on at least this many rows; a smaller first ``add`` keeps the
#: raw inner product
IP_TO_L2_MIN_ROWS = 32


def embedding_cone(E) -> float:
    """``||mean(E)|| / mean(||E_i||)`` of embedding rows: 0 for centered
    rows, 1 when they all point the same way (0 for no or all-zero rows).

    Parameters
    ----------
    E : array-like of shape (n, k)
        Finite rows (ValueError otherwise).

    Returns
    -------
    float in [0, 1]
    """
    E = np.asarray(E, dtype=np.float64)
    if E.ndim != 2:
        raise ValueError(f"embedding_cone: E must be a 2-D array of embedding rows, got "
                         f"shape {E.shape}.")
    if E.shape[0] == 0:
        return 0.0
    if not np.isfinite(E).all():
        raise ValueError("embedding_cone: E contains NaN or infinity.")
    mean_norm = float(np.sqrt(np.einsum("ij,ij->i", E, E)).mean())
    return float(np.linalg.norm(E.mean(axis=0)) / mean_norm) if mean_norm > 0 else 0.0


def faiss_available() -> bool:
    """Whether ``faiss`` (the ``faiss-cpu`` wheel) can be imported."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def _faiss(func: str):
    try:
        import faiss
    except ImportError:
        raise ImportError(f"{func}: the faiss backend needs faiss, which is not installed; "
                          f"{_INSTALL}.") from None
    return faiss


def _take(X, rows):
    """Rows of X (a DataFrame by position)."""
    return X.iloc[rows] if hasattr(X, "iloc") else X[rows]


def _search_work(index, Q, *args, **kwargs):
    """A search's work (tripletml.engine.threads): queries x database x dim."""
    n = getattr(Q, "shape", (None,))[0]
    return None if n is None or index.dim is None else float(n) * index.ntotal * index.dim


class SimilarityIndex:
    """k-nearest-neighbor index over a fitted model's database embeddings.

    Parameters
    ----------
    model : fitted tripletml triplet learner
        Any learner with ``embed_queries`` / ``embed_database`` (every
        registry triplet learner).  Its similarity defines the neighbors.
    kind : {"flat", "ivf", "hnsw"}, default="flat"
        Exact scan, inverted file (k-means cells) or HNSW graph.  "ivf" and
        "hnsw" need faiss.
    backend : {"auto", "faiss", "numpy"}, default="auto"
        "auto": faiss when importable, else numpy (exact, "flat" only).
    dtype : {"float32", "float64"} or None, default=None
        Storage of the numpy backend (None: float64, exact scores).  faiss
        always stores float32 (None or "float32").
    nlist : int or None, default=None
        IVF cells (None: ``clip(4 sqrt(n), 1, n / 39)`` at training).
    nprobe : int or None, default=None
        IVF cells visited per query (None: ``max(1, nlist // 16)``).
    hnsw_m : int, default=32
        HNSW links per node (M).
    ef_construction : int, default=200
        HNSW build beam width.
    ef_search : int, default=128
        HNSW search beam width (raised to k when smaller).
    train_size : int or None, default=None
        IVF training rows sampled from the first ``add`` (None:
        ``min(n, 256 nlist)``).
    random_state : None, int or numpy Generator
        Sampling of the IVF training rows.
    ip_to_l2 : bool or None, default=None
        Search an inner-product model as L2 after the augmentation
        ``x -> [x, sqrt(M^2 - ||x||^2)]``, ``q -> [q, 0]`` (faiss only; the
        ranking is the inner product's; see the module docstring for when it
        helps).  None: off for ``kind="flat"``, an L2 model or the numpy
        backend; on for ``"ivf"`` over an inner-product model; for
        ``"hnsw"`` decided at the first ``add`` (on when the database
        embeddings lie in a narrow cone, :func:`embedding_cone` >
        :data:`IP_TO_L2_CONE`, measured on at least
        :data:`IP_TO_L2_MIN_ROWS` rows, else off; on at once when
        ``max_norm`` is given).  With the augmentation, ``max_norm`` is
        fixed by the first ``add``: later rows with larger embeddings are
        refused (pass ``max_norm`` to leave room).  True with an L2 model or
        the numpy backend is a ValueError.
    max_norm : float or None, default=None
        ``M`` of the augmentation: None takes the largest database
        embedding norm of the first ``add``.  Rows added later must not
        exceed it (ValueError); pass a larger ``max_norm`` to leave room.

    Attributes
    ----------
    model : the learner
    metric : {"inner_product", "neg_squared_l2"}
        ``model.embedding_similarity``.
    dim : int or None
        Embedding dimensions (None before the first ``add``).
    ntotal : int
        Database rows added.
    backend : {"faiss", "numpy"}
        The backend in use ("auto" resolved).
    ip_to_l2 : bool or None
        Whether the augmentation is in use (None: not decided yet, before
        the first ``add``).
    max_norm : float or None
        ``M`` of the augmentation (set by the first ``add`` when None).
    """

    def __init__(self, model: Any, *, kind: str = "flat", backend: str = "auto",
                 dtype: str | None = None, nlist: int | None = None,
                 nprobe: int | None = None, hnsw_m: int = 32, ef_construction: int = 200,
                 ef_search: int = 128, train_size: int | None = None,
                 random_state: Any = None, ip_to_l2: bool | None = None,
                 max_norm: float | None = None):
        who = "SimilarityIndex"
        model = _winner(model)
        _check_model(model, who)
        check_choice_param(kind, "kind", who, KINDS)
        check_choice_param(backend, "backend", who, BACKENDS)
        if backend == "auto":
            backend = "faiss" if faiss_available() else "numpy"
            if backend == "numpy" and kind != "flat":
                _faiss(f"{who}(kind={kind!r})")
        elif backend == "faiss":
            _faiss(who)
        if backend == "numpy" and kind != "flat":
            raise ValueError(f"{who}: the numpy backend is exact (kind='flat' only); kind="
                             f"{kind!r} needs backend='faiss' ({_INSTALL}).")
        if dtype is not None:
            check_choice_param(dtype, "dtype", who, ("float32", "float64"))
        if backend == "faiss" and dtype == "float64":
            raise ValueError(f"{who}: faiss stores float32 vectors; use dtype=None or "
                             "'float32', or backend='numpy' for float64.")
        for name, value in (("nlist", nlist), ("nprobe", nprobe), ("train_size", train_size)):
            check_scalar_param(value, name, who, kind="int", low=1, allow_none=True)
        for name, value in (("hnsw_m", hnsw_m), ("ef_construction", ef_construction),
                            ("ef_search", ef_search)):
            check_scalar_param(value, name, who, kind="int", low=1)
        if ip_to_l2 is not None and not isinstance(ip_to_l2, (bool, np.bool_)):
            raise TypeError(f"{who}: ip_to_l2 must be True, False or None, got {ip_to_l2!r}.")
        metric = str(model.embedding_similarity)
        if ip_to_l2 is None:
            # IVF: always; HNSW: decided from the data at the first add (None
            # until then; a max_norm asks for the augmentation)
            if not (backend == "faiss" and kind != "flat" and metric == "inner_product"):
                ip_to_l2 = False
            elif kind == "ivf" or max_norm is not None:
                ip_to_l2 = True
        elif ip_to_l2 and (backend != "faiss" or metric != "inner_product"):
            raise ValueError(f"{who}: ip_to_l2=True turns an inner-product search into an L2 "
                             f"one for faiss; it needs backend='faiss' and an inner-product "
                             f"model (got backend={backend!r}, metric={metric!r}).")
        check_scalar_param(max_norm, "max_norm", who, kind="real", low=0.0,
                           low_inclusive=False, allow_none=True)
        if max_norm is not None and not ip_to_l2:
            raise ValueError(f"{who}: max_norm is the M of the ip_to_l2 augmentation; it "
                             "needs ip_to_l2 in use.")
        self.model = model
        self.kind = kind
        self.ip_to_l2 = None if ip_to_l2 is None else bool(ip_to_l2)
        self.max_norm = None if max_norm is None else float(max_norm)
        self.backend = backend
        self.metric = metric
        self.dtype = np.dtype(dtype or ("float32" if backend == "faiss" else "float64"))
        self.nlist = None if nlist is None else int(nlist)
        self.nprobe = None if nprobe is None else int(nprobe)
        self.hnsw_m = int(hnsw_m)
        self.ef_construction = int(ef_construction)
        self.ef_search = int(ef_search)
        self.train_size = None if train_size is None else int(train_size)
        self._rng = as_generator(random_state, who)
        self.dim: int | None = None
        self._blocks: list[np.ndarray] = []      # numpy backend: database rows
        self._norms: list[np.ndarray] = []       # their squared norms (L2)
        self._faiss_index = None
        self._quantizer = None

    # ------------------------------------------------------------ properties
    @property
    def ntotal(self) -> int:
        """Number of database rows in the index."""
        if self.backend == "faiss":
            return 0 if self._faiss_index is None else int(self._faiss_index.ntotal)
        return int(sum(b.shape[0] for b in self._blocks))

    @property
    def is_exact(self) -> bool:
        """True for ``kind="flat"`` (exact search)."""
        return self.kind == "flat"

    def __repr__(self) -> str:
        aug = {True: ", ip_to_l2=True", None: ", ip_to_l2=None"}.get(self.ip_to_l2, "")
        return (f"SimilarityIndex({type(self.model).__name__}, kind={self.kind!r}, "
                f"backend={self.backend!r}, metric={self.metric!r}{aug}, dim={self.dim}, "
                f"ntotal={self.ntotal})")

    @property
    def _faiss_l2(self) -> bool:
        """The faiss index measures L2 (an L2 model, or the augmentation)."""
        return self.metric == "neg_squared_l2" or self.ip_to_l2

    # ----------------------------------------------------------------- build
    def _new_faiss(self, dim: int, n_train: int):
        faiss = _faiss("SimilarityIndex")
        metric = faiss.METRIC_L2 if self._faiss_l2 else faiss.METRIC_INNER_PRODUCT
        if self.kind == "flat":
            return faiss.IndexFlatIP(dim) if metric == faiss.METRIC_INNER_PRODUCT \
                else faiss.IndexFlatL2(dim)
        if self.kind == "hnsw":
            index = faiss.IndexHNSWFlat(dim, self.hnsw_m, metric)
            index.hnsw.efConstruction = self.ef_construction
            index.hnsw.efSearch = self.ef_search
            return index
        if self.nlist is None:
            self.nlist = int(max(1, min(4 * np.sqrt(n_train), n_train // 39, 65536)))
        if self.nprobe is None:
            self.nprobe = max(1, self.nlist // 16)
        self._quantizer = faiss.IndexFlatIP(dim) if metric == faiss.METRIC_INNER_PRODUCT \
            else faiss.IndexFlatL2(dim)
        index = faiss.IndexIVFFlat(self._quantizer, dim, self.nlist, metric)
        index.nprobe = self.nprobe
        return index

    def _train_ivf(self, X, func: str) -> None:
        n = X.shape[0]
        nlist = self.nlist or int(max(1, min(4 * np.sqrt(n), n // 39, 65536)))
        if n < nlist:
            raise ValueError(f"{func}: an IVF index with nlist={nlist} needs at least {nlist} "
                             f"rows in its first add, got {n}.")
        size = min(n, self.train_size or 256 * nlist)
        rows = np.sort(self._rng.choice(n, size=size, replace=False)) if size < n \
            else np.arange(n)
        E = self._embed(_take(X, rows), "database")
        self.nlist = nlist
        self._faiss_index = self._new_faiss(E.shape[1], n)
        self._faiss_index.train(E)

    def _embed(self, X, side: str) -> np.ndarray:
        """Embeddings as stored (with the ip_to_l2 coordinate when in use)."""
        fn = self.model.embed_queries if side == "query" else self.model.embed_database
        E = np.ascontiguousarray(fn(X), dtype=self.dtype)
        if not self.ip_to_l2:
            return E
        out = np.zeros((E.shape[0], E.shape[1] + 1), dtype=self.dtype)
        out[:, :-1] = E
        if side == "database":
            sq = np.einsum("ij,ij->i", E, E, dtype=np.float64)
            out[:, -1] = np.sqrt(np.maximum(self.max_norm ** 2 - sq, 0.0))
        return out

    def _fix_max_norm(self, X, batch_size: int, func: str) -> None:
        """ip_to_l2: M from the first add (a pass over the embedding norms,
        nothing kept), and rows above M refused before anything is added."""
        fn = self.model.embed_database
        top = 0.0
        for s in range(0, X.shape[0], batch_size):
            E = np.asarray(fn(_take(X, slice(s, s + batch_size))), dtype=np.float64)
            if E.size:
                top = max(top, float(np.sqrt(np.einsum("ij,ij->i", E, E).max())))
        if self.max_norm is None:
            self.max_norm = max(top, np.finfo(np.float32).tiny)
        elif top > self.max_norm * (1 + 1e-6):
            raise ValueError(f"{func}: a row's embedding norm {top:.6g} exceeds this index's "
                             f"max_norm={self.max_norm:.6g} (the M of the ip_to_l2 "
                             "augmentation, fixed when the index was first filled); build "
                             "the index with a larger max_norm, or with ip_to_l2=False.")

    def add(self, X, *, batch_size: int = 65536, verbose: Any = 0) -> "SimilarityIndex":
        """Embed and add database rows (in batches of ``batch_size``).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
            Raw feature rows; ids continue from ``ntotal``.
        batch_size : int, default=65536
            Rows embedded at a time (bounds the working memory).
        verbose : int, default=0
            Progress bar (on a terminal; ``>= 2`` always).

        Returns
        -------
        self
        """
        func = "SimilarityIndex.add"
        X = _check_rows(X, func)
        batch_size = check_scalar_param(batch_size, "batch_size", func, kind="int", low=1)
        n = X.shape[0]
        if n == 0:
            raise ValueError(f"{func}: X has no rows.")
        if self.ip_to_l2 is None:
            # the cone of a few rows says nothing (one row: always 1)
            first = _take(X, slice(0, max(batch_size, IP_TO_L2_MIN_ROWS)))
            self.ip_to_l2 = bool(first.shape[0] >= IP_TO_L2_MIN_ROWS and embedding_cone(
                self.model.embed_database(first)) > IP_TO_L2_CONE)
        if self.ip_to_l2:
            self._fix_max_norm(X, batch_size, func)
        if self.backend == "faiss" and self._faiss_index is None and self.kind == "ivf":
            self._train_ivf(X, func)
        bar = progress_bar(n, verbose=verbose, desc="index add", unit="row")
        try:
            for s in range(0, n, batch_size):
                E = self._embed(_take(X, slice(s, s + batch_size)), "database")
                if self.dim is None:
                    self.dim = int(E.shape[1]) - self.ip_to_l2
                if self.backend == "faiss":
                    if self._faiss_index is None:
                        self._faiss_index = self._new_faiss(E.shape[1], n)
                    self._faiss_index.add(E)
                else:
                    self._add_block(E)
                if bar is not None:
                    bar.update(E.shape[0])
        finally:
            if bar is not None:
                bar.close()
        return self

    def _add_block(self, E: np.ndarray) -> None:
        if self._blocks and self._blocks[-1].shape[0] < _MERGE_ROWS:
            E = np.concatenate([self._blocks.pop(), E])
            self._norms.pop()
        self._blocks.append(E)
        self._norms.append(np.einsum("ij,ij->i", E, E, dtype=np.float64))

    # ---------------------------------------------------------------- search
    @threads_for(_search_work)
    def search(self, Q, k: int = 10, *, batch_size: int = 4096,
               verbose: Any = 0) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` database rows of highest similarity to each query.

        Parameters
        ----------
        Q : array-like or scipy.sparse matrix of shape (n_queries, n_features)
            Raw query rows.
        k : int, default=10
            Neighbors per query, ``1 <= k <= ntotal``.
        batch_size : int, default=4096
            Queries embedded and searched at a time.
        verbose : int, default=0
            Progress bar (on a terminal; ``>= 2`` always).

        Returns
        -------
        scores : ndarray of shape (n_queries, k), float64
            The model's similarities ``S(q, x)``, best first (``-inf`` in
            missing slots).
        ids : ndarray of shape (n_queries, k), int64
            Database row ids (exact index, numpy backend: equal scores by
            lower id).  An approximate index may find fewer than k: the
            missing slots hold -1.

        Notes
        -----
        The order changed with issue 25: the result is ``(scores, ids)``, as
        scikit-learn's ``kneighbors`` returns (distances, then indices); it
        was ``(ids, scores)``.
        """
        func = "SimilarityIndex.search"
        Q = _check_rows(Q, func, name="Q")
        n_total = self.ntotal
        if n_total == 0:
            raise ValueError(f"{func}: the index is empty; add database rows first.")
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
            raise TypeError(f"{func}: k must be an int, got {k!r}.")
        if not 1 <= k <= n_total:
            raise ValueError(f"{func}: k must satisfy 1 <= k <= ntotal={n_total}, got k={k}.")
        k = int(k)
        batch_size = check_scalar_param(batch_size, "batch_size", func, kind="int", low=1)
        # the search settings may have been set as attributes after construction
        # (the CLI's --nprobe / --ef-search): faiss would fail on 0 (a C++
        # assertion) or a negative number (a SWIG message), or ignore them
        check_scalar_param(self.nprobe, "nprobe", func, kind="int", low=1, allow_none=True)
        check_scalar_param(self.ef_search, "ef_search", func, kind="int", low=1)
        n_q = Q.shape[0]
        ids = np.full((n_q, k), -1, dtype=np.int64)
        scores = np.full((n_q, k), -np.inf)
        bar = progress_bar(n_q, verbose=verbose, desc="search", unit="query")
        try:
            for s in range(0, n_q, batch_size):
                E = self._embed(_take(Q, slice(s, s + batch_size)), "query")
                t = slice(s, s + E.shape[0])
                if self.backend == "faiss":
                    scores[t], ids[t] = self._search_faiss(E, k)
                elif k > _LARGE_K:
                    scores[t], ids[t] = self._search_numpy_rank(E, k)
                else:
                    scores[t], ids[t] = self._search_numpy(E, k)
                if bar is not None:
                    bar.update(E.shape[0])
        finally:
            if bar is not None:
                bar.close()
        return scores, ids

    def _search_faiss(self, E, k):
        index = self._faiss_index
        if self.kind == "hnsw":
            index.hnsw.efSearch = max(self.ef_search, k)
        elif self.kind == "ivf":
            index.nprobe = self.nprobe
        D, ids = index.search(E, k)
        scores = D.astype(np.float64)
        if self.ip_to_l2:
            # ||q' - x'||^2 = ||q||^2 + M^2 - 2 <q, x>
            qn = np.einsum("ij,ij->i", E, E, dtype=np.float64)
            scores = 0.5 * ((qn[:, None] + self.max_norm ** 2) - scores)
        elif self.metric == "neg_squared_l2":
            scores = -scores
        missing = ids < 0
        scores[missing] = -np.inf
        return scores, ids.astype(np.int64)

    def _search_numpy(self, E, k):
        """Blockwise GEMM + running top k (:class:`tripletml.linalg.topk.TopK`,
        exact, tie rule)."""
        l2 = self.metric == "neg_squared_l2"
        n_q = E.shape[0]
        acc = TopK(n_q, k)
        qn = np.einsum("ij,ij->i", E, E, dtype=np.float64) if l2 else None
        buf = np.empty(_Q_BLOCK * _DB_BLOCK, dtype=self.dtype)
        for q0 in range(0, n_q, _Q_BLOCK):
            q1 = min(q0 + _Q_BLOCK, n_q)
            Eq = E[q0:q1]
            offset = 0
            for block, norms in zip(self._blocks, self._norms):
                for b0 in range(0, block.shape[0], _DB_BLOCK):
                    b1 = min(b0 + _DB_BLOCK, block.shape[0])
                    S = buf[:(q1 - q0) * (b1 - b0)].reshape(q1 - q0, b1 - b0)
                    np.dot(Eq, block[b0:b1].T, out=S)
                    acc.add(S, offset=offset + b0, rows=slice(q0, q1),
                            sq_norms=(qn[q0:q1], norms[b0:b1]) if l2 else None)
                offset += block.shape[0]
        return acc.finalize()

    def _search_numpy_rank(self, E, k):
        """Large k: whole rows of scores, exact top k under the tie rule."""
        l2 = self.metric == "neg_squared_l2"
        n_total = self.ntotal
        n_q = E.shape[0]
        acc = TopK(n_q, k)
        chunk = max(1, min(n_q, _SCORE_BYTES // (8 * n_total)))
        qn = np.einsum("ij,ij->i", E, E, dtype=np.float64)
        for q0 in range(0, n_q, chunk):
            q1 = min(q0 + chunk, n_q)
            S = np.empty((q1 - q0, n_total))
            offset = 0
            for block, norms in zip(self._blocks, self._norms):
                part = (E[q0:q1] @ block.T).astype(np.float64)
                if l2:
                    part = -((qn[q0:q1, None] - 2.0 * part) + norms[None, :])
                    np.minimum(part, 0.0, out=part)
                S[:, offset:offset + block.shape[0]] = part
                offset += block.shape[0]
            acc.add(S, rows=slice(q0, q1))
        return acc.finalize()

    # ------------------------------------------------------------- persistence
    def save(self, path) -> None:
        """Write the index and its model to the directory ``path``.

        Files: ``model.npz`` (the model, :func:`tripletml.load_model` format),
        ``index.json`` (metadata) and ``vectors.npy`` (numpy backend) or
        ``index.faiss`` (faiss's own format).  The directory is written
        beside ``path`` and renamed into place; an existing ``path`` is
        replaced only when it is a tripletml index directory.
        """
        func = "SimilarityIndex.save"
        if self.ntotal == 0:
            raise ValueError(f"{func}: the index is empty; add database rows first.")
        path = Path(path)
        if (path.exists() or path.is_symlink()) and not is_index_dir(path):
            raise ValueError(f"{func}: {path} exists and is not a tripletml index directory; "
                             "refusing to overwrite it.")
        parent = path.parent if str(path.parent) else Path(".")
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=parent))
        try:
            self.model.save(tmp / "model.npz")
            meta = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                    "backend": self.backend, "kind": self.kind, "metric": self.metric,
                    "dim": self.dim, "ntotal": self.ntotal, "dtype": self.dtype.name,
                    "model_class": type(self.model).__name__,
                    "params": {"nlist": self.nlist, "nprobe": self.nprobe,
                               "hnsw_m": self.hnsw_m, "ef_construction": self.ef_construction,
                               "ef_search": self.ef_search, "train_size": self.train_size,
                               "ip_to_l2": self.ip_to_l2, "max_norm": self.max_norm}}
            if self.backend == "faiss":
                _faiss(func).write_index(self._faiss_index, str(tmp / "index.faiss"))
            else:
                out = np.lib.format.open_memmap(tmp / "vectors.npy", mode="w+",
                                                dtype=self.dtype, shape=(self.ntotal, self.dim))
                offset = 0
                for block in self._blocks:
                    out[offset:offset + block.shape[0]] = block
                    offset += block.shape[0]
                out.flush()
                del out
            data_file = "index.faiss" if self.backend == "faiss" else "vectors.npy"
            meta["hashes"] = {name: _sha256_file(tmp / name, func)[0]
                              for name in ("model.npz", data_file)}
            (tmp / "index.json").write_text(json.dumps(meta, indent=1))
            os.chmod(tmp, 0o777 & ~_umask())
            if path.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=parent))
                os.replace(path, old / "index")
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    @classmethod
    def load(cls, path) -> "SimilarityIndex":
        """Read an index written by :meth:`save` (see :func:`load_index`)."""
        return load_index(path)


#: the files of an index directory
_INDEX_FILES = frozenset({"index.json", "model.npz", "vectors.npy", "index.faiss"})


def is_index_dir(path) -> bool:
    """Whether ``path`` is a directory (not a symbolic link) that holds a
    tripletml index and nothing else: an ``index.json`` naming the index
    format and only the files :meth:`SimilarityIndex.save` writes.  What
    ``save`` (and the command line) may replace; anything else is refused."""
    path = Path(path)
    try:
        if path.is_symlink() or not path.is_dir():
            return False
        names = set(os.listdir(path))
        if "index.json" not in names or not names <= _INDEX_FILES:
            return False
        meta = _read_meta(path, "is_index_dir")
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT_NAME


def _sha256_file(path: Path, func: str) -> tuple[str, os.stat_result]:
    """SHA-256 (hex) of a regular file, read in chunks, and the ``fstat`` of
    the descriptor it was read from (to tell a file swapped afterwards)."""
    h = hashlib.sha256()
    with open_regular(path, func) as fh:
        st = os.fstat(fh.fileno())
        for chunk in iter(lambda: fh.read(_HASH_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest(), st


def _verified(path: Path, name: str, hashes: dict | None, func: str) -> os.stat_result | None:
    """Check ``path / name`` against its recorded hash (None: an unverified
    legacy index; only the regular-file check).  Returns the file's stat."""
    file = path / name
    if not file.exists():
        raise FileNotFoundError(f"{func}: {file} is missing.")
    if hashes is None:
        check_regular_file(file, func)
        return None
    digest, st = _sha256_file(file, func)
    if digest != hashes[name]:
        raise ValueError(f"{func}: {file} does not match the SHA-256 recorded in "
                         f"{path}/index.json: the file was modified or replaced after the "
                         "index was written; rebuild the index.")
    return st


def _unchanged(file: Path, st: os.stat_result | None, func: str) -> None:
    """The file read is the one hashed (same inode, size and mtime)."""
    if st is None:
        return
    now = os.stat(file)
    if (now.st_ino, now.st_dev, now.st_size, now.st_mtime_ns) != (
            st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns):
        raise ValueError(f"{func}: {file} changed while it was read; load the index again.")


def _unchanged_fd(fh, st: os.stat_result | None, file: Path, func: str) -> None:
    """The open file is the one hashed (same inode, size and mtime)."""
    if st is None:
        return
    now = os.fstat(fh.fileno())
    if (now.st_ino, now.st_dev, now.st_size, now.st_mtime_ns) != (
            st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns):
        raise ValueError(f"{func}: {file} changed while it was read; load the index again.")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _winner(model: Any) -> Any:
    """A fitted :class:`~tripletml.AutoSimilarity` is indexed as its winner
    (what its ``save`` writes); any other model as itself.  The class is
    looked up in :data:`sys.modules`, not imported (search sits below
    :mod:`tripletml.auto`): no instance exists before its module is loaded."""
    auto = sys.modules.get("tripletml.auto.estimator")
    if (auto is not None and isinstance(model, auto.AutoSimilarity)
            and hasattr(model, "best_estimator_")):
        return model.best_estimator_
    return model


def _check_model(model: Any, func: str) -> None:
    if not (callable(getattr(model, "embed_queries", None))
            and callable(getattr(model, "embed_database", None))
            and getattr(model, "embedding_similarity", None) in EMBEDDING_SIMILARITIES):
        raise TypeError(f"{func}: model must be a tripletml triplet learner (with "
                        f"embed_queries / embed_database), got {type(model).__name__}.")
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(model)


def _check_rows(X, func: str, name: str = "X"):
    if X is None:
        raise ValueError(f"{func}: {name} must not be None.")
    if sp.issparse(X):
        X = X.tocsr()
    elif not hasattr(X, "shape") or not hasattr(X, "__getitem__"):
        X = np.asarray(X)
    if len(X.shape) != 2:
        raise ValueError(f"{func}: {name} must be 2-D (n_samples, n_features), got shape "
                         f"{X.shape}.")
    return X


def build(model: Any, X, *, kind: str = "flat", backend: str = "auto",
          batch_size: int = 65536, verbose: Any = 0, **params: Any) -> SimilarityIndex:
    """Build a :class:`SimilarityIndex` over the rows of ``X``.

    Parameters
    ----------
    model : fitted tripletml triplet learner
    X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        Database rows (raw features; the model embeds them).
    kind : {"flat", "ivf", "hnsw"}, default="flat"
    backend : {"auto", "faiss", "numpy"}, default="auto"
    batch_size : int, default=65536
        Rows embedded at a time.
    verbose : int, default=0
        Progress bar (on a terminal; ``>= 2`` always).
    **params
        ``dtype``, ``nlist``, ``nprobe``, ``hnsw_m``, ``ef_construction``,
        ``ef_search``, ``train_size``, ``random_state``, ``ip_to_l2``,
        ``max_norm`` (see
        :class:`SimilarityIndex`).

    Returns
    -------
    SimilarityIndex

    Raises
    ------
    ImportError
        ``kind`` "ivf"/"hnsw" or ``backend="faiss"`` without faiss.
    TypeError, ValueError
        On a model that is not a fitted triplet learner, bad parameters or X.
    """
    allowed = {"dtype", "nlist", "nprobe", "hnsw_m", "ef_construction", "ef_search",
               "train_size", "random_state", "ip_to_l2", "max_norm"}
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise TypeError(f"build: unknown parameter(s) {unknown}; allowed: {sorted(allowed)}.")
    index = SimilarityIndex(model, kind=kind, backend=backend, **params)
    return index.add(X, batch_size=batch_size, verbose=verbose)


def _read_meta(path: Path, func: str) -> dict:
    """``index.json``: a regular file of at most 1 MiB holding a JSON object."""
    file = path / "index.json"
    if not path.is_dir() or not (file.exists() or file.is_symlink()):
        raise FileNotFoundError(f"{func}: {path} is not a tripletml index directory "
                                "(no index.json).")
    return read_json(file, func, _META_MAX_BYTES, "a tripletml index")


def load_index(path, *, allow_unverified: bool = False) -> SimilarityIndex:
    """Load an index directory written by :meth:`SimilarityIndex.save`.

    Every file is checked against the SHA-256 that ``index.json`` records
    for it before it is used (the model that embedded the vectors, and the
    vectors or faiss index), and only regular files are opened.  The hashes
    catch accidents, not an attacker who can write the directory: a model
    swapped together with its hash in ``index.json`` loads (the index is not
    signed).  Trust an index as far as you trust whoever can write its
    directory.  The model
    is read with :func:`tripletml.load_model`, the vectors with
    ``np.load(..., allow_pickle=False)`` or faiss's ``read_index``; shapes,
    dtypes, the metric and the row count are checked against ``index.json``.

    Parameters
    ----------
    path : str or path-like
        The index directory.
    allow_unverified : bool, default=False
        Load an index written before content hashes were recorded (format
        version 1 or 2) with a ``UserWarning`` instead of refusing it.  Its
        files cannot be verified; ``save`` the loaded index to record them.

    Raises
    ------
    FileNotFoundError
        No such directory or file in it.
    ValueError
        A file that is not a tripletml index, is inconsistent, is not a
        regular file, or does not match its recorded hash; an index without
        hashes when ``allow_unverified`` is False.
    ImportError
        A faiss index and faiss not installed.
    """
    func = "load_index"
    if not isinstance(allow_unverified, (bool, np.bool_)):
        raise TypeError(f"{func}: allow_unverified must be True or False, got "
                        f"{allow_unverified!r}.")
    path = Path(path)
    meta = _read_meta(path, func)
    hashes = _index_hashes(path, meta, allow_unverified, func)
    st = _verified(path, "model.npz", hashes, func)
    model = load_model(path / "model.npz")
    _unchanged(path / "model.npz", st, func)
    index = _index_from_meta(path, meta, model, func)
    if meta["backend"] == "faiss":
        index._faiss_index = _read_faiss(path, meta, index, hashes, func)
    else:
        V = _read_vectors(path, meta, hashes, func)
        index._blocks = [np.ascontiguousarray(V)]
        index._norms = [np.einsum("ij,ij->i", V, V, dtype=np.float64)]
    return index


def _index_hashes(path: Path, meta: Any, allow_unverified: bool, func: str) -> dict | None:
    """The format, version and content hashes of ``index.json`` checked
    (popped from ``meta``): the hashes to verify, or None for a legacy
    index loaded unverified (with a warning)."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ValueError(f"{func}: {path} is not a tripletml index.")
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(f"{func}: {path} has format version {version!r}; this tripletml "
                         f"reads versions <= {FORMAT_VERSION}.")
    backend = meta.get("backend")
    data_file = "index.faiss" if backend == "faiss" else "vectors.npy"
    hashes = meta.pop("hashes", None)
    if version >= HASHED_VERSION:
        if not (isinstance(hashes, dict) and set(hashes) == {"model.npz", data_file}
                and all(isinstance(v, str) and len(v) == 64 for v in hashes.values())):
            raise ValueError(f"{func}: {path}/index.json does not record the SHA-256 of "
                             f"model.npz and {data_file}; the index was tampered with; "
                             "rebuild it.")
    elif hashes is not None:
        raise ValueError(f"{func}: {path}/index.json: hashes in a version-{version} index.")
    elif not allow_unverified:
        raise ValueError(f"{func}: {path} was written by an older tripletml (format version "
                         f"{version}) without content hashes, so its files cannot be "
                         "verified; rebuild it (tripletml index build), or load it with "
                         "load_index(path, allow_unverified=True) and save it again.")
    else:
        warnings.warn(f"{func}: {path} (format version {version}) records no content hashes; "
                      "its files are loaded unverified. Save it again to record them.",
                      UserWarning, stacklevel=3)
    return hashes


def _index_from_meta(path: Path, meta: dict, model: Any, func: str) -> SimilarityIndex:
    """An empty :class:`SimilarityIndex` over ``model`` with the metadata of
    ``index.json``, each field checked (and against the model)."""
    backend, kind, metric = meta.get("backend"), meta.get("kind"), meta.get("metric")
    dim, ntotal, dtype = meta.get("dim"), meta.get("ntotal"), meta.get("dtype")
    params = meta.get("params")
    if backend not in ("faiss", "numpy") or kind not in KINDS or dtype not in (
            "float32", "float64") or not isinstance(params, dict):
        raise ValueError(f"{func}: {path}/index.json has malformed metadata.")
    for name, v in (("dim", dim), ("ntotal", ntotal)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{func}: {path}/index.json: {name}={v!r} is not a positive int.")
    if metric != model.embedding_similarity or meta.get("model_class") != type(model).__name__:
        raise ValueError(f"{func}: {path}: the index metric {metric!r} / class "
                         f"{meta.get('model_class')!r} do not match the saved model "
                         f"({type(model).__name__}, {model.embedding_similarity!r}).")
    known = {"nlist", "nprobe", "hnsw_m", "ef_construction", "ef_search", "train_size",
             "ip_to_l2", "max_norm"}
    # version 1 had no augmentation: its faiss indexes hold the raw vectors
    params = dict({"ip_to_l2": False, "max_norm": None}, **params)
    if set(params) - known:
        raise ValueError(f"{func}: {path}/index.json has unknown parameters "
                         f"{sorted(set(params) - known)}.")
    try:
        index = SimilarityIndex(model, kind=kind, backend=backend,
                                dtype=dtype if backend == "numpy" else None, **params)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{func}: {path}/index.json has invalid parameters: {exc}") from None
    if index.ip_to_l2 and index.max_norm is None:
        raise ValueError(f"{func}: {path}/index.json: ip_to_l2 without max_norm.")
    if index.ip_to_l2 is None:     # decided by the first add, which a saved index had
        raise ValueError(f"{func}: {path}/index.json: ip_to_l2 is null in an index that "
                         "holds rows.")
    probe = model.embed_queries(np.zeros((1, model.n_features_in_)))
    if probe.shape[1] != dim:
        raise ValueError(f"{func}: {path}: the model embeds into {probe.shape[1]} dimensions, "
                         f"the index holds {dim}.")
    index.dim = dim
    return index


def _read_faiss(path: Path, meta: dict, index: SimilarityIndex, hashes: dict | None,
                func: str):
    """``index.faiss``, verified, read by faiss and checked against
    ``index.json``."""
    dim, ntotal, metric = meta["dim"], meta["ntotal"], meta["metric"]
    faiss = _faiss(func)
    file = path / "index.faiss"
    st = _verified(path, "index.faiss", hashes, func)
    try:
        fi = faiss.read_index(str(file))
    except RuntimeError as exc:
        raise ValueError(f"{func}: {file} is not a readable faiss index "
                         f"({str(exc).splitlines()[0][:200]}).") from None
    _unchanged(file, st, func)
    want = faiss.METRIC_L2 if index._faiss_l2 else faiss.METRIC_INNER_PRODUCT
    if fi.d != dim + index.ip_to_l2 or fi.ntotal != ntotal or fi.metric_type != want:
        raise ValueError(f"{func}: {file} (d={fi.d}, ntotal={fi.ntotal}) does not match "
                         f"index.json (dim={dim}, ntotal={ntotal}, metric={metric}, "
                         f"ip_to_l2={index.ip_to_l2}).")
    return fi


def _read_vectors(path: Path, meta: dict, hashes: dict | None, func: str) -> np.ndarray:
    """``vectors.npy``, verified, read without pickle and checked against
    ``index.json`` (shape, dtype, finite values)."""
    dim, ntotal, dtype = meta["dim"], meta["ntotal"], meta["dtype"]
    file = path / "vectors.npy"
    st = _verified(path, "vectors.npy", hashes, func)
    with open_regular(file, func) as fh:
        _unchanged_fd(fh, st, file, func)
        try:
            V = np.load(fh, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"{func}: {file} is not a readable .npy file "
                             f"({exc}).") from None
    if V.shape != (ntotal, dim) or V.dtype != np.dtype(dtype):
        raise ValueError(f"{func}: {file} holds {V.dtype} {V.shape}, index.json declares "
                         f"{dtype} ({ntotal}, {dim}).")
    if not np.isfinite(V).all():
        raise ValueError(f"{func}: {file} holds non-finite values.")
    return V
