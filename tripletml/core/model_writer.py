"""Writing a model file (:func:`save_model`), apart from reading it.

:mod:`tripletml.persistence` is the public home of :func:`save_model` and
:func:`~tripletml.persistence.load_model` (see it for the file format).  The
writer lives in this module of its own because it needs nothing of the
learners, where the reader must look their classes up in the registry: the
base classes' ``save`` can import the writer without closing an import
circle through the learners (``_registry -> learners -> base -> writer``).
"""
from __future__ import annotations

import json
import warnings
import os
import re
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from tripletml.core.files import write_atomically

__all__ = ["save_model", "model_record", "SavableModel", "FORMAT_VERSION", "temp_file_pattern"]


@runtime_checkable
class SavableModel(Protocol):
    """What :func:`save_model` and :func:`load_model` need of a model.

    Every learner of :mod:`tripletml.registry` satisfies it (through
    :class:`tripletml.core.base.LearnerBase`); this module is typed against the
    protocol, not the base class, so it never imports :mod:`tripletml.core.base`
    (which imports this module to implement ``save``).
    """

    #: the fitted arrays a model file may hold (:mod:`tripletml.core.arrayspec`)
    _fitted_arrays: ClassVar[dict]

    def get_params(self, deep: bool = True) -> dict: ...

    def set_params(self, **params: Any) -> Any: ...

    def _validate_params(self) -> None: ...

    def _check_loaded(self) -> None: ...

FORMAT_VERSION = 1
_FORMAT_NAME = "tripletml-model"
_META = "__meta__"


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
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.size <= 64 \
            and value.dtype.kind in "biuf":
        return [_jsonable(v, what) for v in value.tolist()]   # e.g. ITML's bounds
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"save: cannot store {what} of type {type(value).__name__} as JSON.")


def unstorable_sampler_message(sampling: Any, who: str) -> str:
    """Why ``save`` refuses a ``sampling`` object (one message for both
    callers: the writer and :func:`tripletml.triplets.sampler_to_dict`)."""
    return (f"save: {who}: parameter sampling={sampling!r} is a {type(sampling).__name__} "
            "object, which a model file cannot store; only the strings 'class', 'knn', "
            "'semihard' and the tripletml samplers ClassTriplets, KNNTriplets, "
            "SemiHardTriplets (stored as class name and parameters) can be saved.")


def _umask() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def temp_file_pattern(name_regex: str) -> "re.Pattern[str]":
    """The names of the temporary files :func:`save_model` creates for a
    target whose file name matches ``name_regex`` (``.NAME.XXXXXXXX.tmp``,
    the 8 random characters of :func:`tempfile.mkstemp`): what a save killed
    before its rename leaves behind, so that a caller owning the directory
    (a stream checkpoint) can remove exactly those files and nothing else."""
    return re.compile(r"\.(?:" + name_regex + r")\.[a-z0-9_]{8}\.tmp\Z")


def save_model(model: SavableModel, path: str | os.PathLike) -> None:
    """Write a fitted model to ``path`` (``.npz`` added if missing).

    The public counterpart of :func:`load_model` (``model.save(path)`` calls
    it).  The archive is written to a new temporary file in the target
    directory (created exclusively, never through an existing name), given
    the usual permissions (0666 minus the umask) and renamed over ``path``.

    Parameters
    ----------
    model : fitted tripletml learner
        Any learner of :mod:`tripletml.registry` (:class:`SavableModel`).
    path : str or path-like
        Target file; ``.npz`` is appended when it has another suffix.

    Raises
    ------
    ValueError
        The model is not fitted.
    TypeError
        A fitted attribute cannot be stored (an object array, a value that is
        not JSON), or the ``sampling`` parameter is an object other than
        the tripletml samplers (ClassTriplets, KNNTriplets, SemiHardTriplets,
        stored as class name and parameters).
    """
    record, arrays = model_record(model, stacklevel=4)
    meta = {"format": _FORMAT_NAME, "format_version": FORMAT_VERSION, **record}
    blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    write_atomically(path, lambda fh: np.savez(fh, **{_META: blob}, **arrays),
                     mode=0o666 & ~_umask())


def model_record(model: SavableModel, stacklevel: int = 2) -> tuple[dict, dict[str, np.ndarray]]:
    """What a model file stores of a fitted model: ``{"class", "params",
    "attributes"}`` (JSON) and its arrays by name (``stacklevel``: of the
    preprocessor warning, counted from here).  A model listed in the
    class's ``_nested_models`` (a parameter holding an unfitted estimator, a
    fitted attribute holding a fitted model) is stored as a nested record:
    ``{"class", "params"}`` for a parameter, a whole record for an
    attribute, whose arrays are stored as ``<attribute><array>``."""
    if not hasattr(model, "n_features_in_"):
        raise ValueError(f"{type(model).__name__}: cannot save an unfitted model; call fit first.")
    flatten = getattr(model, "_saved_form", None)
    if callable(flatten):     # a fitted helper object (the scaler) as plain attributes
        model = flatten()
    params = _jsonable(_file_params(model, stacklevel + 1), "parameters")
    nested = getattr(type(model), "_nested_models", {})
    arrays: dict[str, np.ndarray] = {}
    attrs: dict[str, Any] = {}
    for name, value in vars(model).items():
        if not name.endswith("_") or name.startswith("_"):
            continue
        if name in nested:
            attrs[name], inner = model_record(value, stacklevel + 1)
            arrays.update({name + k: v for k, v in inner.items()})
        elif name == "feature_names_in_":
            attrs[name] = [str(v) for v in value]
        elif isinstance(value, np.ndarray):
            if value.dtype == object:
                raise TypeError(f"save: fitted attribute {name} is an object array.")
            arrays[name] = value
        else:
            attrs[name] = _jsonable(value, f"attribute {name}")
    return {"class": type(model).__name__, "params": params, "attributes": attrs}, arrays


def _file_params(model: Any, stacklevel: int) -> dict:
    """The parameters as a model file stores them: no Generator, no
    preprocessor (warned at ``stacklevel``), a sampler as its file form, a
    nested estimator as ``{"class", "params"}``."""
    params = model.get_params(deep=False)
    if not isinstance(params.get("random_state", None), (int, np.integer, type(None))):
        params["random_state"] = None  # a Generator cannot be stored; documented
    if params.get("preprocessor", None) is not None:
        # metric-learn's preprocessor is data (rows or a function), not a
        # setting: the model file holds the model only; documented
        warnings.warn(f"{type(model).__name__}: the preprocessor (rows or a function for "
                      "index inputs) is not saved with the model; the loaded model has "
                      "preprocessor=None (set it again with set_params to pass indices).",
                      UserWarning, stacklevel=stacklevel)
        params["preprocessor"] = None
    sampling = params.get("sampling")
    if sampling is not None and not isinstance(sampling, str):
        # a tripletml sampler stores itself as class name + parameters (its
        # _model_file_form); any other object: TypeError naming the learner
        form = getattr(sampling, "_model_file_form", None)
        if form is None:
            raise TypeError(unstorable_sampler_message(sampling, type(model).__name__))
        params["sampling"] = form(model)
    for name in getattr(type(model), "_nested_models", {}):
        if not name.endswith("_") and params.get(name) is not None:
            inner = params[name]
            params[name] = {"class": type(inner).__name__,
                            "params": _file_params(inner, stacklevel + 1)}
    return params
