"""The files the command line writes: never over a file it did not write.

Every output option (``fit -o MODEL``, ``index build -o INDEX``, ``search
-o RESULTS``) goes through :func:`check_output` before anything is computed:

* a path that does not exist is written;
* an existing output of the same kind -- a tripletml model file, an index
  directory, a search-results file -- is replaced only with ``--force``;
* anything else (a data file, a model where an index goes, a directory of
  the user's) is refused, ``--force`` or not.

Recognizing a file is cheap and reads no large array: a model is a zip
archive whose small ``__meta__.npy`` member declares tripletml's model
format; an index directory is :func:`tripletml.search.index.is_index_dir`; search
results are a zip holding exactly ``ids.npy`` and ``scores.npy``, or a text
file whose first line is the results header.
"""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from tripletml.core.files import open_regular

__all__ = ["check_output", "is_model_file", "model_target", "RESULTS_HEADER"]

#: first line of a search-results text file
RESULTS_HEADER = "query\trank\tid\tscore"
_META_MEMBER = "__meta__.npy"
_META_MAX_BYTES = 16 << 20


def model_target(path) -> Path:
    """The file ``model.save(path)`` writes (``.npz`` appended to another
    suffix)."""
    path = Path(path)
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def _zip_members(path: Path) -> dict[str, int] | None:
    try:
        with open_regular(path, "tripletml") as fh, zipfile.ZipFile(fh) as zf:
            return {i.filename: i.file_size for i in zf.infolist()}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        return None


def is_model_file(path) -> bool:
    """Whether ``path`` is a regular file holding a tripletml model: a zip
    whose ``__meta__.npy`` (read alone, at most 16 MiB) declares the
    ``tripletml-model`` format.  No other member is read."""
    try:
        with open_regular(path, "tripletml") as fh, zipfile.ZipFile(fh) as zf:
            info = zf.getinfo(_META_MEMBER)
            if info.file_size > _META_MAX_BYTES:
                return False
            with zf.open(info) as member:
                version = np.lib.format.read_magic(member)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read_header(member)
                # the declared size must be what the member stores: a header
                # claiming more is not allocated
                if dtype != np.uint8 or len(shape) != 1 or shape[0] > info.file_size:
                    return False
                raw = member.read(shape[0])
        if len(raw) != shape[0]:
            return False
        meta = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError,
            UnicodeDecodeError, RuntimeError):
        return False
    return isinstance(meta, dict) and meta.get("format") == "tripletml-model"


def _is_results(path: Path) -> bool:
    members = _zip_members(path)
    if members is not None:
        return set(members) == {"ids.npy", "scores.npy"}
    try:
        with open_regular(path, "tripletml") as fh:
            head = fh.read(len(RESULTS_HEADER) + 1)
    except (OSError, ValueError):
        return False
    return head == (RESULTS_HEADER + "\n").encode()


_KINDS = {
    "model": ("a tripletml model file", is_model_file),
    "index": ("a tripletml index directory", None),
    "results": ("a tripletml search-results file", _is_results),
}


_EXAMPLES = {"model": "model.npz", "index": "my-index", "results": "results.tsv"}


def _check_folder(path: Path, kind: str, option: str) -> None:
    """The folder ``path`` goes in: it must exist and be a writable folder
    (an index directory's missing folders are created, but the nearest
    existing one must be a writable folder) -- checked before any work, so
    that a long fit does not end in an unwritable path."""
    folder = path.parent
    if kind == "index":
        while not (folder.exists() or folder.is_symlink()) and folder != folder.parent:
            folder = folder.parent
    elif not folder.exists():
        raise ValueError(f"{option} {path}: the folder {folder} does not exist; create it "
                         "first (nothing was computed).")
    if not folder.is_dir():
        raise ValueError(f"{option} {path}: {folder} is not a folder, so {path} cannot be "
                         "written (nothing was computed).")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: no permission to write in the folder {folder} "
                         "(nothing was computed).")


def check_output(path, kind: str, force: bool, option: str = "-o") -> Path:
    """Refuse to write ``kind`` ("model", "index", "results") over ``path``
    unless it is absent, or is an output of that kind and ``force`` is set.

    Returns the path that will be written (``.npz`` appended for a model).

    Raises
    ------
    ValueError
        ``path`` exists and is not such an output ("refusing to overwrite"),
        or is one and ``force`` is not set ("pass --force"); ``path`` is not a
        file name (``''``, ``.``); its folder does not exist (an index's
        nearest existing folder), is not a folder or is not writable.
    """
    what = _KINDS[kind][0]
    raw = str(path)
    if not raw.strip() or Path(raw).name in ("", ".", ".."):
        raise ValueError(f"{option} {raw!r}: not a file name; give the path of "
                         f"{what} to write (e.g. {_EXAMPLES[kind]}).")
    if kind == "model":
        path = model_target(path)
    path = Path(path)
    _check_folder(path, kind, option)
    if not (path.exists() or path.is_symlink()):
        return path
    test = _KINDS[kind][1]
    if kind == "index":
        # lazy: the index module loads the Numba kernels; `tripletml --help` need not
        from tripletml.search.index import is_index_dir
        ours = is_index_dir(path)
    else:
        ours = not path.is_dir() and test(path)
    if not ours:
        kind_of = "a directory" if path.is_dir() else "a file"
        raise ValueError(f"{option} {path}: {kind_of} of that name exists and is not {what}; "
                         "refusing to overwrite it (choose another name; --force replaces "
                         f"only {what}).")
    if not force:
        raise ValueError(f"{option} {path}: {what} of that name exists; pass --force to "
                         "replace it.")
    return path
