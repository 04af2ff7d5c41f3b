"""Every registry learner along every fit path gives the results recorded
before the house was rebuilt (issue 37): fitted arrays, ``n_iter_``,
``stop_reason_``, the history's columns and lengths, refusals.

The reference (``tests/data/house_reference.*``) was written by
``python -m bench.house_reference write`` before the move; that script's
``compare`` is the bit-for-bit check.  Here arrays are compared to a
tolerance, since another machine's BLAS may round the last bit differently.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"


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
    for key, value in arrays.items():
        np.testing.assert_allclose(value, stored[key], rtol=1e-9, atol=1e-12, err_msg=key)
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
