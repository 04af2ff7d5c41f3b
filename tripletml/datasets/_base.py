"""Data home, checksums and the loaders behind :func:`tripletml.datasets.load`."""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import tarfile
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch

from tripletml.core.files import check_regular_file, open_regular
from tripletml.core.validation import check_X
from tripletml.datasets._registry import REGISTRY, DataFile, DatasetRecord, get_record

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
def _encode(raw: list[str], record: DatasetRecord, path: Path,
            linenos: list[int] | None = None) -> np.ndarray:
    """Map raw labels (as strings) to indices into ``record.classes``; an unknown
    label is a ValueError naming the file (and its line when ``linenos`` is given)."""
    lookup = {c: i for i, c in enumerate(record.classes)}
    out = np.empty(len(raw), dtype=np.int64)
    for i, v in enumerate(raw):
        code = lookup.get(v)
        if code is None:
            where = f"{path}, line {linenos[i]}" if linenos is not None else f"{path}"
            raise ValueError(f"{where}: unexpected class label {v!r}; expected one of "
                             f"{list(record.classes)}")
        out[i] = code
    return out


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


#: Largest uncompressed size of a text table or IDX file the loaders read (the
#: largest registered one, the MNIST test images, has 7.8 MB).  A larger file, or a
#: gzip stream that inflates beyond it, is refused once this many bytes are read.
TABLE_MAX_BYTES = 64 << 20


def _read_bounded(fh, path: Path, n: int, limit: int | None = None) -> bytes:
    """Read ``n`` bytes (``-1``: to the end) of ``fh``, never more than ``limit``
    (default ``TABLE_MAX_BYTES``); a gzip error (bad stream, truncated) is a
    ValueError naming ``path``."""
    limit = TABLE_MAX_BYTES if limit is None else limit
    try:
        raw = fh.read(limit + 1 if n < 0 else min(n, limit + 1))
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: cannot read the file (corrupt or truncated gzip "
                         f"stream?): {exc}") from None
    if len(raw) > limit:
        raise ValueError(f"{path}: more than {limit} bytes of data; refusing to read it "
                         "(no registered file is this large).")
    return raw


def _read_lines(path: Path) -> tuple[list[str], list[int]]:
    """The non-blank lines of an ASCII text file (plain or ``.gz``; LF or CRLF line
    ends) and their 1-based line numbers, read in bounded memory."""
    with _open(path) as fh:
        raw = _read_bounded(fh, path, -1)
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{path}, line {line}: not ASCII text (byte "
                         f"{raw[exc.start]:#04x}); is this the right file?") from None
    lines, linenos = [], []
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if line.strip():
            lines.append(line)
            linenos.append(lineno)
    return lines, linenos


def _split_fields(path: Path, lines: list[str], linenos: list[int], sep: str | None,
                  n_fields: int) -> list[list[str]]:
    """Split each line at ``sep`` (``None``: runs of white space) and check that it
    has ``n_fields`` fields; the fields are stripped of surrounding blanks."""
    rows = []
    for line, lineno in zip(lines, linenos):
        row = [f.strip() for f in line.split(sep)]
        if len(row) != n_fields:
            what = "white-space separated" if sep is None else f"separated by {sep!r}"
            raise ValueError(f"{path}, line {lineno}: expected {n_fields} fields {what}, "
                             f"found {len(row)}")
        rows.append(row)
    return rows


def _numbers(path: Path, rows: list[list[str]], linenos: list[int],
             record: DatasetRecord | None = None, what: str = "feature") -> np.ndarray:
    """The fields of ``rows`` as a float64 matrix; a non-numeric or non-finite value,
    or one outside ``record.value_range`` / not an integer when
    ``record.integer_values``, is a ValueError naming the file and line."""
    n_cols = len(rows[0]) if rows else 0
    try:
        X = np.array(rows, dtype=np.float64).reshape(len(rows), n_cols)
    except ValueError:
        for row, lineno in zip(rows, linenos):
            for j, v in enumerate(row):
                try:
                    float(v)
                except ValueError:
                    raise ValueError(f"{path}, line {lineno}: {what} {j + 1} is not a "
                                     f"number: {v[:40]!r}") from None
        raise  # pragma: no cover - numpy and float() accept the same strings
    bad = ~np.isfinite(X).all(axis=1)
    problem = "holds NaN or infinity"
    if record is not None and not bad.any():
        if record.value_range is not None:
            lo, hi = record.value_range
            bad = ((X < lo) | (X > hi)).any(axis=1)
            problem = f"holds a {what} value outside [{lo:g}, {hi:g}]"
        if record.integer_values and not bad.any():
            bad = (X != np.round(X)).any(axis=1)
            problem = f"holds a {what} value that is not an integer"
    if bad.any():
        raise ValueError(f"{path}, line {linenos[int(np.argmax(bad))]}: {problem}")
    return X


