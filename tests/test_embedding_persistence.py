"""save_model / load_model for the feature-free ordinal embeddings (SOE,
STE, TSTE): round trip, and crafted files refused."""
from __future__ import annotations


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


def test_unfitted_and_bilinear_not_saved(tmp_path):
    with pytest.raises(ValueError, match="unfitted"):
        SOE().save(tmp_path / "x")
    # BilinearEmbedding holds a fitted learner: not stored (and a file naming
    # it is refused on load, see CRAFTED)
    emb = BilinearEmbedding(random_state=0).fit(_triplets())
    with pytest.raises(TypeError, match="learner_"):
        tm.save_model(emb, tmp_path / "b")
    assert not (tmp_path / "b.npz").exists()


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
     "unknown or abstract model class"),
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
