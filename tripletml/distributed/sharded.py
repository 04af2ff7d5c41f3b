"""Embedding, exact search and retrieval evaluation of collections bigger than
memory, as Dask map/reduce over row partitions (optional: ``pip install
"tripletml[dask]"``).

A :class:`ShardedCollection` is a list of row partitions (dense arrays or CSR
matrices) with their row counts and, optionally, labels.  A partition is
either a Dask ``Delayed`` (a chunk of a Dask array, a partition of a bag) or a
*loader*: a picklable callable that returns ``(X, y)`` when called (an ``.npz``
shard, a synthetic generator).  Loaders are called inside each task, so a
worker holds one partition at a time and nothing is kept between passes.

Global row ids are the rows' positions in the concatenated collection.  All
rankings follow :mod:`tripletml.metrics`' tie rule (equal scores: lower id
first), so the results equal the local ones exactly:

* :func:`search` -- map: the exact top-k of every query within a partition
  (scores as :class:`tripletml.search.index.SimilarityIndex`'s exact numpy backend:
  ``<embed_queries(q), embed_database(x)>`` or minus the squared distance);
  reduce: a tree of merges of top-k lists ordered by ``(-score, id)``
  (:class:`tripletml.linalg.topk.TopK`), returned as ``(scores, ids)``.
  Equals ``tripletml.search.index.build(model, X, backend="numpy").search(Q, k)``.
* :func:`evaluate_retrieval` -- the full-ranking mAP, precision@k and
  recall@k of many queries in two passes.  Pass 1 (map) collects, per query,
  the scores and ids of its relevant items in each partition; the reduce
  sorts them by ``(-score, id)``.  Pass 2 (map) counts, in each partition,
  the items ranked before each relevant item (a count per relevant item,
  summed over partitions in a tree).  The rank of the m-th relevant item is
  then ``1 + count``, its precision ``m / rank``, and AP, P@k and R@k follow
  exactly as :func:`tripletml.metrics.evaluate_retrieval` computes them (same
  arithmetic in the same order: the numbers are bitwise equal for dense data).
  Memory: one partition's scores for one block of queries per task, and the
  relevant items of one block of queries in the reduce (``O(query_block *
  n_relevant)``); the collection itself is never gathered.
* :func:`build_indexes` / :func:`search_indexes` -- one
  :class:`~tripletml.search.index.SimilarityIndex` per partition (faiss where it is
  installed, else exact numpy), saved by the workers to a shared directory,
  searched and merged the same way.

Scores of the evaluation are computed from the embeddings; for sparse data the
local reference is therefore ``evaluate_retrieval(..., index=<exact numpy
index>)`` (a sparse ``model.similarity`` sums in another order and may differ
in the last bit).
"""
from __future__ import annotations

import functools
import numbers
import os
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted

from tripletml import persistence as _p
from tripletml.core.files import open_regular
from tripletml.core.validation import as_generator
from tripletml.distributed.dask_search import require_dask
from tripletml.distributed.partitioned import fit_partitioned
from tripletml.distributed.reduction import tree_sum
from tripletml.linalg.topk import TopK
from tripletml.metrics import _check_ks, _mean_ap, _recall
from tripletml.search.index import build, load_index

__all__ = ["ShardedCollection", "write_npz_shards", "read_npz_shards", "load_npz_shard",
           "embed", "search", "evaluate_retrieval", "build_indexes", "search_indexes"]

#: target bytes of one block of float64 scores inside a task
_SCORE_BYTES = 32 * 2**20


