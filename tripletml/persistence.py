"""Saving and loading fitted models safely.

A model file is a ``.npz`` archive holding the fitted arrays plus one
``__meta__`` entry: UTF-8 JSON with the format version, the class name, the
constructor parameters and the non-array fitted attributes (``history_``,
``n_features_in_``, ...).

Loading trusts nothing in the file:

* the class must be a learner of :mod:`tripletml._registry` (abstract bases
  and anything else are refused); nothing is imported or unpickled
  (``allow_pickle=False``, JSON metadata);
* every array member must be declared in the class's ``_fitted_arrays``
  (:mod:`tripletml._arrayspec`); an undeclared one is refused from the zip
  directory, before anything is decompressed;
* each array's shape and dtype are read from its ``.npy`` header and checked
  against the declaration (shape symbols, dtype) and its size against the
  zip entry's before its data is read, so a member cannot inflate beyond the
  shape it declares; then finiteness and integer bounds are checked;
* the parameters go through the learner's own ``_validate_params`` and the
  whole model through ``_check_loaded``; a triplet learner's fitted
  preprocessing (``preprocessing_`` and its statistics, plain arrays) is
  checked there too.  A file written before the ``preprocessing`` parameter
  existed loads as ``preprocessing=None`` (raw features);
* RecursionError, MemoryError, NotImplementedError, AttributeError (and other
  errors of odd files) become one ``ValueError`` naming the file.

``save`` writes to a temporary file created exclusively (``mkstemp``) in the
target directory, then renames it over the target: a symlink planted at any
fixed name is never followed.
"""
from __future__ import annotations

import json
import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ._arrayspec import check_header, check_values, expected_nbytes
from ._model_writer import _FORMAT_NAME, _META, FORMAT_VERSION, SavableModel, save_model
from ._registry import get_entry, learner_names
from ._validation import as_generator

__all__ = ["save_model", "load_model", "FORMAT_VERSION", "SavableModel"]


#: the JSON metadata (parameters, history) is small; refuse more
_META_MAX_BYTES = 64 * 2**20
_HEADER_MAX = 10000


class _Refused(ValueError):
    """A file refused with a message already naming it."""


def load_model(path: str | os.PathLike) -> SavableModel:
    """Load a model written by :func:`save_model` (``model.save``), checking
    everything in the file.

    Parameters
    ----------
    path : str or path-like
        The model file (``.npz`` may be left out).

    Returns
    -------
    model : fitted tripletml learner
        An instance of the registered learner class the file names.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        The file is truncated, not a tripletml model, of a newer format, names
        a class that is not a registered learner, holds an undeclared array,
        an array of the wrong shape / dtype / values, invalid parameters, or
        is otherwise inconsistent.
    """
    path = Path(path)
    if not path.exists() and path.with_name(path.name + ".npz").exists():
        path = path.with_name(path.name + ".npz")
    if not path.exists():
        raise FileNotFoundError(f"load_model: no such file: {path}")
    try:
        return _load(path)
    except _Refused:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, UnicodeDecodeError,
            ValueError, struct.error, zlib.error, KeyError, TypeError, IndexError,
            OverflowError, RecursionError, MemoryError, NotImplementedError,
            AttributeError) as exc:
        detail = " ".join(str(exc).split())[:300]
        raise ValueError(f"load_model: {path} is not a readable tripletml model file "
                         f"(truncated or foreign: {type(exc).__name__}: {detail}).") from None


def _read_meta(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path) -> dict:
    if info.file_size > _META_MAX_BYTES:
        raise _Refused(f"load_model: {path} has a {info.file_size}-byte metadata entry "
                       f"(at most {_META_MAX_BYTES}).")
    with zf.open(info) as fh:
        arr = np.lib.format.read_array(fh, allow_pickle=False,
                                       max_header_size=_HEADER_MAX)
    if arr.dtype != np.uint8 or arr.ndim != 1:
        raise _Refused(f"load_model: {path} is not a tripletml model file (bad metadata).")
    return json.loads(arr.tobytes().decode("utf-8"))


def _budget() -> int | None:
    from ._validation import available_memory

    avail = available_memory()
    return None if avail is None else avail // 2


