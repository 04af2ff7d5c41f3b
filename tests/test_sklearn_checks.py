"""scikit-learn's own estimator checks over every learner of the registry.

Each expected failure is listed with its reason (``expected_failed_checks``).
They fall into few families:

* ``decision_function(X, triplets)`` scores *triplets*, not samples (a
  triplet learner has no per-sample prediction); scikit-learn's checks call
  ``decision_function(X)``.
* ``partial_fit(X, triplets)`` takes triplets, while the checks pass labels.
* ``check_X`` (tripletml/_validation.py) words some errors its own way and
  raises TypeError for complex data; the checks match scikit-learn's wording.
* A fixed ``rank`` > 1 cannot fit one feature (worded differently).
* The multi-label rankers fit a binary indicator matrix Y (n x L, L >= 2);
  the checks pass 1-D targets.
"""
import warnings

import pytest
from sklearn.base import TransformerMixin
from sklearn.utils.estimator_checks import parametrize_with_checks

from tripletml._registry import entries, get_entry
from tripletml.preprocessing import n_added_features

_TRIPLET_SCORE = ("decision_function(X, triplets) scores triplets (S(q,p+) - S(q,p-)), not "
                  "samples; the check calls decision_function(X)")
_WORDING = ("check_X names the estimator and words this error its own way; the check "
            "matches scikit-learn's wording")
_COMPLEX = "check_X raises TypeError (not ValueError) for complex X"
_PARTIAL = "partial_fit(X, triplets) takes a triplet index array; the check passes labels"
_RANK = ("the test rank (2) exceeds the check's single (preprocessed) feature; the learner's ValueError "
         "does not use the check's wording 'n_features=1'")
_INDICATOR = ("fit(X, Y) needs a binary indicator matrix Y with >= 2 label columns; the "
              "check passes a 1-D target")

_CHECK_X_WORDING = {
    "check_complex_data": _COMPLEX,
    "check_dtype_object": _WORDING,
    "check_estimators_empty_data_messages": _WORDING,
}

_TRIPLET_EXPECTED = {
    **_CHECK_X_WORDING,
    "check_estimators_unfitted": _TRIPLET_SCORE,
    "check_n_features_in_after_fitting": _TRIPLET_SCORE,
    "check_estimators_dtypes": _TRIPLET_SCORE,
    "check_estimators_pickle": _TRIPLET_SCORE,
    "check_methods_sample_order_invariance": _TRIPLET_SCORE,
    "check_methods_subset_invariance": _TRIPLET_SCORE,
    "check_dict_unchanged": _TRIPLET_SCORE,
    "check_fit_idempotent": _TRIPLET_SCORE,
    "check_fit2d_predict1d": _TRIPLET_SCORE,
}

_MULTILABEL_EXPECTED = {
    **_CHECK_X_WORDING,
    **{name: _INDICATOR for name in (
        "check_dict_unchanged", "check_dont_overwrite_parameters", "check_estimator_sparse_array",
        "check_estimator_sparse_matrix", "check_estimator_sparse_tag", "check_estimators_dtypes",
        "check_estimators_fit_returns_self", "check_estimators_nan_inf",
        "check_estimators_overwrite_params", "check_estimators_pickle",
        "check_f_contiguous_array_estimator", "check_fit2d_1feature", "check_fit2d_1sample",
        "check_fit2d_predict1d", "check_fit_check_is_fitted", "check_fit_idempotent",
        "check_fit_score_takes_y", "check_methods_sample_order_invariance",
        "check_methods_subset_invariance", "check_n_features_in",
        "check_n_features_in_after_fitting", "check_pipeline_consistency",
        "check_positive_only_tag_during_fit", "check_readonly_memmap_input",
        "check_requires_y_none", "check_dtype_object")},
}


def _expected_failed_checks(est):
    if get_entry(type(est).__name__).kind == "multilabel":
        return _MULTILABEL_EXPECTED
    expected = dict(_TRIPLET_EXPECTED)
    if hasattr(est, "partial_fit"):
        expected["check_fit_score_takes_y"] = _PARTIAL
    params = est.get_params()
    if "rank" in params:
        # one raw feature: the solver sees 1 column, or 2 with "sphere"
        mode = params.get("preprocessing")
        mode = getattr(est, "_auto_preprocessing", None) if mode == "auto" else mode
        if (params["rank"] or 0) > 1 + n_added_features(mode):
            expected["check_fit2d_1feature"] = _RANK
    return expected


def _instances():
    """One quick instance per registry entry (its first test variant).
    An entry whose test parameters do not construct is left to
    test_registry_test_parameters_construct."""
    out = []
    for e in entries():
        try:
            est = e.make(0)
        except TypeError:
            continue
        if hasattr(est, "transform") and not isinstance(est, TransformerMixin):
            continue   # scikit-learn refuses to generate its checks: see the test below
        out.append(est)
    return out


@parametrize_with_checks(_instances(), expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check(estimator)


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e.name)
def test_learners_with_transform_are_transformers(entry):
    """A learner with ``transform`` must be a TransformerMixin (e.g. through
    tripletml.base.EmbeddingMixin), or scikit-learn cannot check it."""
    if hasattr(entry.cls, "transform"):
        assert issubclass(entry.cls, TransformerMixin)


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e.name)
def test_registry_test_parameters_construct(entry):
    for i in range(len(entry.tests)):
        est = entry.make(i)
        assert set(entry.alt) <= set(est.get_params())
