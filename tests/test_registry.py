"""The learner registry: one list drives the loader, the package namespace,
the generic tests, the CLI and the demo; every fitted array is declared.
The item embeddings (kind "embedding", fitted on triplets alone) are in it
for the loader and stay out of whatever assumes ``fit(X, y)``."""
import ast
from pathlib import Path

import numpy as np
import pytest

import tripletml as tm
from tripletml.core.arrayspec import check_fitted_arrays
import tripletml.embedding
from tripletml.registry import (FEATURE_KINDS, KINDS, entries, get_entry, learner_class,
                                learner_names)

from _estimators import ALL, toy_data, toy_item_triplets, toy_multilabel

PKG = Path(tm.__file__).resolve().parent


def test_entries_are_well_formed():
    names = learner_names()
    assert len(names) == len(set(names))
    labels = [e.demo_label for e in entries() if e.demo is not None]
    assert len(labels) == len(set(labels)) and None not in labels
    for e in entries():
        assert e.kind in KINDS and e.cls.__name__ == e.name and e.tests
        if e.kind in FEATURE_KINDS:
            assert getattr(tm, e.name) is e.cls and e.name in tm.__all__
        else:       # the item embeddings live in tripletml.embedding only
            assert getattr(tripletml.embedding, e.name) is e.cls
            assert e.name not in tm.__all__ and not hasattr(tm, e.name)


def test_kinds_keep_the_embeddings_apart():
    """entries("triplet") / entries("multilabel") (the generic learner
    tests) are the learners on features; entries() adds the embeddings."""
    emb = {"SOE", "STE", "TSTE", "BilinearEmbedding"}
    assert set(learner_names("embedding")) == emb
    assert set(learner_names()) == set(learner_names(FEATURE_KINDS)) | emb
    assert not emb & set(learner_names(FEATURE_KINDS))
    assert entries(("triplet", "multilabel")) == entries(FEATURE_KINDS)
    assert not emb & {c.id.split("-")[0] for c in ALL}
    with pytest.raises(ValueError, match="unknown learner kind 'nope'"):
        entries(("triplet", "nope"))
    assert get_entry("soe", case_sensitive=False).cls is tripletml.embedding.SOE
    with pytest.raises(ValueError, match="unknown learner 'SOE'; known: Euclidean"):
        get_entry("SOE", kind=FEATURE_KINDS)
    with pytest.raises(ValueError, match="unknown learner 'OASIS'; known: SOE, STE, TSTE, Bil"):
        get_entry("OASIS", kind="embedding")


def test_consumers_assuming_fit_X_y_leave_the_embeddings_out():
    import argparse

    from tripletml.cli import build_parser
    from tripletml.cli.demo import DEMO_LEARNERS as demo
    sub = [a for a in build_parser()._actions if a.dest == "command"][0].choices["fit"]
    learner = [a for a in sub._actions if a.dest == "learner"][0]
    assert learner.type("oasis") == "OASIS"
    for name in learner_names("embedding"):
        with pytest.raises(argparse.ArgumentTypeError, match="unknown learner"):
            learner.type(name)
        assert name not in sub.epilog.split()
    assert not {label for label, _ in demo} & set(learner_names("embedding"))


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
    if entry.kind == "embedding":
        return entry.make(0).fit(toy_item_triplets())
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