def _load(path: Path):
    with zipfile.ZipFile(path) as zf:
        members: dict[str, zipfile.ZipInfo] = {}
        for info in zf.infolist():
            name = info.filename
            if not name.endswith(".npy") or name[:-4] in members or "/" in name:
                raise _Refused(f"load_model: {path} is not a tripletml model file (member "
                               f"{name[:80]!r}).")
            members[name[:-4]] = info
        if _META not in members:
            raise _Refused(f"load_model: {path} is not a tripletml model file (no metadata "
                           "entry).")
        meta = _read_meta(zf, members.pop(_META), path)
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT_NAME:
            raise _Refused(f"load_model: {path} is not a tripletml model file.")
        version = meta.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int) or version > FORMAT_VERSION:
            raise _Refused(f"load_model: {path} has format version {version!r}; this "
                           f"tripletml reads versions <= {FORMAT_VERSION}. Upgrade tripletml.")
        cname = meta.get("class")
        try:
            cls = get_entry(cname).cls
        except ValueError:
            raise _Refused(f"load_model: {path} holds an unknown or abstract model class "
                           f"{str(cname)[:80]!r}; known: {', '.join(learner_names())}.") from None
        params, attrs = meta.get("params"), meta.get("attributes")
        if not isinstance(params, dict) or not isinstance(attrs, dict):
            raise _Refused(f"load_model: {path} has malformed metadata (params/attributes).")
        model = cls()
        if "preprocessing" in model.get_params() and "preprocessing" not in params:
            # written before preprocessing existed (issue 14): raw features
            params = {**params, "preprocessing": None}
        for old, new in getattr(cls, "_renamed_params", {}).items():
            # a parameter renamed since the file was written (e.g. LORETA's
            # algorithm -> solver in 0.2): a value given under the old name
            # is the one the model was fitted with (it won over the new name
            # at fit time), read under the new name, without a warning
            if old in params:
                value = params.pop(old)
                if value != model.get_params()[old]:     # not the placeholder
                    params[new] = value
        unknown = set(params) - set(model.get_params())
        if unknown:
            raise _Refused(f"load_model: {path} sets unknown {cls.__name__} parameters "
                           f"{sorted(unknown)[:10]}.")
        model.set_params(**params)
        try:
            model._validate_params()
            if "random_state" in params:      # as fit would (as_generator)
                as_generator(model.random_state, model)
        except (TypeError, ValueError) as exc:
            raise _Refused(f"load_model: {path} holds invalid {cls.__name__} parameters: "
                           f"{exc}") from None
        specs = cls._fitted_arrays
        for k, v in attrs.items():
            if not (k.endswith("_") and not k.startswith("_") and k.isidentifier()):
                raise _Refused(f"load_model: {path} holds {k[:80]!r}, which is not a fitted "
                               "attribute name.")
            if k in specs or k in members:
                raise _Refused(f"load_model: {path} stores the array {k} as metadata.")
            if k == "feature_names_in_":
                if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                    raise _Refused(f"load_model: {path} has malformed feature_names_in_.")
                v = np.asarray(v, dtype=object)
            setattr(model, k, v)
        d = getattr(model, "n_features_in_", None)
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise _Refused(f"load_model: {path} does not hold a consistent fitted "
                           f"{cls.__name__}: n_features_in_={d!r} is not a positive integer")
        undeclared = sorted(set(members) - set(specs))
        if undeclared:
            raise _Refused(f"load_model: {path} holds array(s) {undeclared[:5]} that "
                           f"{cls.__name__} does not declare; refused without reading them.")
        missing = [n for n, s in specs.items() if n not in members and not s.optional]
        if missing:
            raise _Refused(f"load_model: {path} does not hold a consistent fitted "
                           f"{cls.__name__}: the fitted array(s) {missing} are missing.")
        total = sum(info.file_size for info in members.values())
        budget = _budget()
        if budget is not None and total > budget:
            raise _Refused(f"load_model: {path} declares {total} bytes of arrays, more than "
                           f"half the available memory ({budget * 2} bytes).")
        bindings: dict = {}
        for name, spec in specs.items():     # declaration order: deterministic bindings
            if name not in members:
                continue
            arr = _read_array(zf, members[name], model, name, spec, bindings, path, cls)
            setattr(model, name, arr)
    try:
        model._check_loaded()
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise _Refused(f"load_model: {path} does not hold a consistent fitted "
                       f"{cls.__name__}: {exc}") from None
    return model


def _read_array(zf, info, model, name, spec, bindings, path, cls) -> np.ndarray:
    def refuse(msg):
        return _Refused(f"load_model: {path} does not hold a consistent fitted "
                        f"{cls.__name__}: {msg}")

    with zf.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                fh, max_header_size=_HEADER_MAX)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                fh, max_header_size=_HEADER_MAX)
        else:
            raise refuse(f"{name} has an unsupported .npy version {version}")
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
            raise refuse(f"{name} has dtype {dtype}, not a plain numeric dtype")
        try:
            check_header(model, name, spec, tuple(shape), dtype, bindings)
        except (TypeError, ValueError) as exc:
            raise refuse(str(exc)) from None
        nbytes = expected_nbytes(shape, dtype)
        offset = fh.tell()
        if info.file_size != offset + nbytes:
            raise refuse(f"the zip entry of {name} holds {info.file_size} bytes, but its "
                         f"declared shape {tuple(shape)} needs {offset + nbytes}")
        data = fh.read(nbytes)
    if len(data) != nbytes:
        raise refuse(f"{name} is truncated")
    arr = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    arr = np.array(arr, order="C", copy=True)    # writeable, C-contiguous
    try:
        check_values(model, name, spec, arr)
    except (TypeError, ValueError) as exc:
        raise refuse(str(exc)) from None
    return arr
