"""Saving and loading fitted models safely.

A model file is a ``.npz`` archive holding the fitted arrays plus one
``__meta__`` entry: UTF-8 JSON with the format version, the class name, the
constructor parameters and the non-array fitted attributes (``history_``,
``n_features_in_``, ...).

Loading trusts nothing in the file:

* the class must be one of :mod:`tripletml.registry` (learners on features
  and item embeddings: the one allow-list; abstract bases and anything else
  are refused); nothing is imported or unpickled (``allow_pickle=False``,
  JSON metadata).  A model holding another model (``BilinearEmbedding``'s
  fitted ``learner_``, declared in ``_nested_models``) stores it as a nested
  record (class, parameters, attributes; its arrays as
  ``<attribute><array>``), checked in the same way and refused when not of
  the kinds allowed there;
* every array member must be declared in the class's ``_fitted_arrays``
  (:mod:`tripletml.core.arrayspec`); an undeclared one is refused from the zip
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
* only a regular file is opened (:func:`tripletml.core.files.open_regular`): a
  FIFO, ``/dev/zero`` or a directory is refused at once, naming the file;
* what a file may allocate is bounded by what it stores: every member's
  stored bytes must lie inside the file, a compressed member may expand at
  most :data:`MAX_COMPRESSION_RATIO` times (members up to
  :data:`SMALL_MEMBER_BYTES` excepted), and the arrays together may hold at
  most ``max_bytes`` (argument, else the ``TRIPLETML_LOAD_MAX_BYTES``
  environment variable, else half the available memory) -- all checked from
  the zip directory and the ``.npy`` headers before any data is read.  Each
  array is read in chunks into one preallocated buffer (no second copy of
  the whole array);
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
from typing import IO

import numpy as np

from tripletml.core.arrayspec import check_header, check_values, expected_nbytes
from tripletml.core.files import open_regular
from tripletml.core.model_writer import _FORMAT_NAME, _META, FORMAT_VERSION, SavableModel, save_model
from tripletml.core.validation import as_generator, available_memory
from tripletml.registry import get_entry, learner_names
from tripletml.triplets import sampler_from_dict

__all__ = ["save_model", "load_model", "ModelFileError", "FORMAT_VERSION", "SavableModel",
           "MAX_COMPRESSION_RATIO", "SMALL_MEMBER_BYTES", "LOAD_MAX_BYTES_ENV"]


#: the JSON metadata (parameters, history) is small; refuse more
_META_MAX_BYTES = 64 * 2**20
_HEADER_MAX = 10000

#: Largest expansion (uncompressed / compressed bytes) a compressed member of
#: a model file may have.  :func:`save_model` stores arrays uncompressed
#: (ratio 1); ``np.savez_compressed`` gives about 1.1 for fitted float
#: arrays and up to ~1000 (deflate's limit) for all-zero ones, which is what a
#: decompression bomb uses: a 1 MB file inflating to a 1 GB ``W_``.  100 keeps
#: every compressed file of real fitted arrays and bounds a file's arrays by
#: 100 times its size.
MAX_COMPRESSION_RATIO = 100
#: Members of at most this many uncompressed bytes are exempt from
#: :data:`MAX_COMPRESSION_RATIO` (small sparse or zero arrays compress well
#: and cost nothing to allocate).
SMALL_MEMBER_BYTES = 1 << 20
#: Environment variable holding the default ``max_bytes`` of :func:`load_model`
#: (a positive integer of bytes).
LOAD_MAX_BYTES_ENV = "TRIPLETML_LOAD_MAX_BYTES"
#: chunk of a member read at once into the array's buffer
_READ_CHUNK = 4 << 20


class ModelFileError(ValueError):
    """A model file refused by :func:`load_model`: not a regular file,
    truncated, foreign, of a newer format, over the size limits, or holding
    an inconsistent model.  The message names the file and the problem.  A
    :class:`ValueError`, so ``except ValueError`` keeps working."""


#: the name of :class:`ModelFileError` before tripletml 0.3 (private)
_Refused = ModelFileError


def load_model(path: str | os.PathLike, *, max_bytes: int | None = None) -> SavableModel:
    """Load a model written by :func:`save_model` (``model.save``), checking
    everything in the file.

    Parameters
    ----------
    path : str or path-like
        The model file (``.npz`` may be left out).  Only a regular file is
        read: a directory, FIFO, device or socket is refused at once.
    max_bytes : int, optional
        The most bytes the file's arrays may hold together (their declared
        sizes, checked before any data is read).  By default the value of the
        ``TRIPLETML_LOAD_MAX_BYTES`` environment variable (a positive integer)
        when it is set, else half the memory available.  Independently of
        it, what a file may allocate is bounded by what it stores: a
        compressed member may expand at most ``MAX_COMPRESSION_RATIO`` (100)
        times, members up to ``SMALL_MEMBER_BYTES`` (1 MiB) excepted, so a
        small file cannot declare a huge array.  Arrays are read into one
        buffer each (peak memory about the arrays' size, plus one more copy of
        an array stored in Fortran order).

    Returns
    -------
    model : fitted tripletml learner
        An instance of the registered learner class the file names.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        The file is not a regular file, exceeds ``max_bytes`` or the
        compression-ratio cap, is truncated, not a tripletml model, of a newer format, names
        a class that is not a registered learner, holds an undeclared array,
        an array of the wrong shape / dtype / values, invalid parameters, or
        is otherwise inconsistent.
    """
    limit = _max_bytes(max_bytes)
    path = Path(path)
    if not os.path.lexists(path) and path.with_name(path.name + ".npz").exists():
        path = path.with_name(path.name + ".npz")
    try:
        fh = open_regular(path, "load_model")
    except FileNotFoundError:
        raise FileNotFoundError(f"load_model: no such file: {path}") from None
    try:
        with fh:
            return _load(path, fh, limit)
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, UnicodeDecodeError,
            ValueError, struct.error, zlib.error, KeyError, TypeError, IndexError,
            OverflowError, RecursionError, MemoryError, NotImplementedError,
            AttributeError) as exc:
        detail = " ".join(str(exc).split())[:300]
        raise ModelFileError(f"load_model: {path} is not a readable tripletml model file "
                         f"(truncated or foreign: {type(exc).__name__}: {detail}).") from None


def _read_meta(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path) -> dict:
    if info.file_size > _META_MAX_BYTES:
        raise ModelFileError(f"load_model: {path} has a {info.file_size}-byte metadata entry "
                       f"(at most {_META_MAX_BYTES}).")
    with zf.open(info) as fh:
        arr = np.lib.format.read_array(fh, allow_pickle=False,
                                       max_header_size=_HEADER_MAX)
    if arr.dtype != np.uint8 or arr.ndim != 1:
        raise ModelFileError(f"load_model: {path} is not a tripletml model file (bad metadata).")
    return json.loads(arr.tobytes().decode("utf-8"))


def _max_bytes(max_bytes) -> tuple[int | None, str]:
    """The cap on a file's array bytes and where it comes from."""
    if max_bytes is not None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)):
            raise TypeError(f"load_model: max_bytes must be a positive int or None, got "
                            f"{type(max_bytes).__name__}")
        if max_bytes < 1:
            raise ValueError(f"load_model: max_bytes must be a positive int, got {max_bytes}")
        return int(max_bytes), "max_bytes"
    env = os.environ.get(LOAD_MAX_BYTES_ENV)
    if env is not None and env.strip():
        try:
            value = int(env.strip().replace("_", ""))
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"load_model: the {LOAD_MAX_BYTES_ENV} environment variable "
                             f"must be a positive integer of bytes, got {env[:40]!r}")
        return value, f"the {LOAD_MAX_BYTES_ENV} environment variable"
    avail = available_memory()
    return (None if avail is None else avail // 2), "half the available memory"


def _check_members(zf: zipfile.ZipFile, file_size: int, path) -> None:
    """Bound what each member may allocate by what the file stores, from the
    zip directory alone (nothing decompressed)."""
    for info in zf.infolist():
        name = info.filename[:80]
        if info.flag_bits & 0x1:
            raise ModelFileError(f"load_model: {path}: member {name!r} is encrypted.")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED,
                                      zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
            raise ModelFileError(f"load_model: {path}: member {name!r} uses an unsupported "
                           f"compression method {info.compress_type}.")
        if info.header_offset + info.compress_size > file_size:
            raise ModelFileError(f"load_model: {path}: member {name!r} claims "
                           f"{info.compress_size} stored bytes beyond the end of the "
                           f"{file_size}-byte file (truncated or forged).")
        if info.compress_type == zipfile.ZIP_STORED:
            if info.file_size != info.compress_size:
                raise ModelFileError(f"load_model: {path}: uncompressed member {name!r} declares "
                               f"{info.file_size} bytes but stores {info.compress_size}.")
        elif info.file_size > SMALL_MEMBER_BYTES and \
                info.file_size > MAX_COMPRESSION_RATIO * info.compress_size:
            raise ModelFileError(f"load_model: {path}: member {name!r} would expand from "
                           f"{info.compress_size} to {info.file_size} bytes, more than "
                           f"{MAX_COMPRESSION_RATIO} times (a decompression bomb?); "
                           "refused without decompressing it.")


def _load(path: Path, fh: IO[bytes], limit: tuple[int | None, str]):
    file_size = os.fstat(fh.fileno()).st_size
    with zipfile.ZipFile(fh) as zf:
        _check_members(zf, file_size, path)
        members = _array_members(zf, path)
        meta = _read_meta(zf, members.pop(_META), path)
        _check_format(meta, path)
        parts: list = []
        model = _build(path, meta, members, None, parts)
        _check_budget(path, members, limit)
        for owner, specs, own in parts:
            bindings: dict = {}
            for name, spec in specs.items():     # declaration order: deterministic bindings
                if name in own:
                    arr = _read_array(zf, own[name], owner, name, spec, bindings, path,
                                      type(owner))
                    setattr(owner, name, arr)
    for owner, _, _ in reversed(parts):          # a nested model before its holder
        _check_loaded(path, owner)
    return model


def _array_members(zf: zipfile.ZipFile, path) -> dict[str, zipfile.ZipInfo]:
    """The ``.npy`` members by array name (the metadata entry included)."""
    members: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        name = info.filename
        if not name.endswith(".npy") or name[:-4] in members or "/" in name:
            raise ModelFileError(f"load_model: {path} is not a tripletml model file (member "
                           f"{name[:80]!r}).")
        members[name[:-4]] = info
    if _META not in members:
        raise ModelFileError(f"load_model: {path} is not a tripletml model file (no metadata "
                       "entry).")
    return members


def _check_format(meta, path) -> None:
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT_NAME:
        raise ModelFileError(f"load_model: {path} is not a tripletml model file.")
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version > FORMAT_VERSION:
        raise ModelFileError(f"load_model: {path} has format version {version!r}; this "
                       f"tripletml reads versions <= {FORMAT_VERSION}. Upgrade tripletml.")


def _model_class(path, cname, kinds) -> type:
    """The registry class a file names (of ``kinds``; None: any): the one
    allow-list."""
    try:
        return get_entry(cname, kind=kinds).cls
    except ValueError:
        raise ModelFileError(f"load_model: {path} holds an unknown or abstract model class "
                       f"{str(cname)[:80]!r}; known: {', '.join(learner_names(kinds))}."
                       ) from None


def _build(path, record: dict, members: dict, kinds, parts: list) -> SavableModel:
    """The model of a record (``class``, ``params``, ``attributes``) with its
    parameters and JSON attributes set; appends ``(model, specs, its array
    members)`` to ``parts`` for it and every fitted model it holds (a
    nested record, its arrays stored as ``<attribute><array>``)."""
    cls = _model_class(path, record.get("class"), kinds)
    params, attrs = record.get("params"), record.get("attributes")
    if not isinstance(params, dict) or not isinstance(attrs, dict):
        raise ModelFileError(f"load_model: {path} has malformed metadata (params/attributes).")
    model = _with_params(path, cls, params)
    specs = cls._fitted_arrays
    nested = {k: v for k, v in getattr(cls, "_nested_models", {}).items() if k.endswith("_")}
    own = {n: i for n, i in members.items() if not n.startswith(tuple(nested))}
    _set_attributes(path, model, {k: v for k, v in attrs.items() if k not in nested}, specs,
                    own)
    _check_declared(path, cls, specs, own)
    parts.append((model, specs, own))
    for name, inner_kinds in nested.items():
        inner = attrs.get(name)
        if not isinstance(inner, dict):
            raise ModelFileError(f"load_model: {path} has malformed metadata ({name}).")
        sub = {n[len(name):]: i for n, i in members.items() if n.startswith(name)}
        setattr(model, name, _build(path, inner, sub, inner_kinds, parts))
    return model


#: the value a renamed parameter's old name held when nothing was given
_RENAMED_PLACEHOLDER = "deprecated"


def _with_params(path, cls: type, params: dict) -> SavableModel:
    """An instance of ``cls`` with the file's parameters, checked by the
    class's own ``_validate_params``."""
    model = cls()
    if "preprocessing" in model.get_params() and "preprocessing" not in params:
        # written before preprocessing existed (issue 14): raw features
        params = {**params, "preprocessing": None}
    for old, new in getattr(cls, "_renamed_params", {}).items():
        # a parameter renamed since the file was written (e.g. LORETA's
        # algorithm -> solver): a value given under the old name is the one
        # the model was fitted with (it won over the new name at fit time),
        # read under the new name; "deprecated" was the old name's
        # placeholder (nothing given) in the files of 0.2 development
        if old in params:
            value = params.pop(old)
            if value != _RENAMED_PLACEHOLDER:
                params[new] = value
    unknown = set(params) - set(model.get_params())
    if unknown:
        raise ModelFileError(f"load_model: {path} sets unknown {cls.__name__} parameters "
                       f"{sorted(unknown)[:10]}.")
    if isinstance(params.get("sampling"), dict):
        try:
            params = {**params, "sampling": sampler_from_dict(params["sampling"])}
        except ValueError as e:
            raise ModelFileError(f"load_model: {path} holds invalid {cls.__name__} "
                           f"parameters: {e}") from None
    for name, kinds in getattr(cls, "_nested_models", {}).items():
        if not name.endswith("_") and isinstance(params.get(name), dict):
            # an estimator parameter (unfitted): its class and parameters
            inner = params[name]
            if not isinstance(inner.get("params"), dict):
                raise ModelFileError(f"load_model: {path} has malformed metadata ({name}).")
            params = {**params, name: _with_params(path, _model_class(path, inner.get("class"),
                                                                      kinds), inner["params"])}
    model.set_params(**params)
    try:
        model._validate_params()
        if "random_state" in params:      # as fit would (as_generator)
            as_generator(model.random_state, model)
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"load_model: {path} holds invalid {cls.__name__} parameters: "
                       f"{exc}") from None
    return model


