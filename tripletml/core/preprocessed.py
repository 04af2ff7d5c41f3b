"""A learner that holds its fitted preprocessing: the plumbing between a
triplet learner and its :class:`~tripletml.core.preprocessing.Preprocessor`.

:class:`PreprocessedModel` (a mixin of
:class:`tripletml.core.base.TripletLearner`) fits one ``Preprocessor`` on the
training X (``scaler_``), applies it to every X a method takes, reads
``preprocessing_`` / ``preprocessing_mean_`` / ``_scale_`` / ``_whitener_``
/ ``_radius_`` from it, and writes and reads it in model files and pickles
as those flat attributes (the format of tripletml 0.1).
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.preprocessing import Preprocessor, check_preprocessing, n_added_features

__all__ = ["PreprocessedModel", "PREPROCESSING_ARRAYS", "PREPROCESSING_SCALARS"]


#: the prefix of the preprocessing attributes in a model file
_PREP = "preprocessing_"
#: the fitted preprocessing arrays a triplet learner's model file may hold
#: (:attr:`Preprocessor._fitted_arrays` under the prefix), merged into each
#: subclass's ``_fitted_arrays``
PREPROCESSING_ARRAYS: dict[str, ArraySpec] = {
    _PREP + name: spec for name, spec in Preprocessor._fitted_arrays.items()}
#: the fitted preprocessing scalars (float attributes, saved as metadata)
PREPROCESSING_SCALARS = tuple(_PREP + name for name in Preprocessor._fitted_scalars)
#: the learner attributes that read ``scaler_`` (the model-file names)
_SCALER_VIEWS = {name: name[len(_PREP):] or "mode_"
                 for name in Preprocessor.saved_names(_PREP)}


class PreprocessedModel:
    """Mixin: ``scaler_`` fitted on the training X and applied to every
    X (see the module docstring).  The class needs ``preprocessing`` (the
    parameter) and the declarations ``_auto_preprocessing``,
    ``_feature_unit`` and ``_auto_column_scale`` (defaults and meanings:
    :class:`tripletml.core.base.TripletLearner` and
    :data:`tripletml.core.base.DECLARATIONS`).

    A model file holds the preprocessor as flat attributes:
    ``_fitted_arrays`` of every subclass is extended with
    :data:`PREPROCESSING_ARRAYS` (raw width ``n_features_in_``), ``save``
    writes :meth:`Preprocessor.to_attributes` and loading rebuilds the
    Preprocessor (:meth:`Preprocessor.from_attributes`).
    """

    _fitted_arrays: ClassVar[dict[str, ArraySpec]] = dict(PREPROCESSING_ARRAYS)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # the declarations found through the MRO (a mixin's included)
        from tripletml.core.tuples import TUPLE_ARRAYS     # classes_ of the pair classifier

        own = {name: spec for name, spec in cls._fitted_arrays.items()
               if name not in PREPROCESSING_ARRAYS and name not in TUPLE_ARRAYS}
        cls._fitted_arrays = {**own, **PREPROCESSING_ARRAYS, **TUPLE_ARRAYS}

    # ------------------------------------------------------------- widths
    @property
    def n_features_preprocessed_(self) -> int:
        """Width of the preprocessed rows the solver works on: the dimension
        of ``W_`` / ``M_`` / the factors (``n_features_in_ + 1`` with
        ``preprocessing_ == "sphere"``, else ``n_features_in_``)."""
        pre = self.__dict__.get("scaler_")
        if pre is not None:
            return pre.n_features_out_
        # a model being loaded: the file's preprocessing_ (checked later)
        return self.n_features_in_ + n_added_features(self.__dict__.get(_PREP))

    # --------------------------------------------------------- preprocessing
    def __getattr__(self, name: str):
        """``preprocessing_`` (the fitted mode) and ``preprocessing_mean_``,
        ``preprocessing_scale_``, ``preprocessing_whitener_``,
        ``preprocessing_radius_`` (the statistics the mode holds; absent
        otherwise) read ``scaler_``."""
        attr = _SCALER_VIEWS.get(name)
        pre = self.__dict__.get("scaler_") if attr is not None else None
        if pre is not None:
            value = getattr(pre, attr)
            if value is not None or name == _PREP:
                return value
        from tripletml.core.tuples import raise_fitted_method_error
        raise_fitted_method_error(self, name)    # predict before fit: NotFittedError
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _reset_fitted(self) -> None:
        super()._reset_fitted()
        self._clear_preprocessing()

    def _clear_preprocessing(self) -> None:
        for name in ("scaler_", *_SCALER_VIEWS):
            self.__dict__.pop(name, None)

    def _fit_preprocessing(self, X):
        """Fit ``scaler_`` on the training X.  Returns X, densified
        once here when a mode applies to sparse X (the preprocessed rows are
        dense anyway), so that ``fit`` and :meth:`_preprocess` share it."""
        self._clear_preprocessing()
        pre = Preprocessor(getattr(self, "preprocessing", None),
                           auto=self._auto_preprocessing, owner=type(self).__name__,
                           unit=self._feature_unit, column_scale=self._auto_column_scale)
        if pre.resolve(X) is not None and sp.issparse(X):
            X = np.ascontiguousarray(X.toarray(), dtype=np.float64)
        self.scaler_ = pre.fit(X)
        return X

    def _preprocessed_second_moment(self, C: np.ndarray) -> np.ndarray:
        """:meth:`Preprocessor.second_moment` of ``scaler_``."""
        return self.scaler_.second_moment(C)

    def _preprocess(self, X, *, copy: bool = True):
        """``scaler_.transform`` of validated X (X unchanged without
        one; ``copy=False``: X is a private array that may be overwritten)."""
        pre = self.__dict__.get("scaler_")
        return X if pre is None else pre.transform(X, copy=copy)

    def _saved_form(self) -> "PreprocessedModel":
        """A shallow copy holding ``scaler_`` as the attributes of the
        model file (:meth:`Preprocessor.to_attributes`), for ``save``."""
        flat = type(self).__new__(type(self))
        flat.__dict__.update(self.__dict__)
        pre = flat.__dict__.pop("scaler_", None)
        if pre is not None:
            flat.__dict__.update(pre.to_attributes(_PREP))
        return flat

    def _adopt_saved_preprocessing(self) -> None:
        """``scaler_`` from the model-file attributes
        (:meth:`Preprocessor.adopt_saved`; ValueError when inconsistent)."""
        Preprocessor.adopt_saved(self.__dict__, prefix=_PREP,
                                 mode=getattr(self, "preprocessing", None),
                                 auto=self._auto_preprocessing, owner=type(self).__name__,
                                 unit=self._feature_unit,
                                 column_scale=self._auto_column_scale)

    def __setstate__(self, state):
        super().__setstate__(state)
        # pickled by tripletml 0.1 (flat attributes) or 0.2 (``preprocessor_``)
        if any(n in self.__dict__ for n in (*_SCALER_VIEWS, "preprocessor_")):
            self._adopt_saved_preprocessing()

    def _check_loaded(self) -> None:
        check_preprocessing(getattr(self, "preprocessing", None), self)
        self._adopt_saved_preprocessing()
        super()._check_loaded()
