"""The learner registry: one list drives the loader, the package namespace,
the generic tests, the CLI and the demo; every fitted array is declared."""
import ast
from pathlib import Path

import numpy as np
import pytest

import tripletml as tm
from tripletml.core.arrayspec import check_fitted_arrays
from tripletml.registry import KINDS, entries, get_entry, learner_class, learner_names

from _estimators import toy_data, toy_multilabel

PKG = Path(tm.__file__).resolve().parent


def test_entries_are_well_formed():
    names = learner_names()
    assert len(names) == len(set(names))
    labels = [e.demo_label for e in entries() if e.demo is not None]
    assert len(labels) == len(set(labels)) and None not in labels
    for e in entries():
        assert e.kind in KINDS and e.cls.__name__ == e.name and e.tests
        assert getattr(tm, e.name) is e.cls and e.name in tm.__all__


def test_lookup_by_name():
    assert get_entry("oasis", case_sensitive=False).cls is tm.OASIS
    assert get_entry("LORETAMULTILABEL", case_sensitive=False).cls is tm.LORETAMultilabel
    assert learner_class("SML") is tm.SML
    for bad in ("oasis", "OnlineTripletLearner", "_MultilabelRanker", "TripletLearner",
                "FactoredBilinearMixin", "", None, 3):
        with pytest.raises(ValueError, match="unknown learner"):
            learner_class(bad)


def _module_imports(path):
    """tripletml modules imported at module level (not inside functions or
    ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text())
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            out.add(node.module or "")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tripletml"):
            out.add(node.module.split(".", 1)[-1])
    return out


def test_no_import_cycle_between_base_persistence_and_registry():
    assert "persistence" not in _module_imports(PKG / "core" / "base.py")
    assert "registry" not in _module_imports(PKG / "core" / "base.py")
    assert "core.base" not in _module_imports(PKG / "persistence.py")
    assert _module_imports(PKG / "registry.py") == set()   # learners imported lazily


def _fit(entry):
    if entry.kind == "multilabel":
        X, Y = toy_multilabel()
        return entry.make(0).fit(X, Y)
    X, y = toy_data()
    return entry.make(0).fit(X, y)


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e.name)
def test_every_fitted_array_is_declared(entry):
    """Every ndarray fitted attribute is in ``_fitted_arrays`` with the right
    shape, dtype and values: load_model refuses anything else."""
    est = _fit(entry)
    arrays = {k for k, v in vars(est).items()
              if k.endswith("_") and not k.startswith("_") and isinstance(v, np.ndarray)}
    assert arrays <= set(type(est)._fitted_arrays) | {"feature_names_in_"}
    check_fitted_arrays(est)