# ---------------------------------------------------------------------------
# shards on disk
# ---------------------------------------------------------------------------
def write_npz_shards(directory, X, y=None, *, rows_per_shard: int,
                     prefix: str = "shard", shuffle: bool = False,
                     random_state: Any = None) -> list[Path]:
    """Write ``X`` (dense or sparse) and labels ``y`` as ``.npz`` shards.

    Sparse shards are ``scipy.sparse.save_npz`` archives with an extra ``y``
    member; dense shards hold ``X`` (and ``y``).  Files are named
    ``{prefix}-00000.npz`` ... in row order.

    ``shuffle=True`` writes the rows in the order
    ``np.random.default_rng(random_state).permutation(n)`` (reproducible
    with an int seed): rows sorted by class would otherwise give shards that
    lack classes, and training on a collection samples its triplets within
    shards (``fit(collection)`` warns when a shard lacks classes).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(rows_per_shard, bool) or not isinstance(rows_per_shard, numbers.Integral) \
            or rows_per_shard < 1:
        raise ValueError(f"write_npz_shards: rows_per_shard must be a positive int, got "
                         f"{rows_per_shard!r}")
    n = X.shape[0]
    if y is not None and len(y) != n:
        raise ValueError(f"write_npz_shards: {len(y)} labels for {n} rows")
    if shuffle:
        order = as_generator(random_state, "write_npz_shards").permutation(n)
        X = X[order]
        y = None if y is None else np.asarray(y)[order]
    paths = []
    for i, s in enumerate(range(0, n, int(rows_per_shard))):
        part = X[s:s + rows_per_shard]
        members: dict[str, np.ndarray] = {}
        if sp.issparse(part):
            part = sp.csr_matrix(part)
            members = {"format": np.array(b"csr"), "shape": np.array(part.shape),
                       "data": part.data, "indices": part.indices, "indptr": part.indptr}
        else:
            members = {"X": np.ascontiguousarray(part)}
        if y is not None:
            members["y"] = np.asarray(y[s:s + rows_per_shard])
        path = directory / f"{prefix}-{i:05d}.npz"
        np.savez(path, **members)
        paths.append(path)
    return paths


#: a shard's ``.npy`` header may not be longer (numpy's own default limit)
_SHARD_HEADER_MAX = 10000


def _shard_error(who: str, path, msg: str) -> ValueError:
    return ValueError(f"{who}: shard {path}: {msg}")


def _shard_headers(zf: zipfile.ZipFile, file_size: int, path, who: str) -> dict:
    """``{member: (shape, fortran_order, dtype)}`` of every ``.npy`` member of
    an open shard, from the zip directory and the ``.npy`` headers alone.

    Every member's size is checked against what the file stores before any
    data is read: its stored bytes lie inside the file, a compressed member
    expands at most :data:`tripletml.persistence.MAX_COMPRESSION_RATIO` times
    (members up to ``SMALL_MEMBER_BYTES`` excepted), and the header's shape
    times the item size plus the header fills the member exactly -- so a
    header cannot declare rows the shard does not hold."""

    headers = {}
    for info in zf.infolist():
        name = info.filename[:80]
        if info.flag_bits & 0x1:
            raise _shard_error(who, path, f"member {name!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED,
                                      zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
            raise _shard_error(who, path, f"member {name!r} uses an unsupported compression "
                                          f"method {info.compress_type}")
        if info.header_offset + info.compress_size > file_size:
            raise _shard_error(who, path, f"member {name!r} claims {info.compress_size} "
                                          f"stored bytes beyond the end of the {file_size}-"
                                          "byte file (truncated or forged)")
        if info.compress_type == zipfile.ZIP_STORED:
            if info.file_size != info.compress_size:
                raise _shard_error(who, path, f"uncompressed member {name!r} declares "
                                              f"{info.file_size} bytes but stores "
                                              f"{info.compress_size}")
        elif info.file_size > _p.SMALL_MEMBER_BYTES and \
                info.file_size > _p.MAX_COMPRESSION_RATIO * info.compress_size:
            raise _shard_error(who, path, f"member {name!r} would expand from "
                                          f"{info.compress_size} to {info.file_size} bytes, "
                                          f"more than {_p.MAX_COMPRESSION_RATIO} times (a "
                                          "decompression bomb?)")
        if not info.filename.endswith(".npy"):
            continue
        name = info.filename[:-4][:80]
        with zf.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            if version not in ((1, 0), (2, 0)):
                raise _shard_error(who, path, f"{name} has an unsupported .npy version "
                                              f"{version}")
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read(fh, max_header_size=_SHARD_HEADER_MAX)
            offset = fh.tell()
        if dtype.hasobject:
            raise _shard_error(who, path, f"{name} holds Python objects (dtype {dtype}); "
                                          "nothing is unpickled")
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if info.file_size != offset + nbytes:
            raise _shard_error(who, path, f"{name} declares shape {tuple(shape)} "
                                          f"({nbytes} bytes of {dtype}) but stores "
                                          f"{info.file_size - offset} bytes")
        headers[info.filename[:-4]] = (tuple(shape), fortran, dtype)
    return headers


def _shard_layout(zf, headers: dict, path, who: str) -> tuple[str, int]:
    """``("dense" | "csr", rows)`` of a shard whose headers were checked: the
    rows a shard declares are the rows it stores (dense ``X``: its first
    dimension; CSR: ``len(indptr) - 1``, which ``shape`` must agree with);
    labels ``y`` must have one entry per row."""
    if "X" in headers:
        shape = headers["X"][0]
        if len(shape) != 2:
            raise _shard_error(who, path, f"X has shape {shape}, not (rows, features)")
        kind, rows = "dense", shape[0]
    elif "format" in headers:
        for m in ("shape", "indptr", "indices", "data"):
            if m not in headers:
                raise _shard_error(who, path, f"a scipy.sparse archive without {m!r}")
        sshape, _, sdtype = headers["shape"]
        fshape, _, fdtype = headers["format"]
        if sshape != (2,) or sdtype.kind not in "iu" or fdtype.kind not in "SU" \
                or fshape != ():
            raise _shard_error(who, path, "malformed scipy.sparse 'shape' or 'format' member")
        with zf.open("format.npy") as fh:
            fmt = np.lib.format.read_array(fh, allow_pickle=False,
                                           max_header_size=_SHARD_HEADER_MAX)
        with zf.open("shape.npy") as fh:
            dims = np.lib.format.read_array(fh, allow_pickle=False,
                                            max_header_size=_SHARD_HEADER_MAX)
        fmt = fmt.item().decode("ascii", "replace") if fdtype.kind == "S" else str(fmt.item())
        if fmt != "csr":
            raise _shard_error(who, path, f"a scipy.sparse {fmt[:20]!r} archive; shards are "
                                          "CSR (scipy.sparse.save_npz of a csr_matrix)")
        rows, cols = (int(v) for v in dims)
        ishape = headers["indptr"][0]
        if rows < 0 or cols < 0 or ishape != (rows + 1,):
            raise _shard_error(who, path, f"declares shape {(rows, cols)} but its indptr "
                                          f"has shape {ishape}, not ({rows + 1},)")
        if headers["indices"][0] != headers["data"][0] or len(headers["data"][0]) != 1:
            raise _shard_error(who, path, f"indices {headers['indices'][0]} and data "
                                          f"{headers['data'][0]} do not match")
        kind = "csr"
    else:
        raise _shard_error(who, path, "neither an 'X' member nor a scipy.sparse archive")
    if "y" in headers:
        yshape = headers["y"][0]
        if len(yshape) == 0 or yshape[0] != rows:
            raise _shard_error(who, path, f"{yshape[0] if yshape else 'scalar'} labels "
                                          f"for {rows} rows")
    return kind, int(rows)


def _open_shard(path, who: str):
    """The open file and ZipFile of a shard (regular files only)."""

    fh = open_regular(path, who)
    try:
        return fh, zipfile.ZipFile(fh)
    except BaseException:
        fh.close()
        raise


_SHARD_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, KeyError,
                 TypeError, IndexError, OverflowError, UnicodeDecodeError, struct.error,
                 zlib.error, NotImplementedError, MemoryError, RuntimeError)


def _reading(who: str, path, func):
    """Run ``func()``; any error of an odd file becomes a ValueError naming
    the shard (FileNotFoundError and ValueErrors already naming it pass)."""
    try:
        return func()
    except FileNotFoundError:
        raise
    except ValueError as exc:
        if str(exc).startswith(f"{who}: "):
            raise
        detail = " ".join(str(exc).split())[:300]
        raise _shard_error(who, path, f"not a readable shard: {detail}") from None
    except _SHARD_ERRORS as exc:
        detail = " ".join(str(exc).split())[:300]
        raise _shard_error(who, path, f"not a readable shard (truncated or foreign: "
                                      f"{type(exc).__name__}: {detail})") from None


def load_npz_shard(path) -> tuple[Any, np.ndarray | None]:
    """Read one shard: ``(X, y)`` (``y`` None when the shard has none).

    A ``scipy.sparse.save_npz`` archive of a CSR matrix gives a CSR matrix,
    an archive with an ``X`` member a dense array; nothing is unpickled
    (``allow_pickle=False``).  Only a regular file is read, and every
    member's declared shape is checked against the bytes the shard stores
    before its data is read (a compressed member may expand at most
    :data:`tripletml.persistence.MAX_COMPRESSION_RATIO` times).

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        Not a regular file, not a shard, truncated, a header that does not
        match the stored bytes, labels that do not match the rows; the
        message names the shard.
    """
    who = "load_npz_shard"

    def read():
        fh, zf = _open_shard(path, who)
        with fh, zf:
            headers = _shard_headers(zf, os.fstat(fh.fileno()).st_size, path, who)
            kind, rows = _shard_layout(zf, headers, path, who)

            def member(name):
                with zf.open(name + ".npy") as f:
                    return np.lib.format.read_array(f, allow_pickle=False,
                                                    max_header_size=_SHARD_HEADER_MAX)

            y = member("y") if "y" in headers else None
            if kind == "dense":
                X = member("X")
            else:
                with zf.open("shape.npy") as f:
                    dims = np.lib.format.read_array(f, allow_pickle=False,
                                                    max_header_size=_SHARD_HEADER_MAX)
                X = sp.csr_matrix((member("data"), member("indices"), member("indptr")),
                                  shape=tuple(int(v) for v in dims))
                X.check_format(full_check=True)
        return X, y

    return _reading(who, path, read)


def _npz_rows(path, who: str = "read_npz_shards") -> int:
    """Rows of a shard, from the zip directory and ``.npy`` headers (checked
    against the stored bytes; no array data read but a sparse ``shape``)."""
    def rows():
        fh, zf = _open_shard(path, who)
        with fh, zf:
            headers = _shard_headers(zf, os.fstat(fh.fileno()).st_size, path, who)
            return _shard_layout(zf, headers, path, who)[1]

    return _reading(who, path, rows)


def read_npz_shards(directory, pattern: str = "*.npz") -> "ShardedCollection":
    """A :class:`ShardedCollection` over the ``.npz`` shards of a directory
    (sorted by name).  Only the array headers are read here; each task loads
    its shard itself with :func:`load_npz_shard`.

    Every shard must be a regular file whose declared rows are the rows it
    stores: each ``.npy`` header's shape is checked against its member's
    bytes (and a compressed member's expansion capped) before the row count
    is taken, so a 200-byte file cannot declare a billion rows.

    Raises
    ------
    ValueError
        No shard matches, or a shard is not a regular file, truncated,
        foreign or inconsistent; the message names the shard.
    """
    paths = sorted(Path(directory).glob(pattern))
    if not paths:
        raise ValueError(f"read_npz_shards: no file matches {pattern!r} in {directory}")
    return ShardedCollection.from_loaders(
        [functools.partial(load_npz_shard, str(p)) for p in paths],
        n_rows=[_npz_rows(p) for p in paths])


# ---------------------------------------------------------------------------
# the collection
# ---------------------------------------------------------------------------
class ShardedCollection:
    """Row partitions of a collection, their row counts and labels.

    Build one with :meth:`from_dask_array`, :meth:`from_delayed`,
    :meth:`from_loaders` or :func:`read_npz_shards`.

    Attributes
    ----------
    parts : list
        One entry per partition: a Dask Delayed of ``X_p`` or of ``(X_p,
        y_p)``, or a loader (callable returning ``(X_p, y_p)``).
    n_rows : list of int
        Rows per partition.
    offsets : ndarray of int64
        Global id of each partition's first row.
    """

    #: what ``TripletLearner.fit`` recognizes (without importing this module)
    _is_sharded_collection = True

    def __init__(self, parts: list, n_rows: Sequence[int], labels: list | None = None,
                 triplets: list | None = None):
        if len(parts) == 0:
            raise ValueError("ShardedCollection: no partition")
        if len(n_rows) != len(parts):
            raise ValueError("ShardedCollection: one row count per partition is needed")
        for name, v in (("labels", labels), ("triplets", triplets)):
            if v is not None and len(v) != len(parts):
                raise ValueError(f"ShardedCollection: {len(v)} {name} entries for "
                                 f"{len(parts)} partitions")
        self.parts = list(parts)
        self.n_rows = [int(n) for n in n_rows]
        self.labels = None if labels is None else list(labels)
        self.triplets = None if triplets is None else list(triplets)
        self.offsets = np.concatenate([[0], np.cumsum(self.n_rows)]).astype(np.int64)

    def _fit_learner(self, learner):
        """``learner.fit(self)``: :func:`tripletml.distributed.partitioned.fit_partitioned`
        (imported here, so that the learners' base module does not import the
        training driver)."""
        return fit_partitioned(learner, self)

    @property
    def n_total(self) -> int:
        return int(self.offsets[-1])

    @property
    def n_partitions(self) -> int:
        return len(self.parts)

    def __repr__(self) -> str:
        return (f"ShardedCollection({self.n_partitions} partitions, {self.n_total} rows, "
                f"labels={'yes' if self.labels is not None else 'in parts or none'})")

    def with_triplets(self, triplets: Sequence) -> "ShardedCollection":
        """The same partitions with explicit triplets: one (m_p, 3) index
        array (or Delayed) per partition, indexing that partition's rows
        (``fit`` then ignores the labels)."""
        return type(self)(self.parts, self.n_rows, self.labels, list(triplets))

    @classmethod
    def from_arrays(cls, X, y=None, *, n_partitions: int) -> "ShardedCollection":
        """In-memory X (dense or sparse) and labels cut into ``n_partitions``
        consecutive row blocks (tests, simulations of K machines)."""
        if isinstance(n_partitions, bool) or not isinstance(n_partitions, numbers.Integral) \
                or not 1 <= n_partitions <= max(1, X.shape[0]):
            raise ValueError(f"ShardedCollection.from_arrays: n_partitions must be an int in "
                             f"[1, {X.shape[0]}], got {n_partitions!r}")
        bounds = np.linspace(0, X.shape[0], int(n_partitions) + 1).round().astype(int)
        parts = [X[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        labels = None if y is None else [np.asarray(y)[a:b]
                                         for a, b in zip(bounds[:-1], bounds[1:])]
        return cls(parts, np.diff(bounds), labels)

    @classmethod
    def from_loaders(cls, loaders: Sequence[Callable[[], tuple]], n_rows: Sequence[int]
                     ) -> "ShardedCollection":
        """Partitions made by calling ``loader()`` -> ``(X_p, y_p)`` (or
        ``(X_p, y_p, triplets_p)``) inside each task (``y_p`` may be None).
        Loaders must be picklable (module-level functions,
        ``functools.partial``)."""
        for f in loaders:
            if not callable(f):
                raise TypeError(f"ShardedCollection.from_loaders: {f!r} is not callable")
        return cls(list(loaders), n_rows)

    @classmethod
    def from_dask_array(cls, X, y=None) -> "ShardedCollection":
        """Row chunks of a 2-D Dask array (re-chunked to whole rows if needed);
        ``y`` a 1-D Dask array (re-chunked as X) or a NumPy array."""
        require_dask("ShardedCollection.from_dask_array")
        import dask.array as da
        if not isinstance(X, da.Array) or X.ndim != 2:
            raise TypeError("ShardedCollection.from_dask_array: X must be a 2-D dask array")
        if len(X.chunks[1]) > 1:
            X = X.rechunk({1: -1})
        if any(np.isnan(c) for c in X.chunks[0]):
            X = X.compute_chunk_sizes()
        parts = list(X.to_delayed().ravel())
        labels = None
        if y is not None:
            if not isinstance(y, da.Array):
                y = da.from_array(np.asarray(y), chunks=(X.chunks[0],))
            if y.shape[0] != X.shape[0]:
                raise ValueError(f"ShardedCollection.from_dask_array: {y.shape[0]} labels for "
                                 f"{X.shape[0]} rows")
            labels = list(y.rechunk((X.chunks[0],)).to_delayed().ravel())
        return cls(parts, X.chunks[0], labels)

    @classmethod
    def from_delayed(cls, parts: Sequence, labels: Sequence | None = None,
                     n_rows: Sequence[int] | None = None) -> "ShardedCollection":
        """Dask Delayed partitions (dense or CSR; e.g. ``bag.to_delayed()``
        after ``bag.map_partitions`` to one matrix per partition) and optional
        Delayed labels.  Row counts are computed (cheaply, on the workers)
        when not given."""
        dask, _ = require_dask("ShardedCollection.from_delayed")
        parts = list(parts)
        if n_rows is None:
            n_rows = dask.compute(*[dask.delayed(_rows)(p) for p in parts])
        return cls(parts, n_rows, None if labels is None else list(labels))


def _rows(X) -> int:
    return int(X.shape[0])


def _materialize(part, label=None):
    """``(X, y)`` of a partition inside a task."""
    if callable(part) and not hasattr(part, "shape"):
        part = part()
    if isinstance(part, tuple):
        X, y = part[0], part[1]          # (X, y) or (X, y, triplets)
    else:
        X, y = part, None
    if label is not None:
        y = label
    if y is not None:
        y = np.asarray(y)
    return X, y


def _part_args(coll: ShardedCollection, i: int) -> tuple:
    """The (part, label) arguments of a task on partition i."""
    return coll.parts[i], (None if coll.labels is None else coll.labels[i])


# ---------------------------------------------------------------------------
# scores (as the exact numpy SimilarityIndex)
# ---------------------------------------------------------------------------
def _scores(Eq: np.ndarray, qn: np.ndarray | None, E: np.ndarray, en: np.ndarray | None
            ) -> np.ndarray:
    """Similarities of query embeddings ``Eq`` to database embeddings ``E``:
    the inner product, or ``-((|q|^2 - 2 q.x) + |x|^2)`` clamped to <= 0 when
    norms are given (the formula of :mod:`tripletml.search.index` and of
    scikit-learn's ``euclidean_distances``)."""
    S = Eq @ E.T
    if qn is not None:
        S = -((qn[:, None] - 2.0 * S) + en[None, :])
        np.minimum(S, 0.0, out=S)
    return S


def _sqnorms(E: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", E, E, dtype=np.float64)


def _embed_part(model, part, label, side: str = "database"):
    X, y = _materialize(part, label)
    fn = model.embed_database if side == "database" else model.embed_queries
    return np.ascontiguousarray(fn(X), dtype=np.float64), y


def _col_block(n_q: int, n_p: int) -> int:
    return int(max(1, min(n_p, _SCORE_BYTES // (8 * max(n_q, 1)))))


# ---------------------------------------------------------------------------
# embedding
# ---------------------------------------------------------------------------
def embed(model, collection: ShardedCollection, *, side: str = "database"):
    """Embed every partition with a fitted model (lazily, on the workers).

    Returns
    -------
    dask.array.Array of shape (n_total, n_dims), float64
        ``model.embed_database`` (or ``embed_queries`` with
        ``side="query"``) of each partition; compute it, store it
        (``to_zarr``, ...) or reduce it without gathering it.
    """
    dask, _ = require_dask("tripletml.distributed.sharded.embed")
    import dask.array as da
    if side not in ("database", "query"):
        raise ValueError(f"embed: side must be 'database' or 'query', got {side!r}")
    _check_model(model, "embed")
    d = model.n_features_in_
    probe = (model.embed_database if side == "database" else model.embed_queries)(
        np.zeros((1, d)))
    dim = probe.shape[1]
    dm = dask.delayed(model, pure=True)
    blocks = []
    for i in range(collection.n_partitions):
        part, label = _part_args(collection, i)
        e = dask.delayed(_embed_only, pure=True)(dm, part, label, side)
        blocks.append(da.from_delayed(e, shape=(collection.n_rows[i], dim), dtype=np.float64))
    return da.concatenate(blocks, axis=0)


def _embed_only(model, part, label, side):
    return _embed_part(model, part, label, side)[0]


def _check_model(model, func: str) -> None:
    for name in ("embed_queries", "embed_database", "embedding_similarity"):
        if not hasattr(model, name):
            raise TypeError(f"{func}: model must be a fitted tripletml triplet learner (with "
                            f"{name}), got {type(model).__name__}")
    check_is_fitted(model)


# ---------------------------------------------------------------------------
# exact top-k search
# ---------------------------------------------------------------------------
def _topk_part(model, part, label, Eq, qn, offset, k, exclude):
    """Map: the exact top-k (scores, ids) of every query in one partition."""
    E, _ = _embed_part(model, part, label)
    en = None if qn is None else _sqnorms(E)
    n_q, n_p = Eq.shape[0], E.shape[0]
    acc = TopK(n_q, k)
    rows = max(1, _SCORE_BYTES // (8 * max(n_p, 1)))
    for q0 in range(0, n_q, rows):
        q1 = min(q0 + rows, n_q)
        S = _scores(Eq[q0:q1], None if qn is None else qn[q0:q1], E, en)
        if exclude is not None:                    # -inf never enters the top k
            loc = exclude[q0:q1] - offset
            hit = np.flatnonzero((loc >= 0) & (loc < n_p))
            S[hit, loc[hit]] = -np.inf
        acc.add(S, offset=offset, rows=slice(q0, q1))
    return acc.finalize()


def _merge_topk(*lists):
    """Reduce: merge (scores, ids) top-k lists (invalid slots last, best
    score first, equal scores by lower id)."""
    scores, ids = lists[0]
    acc = TopK(scores.shape[0], scores.shape[1])
    for scores, ids in lists:
        acc.add(scores, ids)
    return acc.finalize()


def _tree(dask, func, items: list, fan_in: int = 8):
    """Reduce a list of delayed values with ``func(*group)`` in a tree."""
    rounds = 0
    while len(items) > 1 and rounds < 64:
        items = [dask.delayed(func, pure=True)(*items[i:i + fan_in])
                 for i in range(0, len(items), fan_in)]
        rounds += 1
    return items[0]


def _query_embeddings(model, Q):
    Eq = np.ascontiguousarray(model.embed_queries(Q), dtype=np.float64)
    qn = _sqnorms(Eq) if model.embedding_similarity == "neg_squared_l2" else None
    return Eq, qn


def _check_exclude(exclude, n_q: int, func: str):
    if exclude is None:
        return None
    ex = np.asarray(exclude)
    if ex.shape != (n_q,) or not np.issubdtype(ex.dtype, np.integer):
        raise ValueError(f"{func}: query_ids must be {n_q} integers (global row ids, -1 for "
                         f"none), got shape {ex.shape} and dtype {ex.dtype}")
    return ex.astype(np.int64)


def search(model, collection: ShardedCollection, Q, k: int = 10, *,
           query_ids: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k search of queries ``Q`` (in memory) over a sharded collection.

    Parameters
    ----------
    model : fitted tripletml triplet learner
    collection : ShardedCollection
    Q : array-like or sparse matrix of shape (n_queries, n_features)
    k : int, default=10
    query_ids : array of int of shape (n_queries,), optional
        Global id of each query's own row in the collection (-1: none): that
        row is left out of the query's results (leave-one-out).

    Returns
    -------
    scores : ndarray (n_queries, k), float64
        Similarities, best first (``-inf`` in empty slots).
    ids : ndarray (n_queries, k), int64
        Global row ids (ties: lower id first; -1 in empty slots).

    The order changed with issue 25: ``(scores, ids)``, as scikit-learn's
    ``kneighbors`` returns (distances, then indices); it was ``(ids, scores)``.

    Equals :meth:`tripletml.search.index.SimilarityIndex.search` of an exact numpy
    index over the concatenated collection.
    """
    dask, _ = require_dask("tripletml.distributed.sharded.search")
    func = "search"
    _check_model(model, func)
    n_avail = collection.n_total - (0 if query_ids is None else 1)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= n_avail:
        raise ValueError(f"{func}: k must be an int in [1, {n_avail}], got {k!r}")
    Eq, qn = _query_embeddings(model, Q)
    exclude = _check_exclude(query_ids, Eq.shape[0], func)
    dm, dq = dask.delayed(model, pure=True), dask.delayed(Eq, pure=True)
    dn = None if qn is None else dask.delayed(qn, pure=True)
    de = None if exclude is None else dask.delayed(exclude, pure=True)
    maps = []
    for i in range(collection.n_partitions):
        part, label = _part_args(collection, i)
        maps.append(dask.delayed(_topk_part, pure=True)(dm, part, label, dq, dn,
                                                        int(collection.offsets[i]), int(k), de))
    scores, ids = dask.compute(_tree(dask, _merge_topk, maps))[0]
    return scores, ids


# ---------------------------------------------------------------------------
# retrieval evaluation (two passes)
# ---------------------------------------------------------------------------
def _relevant_part(model, part, label, Eq, qn, y_q, offset, exclude):
    """Pass 1 map: per query, (scores, ids) of its relevant items here.
    Returns (query index, score, id) flat arrays."""
    E, y = _embed_part(model, part, label)
    if y is None:
        raise ValueError("evaluate_retrieval: a partition has no labels")
    en = None if qn is None else _sqnorms(E)
    out_q, out_s, out_g = [], [], []
    n_p = E.shape[0]
    step = _col_block(Eq.shape[0], n_p)
    for c0 in range(0, n_p, step):
        c1 = min(c0 + step, n_p)
        S = _scores(Eq, qn, E[c0:c1], None if en is None else en[c0:c1])
        rel = y[None, c0:c1] == y_q[:, None]
        if exclude is not None:
            loc = exclude - offset - c0
            hit = np.flatnonzero((loc >= 0) & (loc < c1 - c0))
            rel[hit, loc[hit]] = False
        qi, cj = np.nonzero(rel)
        out_q.append(qi)
        out_s.append(S[qi, cj])
        out_g.append(cj + offset + c0)
    return (np.concatenate(out_q), np.concatenate(out_s), np.concatenate(out_g))


def _sort_relevant(n_q, *parts):
    """Pass 1 reduce: relevant items of every query, sorted by (query, -score, id)."""
    q = np.concatenate([p[0] for p in parts])
    s = np.concatenate([p[1] for p in parts])
    g = np.concatenate([p[2] for p in parts])
    order = np.lexsort((g, -s, q))
    q, s, g = q[order], s[order], g[order]
    starts = np.searchsorted(q, np.arange(n_q + 1))
    return q, s, g, starts


def _count_part(model, part, label, Eq, qn, offset, exclude, R):
    """Pass 2 map: for each relevant item (in R's order), the number of this
    partition's items ranked before it (score higher, or equal with a lower
    id), the query's own row excluded."""
    q_r, s_r, g_r, starts = R
    E, _ = _embed_part(model, part, label)
    en = None if qn is None else _sqnorms(E)
    n_q, n_p = Eq.shape[0], E.shape[0]
    counts = np.zeros(q_r.shape[0], dtype=np.int64)
    step = _col_block(n_q, n_p)
    for c0 in range(0, n_p, step):
        c1 = min(c0 + step, n_p)
        S = _scores(Eq, qn, E[c0:c1], None if en is None else en[c0:c1])
        gids = np.arange(offset + c0, offset + c1, dtype=np.int64)
        for i in range(n_q):
            a, b = starts[i], starts[i + 1]
            if a == b:
                continue
            neg_r, gr = -s_r[a:b], g_r[a:b]          # sorted by (neg, id)
            neg = -S[i]
            keep = slice(None)
            if exclude is not None and 0 <= exclude[i] - offset - c0 < c1 - c0:
                mask = np.ones(c1 - c0, dtype=bool)
                mask[exclude[i] - offset - c0] = False
                keep = mask
            nj, gj = neg[keep], gids[keep]
            # m_j = #{r : (neg_r, id_r) <= (neg_j, id_j)}: item j ranks before r_m iff m >= m_j
            lo = np.searchsorted(neg_r, nj, side="left")
            hi = np.searchsorted(neg_r, nj, side="right")
            m_j = lo
            tied = np.flatnonzero(hi > lo)
            if tied.size:
                # within a tie group ids are sorted: add #{r in group: id_r <= id_j}
                t_lo, t_hi, t_g = lo[tied], hi[tied], gj[tied]
                add = np.empty(tied.size, dtype=np.int64)
                for u in range(tied.size):        # bounded by the tied items of this block
                    add[u] = np.searchsorted(gr[t_lo[u]:t_hi[u]], t_g[u], side="right")
                m_j = m_j.copy()
                m_j[tied] += add
            counts[a:b] += np.cumsum(np.bincount(m_j, minlength=b - a + 1))[:b - a]
    return counts


def _block_scores(R, counts, ks):
    """Per-query AP (NaN without a relevant item), hits at each k and n_rel,
    with the arithmetic of :func:`tripletml.metrics.evaluate_retrieval`."""
    q_r, _, _, starts = R
    n_q = starts.shape[0] - 1
    n_rel = np.diff(starts)
    m = np.arange(1, q_r.size + 1) - starts[:-1][q_r]
    cols = counts                                  # 0-based rank
    ap_sum = np.bincount(q_r, weights=m / (cols + 1.0), minlength=n_q)
    ap = np.full(n_q, np.nan)
    has = n_rel > 0
    ap[has] = ap_sum[has] / n_rel[has]
    hits = np.zeros((n_q, len(ks)))
    for j, k in enumerate(ks):
        hits[:, j] = np.bincount(q_r[cols < k], minlength=n_q)
    return ap, hits, n_rel


def evaluate_retrieval(model, collection: ShardedCollection, X_query, y_query, *,
                       k: int | Sequence[int] = (1, 5, 10), recall: bool = False,
                       query_ids: Any = None, query_block: int = 1024) -> dict[str, float]:
    """mAP (full ranking), precision@k and recall@k of queries against a
    sharded collection, as map/reduce on the workers.

    Parameters
    ----------
    model : fitted tripletml triplet learner
    collection : ShardedCollection
        With labels (in the shards, or given to the constructor).
    X_query : array-like or sparse matrix of shape (n_queries, n_features)
    y_query : 1-D array of labels
        Relevant items are those whose label equals the query's (``==``).
    k : int or sequence of int, default=(1, 5, 10)
    recall : bool, default=False
        Also report ``recall_at_<k>``.
    query_ids : array of int (n_queries,), optional
        Global id of each query's own row (-1: none), left out of its
        ranking: with every row of the collection as a query this is
        :func:`tripletml.metrics.evaluate_retrieval`'s leave-one-out.
    query_block : int, default=1024
        Queries per task (bounds the reduce's memory).

    Returns
    -------
    dict
        The keys and values of :func:`tripletml.metrics.evaluate_retrieval`
        (``"map"``, ``"precision_at_<k>"``, ``"recall_at_<k>"``).
    """
    dask, _ = require_dask("tripletml.distributed.sharded.evaluate_retrieval")
    func = "evaluate_retrieval"
    _check_model(model, func)
    y_query = np.asarray(y_query)
    if y_query.ndim != 1:
        raise ValueError(f"{func}: y_query must be 1-D, got shape {y_query.shape}")
    Eq, qn = _query_embeddings(model, X_query)
    n_q = Eq.shape[0]
    if y_query.shape[0] != n_q:
        raise ValueError(f"{func}: {y_query.shape[0]} labels for {n_q} queries")
    exclude = _check_exclude(query_ids, n_q, func)
    n_avail = collection.n_total - (0 if exclude is None else 1)
    if isinstance(k, (list, tuple, np.ndarray)) and len(k) == 0:
        ks = []
    else:
        ks, _ = _check_ks(k, n_avail, func)
    if isinstance(query_block, bool) or not isinstance(query_block, numbers.Integral) \
            or query_block < 1:
        raise ValueError(f"{func}: query_block must be a positive int, got {query_block!r}")
    dm = dask.delayed(model, pure=True)
    results = []
    for q0 in range(0, n_q, int(query_block)):
        q1 = min(q0 + int(query_block), n_q)
        dq = dask.delayed(Eq[q0:q1], pure=True)
        dn = None if qn is None else dask.delayed(qn[q0:q1], pure=True)
        de = None if exclude is None else dask.delayed(exclude[q0:q1], pure=True)
        dy = dask.delayed(y_query[q0:q1], pure=True)
        args = [(*_part_args(collection, i), int(collection.offsets[i]))
                for i in range(collection.n_partitions)]
        pass1 = [dask.delayed(_relevant_part, pure=True)(dm, p, lab, dq, dn, dy, off, de)
                 for p, lab, off in args]
        R = dask.delayed(_sort_relevant, pure=True)(q1 - q0, *pass1)
        pass2 = [dask.delayed(_count_part, pure=True)(dm, p, lab, dq, dn, off, de, R)
                 for p, lab, off in args]
        counts = _tree(dask, tree_sum, pass2)
        results.append(dask.delayed(_block_scores, pure=True)(R, counts, ks))
    blocks = dask.compute(*results)
    ap = np.concatenate([b[0] for b in blocks])
    hits = np.concatenate([b[1] for b in blocks]) if ks else np.zeros((n_q, 0))
    n_rel = np.concatenate([b[2] for b in blocks])
    out = {"map": _mean_ap(ap, func)}
    for j, kk in enumerate(ks):
        out[f"precision_at_{kk}"] = float(hits[:, j].mean() / kk)
    if recall:
        out.update(_recall(hits, ks, n_rel))
    return out


# ---------------------------------------------------------------------------
# per-partition indexes
# ---------------------------------------------------------------------------
def _build_one(model, part, label, path, kwargs):
    X, _ = _materialize(part, label)
    index = build(model, X, **kwargs)
    index.save(path)
    return str(path)


def build_indexes(model, collection: ShardedCollection, directory, **index_params
                  ) -> list[str]:
    """Build and save one :class:`tripletml.search.index.SimilarityIndex` per
    partition (on the workers) under ``directory/part-00000`` ...; the
    directory must be shared by the workers and the client.
    ``index_params`` go to :func:`tripletml.search.index.build` (``kind``,
    ``backend``: faiss where installed, else exact numpy)."""
    dask, _ = require_dask("tripletml.distributed.sharded.build_indexes")
    _check_model(model, "build_indexes")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dm = dask.delayed(model, pure=True)
    tasks = [dask.delayed(_build_one)(dm, *_part_args(collection, i),
                                      str(directory / f"part-{i:05d}"), index_params)
             for i in range(collection.n_partitions)]
    return list(dask.compute(*tasks))


def _search_one(path, Q, k, offset):
    index = load_index(path)
    kk = min(k, index.ntotal)
    ids = np.full((Q.shape[0], k), -1, dtype=np.int64)
    vals = np.full((Q.shape[0], k), -np.inf)
    v, i = index.search(Q, kk)
    ids[:, :kk] = np.where(i >= 0, i + offset, -1)
    vals[:, :kk] = v
    return vals, ids


def search_indexes(paths: Sequence[str], collection: ShardedCollection, Q, k: int = 10
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Search the per-partition indexes of :func:`build_indexes` and merge the
    top-k lists (ties: lower global id) into ``(scores, ids)`` (the order of
    :func:`search`; it was ``(ids, scores)`` before issue 25).  With exact
    numpy indexes this equals :func:`search`; faiss scores are float32-rounded."""
    dask, _ = require_dask("tripletml.distributed.sharded.search_indexes")
    if len(paths) != collection.n_partitions:
        raise ValueError(f"search_indexes: {len(paths)} indexes for "
                         f"{collection.n_partitions} partitions")
    dQ = dask.delayed(Q, pure=True)
    maps = [dask.delayed(_search_one, pure=True)(p, dQ, int(k), int(collection.offsets[i]))
            for i, p in enumerate(paths)]
    return dask.compute(_tree(dask, _merge_topk, maps))[0]