def _set_attributes(path, model, attrs: dict, specs: dict, members: dict) -> None:
    """The JSON fitted attributes (names ``x_``, no array among them) and a
    positive int ``n_features_in_``."""
    for k, v in attrs.items():
        if not (k.endswith("_") and not k.startswith("_") and k.isidentifier()):
            raise ModelFileError(f"load_model: {path} holds {k[:80]!r}, which is not a fitted "
                           "attribute name.")
        if k in specs or k in members:
            raise ModelFileError(f"load_model: {path} stores the array {k} as metadata.")
        if k == "feature_names_in_":
            if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                raise ModelFileError(f"load_model: {path} has malformed feature_names_in_.")
            v = np.asarray(v, dtype=object)
        setattr(model, k, v)
    d = getattr(model, "n_features_in_", None)
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ModelFileError(f"load_model: {path} does not hold a consistent fitted "
                       f"{type(model).__name__}: n_features_in_={d!r} is not a positive "
                       "integer")


def _check_declared(path, cls: type, specs: dict, members: dict) -> None:
    """Every array member declared, every declared (non-optional) array there."""
    undeclared = sorted(set(members) - set(specs))
    if undeclared:
        raise ModelFileError(f"load_model: {path} holds array(s) {undeclared[:5]} that "
                       f"{cls.__name__} does not declare; refused without reading them.")
    missing = [n for n, s in specs.items() if n not in members and not s.optional]
    if missing:
        raise ModelFileError(f"load_model: {path} does not hold a consistent fitted "
                       f"{cls.__name__}: the fitted array(s) {missing} are missing.")