def _read_uci_csv(path: Path, record: DatasetRecord):
    """UCI comma-separated numbers with the class label in the last column (the
    first for balance-scale)."""
    lines, linenos = _read_lines(path)
    rows = _split_fields(path, lines, linenos, ",", record.shape[1] + 1)
    label_col = 0 if record.name == "balance-scale" else -1
    labels = [r.pop(label_col) for r in rows]
    return _numbers(path, rows, linenos, record), _encode(labels, record, path, linenos)


def _read_semeion(path: Path, record: DatasetRecord):
    """Semeion: white-space separated 0/1 pixels, then one-hot label columns."""
    n_feat, n_cls = record.shape[1], len(record.classes)
    lines, linenos = _read_lines(path)
    rows = _split_fields(path, lines, linenos, None, n_feat + n_cls)
    X = _numbers(path, [r[:n_feat] for r in rows], linenos, record)
    Y = _numbers(path, [r[n_feat:] for r in rows], linenos, what="label column")
    bad = ~(np.isin(Y, (0.0, 1.0)).all(axis=1) & (Y.sum(axis=1) == 1))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{path}, line {linenos[i]}: the {n_cls} label columns must be "
                         f"one-hot (a single 1, the rest 0), found {' '.join(rows[i][n_feat:])}")
    return X, Y.argmax(axis=1).astype(np.int64)


def _read_uci_onehot(path: Path, record: DatasetRecord):
    """Comma-separated categorical attributes (class last), one-hot encoded into the
    ``attribute=value`` columns of ``record.feature_names``."""
    columns: dict[str, dict[str, int]] = {}
    for j, name in enumerate(record.feature_names):
        attr, value = name.split("=", 1)
        columns.setdefault(attr, {})[value] = j
    lines, linenos = _read_lines(path)
    rows = _split_fields(path, lines, linenos, ",", len(columns) + 1)
    X = np.zeros((len(rows), len(record.feature_names)))
    for i, (row, lineno) in enumerate(zip(rows, linenos)):
        for (attr, values), v in zip(columns.items(), row):
            j = values.get(v)
            if j is None:
                raise ValueError(f"{path}, line {lineno}: unknown value {v[:40]!r} of "
                                 f"attribute {attr!r}; expected one of {list(values)}")
            X[i, j] = 1.0
    return X, _encode([r[-1] for r in rows], record, path, linenos)


def _read_csv_header(path: Path, record: DatasetRecord):
    """``;``-separated numbers after one header line of quoted column names, which
    must be ``record.feature_names`` then the target column; the target (last
    column) is a class label."""
    lines, linenos = _read_lines(path)
    if not lines:
        raise ValueError(f"{path}: empty file")
    n = len(record.feature_names) + 1
    header = [h.strip('"') for h in _split_fields(path, lines[:1], linenos[:1], ";", n)[0]]
    if tuple(header[:-1]) != record.feature_names:
        raise ValueError(f"{path}, line {linenos[0]}: unexpected header {header[:-1]}; "
                         f"expected the columns {list(record.feature_names)} and the target")
    rows = _split_fields(path, lines[1:], linenos[1:], ";", n)
    labels = [r.pop() for r in rows]
    return (_numbers(path, rows, linenos[1:], record),
            _encode(labels, record, path, linenos[1:]))


#: IDX element type codes (third byte of the magic number) the loaders read.
_IDX_UBYTE = 0x08


