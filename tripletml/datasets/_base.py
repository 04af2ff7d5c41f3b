"""Data home, checksums and the loaders behind :func:`tripletml.datasets.load`."""
from __future__ import annotations

import gzip
import hashlib
import os
import tarfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch

from ._registry import REGISTRY, DataFile, DatasetRecord, get_record

__all__ = ["get_data_home", "list_datasets", "info", "load", "sha256sum"]

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
    """Return the hex SHA-256 of the file at ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk_size), b""):
            h.update(block)
    return h.hexdigest()


def _verify(path: Path, expected: str | None, *, unknown_ok: bool = False) -> bool:
    """Check ``path`` against ``expected``; cached per (path, size, mtime).

    Returns True when the hash matched, False when there is nothing to compare
    (no hash known, or a mismatch where ``unknown_ok``: the file may be an official
    copy whose hash is unknown, and only its structure can be checked).  Raises
    ValueError on a mismatch otherwise.
    """
    if expected is None:
        return False
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if _VERIFIED.get(key) == expected:
        return True
    actual = sha256sum(path)
    if actual != expected and unknown_ok:
        return False
    if actual != expected:
        raise ValueError(f"checksum mismatch for {path}: expected sha256 {expected}, found "
                         f"{actual}. The file is corrupt or a different version; delete it "
                         "and run tripletml.datasets.fetch() again.")
    _VERIFIED[key] = expected
    return True


def _locate(f: DataFile, home: Path, how: str, name: str) -> tuple[Path, str | None]:
    """Find ``f`` stored (maybe gzip'd) or as its plain original; return (path, expected hash)."""
    candidates = [(home / f.path, f.sha256)]
    if f.compressed:
        candidates.append((home / f.original_path, f.sha256_original))
    for path, expected in candidates:
        if path.is_file():
            return path, expected
    looked = "\n  ".join(str(p) for p, _ in candidates)
    raise FileNotFoundError(
        f"data set {name!r}: file not found; looked in\n  {looked}\n"
        f"(data home {home}, chosen by {how}). Download it with "
        f"tripletml.datasets.fetch({name!r}) or set {ENV_VAR} to a folder that holds it.")


def _official_hash_unknown(f: DataFile, path: Path, home: Path) -> bool:
    """True if ``path`` may be an official download of ``f`` whose hash is unknown."""
    return f.sha256_original is None and path == home / f.original_path


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


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


def _read_libsvm(path: Path, record: DatasetRecord):
    from sklearn.datasets import load_svmlight_file

    try:
        X, y = load_svmlight_file(str(path), n_features=record.shape[1], zero_based=False,
                                  dtype=np.float64)
    except ValueError as exc:
        raise ValueError(f"{path}: cannot read as LIBSVM with {record.shape[1]} features "
                         f"(expected shape (n, {record.shape[1]})): {exc}") from exc
    return X.tocsr(), _encode([_label_str(v) for v in y], record, path)


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

    with open(path, encoding="utf-8") as fh:
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


def _read_newsgroups(path: Path, record: DatasetRecord, subset: str):
    """Read the bydate tarball: members ``20news-bydate-{train,test}/<group>/<id>``."""
    lookup = {g: i for i, g in enumerate(record.classes)}
    keep = ("train", "test") if subset == "all" else (subset,)
    items = []
    with tarfile.open(path, "r:*") as tf:
        for m in tf:
            parts = m.name.removeprefix("./").split("/")
            if not m.isfile() or len(parts) != 3 or not parts[0].startswith("20news-bydate-"):
                continue
            part = parts[0][len("20news-bydate-"):]
            if part not in keep:
                continue
            if parts[1] not in lookup:
                raise ValueError(f"{path}: unknown newsgroup {parts[1]!r} in {m.name}")
            text = tf.extractfile(m).read().decode("latin-1")
            items.append(((keep.index(part), parts[1], parts[2]), "/".join(parts), text,
                          lookup[parts[1]]))
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
        Check each file's SHA-256: a gzip'd file against the stored-file hash, a plain
        file against the hash of the uncompressed original.  Results are cached in
        memory per (path, size, mtime).  A file whose hash is unknown (an official
        download of the 20 Newsgroups tarball) is checked by its structure only.

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
        Unknown name or subset, checksum mismatch, or a shape / class count that
        differs from the registry.
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
            path, expected = _locate(f, home, how, name)
            if verify:  # unknown official hash: the shape / class checks below stand in
                _verify(path, expected, unknown_ok=_official_hash_unknown(f, path, home))
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
                labels = np.loadtxt(label_path, dtype=np.int64, ndmin=1)
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
