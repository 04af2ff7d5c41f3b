"""Every registry learner along every fit path gives the results recorded
before the house was rebuilt (issue 37): fitted arrays, ``n_iter_``,
``stop_reason_``, the history's columns and lengths, refusals.

The reference (``tests/data/house_reference.*``) was written by
``python -m bench.house_reference write`` before the move; that script's
``compare`` is the bit-for-bit check.  Here arrays are compared to a
tolerance, since another machine's BLAS or LAPACK rounds differently (an
L-BFGS fit then ends a few ulps of its tolerance apart), and factor matrices
(:data:`GAUGE`) up to their gauge: ``F`` and ``F R`` for an orthogonal ``R``
are the same model (a LAPACK version picks another basis for equal singular
values, or another sign for an eigenvector), so ``F F^T`` and, for a pair of
factors, ``A B^T`` are compared.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"

#: fitted factors defined up to an orthogonal rotation: of their columns
#: (``F R``: compare ``F F^T``) or of their rows (``R L``, a map's
#: ``components_``: compare ``L^T L``)
GAUGE = {"A_": "cols", "B_": "cols", "pinv_A_": "cols", "pinv_B_": "cols", "U_": "cols",
         "components_": "rows"}


def _close(actual, desired, key):
    np.testing.assert_allclose(actual, desired, rtol=1e-7,
                               atol=1e-10 * max(1.0, float(np.abs(desired).max(initial=0))),
                               err_msg=key)


def _compare_arrays(arrays: dict, stored: dict) -> None:
    """Every fitted array as recorded; a factor up to its gauge."""
    for key, value in arrays.items():
        if key in GAUGE and value.ndim == 2 and value.shape == stored[key].shape:
            F, G = (value, stored[key]) if GAUGE[key] == "cols" else (value.T, stored[key].T)
            _close(F @ F.T, G @ G.T, f"{key} up to a rotation")
        else:
            _close(value, stored[key], key)
    if "A_" in arrays and "B_" in arrays and arrays["A_"].ndim == 2:
        _close(arrays["A_"] @ arrays["B_"].T, stored["A_"] @ stored["B_"].T, "A_ B_^T")


def _load_harness():
    """bench/house_reference.py by its path (``pytest`` does not put the
    repository root on sys.path)."""
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "bench" / "house_reference.py"
    spec = importlib.util.spec_from_file_location("_house_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load_harness()
META = json.loads((DATA / "house_reference.json").read_text())
CASES = dict(ref._cases())


def test_every_case_is_recorded():
    assert sorted(CASES) == sorted(META)


@pytest.mark.parametrize("name", sorted(META))
def test_fit_matches_the_reference(name):
    want = META[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "__error__" in want:
            with pytest.raises(Exception) as info:
                CASES[name]()
            assert f"{info.type.__name__}: {info.value}" == want["__error__"]
            return
        est = CASES[name]()
    arrays, meta = ref.record(est)
    with np.load(DATA / "house_reference.npz", allow_pickle=False) as npz:
        stored = {k.split("::", 1)[1]: npz[k] for k in npz.files if k.startswith(name + "::")}
    assert sorted(arrays) == sorted(stored)
    _compare_arrays(arrays, stored)
    for key in ("n_iter_", "stop_reason_", "n_features_in_", "classes_"):
        if key in want:
            assert meta.get(key) == want[key], key
    if "best_params_" in want:
        assert meta["best_params_"]["learner"] == want["best_params_"]["learner"]
    if "history_" in want:
        assert sorted(meta["history_"]) == sorted(want["history_"])
        for col, values in want["history_"].items():
            assert len(meta["history_"][col]) == len(values), col
    assert sorted(meta["__model__"]) == sorted(want["__model__"])