def _read_idx(path: Path, item_shape: tuple[int, ...]) -> np.ndarray:
    """Read an IDX file of unsigned bytes (plain or ``.gz``) whose items have shape
    ``item_shape``: big-endian magic ``00 00 08 <ndim>``, ``ndim`` 32-bit sizes,
    then exactly ``prod(sizes)`` bytes.  Returns an ``(n, *item_shape)`` uint8 array.

    Anything else -- another magic number, element type or number of dimensions,
    item sizes other than ``item_shape``, a short or overlong body, more than
    ``TABLE_MAX_BYTES`` of data -- is a ValueError naming the file, before the
    body is read when the header is at fault."""
    ndim = 1 + len(item_shape)
    with _open(path) as fh:
        head = _read_bounded(fh, path, 4 + 4 * ndim)
        if len(head) < 4 + 4 * ndim:
            raise ValueError(f"{path}: truncated IDX header ({len(head)} of {4 + 4 * ndim} "
                             "bytes)")
        magic = int.from_bytes(head[:4], "big")
        expected = (_IDX_UBYTE << 8) | ndim
        if magic != expected:
            raise ValueError(f"{path}: bad IDX magic number {magic:#010x}; expected "
                             f"{expected:#010x} (unsigned bytes, {ndim} dimensions)")
        dims = tuple(int.from_bytes(head[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim))
        if dims[1:] != tuple(item_shape):
            raise ValueError(f"{path}: IDX header gives items of shape {dims[1:]}; expected "
                             f"{tuple(item_shape)}")
        size = dims[0] * int(np.prod(item_shape, dtype=np.int64))
        if size > TABLE_MAX_BYTES:
            raise ValueError(f"{path}: IDX header declares {dims[0]} items ({size} bytes), "
                             f"more than {TABLE_MAX_BYTES} bytes; refusing to read it.")
        body = _read_bounded(fh, path, size)
        if len(body) < size:
            raise ValueError(f"{path}: truncated IDX file: the header declares {dims[0]} "
                             f"items ({size} bytes of data), only {len(body)} bytes follow")
        if _read_bounded(fh, path, 1):
            raise ValueError(f"{path}: trailing bytes after the {dims[0]} items the IDX "
                             "header declares")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def _read_idx_pair(images: Path, labels: Path, record: DatasetRecord):
    """An IDX image file and its IDX label file (MNIST layout) as float64 rows of
    pixels and class indices (the labels must be valid indices into ``record.classes``)."""
    side = int(round(np.sqrt(record.shape[1])))
    X = _read_idx(images, (side, side)).reshape(-1, side * side).astype(np.float64)
    y = _read_idx(labels, ()).astype(np.int64)
    if len(y) != len(X):
        raise ValueError(f"{images} holds {len(X)} images but {labels} holds {len(y)} labels")
    bad = y >= len(record.classes)
    if bad.any():
        raise ValueError(f"{labels}: label {y[bad][0]} of item {int(np.argmax(bad))} is not "
                         f"one of 0..{len(record.classes) - 1}")
    return X, y


#: Readers of the table kinds: one (X, y) per file, stacked in the subset's file order.
_TABLE_READERS = {"uci_csv": _read_uci_csv, "semeion": _read_semeion,
                  "uci_onehot": _read_uci_onehot, "csv_header": _read_csv_header}


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
    elif len(np.unique(y)) != (record.subset(subset).n_classes or record.n_classes):
        raise ValueError(f"{record.name} ({subset}) from {where}: expected "
                         f"{record.subset(subset).n_classes or record.n_classes} classes, "
                         f"found {len(np.unique(y))}")


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
        sets; semeion, car, optdigits, mnist-test, wine-quality) or a list of str (20
        Newsgroups, decoded as Latin-1); ``target``: int64 class indices (into
        ``target_names``), or an ``(n, n_labels)`` int8 0/1 indicator for multi-label
        sets; ``target_names``; ``name``; ``subset``; ``DESCR``; ``files`` (paths
        read); 20 Newsgroups also has ``filenames`` (archive member names); sets whose
        record has ``feature_names`` (semeion, car, optdigits, mnist-test:
        ``"pixel_0"``...; car: ``"buying=vhigh"``...; wine-quality: the header's
        column names) also have ``feature_names``.  Multi-file
        subsets are stacked in the order of ``info(name).subset(subset).files``.

    Raises
    ------
    ValueError
        Unknown name or subset, a data file that is not a regular file (FIFO,
        device, directory: refused without blocking), checksum mismatch, a
        malformed file (wrong field count, non-numeric or out-of-range value,
        unknown class label or category, bad one-hot label row, bad IDX header,
        truncated data: the message names the file and line), or a shape / class
        count that differs from the registry.  Reading is bounded: a text or IDX
        file above ``TABLE_MAX_BYTES`` uncompressed is refused.
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
        elif record.kind in _TABLE_READERS:
            parts = [_TABLE_READERS[record.kind](p, record) for p in paths]
            X = np.vstack([p[0] for p in parts])
            y = np.concatenate([p[1] for p in parts])
        elif record.kind == "idx":
            X, y = _read_idx_pair(paths[0], paths[1], record)
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
    if record.feature_names:
        extra["feature_names"] = list(record.feature_names)
    return Bunch(data=X, target=y, target_names=list(record.classes), name=name,
                 subset=subset, DESCR=descr, files=paths, **extra)
