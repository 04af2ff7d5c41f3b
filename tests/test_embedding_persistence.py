"""save_model / load_model for the feature-free ordinal embeddings (SOE,
STE, TSTE, BilinearEmbedding and its nested learner): round trip, and
crafted files refused."""
from __future__ import annotations

import zipfile

import numpy as np
import pytest

import tripletml as tm
from tripletml.embedding import SOE, STE, TSTE, BilinearEmbedding
from _model_files import read_model_file as _read, write_model_file as _write

ESTIMATORS = [SOE, STE, TSTE]


def _triplets(n=15, m=400, seed=0):
    rng = np.random.default_rng(seed)
    return np.array([rng.choice(n, 3, replace=False) for _ in range(m)])





@pytest.mark.parametrize("cls", ESTIMATORS)
def test_round_trip_predicts_identically(tmp_path, cls):
    t = _triplets()
    est = cls(3, n_init=1, random_state=0).fit(t)
    tm.save_model(est, tmp_path / "m")
    est.save(tmp_path / "m2.npz")
    for name in ("m.npz", "m2.npz"):
        got = tm.load_model(tmp_path / name)
        assert type(got) is cls and got.get_params() == est.get_params()
        np.testing.assert_array_equal(got.embedding_, est.embedding_)
        np.testing.assert_array_equal(got.predict(t), est.predict(t))
        assert got.score(t) == est.score(t)
        assert (got.n_items_, got.loss_, got.n_iter_, got.stop_reason_) == \
            (est.n_items_, est.loss_, est.n_iter_, est.stop_reason_)
    if cls is TSTE:
        assert got.alpha_ == est.alpha_


def test_unfitted_not_saved(tmp_path):
    with pytest.raises(ValueError, match="unfitted"):
        SOE().save(tmp_path / "x")
    with pytest.raises(ValueError, match="unfitted"):
        BilinearEmbedding().save(tmp_path / "x")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("learner", [None, "oasis"])
def test_bilinear_round_trip_scores_identically(tmp_path, learner):
    """The fitted learner is stored flattened inside the file (class,
    parameters, attributes, arrays ``learner_<name>``) and reloads to the
    same scores; a given learner reloads as an equal unfitted estimator."""
    t = _triplets()
    if learner is not None:
        learner = tm.OASIS(preprocessing=None, n_triplets=300, random_state=1)
    emb = BilinearEmbedding(learner, n_components=None if learner else 3,
                            random_state=0).fit(t)
    emb.save(tmp_path / "b")
    names = set(zipfile.ZipFile(tmp_path / "b.npz").namelist())
    inner = {f"learner_{k}.npy" for k, v in vars(emb.learner_).items()
             if k.endswith("_") and isinstance(v, np.ndarray)}
    assert names == {"__meta__.npy", "embedding_.npy"} | inner
    got = tm.load_model(tmp_path / "b")
    assert type(got) is BilinearEmbedding and type(got.learner_) is type(emb.learner_)
    np.testing.assert_array_equal(got.decision_function(t), emb.decision_function(t))
    np.testing.assert_array_equal(got.predict(t), emb.predict(t))
    np.testing.assert_array_equal(got.similarity(), emb.similarity())
    np.testing.assert_array_equal(got.embedding_, emb.embedding_)
    assert got.score(t) == emb.score(t) and got.n_items_ == emb.n_items_
    assert got.learner_.get_params() == emb.learner_.get_params()
    if learner is None:
        assert got.get_params() == emb.get_params()
    else:
        assert got.learner is not learner and type(got.learner) is type(learner)
        assert got.learner.get_params() == learner.get_params()


def _bilinear_file(tmp_path):
    emb = BilinearEmbedding(n_components=2, n_items=15, random_state=0).fit(_triplets())
    emb.save(tmp_path / "good.npz")
    return _read(tmp_path / "good.npz")


def _set_learner(m, cls, params=None):
    m["params"]["learner"] = {"class": cls, "params": params or {}}