def _check_budget(path, members: dict, limit: tuple[int | None, str]) -> None:
    total = sum(info.file_size for info in members.values())
    budget, source = limit
    if budget is not None and total > budget:
        raise ModelFileError(f"load_model: {path} declares {total} bytes of arrays, more than "
                       f"the {budget} bytes allowed ({source}); pass a larger "
                       f"max_bytes or set {LOAD_MAX_BYTES_ENV} to load it.")


def _check_loaded(path, model) -> None:
    try:
        model._check_loaded()
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise ModelFileError(f"load_model: {path} does not hold a consistent fitted "
                       f"{type(model).__name__}: {exc}") from None


def _read_array(zf, info, model, name, spec, bindings, path, cls) -> np.ndarray:
    def refuse(msg):
        return ModelFileError(f"load_model: {path} does not hold a consistent fitted "
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
        buf = np.empty(nbytes, dtype=np.uint8)     # the array's only buffer
        view = memoryview(buf)
        pos = 0
        while pos < nbytes:
            chunk = fh.read(min(_READ_CHUNK, nbytes - pos))
            if not chunk:
                break
            view[pos:pos + len(chunk)] = chunk
            pos += len(chunk)
        del view
    if pos != nbytes:
        raise refuse(f"{name} is truncated")
    arr = buf.view(dtype).reshape(shape, order="F" if fortran else "C")
    if not arr.flags.c_contiguous:               # stored in Fortran order
        arr = np.ascontiguousarray(arr)
    try:
        check_values(model, name, spec, arr)
    except (TypeError, ValueError) as exc:
        raise refuse(str(exc)) from None
    return arr
