"""Data home, checksums and the loaders behind :func:`tripletml.datasets.load`."""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch

from .._files import check_regular_file, open_regular
from ._registry import REGISTRY, DataFile, DatasetRecord, get_record

__all__ = ["get_data_home", "list_datasets", "info", "load", "sha256sum", "read_libsvm"]

ENV_VAR = "TRIPLETML_DATA"
DEFAULT_DATA_HOME = "~/tripletml_data"

# (resolved path, size, mtime_ns) -> sha256 of a file that passed verification
_VERIFIED: dict[tuple[str, int, int], str] = {}


# --------------------------------------------------------------------------- data home
def _resolve_data_home(data_home: str | os.PathLike | None) -> tuple[Path, str]:
    if data_home is not None:
        return Path(data_home).expanduser(), "the data_home argument"
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser(), f"the {ENV_VAR} environment variable"
    return Path(DEFAULT_DATA_HOME).expanduser(), f"the default {DEFAULT_DATA_HOME} ({ENV_VAR} unset)"


def get_data_home(data_home: str | os.PathLike | None = None) -> Path:
    """Return the folder holding the data sets.

    Parameters
    ----------
    data_home : str or path-like, optional
        Used as given when not None.  Otherwise the environment variable
        ``TRIPLETML_DATA`` if set and non-empty, else ``~/tripletml_data``.

    Returns
    -------
    pathlib.Path
        The folder (``~`` expanded).  It is not created.
    """
    return _resolve_data_home(data_home)[0]


def list_datasets() -> list[str]:
    """Return the names of the registered data sets, sorted."""
    return sorted(REGISTRY)


def info(name: str) -> DatasetRecord:
    """Return the registry record of data set ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not registered; the message lists the known names.
    """
    return get_record(name)