CRAFTED_BILINEAR = [
    ("inner_shape", lambda m, a: a.update(learner_A_=a["learner_A_"][:, :1]), "learner_A_|A_ has"),
    ("inner_nan", lambda m, a: a["learner_B_"].__setitem__((0, 0), np.nan), "B_ contains NaN"),
    ("inner_missing", lambda m, a: a.pop("learner_A_"), "A_.*missing"),
    ("inner_extra", lambda m, a: a.update(learner_evil_=np.zeros(2)), "does not declare"),
    ("outer_extra", lambda m, a: a.update(evil_=np.zeros(2)), "does not declare"),
    ("inner_class", lambda m, a: m["attributes"]["learner_"].update({"class": "LORETAMultilabel"}),
     "unknown or abstract model class"),
    ("inner_embedding", lambda m, a: m["attributes"]["learner_"].update({"class": "SOE"}),
     "unknown or abstract model class"),
    ("inner_module", lambda m, a: m["attributes"]["learner_"].update(
        {"class": "tripletml.algorithms.loreta.estimator.LORETA"}), "unknown or abstract"),
    ("inner_other", lambda m, a: m["attributes"]["learner_"].update({"class": "OASIS"}),
     "unknown OASIS parameters"),
    ("inner_none", lambda m, a: m["attributes"].update(learner_=None), "malformed metadata"),
    ("inner_param", lambda m, a: m["attributes"]["learner_"]["params"].update(rank=0),
     "invalid LORETA param"),
    ("inner_unknown", lambda m, a: m["attributes"]["learner_"]["params"].update(evil=1),
     "unknown LORETA parameters"),
    ("inner_features", lambda m, a: m["attributes"]["learner_"]["attributes"].update(
        n_features_in_=14), "n_features_in_|one-hot|'d'=14"),
    ("rank", lambda m, a: m["params"].update(n_components=3), "rank|shape"),
    ("n_items_", lambda m, a: m["attributes"].update(n_items_=14), "n_items"),
    ("n_features", lambda m, a: m["attributes"].update(n_features_in_=4), "n_features_in_"),
    ("embedding_missing", lambda m, a: a.pop("embedding_"), "embedding_ must be stored"),
    ("embedding_rows", lambda m, a: a.update(embedding_=a["embedding_"][:-1]),
     "embedding_ has shape"),
    ("param_class", lambda m, a: _set_learner(m, "BilinearEmbedding"), "unknown or abstract"),
    ("param_multilabel", lambda m, a: _set_learner(m, "MatrixPerceptron"), "unknown or abstract"),
    ("param_bad", lambda m, a: _set_learner(m, "LORETA", {"rank": -1}), "invalid LORETA param"),
    ("param_malformed", lambda m, a: m["params"].update(learner={"class": "LORETA"}),
     "malformed metadata"),
    ("param_string", lambda m, a: m["params"].update(learner="LORETA"), "triplet learner"),
    ("param_other", lambda m, a: _set_learner(m, "OASIS"), "OASIS has no rank parameter"),
    ("param_other_rank", lambda m, a: (_set_learner(m, "IterativePA"), m["params"].update(
        n_components=None)), "learner_ is a LORETA, expected IterativePA"),
    ("inner_attrs", lambda m, a: m["attributes"]["learner_"].pop("attributes"),
     "malformed metadata"),
]


@pytest.mark.parametrize("edit, msg", [c[1:] for c in CRAFTED_BILINEAR],
                         ids=[c[0] for c in CRAFTED_BILINEAR])
def test_crafted_bilinear_file_is_refused(tmp_path, edit, msg):
    meta, arrays = _bilinear_file(tmp_path)
    edit(meta, arrays)
    _write(tmp_path / "bad.npz", meta, arrays)
    with pytest.raises(ValueError, match=f"load_model: .*({msg})"):
        tm.load_model(tmp_path / "bad.npz")


CRAFTED = [
    ("shape", lambda m, a: a.update(embedding_=a["embedding_"][:, :2]), "embedding_ has shape"),
    ("rows", lambda m, a: a.update(embedding_=a["embedding_"][:-1]), "embedding_ has shape"),
    ("nan", lambda m, a: a["embedding_"].__setitem__((0, 0), np.nan), "embedding_ contains NaN"),
    ("inf", lambda m, a: a["embedding_"].__setitem__((1, 1), np.inf), "NaN or inf"),
    ("dtype", lambda m, a: a.update(embedding_=a["embedding_"].astype(np.float32)),
     "embedding_ has dtype"),
    ("missing", lambda m, a: a.pop("embedding_"), "embedding_.*missing"),
    ("extra", lambda m, a: a.update(evil_=np.zeros(3)), "does not declare"),
    ("class", lambda m, a: m.update({"class": "OrdinalEmbeddingBase"}),
     "unknown or abstract model class"),
    ("class_module", lambda m, a: m.update({"class": "tripletml.embedding.SOE"}),
     "unknown or abstract model class"),
    ("class_bilinear", lambda m, a: m.update({"class": "BilinearEmbedding"}),
     "unknown BilinearEmbedding parameters"),
    ("class_none", lambda m, a: m.update({"class": None}), "unknown or abstract model class"),
    ("n_items_", lambda m, a: m["attributes"].update(n_items_=-3), "n_items_"),
    ("n_items_float", lambda m, a: m["attributes"].update(n_items_=15.0), "n_items_"),
    ("n_items_param", lambda m, a: m["params"].update(n_items=14), "n_items"),
    ("n_features", lambda m, a: m["attributes"].update(n_features_in_=4), "n_features_in_"),
    ("loss", lambda m, a: m["attributes"].update(loss_="x"), "loss_"),
    ("bad_param", lambda m, a: m["params"].update(margin=-1.0), "invalid .*param"),
    ("unknown_param", lambda m, a: m["params"].update(evil=1), "unknown SOE parameters"),
    ("array_as_meta", lambda m, a: m["attributes"].update(embedding_=[[0.0]]),
     "array embedding_ as metadata"),
]


@pytest.mark.parametrize("edit, msg", [c[1:] for c in CRAFTED], ids=[c[0] for c in CRAFTED])
def test_crafted_file_is_refused(tmp_path, edit, msg):
    est = SOE(3, n_init=1, n_items=15, random_state=0).fit(_triplets())
    est.save(tmp_path / "good.npz")
    meta, arrays = _read(tmp_path / "good.npz")
    edit(meta, arrays)
    _write(tmp_path / "bad.npz", meta, arrays)
    with pytest.raises(ValueError, match=f"load_model: .*{msg}"):
        tm.load_model(tmp_path / "bad.npz")


def test_tste_alpha_must_be_valid(tmp_path):
    est = TSTE(2, n_init=1, random_state=0).fit(_triplets())
    est.save(tmp_path / "good.npz")
    meta, arrays = _read(tmp_path / "good.npz")
    meta["params"]["alpha"] = 0.0
    _write(tmp_path / "bad.npz", meta, arrays)
    with pytest.raises(ValueError, match="invalid TSTE parameters"):
        tm.load_model(tmp_path / "bad.npz")
