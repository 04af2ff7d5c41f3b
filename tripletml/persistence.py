"""Saving and loading fitted models safely.

A model file is a ``.npz`` archive holding the fitted arrays plus one
``__meta__`` entry: UTF-8 JSON with the format version, the class name, the
constructor parameters and the non-array fitted attributes (``history_``,
``n_features_in_``, ...).  Loading uses ``allow_pickle=False`` and looks the
class up in :data:`tripletml.base.MODEL_REGISTRY`; nothing is imported or
unpickled from the file.
"""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .base import MODEL_REGISTRY, TripletLearner

__all__ = ["save_model", "load_model", "FORMAT_VERSION"]

FORMAT_VERSION = 1
_FORMAT_NAME = "tripletml-model"


def _jsonable(value: Any, what: str) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v, what) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, what) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"save: cannot store {what} of type {type(value).__name__} as JSON.")


def save_model(model: TripletLearner, path) -> None:
    """Write a fitted model to ``path`` (``.npz`` added if missing)."""
    if not hasattr(model, "n_features_in_"):
        raise ValueError(f"{type(model).__name__}: cannot save an unfitted model; call fit first.")
    params = model.get_params(deep=False)
    if not isinstance(params.get("random_state", None), (int, np.integer, type(None))):
        params["random_state"] = None  # a Generator cannot be stored; documented
    arrays: dict[str, np.ndarray] = {}
    attrs: dict[str, Any] = {}
    for name, value in vars(model).items():
        if not name.endswith("_") or name.startswith("_"):
            continue
        if isinstance(value, np.ndarray):
            if value.dtype == object:
                raise TypeError(f"save: fitted attribute {name} is an object array.")
            arrays[name] = value
        else:
            attrs[name] = _jsonable(value, f"attribute {name}")
    meta = {
        "format": _FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "class": type(model).__name__,
        "params": _jsonable(params, "parameters"),
        "attributes": attrs,
    }
    blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.savez(fh, __meta__=blob, **arrays)
    os.replace(tmp, path)


def load_model(path) -> TripletLearner:
    """Load a model written by ``save``.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        The file is truncated, not a tripletml model, or of a newer format.
    """
    path = Path(path)
    if not path.exists() and path.with_name(path.name + ".npz").exists():
        path = path.with_name(path.name + ".npz")
    if not path.exists():
        raise FileNotFoundError(f"load_model: no such file: {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            if "__meta__" not in npz.files:
                raise ValueError(f"load_model: {path} is not a tripletml model file (no "
                                 "metadata entry).")
            meta = json.loads(npz["__meta__"].tobytes().decode("utf-8"))
            arrays = {k: npz[k] for k in npz.files if k != "__meta__"}
    except (zipfile.BadZipFile, EOFError, OSError, UnicodeDecodeError,
            json.JSONDecodeError) as exc:
        raise ValueError(f"load_model: {path} is not a readable tripletml model file "
                         f"(truncated or foreign: {exc}).") from None
    except ValueError as exc:
        if "tripletml" in str(exc):
            raise
        raise ValueError(f"load_model: {path} is not a readable tripletml model file "
                         f"({exc}).") from None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT_NAME:
        raise ValueError(f"load_model: {path} is not a tripletml model file.")
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(f"load_model: {path} has format version {version!r}; this tripletml "
                         f"reads versions <= {FORMAT_VERSION}. Upgrade tripletml.")
    cls = MODEL_REGISTRY.get(meta.get("class"))
    if cls is None:
        raise ValueError(f"load_model: {path} holds an unknown model class "
                         f"{meta.get('class')!r}; known: {', '.join(sorted(MODEL_REGISTRY))}.")
    params, attrs = meta.get("params"), meta.get("attributes")
    if not isinstance(params, dict) or not isinstance(attrs, dict):
        raise ValueError(f"load_model: {path} has malformed metadata (params/attributes).")
    model = cls()
    unknown = set(params) - set(model.get_params())
    if unknown:
        raise ValueError(f"load_model: {path} sets unknown {cls.__name__} parameters "
                         f"{sorted(unknown)}.")
    model.set_params(**params)
    for k, v in list(attrs.items()) + list(arrays.items()):
        if not (k.endswith("_") and not k.startswith("_") and k.isidentifier()):
            raise ValueError(f"load_model: {path} holds {k!r}, which is not a fitted "
                             "attribute name.")
        setattr(model, k, v)
    try:
        model._check_loaded()
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"load_model: {path} does not hold a consistent fitted "
                         f"{cls.__name__}: {exc}") from None
    return model