# --------------------------------------------------------------------------- checksums
def sha256sum(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Return the hex SHA-256 of the file at ``path`` (a regular file: a FIFO,
    device or directory is refused with a ValueError)."""
    h = hashlib.sha256()
    with open_regular(path, "sha256sum") as fh:
        for block in iter(lambda: fh.read(chunk_size), b""):
            h.update(block)
    return h.hexdigest()


def _verify(path: Path, accepted: tuple[str, ...]) -> str:
    """Check ``path`` against the SHA-256 values in ``accepted``; fail closed.

    Returns the matching hash.  Raises ValueError when ``accepted`` is empty (no
    checksum known: the file is never trusted) or when the file's hash is not one
    of them.  Successful checks are cached in memory per (path, size, mtime).
    """
    if not accepted:
        raise ValueError(f"{path}: no SHA-256 is known for this file, so it cannot be "
                         "verified and is not used (fail closed). Fetch it from a mirror "
                         "of the data home (fetch(name, mirror=URL)).")
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if _VERIFIED.get(key) in accepted:
        return _VERIFIED[key]
    actual = sha256sum(path)
    if actual not in accepted:
        raise ValueError(f"checksum mismatch for {path}: expected sha256 "
                         f"{' or '.join(accepted)}, found {actual}. The file is corrupt, "
                         "forged or a different version; delete it and run "
                         "tripletml.datasets.fetch() again.")
    _VERIFIED[key] = actual
    return actual


def _locate(f: DataFile, home: Path, how: str, name: str) -> tuple[Path, tuple[str, ...]]:
    """Find ``f`` stored (maybe gzip'd) or as its plain original; return (path,
    accepted SHA-256 values)."""
    candidates = [(home / f.path, _accepted_hashes(f, f.path))]
    if f.compressed:
        candidates.append((home / f.original_path, _accepted_hashes(f, f.original_path)))
    for path, accepted in candidates:
        if path.exists():     # a FIFO, device or directory: refused, not "missing"
            return check_regular_file(path, f"data set {name!r}"), accepted
    looked = "\n  ".join(str(p) for p, _ in candidates)
    raise FileNotFoundError(
        f"data set {name!r}: file not found; looked in\n  {looked}\n"
        f"(data home {home}, chosen by {how}). Download it with "
        f"tripletml.datasets.fetch({name!r}) or set {ENV_VAR} to a folder that holds it.")


def _accepted_hashes(f: DataFile, rel: str) -> tuple[str, ...]:
    """SHA-256 values a file at relative path ``rel`` may have: the stored file's
    hash at :attr:`DataFile.path`, the official original's at
    :attr:`DataFile.original_path` (both when the two paths coincide, as for
    the 20 Newsgroups tarball: the repack of the shared folder or the official
    download).  Unknown hashes (None) are left out; an empty result means the
    file cannot be verified."""
    out = []
    if rel == f.path and f.sha256:
        out.append(f.sha256)
    if rel == f.original_path and f.sha256_original and f.sha256_original not in out:
        out.append(f.sha256_original)
    return tuple(out)


@contextlib.contextmanager
def _open(path: Path, who: str = "tripletml.datasets.load"):
    """A binary reader of ``path`` (a regular file only; gunzipped for ``.gz``)."""
    with open_regular(path, who) as raw:
        if path.suffix == ".gz":
            with gzip.GzipFile(fileobj=raw, mode="rb") as fh:
                yield fh
        else:
            yield raw


# --------------------------------------------------------------------------- parsers
def _encode(raw: list[str], record: DatasetRecord, path: Path) -> np.ndarray:
    """Map raw labels (as strings) to indices into ``record.classes``."""
    lookup = {c: i for i, c in enumerate(record.classes)}
    try:
        return np.fromiter((lookup[v] for v in raw), dtype=np.int64, count=len(raw))
    except KeyError as exc:
        raise ValueError(f"{path}: unexpected class label {exc.args[0]!r}; expected one of "
                         f"{list(record.classes)}") from None


def _label_str(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


#: Largest feature index :func:`read_libsvm` accepts (scikit-learn's reader stores
#: indices as C ints).
LIBSVM_MAX_INDEX = 2**31 - 2


def read_libsvm(path: str | os.PathLike, *, n_features: int | None = None,
                zero_based: bool = False) -> tuple[sp.csr_matrix, np.ndarray]:
    """Read a LIBSVM / svmlight file (plain or ``.gz``) into a validated CSR matrix.

    Parameters
    ----------
    path : str or path-like
    n_features : int, optional
        Number of columns; by default the largest index found.  An index beyond it
        is an error.
    zero_based : bool, default False
        Feature indices start at 0 (LIBSVM writes them from 1).

    Returns
    -------
    X : scipy.sparse.csr_matrix of float64, canonical (sorted, no duplicates)
    y : ndarray of float64

    Raises
    ------
    ValueError
        Not a regular file (a FIFO, device or directory is refused without
        blocking), unreadable file, a feature index outside ``1..n_features`` (or above
        ``LIBSVM_MAX_INDEX``), non-finite values; the message names the file.
    FileNotFoundError
        No such file.
    """
    from sklearn.datasets import load_svmlight_file

    from .._validation import check_X

    path = Path(path)
    try:
        opened = _open(path, "read_libsvm")
        fh = opened.__enter__()
    except FileNotFoundError:
        raise FileNotFoundError(f"read_libsvm: no such file {path}") from None
    try:
        X, y = load_svmlight_file(fh, n_features=n_features, zero_based=zero_based,
                                  dtype=np.float64)
    except OverflowError:
        raise ValueError(f"read_libsvm: {path}: a feature index or value is too large "
                         f"(feature indices must be at most {LIBSVM_MAX_INDEX + 1}); is "
                         "this a LIBSVM file?") from None
    except (ValueError, UnicodeDecodeError, EOFError, OSError) as exc:
        what = f" with {n_features} features" if n_features is not None else ""
        raise ValueError(f"read_libsvm: {path}: cannot read as LIBSVM{what}: {exc}") from None
    finally:
        opened.__exit__(None, None, None)
    return check_X(X, f"read_libsvm: {path}"), np.asarray(y, dtype=np.float64)


def _read_libsvm(path: Path, record: DatasetRecord):
    X, y = read_libsvm(path, n_features=record.shape[1])
    return X, _encode([_label_str(v) for v in y], record, path)


def _read_uci_csv(path: Path, record: DatasetRecord):
    with _open(path) as fh:
        rows = [ln.split(",") for ln in fh.read().decode("ascii").splitlines() if ln.strip()]
    label_col = 0 if record.name == "balance-scale" else -1
    labels = [r.pop(label_col).strip() for r in rows]
    try:
        X = np.asarray(rows, dtype=np.float64)
    except ValueError as exc:
        raise ValueError(f"{path}: non-numeric or ragged feature rows: {exc}") from exc
    return X, _encode(labels, record, path)


def _read_dexter_data(path: Path, n_features: int) -> sp.csr_matrix:
    """Read the NIPS 2003 sparse-integer format: one row per line, ``idx:val`` 1-based."""
    with _open(path) as fh:
        lines = fh.read().decode("ascii").splitlines()
    indptr, indices, values = [0], [], []
    for lineno, line in enumerate(lines, 1):
        try:
            pairs = np.array(line.replace(":", " ").split(), dtype=np.int64).reshape(-1, 2)
        except ValueError:
            raise ValueError(f"{path}, line {lineno}: expected 'index:value' pairs") from None
        if pairs.size and (pairs[:, 0].min() < 1 or pairs[:, 0].max() > n_features):
            raise ValueError(f"{path}, line {lineno}: feature index outside 1..{n_features}")
        indices.append(pairs[:, 0] - 1)
        values.append(pairs[:, 1])
        indptr.append(indptr[-1] + len(pairs))
    X = sp.csr_matrix((np.concatenate(values).astype(np.float64), np.concatenate(indices),
                       np.asarray(indptr)), shape=(len(lines), n_features))
    X.sum_duplicates()
    return X


def _read_arff(path: Path, record: DatasetRecord):
    from scipy.io import arff

    with open_regular(path, "tripletml.datasets.load") as raw, \
            io.TextIOWrapper(raw, encoding="utf-8") as fh:
        data, meta = arff.loadarff(fh)
    names = list(meta.names())
    n_feat, n_lab = record.shape[1], record.n_labels
    if len(names) != n_feat + n_lab or tuple(names[n_feat:]) != record.classes:
        raise ValueError(f"{path}: expected {n_feat} features followed by the labels "
                         f"{list(record.classes)}, found {len(names)} attributes ending "
                         f"{names[-n_lab:]}")
    X = np.column_stack([data[n] for n in names[:n_feat]]).astype(np.float64)
    Y = np.column_stack([data[n] for n in names[n_feat:]])
    if not np.isin(Y, [b"0", b"1"]).all():
        raise ValueError(f"{path}: label attributes must be 0/1")
    return X, (Y == b"1").astype(np.int8)


#: Bounds on reading the 20 Newsgroups tarball (the real one: 18,888 entries, largest
#: message 160,616 bytes, 35.9 MB of text, 50.3 MB as a tar).  A crafted archive
#: is refused once it passes one of them, before the memory is taken.
TAR_MAX_MEMBER_BYTES = 8 << 20     # one message (50x the largest)
TAR_MAX_TEXT_BYTES = 256 << 20     # all messages kept (7x the real total)
TAR_MAX_ENTRIES = 200_000          # headers read (10x)
TAR_MAX_STREAM_BYTES = 2 << 30     # uncompressed tar stream walked (40x)
TAR_MAX_READ = 1 << 20             # largest single read tarfile may make (headers, pax)


class _BoundedReader:
    """File object over a decompressed tar stream that refuses any single read
    above ``TAR_MAX_READ`` bytes and any position beyond ``TAR_MAX_STREAM_BYTES``.

    :mod:`tarfile` reads a pax or GNU long-name header in one ``read(size)`` of
    the size the header declares; through this wrapper such a header cannot
    allocate more than ``TAR_MAX_READ``, and a decompression bomb stops at the
    stream limit instead of running for hours."""

    def __init__(self, raw, path: Path):
        self.raw, self.path = raw, path

    def _limit(self, pos: int) -> None:
        if pos > TAR_MAX_STREAM_BYTES:
            raise ValueError(f"{self.path}: the uncompressed archive is larger than "
                             f"{TAR_MAX_STREAM_BYTES >> 20} MiB; refusing to read it.")

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > TAR_MAX_READ:
            raise ValueError(f"{self.path}: a tar header or member asks for a read of "
                             f"{size} bytes (limit {TAR_MAX_READ}); refusing to read it.")
        self._limit(self.raw.tell() + size)
        return self.raw.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else (self.raw.tell() + offset if whence == 1 else None)
        if target is None:
            raise ValueError(f"{self.path}: unexpected seek from the end of the archive")
        self._limit(target)
        return self.raw.seek(target)

    def tell(self) -> int:
        return self.raw.tell()


def _open_tar_stream(path: Path):
    """Open ``path`` (gzip, bzip2, xz or plain tar) as a decompressed stream."""
    import bz2
    import lzma

    raw = open_regular(path, "tripletml.datasets.load")
    try:
        magic = raw.read(6)
        raw.seek(0)
        if magic[:2] == b"\x1f\x8b":
            return _Owning(gzip.GzipFile(fileobj=raw, mode="rb"), raw)
        if magic[:3] == b"BZh":
            return _Owning(bz2.BZ2File(raw, "rb"), raw)
        if magic[:6] == b"\xfd7zXZ\x00":
            return _Owning(lzma.LZMAFile(raw, "rb"), raw)
        return raw
    except BaseException:
        raw.close()
        raise


class _Owning:
    """A decompressing reader that also closes the file beneath it."""

    def __init__(self, fh, raw):
        self._fh, self._raw = fh, raw

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        try:
            self._fh.close()
        finally:
            self._raw.close()


def _read_member(tf: tarfile.TarFile, m: tarfile.TarInfo, path: Path) -> bytes:
    """Read one member in chunks of at most ``TAR_MAX_READ`` bytes."""
    if m.size > TAR_MAX_MEMBER_BYTES:
        raise ValueError(f"{path}: member {m.name} has {m.size} bytes, more than the "
                         f"{TAR_MAX_MEMBER_BYTES >> 20} MiB a newsgroup message may have; "
                         "refusing to read it.")
    fh = tf.extractfile(m)
    chunks, left = [], m.size
    while left > 0:  # at most TAR_MAX_MEMBER_BYTES / TAR_MAX_READ + 1 rounds
        block = fh.read(min(left, TAR_MAX_READ))
        if not block:
            raise ValueError(f"{path}: member {m.name} is truncated")
        chunks.append(block)
        left -= len(block)
    return b"".join(chunks)


def _read_newsgroups(path: Path, record: DatasetRecord, subset: str):
    """Read the bydate tarball: members ``20news-bydate-{train,test}/<group>/<id>``.

    Memory is bounded whatever the archive holds (see the ``TAR_MAX_*`` limits):
    a member is refused before it is read when it declares more than
    ``TAR_MAX_MEMBER_BYTES``, the messages kept may total ``TAR_MAX_TEXT_BYTES``,
    and tarfile itself never reads more than ``TAR_MAX_READ`` at once."""
    lookup = {g: i for i, g in enumerate(record.classes)}
    keep = ("train", "test") if subset == "all" else (subset,)
    items = []
    total = 0
    try:
        with _open_tar_stream(path) as raw, \
                tarfile.open(fileobj=_BoundedReader(raw, path), mode="r:") as tf:
            for n_entries in range(TAR_MAX_ENTRIES + 1):
                m = tf.next()
                if m is None:
                    break
                if n_entries == TAR_MAX_ENTRIES:
                    raise ValueError(f"{path}: more than {TAR_MAX_ENTRIES} tar entries; "
                                     "refusing to read further.")
                tf.members.clear()  # tarfile keeps every header otherwise
                parts = m.name.removeprefix("./").split("/")
                if not m.isfile() or len(parts) != 3 or not parts[0].startswith("20news-bydate-"):
                    continue
                part = parts[0][len("20news-bydate-"):]
                if part not in keep:
                    continue
                if parts[1] not in lookup:
                    raise ValueError(f"{path}: unknown newsgroup {parts[1]!r} in {m.name}")
                total += m.size
                if total > TAR_MAX_TEXT_BYTES:
                    raise ValueError(f"{path}: the messages total more than "
                                     f"{TAR_MAX_TEXT_BYTES >> 20} MiB; refusing to read "
                                     "further.")
                text = _read_member(tf, m, path).decode("latin-1")
                items.append(((keep.index(part), parts[1], parts[2]), "/".join(parts), text,
                              lookup[parts[1]]))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ValueError(f"{path}: not a readable tar archive: {exc}") from exc
    items.sort(key=lambda t: t[0])  # train before test, then group, then file name
    return ([t[2] for t in items], np.array([t[3] for t in items], dtype=np.int64),
            [t[1] for t in items])


# --------------------------------------------------------------------------- load
def _check(record: DatasetRecord, subset: str, files: list[Path], X, y) -> None:
    n_exp = record.subset(subset).n_samples
    n_found = len(X) if isinstance(X, list) else X.shape[0]
    where = ", ".join(str(p) for p in files)
    if n_found != n_exp or (not isinstance(X, list) and X.shape[1] != record.shape[1]):
        found = n_found if isinstance(X, list) else X.shape
        exp = n_exp if isinstance(X, list) else (n_exp, record.shape[1])
        raise ValueError(f"{record.name} ({subset}) from {where}: expected shape {exp}, "
                         f"found {found}")
    if record.n_labels is not None:
        if y.shape != (n_exp, record.n_labels):
            raise ValueError(f"{record.name} ({subset}) from {where}: expected "
                             f"{record.n_labels} labels, found target shape {y.shape}")
    elif len(np.unique(y)) != record.n_classes:
        raise ValueError(f"{record.name} ({subset}) from {where}: expected "
                         f"{record.n_classes} classes, found {len(np.unique(y))}")


def _load_sklearn(record: DatasetRecord) -> tuple:
    from sklearn import datasets

    b = getattr(datasets, f"load_{record.name}")()
    return b.data.astype(np.float64), b.target.astype(np.int64), b.DESCR


def load(name: str, data_home: str | os.PathLike | None = None, *, subset: str = "all",
         verify: bool = True) -> Bunch:
    """Load a registered data set.

    Parameters
    ----------
    name : str
        Registry name, see :func:`list_datasets`.
    data_home : str or path-like, optional
        Folder holding the data (see :func:`get_data_home`).  Ignored for the
        scikit-learn bundled sets (iris, wine, digits).
    subset : str, default "all"
        ``"all"`` or a named part such as ``"train"`` / ``"test"`` (see ``info(name).subsets``).
    verify : bool, default True
        Check each file's SHA-256 before reading it: a gzip'd file against the
        stored-file hash, a plain file against the hash of the uncompressed original
        (the 20 Newsgroups tarball: the shared folder's repack or the official
        archive).  A mismatch, or a file with no known hash, is refused.  Results are
        cached in memory per (path, size, mtime).  ``verify=False`` reads unverified
        files at the caller's risk (reading stays bounded in memory).

    Returns
    -------
    sklearn.utils.Bunch
        ``data``: CSR float64 (LIBSVM, dexter), dense float64 (UCI, ARFF, scikit-learn
        sets) or a list of str (20 Newsgroups, decoded as Latin-1); ``target``: int64
        class indices, or an ``(n, n_labels)`` int8 0/1 indicator for multi-label sets;
        ``target_names``; ``name``; ``subset``; ``DESCR``; ``files`` (paths read);
        20 Newsgroups also has ``filenames`` (archive member names).  Multi-file
        subsets are stacked in the order of ``info(name).subset(subset).files``.

    Raises
    ------
    ValueError
        Unknown name or subset, a data file that is not a regular file (FIFO,
        device, directory: refused without blocking), checksum mismatch, or a
        shape / class count that differs from the registry.
    FileNotFoundError
        A file is missing; the message lists the paths searched.
    """
    record = get_record(name)
    part = record.subset(subset)
    extra = {}
    if record.kind == "sklearn":
        X, y, descr = _load_sklearn(record)
        paths: list[Path] = []
    else:
        home, how = _resolve_data_home(data_home)
        paths = []
        for rel in part.files:
            f = record.file(rel)
            path, accepted = _locate(f, home, how, name)
            if verify:  # before anything reads the file
                _verify(path, accepted)
            paths.append(path)
        descr = f"{record.description}\n\nOrigin: {record.origin}"
        if record.kind == "libsvm":
            parts = [_read_libsvm(p, record) for p in paths]
            X = sp.vstack([p[0] for p in parts], format="csr")
            y = np.concatenate([p[1] for p in parts])
        elif record.kind == "uci_csv":
            X, y = _read_uci_csv(paths[0], record)
        elif record.kind == "dexter":
            Xs, ys = [], []
            for data_path, label_path in zip(paths[::2], paths[1::2]):
                Xs.append(_read_dexter_data(data_path, record.shape[1]))
                with open_regular(label_path, "tripletml.datasets.load") as fh:
                    labels = np.loadtxt(fh, dtype=np.int64, ndmin=1)
                ys.append(_encode([str(v) for v in labels], record, label_path))
                if Xs[-1].shape[0] != len(ys[-1]):
                    raise ValueError(f"{data_path} has {Xs[-1].shape[0]} rows but "
                                     f"{label_path} has {len(ys[-1])} labels")
            X, y = sp.vstack(Xs, format="csr"), np.concatenate(ys)
        elif record.kind == "arff_multilabel":
            parts = [_read_arff(p, record) for p in paths]
            X = np.vstack([p[0] for p in parts])
            y = np.vstack([p[1] for p in parts])
        elif record.kind == "newsgroups":
            X, y, extra["filenames"] = _read_newsgroups(paths[0], record, subset)
        else:  # pragma: no cover - guarded by the registry
            raise ValueError(f"unknown loader kind {record.kind!r}")
    _check(record, subset, paths, X, y)
    return Bunch(data=X, target=y, target_names=list(record.classes), name=name,
                 subset=subset, DESCR=descr, files=paths, **extra)
