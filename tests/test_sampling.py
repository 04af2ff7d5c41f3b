"""Triplet sampling policies and every learner's ``sampling`` parameter (issue 27, item 4)."""
from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_wine
from sklearn.metrics import pairwise_distances

import tripletml as tm
from tripletml import load_model
from tripletml.registry import entries
from tripletml.triplets import (ClassTriplets, KNNTriplets, SemiHardTriplets, TripletSampler,
                                knn_triplets, resolve_sampling, semihard_triplets)

SAMPLING_ENTRIES = [e for e in entries("triplet") if "sampling" in e.cls().get_params()]
VALUES = ["class", "knn", "semihard", "random",
          KNNTriplets(n_neighbors=2, n_impostors=4), SemiHardTriplets(margin=1.0),
          ClassTriplets()]


def blobs(n=90, d=4, c=3, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % c
    X = rng.normal(size=(n, d)) + 1.5 * y[:, None]
    return X, y


def wine():
    X, y = load_wine(return_X_y=True)
    return X, y


def test_every_sampling_learner_has_the_parameter():
    names = {e.name for e in SAMPLING_ENTRIES}
    expected = {"OASIS", "SDCA", "COMET", "SparseCOMET", "LORETA", "IterativePA", "NaivePA",
                "FactoredGD", "LowRankDML", "SML", "KISSME", "ITML"}
    assert expected <= names
    for e in SAMPLING_ENTRIES:
        assert e.cls().sampling == "class"
        doc = e.cls.__doc__
        assert ("sampling : {\"class\", \"knn\", \"semihard\"}" in doc
                or "n_triplets, sampling," in doc), e.name     # SparseCOMET: "As COMET"


# ------------------------------------------------------------------ policies
def test_knn_triplets_satisfy_their_definition():
    X, y = blobs()
    k, kimp = 3, 5
    t = KNNTriplets(n_triplets=None, n_neighbors=k, n_impostors=kimp).sample(
        X, y, np.random.default_rng(0))
    D = pairwise_distances(X)
    for q, p, n in t:
        same = np.flatnonzero((y == y[q]) & (np.arange(len(y)) != q))
        other = np.flatnonzero(y != y[q])
        assert y[p] == y[q] and y[n] != y[q]
        assert p in same[np.argsort(D[q, same], kind="stable")[:k]]
        assert n in other[np.argsort(D[q, other], kind="stable")[:kimp]]
    assert len(t) == len(y) * k * kimp


@pytest.mark.parametrize("n_candidates", [None, 7])
def test_semihard_triplets_satisfy_their_definition(n_candidates):
    X, y = blobs(n=120, c=4, seed=1)
    t = semihard_triplets(X, y, 600, margin=0.8, n_candidates=n_candidates, random_state=0)
    D = pairwise_distances(X)
    in_band = has_band = 0
    for q, p, n in t:
        assert y[p] == y[q] and p != q and y[n] != y[q]
        other = np.flatnonzero(y != y[q])
        dqp = D[q, p]
        band = other[(D[q, other] > dqp) & (D[q, other] < dqp + 0.8)]
        has_band += band.size > 0
        if n_candidates is None and band.size:
            assert dqp < D[q, n] < dqp + 0.8          # semi-hard wherever one exists
        if D[q, p] < D[q, n] < D[q, p] + 0.8:
            in_band += 1
        elif n_candidates is None:
            assert band.size == 0 and n == other[np.argmin(D[q, other])]   # hardest fallback
    # the bounded search (7 nearest, then 7 uniform tries) finds most of them
    assert in_band >= (1.0 if n_candidates is None else 0.7) * has_band


def test_semihard_random_fallback_and_auto_margin():
    X, y = blobs()
    D = pairwise_distances(X)
    t = semihard_triplets(X, y, 300, margin=1e-9, fallback="random", random_state=0)
    assert len(t) == 300 and np.all(y[t[:, 0]] != y[t[:, 2]])
    t = SemiHardTriplets(200).sample(X, y, np.random.default_rng(0))
    margin = 0.5 * np.median(D[t[:, 0], t[:, 1]])
    ok = (D[t[:, 0], t[:, 2]] > D[t[:, 0], t[:, 1]]) & \
        (D[t[:, 0], t[:, 2]] < D[t[:, 0], t[:, 1]] + margin)
    assert ok.mean() > 0.8


@pytest.mark.parametrize("policy", [ClassTriplets(), KNNTriplets(), SemiHardTriplets()],
                         ids=["class", "knn", "semihard"])
@pytest.mark.parametrize("n", [50, 5000])
def test_policies_are_reproducible_and_bounded(policy, n):
    X, y = blobs()
    p = clone(policy).set_params(n_triplets=n)
    a = p.sample(X, y, np.random.default_rng(3))
    b = p.sample(X, y, np.random.default_rng(3))
    c = p.sample(X, y, np.random.default_rng(4))
    assert a.shape == (n, 3) and a.dtype == np.int64
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.all(y[a[:, 0]] == y[a[:, 1]]) and np.all(y[a[:, 0]] != y[a[:, 2]])
    assert np.all(a[:, 0] != a[:, 1])


def test_semihard_chunking_keeps_memory_bounded(monkeypatch):
    """With a tiny chunk the search still works (rows x candidates per chunk)."""
    import tripletml.triplets as T
    X, y = blobs()
    monkeypatch.setattr(T, "_SEMIHARD_CHUNK", 16)
    t = semihard_triplets(X, y, 200, margin=1.0, n_candidates=None, random_state=0)
    D = pairwise_distances(X)
    assert np.mean((D[t[:, 0], t[:, 2]] > D[t[:, 0], t[:, 1]])) > 0.8


def test_resolve_sampling_maps_strings_and_clones_objects():
    assert type(resolve_sampling("class", 10)) is ClassTriplets
    assert type(resolve_sampling("random", 10)) is ClassTriplets
    assert type(resolve_sampling("knn", 10)) is KNNTriplets
    assert type(resolve_sampling("semihard", 10)) is SemiHardTriplets
    user = KNNTriplets(n_neighbors=5)
    got = resolve_sampling(user, 77)
    assert got is not user and user.n_triplets is None
    assert got.n_triplets == 77 and got.n_neighbors == 5
    assert resolve_sampling(KNNTriplets(12), 77).n_triplets == 12   # its own wins


# ------------------------------------------------------------------ learners
@pytest.mark.parametrize("entry", SAMPLING_ENTRIES, ids=lambda e: e.name)
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_every_sampling_learner_accepts_every_value(entry, value):
    X, y = wine()
    kw = {"sampling": value}
    if entry.name in ("KISSME", "ITML") or "n_triplets" not in entry.tests[0]:
        kw["n_triplets"] = 150
    est = entry.make(**kw).fit(X, y)
    assert est.n_features_in_ == X.shape[1]
    assert est.get_params()["sampling"] is value


@pytest.mark.parametrize("entry", SAMPLING_ENTRIES, ids=lambda e: e.name)
@pytest.mark.parametrize("name,cls", [("knn", KNNTriplets), ("semihard", SemiHardTriplets)])
def test_sampling_is_not_ignored(entry, name, cls, monkeypatch):
    """fit calls the named policy on the preprocessed rows, with n_triplets,
    and trains on what it returned."""
    calls = []
    orig = cls.sample

    def spy(self, X, codes, rng, owner=None):
        t = orig(self, X, codes, rng, owner)
        calls.append((self.n_triplets, X.shape, t.copy()))
        return t

    monkeypatch.setattr(cls, "sample", spy)
    X, y = wine()
    est = entry.make(sampling=name, n_triplets=120)
    est.fit(X, y)
    assert len(calls) == 1
    n, shape, t = calls[0]
    assert n == 120 and len(t) == 120
    assert shape[1] == getattr(est, "n_features_preprocessed_", X.shape[1])


def test_sampling_changes_the_model_and_is_reproducible():
    X, y = wine()
    W = {s: tm.OASIS(n_triplets=500, sampling=s, random_state=0).fit(X, y).W_
         for s in ("class", "knn", "semihard")}
    assert not np.allclose(W["class"], W["knn"])
    assert not np.allclose(W["class"], W["semihard"])
    again = tm.OASIS(n_triplets=500, sampling="semihard", random_state=0).fit(X, y).W_
    np.testing.assert_array_equal(W["semihard"], again)


def test_knn_sampling_trains_on_knn_triplets():
    """The triplets SDCA trains on with sampling="knn" are knn_triplets of the
    preprocessed rows."""
    X, y = wine()
    seen = []

    class Spy(tm.SDCA):
        def _fit(self, X, triplets, rng):
            seen.append((X.copy(), triplets.copy()))
            return super()._fit(X, triplets, rng)

    Spy(n_triplets=300, max_iter=1, sampling=KNNTriplets(n_neighbors=2, n_impostors=3),
        random_state=0).fit(X, y)
    Xp, t = seen[0]
    pool = {tuple(r) for r in knn_triplets(Xp, y, 2, 3)}
    assert len(t) == 300 and {tuple(r) for r in t} <= pool


def test_sml_random_is_class():
    X, y = wine()
    a = tm.SML(n_triplets=100, max_iter=5, tol=None, sampling="random", random_state=0).fit(X, y)
    b = tm.SML(n_triplets=100, max_iter=5, tol=None, sampling="class", random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.M_, b.M_)


def test_kissme_and_itml_defaults_with_other_policies():
    from tripletml.triplets import AllLabels
    assert type(tm.KISSME()._sampler()) is AllLabels
    assert type(tm.KISSME(sampling=ClassTriplets())._sampler()) is AllLabels
    assert type(tm.KISSME(sampling="knn")._sampler()) is KNNTriplets
    p = tm.ITML()._sampler()
    assert type(p) is ClassTriplets and p.per_class_pair == 20
    assert type(tm.ITML(sampling="semihard")._sampler()) is SemiHardTriplets


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("value", ["foo", "KNN", 3, None, KNNTriplets])
def test_bad_sampling_values_name_the_estimator(value):
    X, y = wine()
    msg = (f"OASIS: parameter sampling={value!r} must be one of 'class', 'knn', 'semihard' "
           "or an object implementing 'sample'.")
    if value is KNNTriplets:          # a class has the method: refused when called
        with pytest.raises(TypeError):
            tm.OASIS(sampling=value).fit(X, y)
        return
    with pytest.raises(ValueError) as info:
        tm.OASIS(sampling=value).fit(X, y)
    assert str(info.value) == msg


@pytest.mark.parametrize("policy,msg", [
    (KNNTriplets(n_neighbors=0), "LORETA: KNNTriplets parameter n_neighbors=0 must be >= 1."),
    (SemiHardTriplets(margin=-1.0),
     "LORETA: SemiHardTriplets parameter margin=-1.0 must be > 0."),
    (SemiHardTriplets(fallback="x"),
     "LORETA: SemiHardTriplets parameter fallback='x' must be one of 'hardest', 'random'."),
    (KNNTriplets(n_triplets=0), "LORETA: parameter n_triplets=0 must be >= 1."),
])
def test_bad_policy_knobs_name_the_learner(policy, msg):
    X, y = wine()
    with pytest.raises(ValueError) as info:
        tm.LORETA(sampling=policy, n_triplets=100).fit(X, y)
    assert str(info.value) == msg
    assert not hasattr(tm.LORETA(sampling=policy), "n_features_in_")


# ------------------------------------------------------------------ params and files
def test_sampling_round_trips_params_and_clone():
    est = tm.OASIS(sampling=KNNTriplets(n_neighbors=5))
    assert est.get_params()["sampling__n_neighbors"] == 5
    est.set_params(sampling__n_neighbors=4)
    assert est.sampling.n_neighbors == 4
    c = clone(est)
    assert c.sampling is not est.sampling and c.sampling.get_params() == est.sampling.get_params()
    est.set_params(sampling="semihard")
    assert clone(est).get_params()["sampling"] == "semihard"


@pytest.mark.parametrize("value", ["knn", "semihard",
                                   KNNTriplets(n_neighbors=2, n_impostors=4),
                                   SemiHardTriplets(300, margin=0.5, n_candidates=None,
                                                    fallback="random")],
                         ids=repr)
def test_sampling_save_load(value, tmp_path):
    X, y = wine()
    est = tm.SDCA(n_triplets=200, max_iter=1, sampling=value, random_state=0).fit(X, y)
    est.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    if isinstance(value, str):
        assert back.sampling == value
    else:
        assert type(back.sampling) is type(value)
        assert back.sampling.get_params() == value.get_params()
    np.testing.assert_array_equal(back.W_, est.W_)
    refit = clone(back).fit(X, y)
    np.testing.assert_allclose(refit.W_, est.W_)


class MySampler:
    def sample(self, X, codes, rng, owner=None):
        return ClassTriplets(50).sample(X, codes, rng, owner)


def test_custom_sampler_fits_but_save_refuses_it(tmp_path):
    X, y = wine()
    est = tm.OASIS(sampling=MySampler(), random_state=0).fit(X, y)
    with pytest.raises(TypeError, match=r"save: OASIS: parameter sampling=.*MySampler object, "
                                        r"which a model file cannot store"):
        est.save(tmp_path / "m.npz")
    assert not (tmp_path / "m.npz").exists()


def _rewrite_params(path, **params):
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    meta_name = "__meta__.npy"
    import io
    meta = json.loads(np.load(io.BytesIO(members[meta_name])).tobytes().decode())
    meta["params"].update(params)
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    members[meta_name] = buf.getvalue()
    with zipfile.ZipFile(path, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)


@pytest.mark.parametrize("stored", [{"sampler": "os.system", "params": {}},
                                    {"sampler": "KNNTriplets", "params": {"bogus": 1}},
                                    {"sampler": "KNNTriplets"}, "nope"])
def test_load_refuses_bad_stored_samplers(stored, tmp_path):
    X, y = wine()
    tm.OASIS(n_triplets=100, sampling="knn").fit(X, y).save(tmp_path / "m.npz")
    _rewrite_params(tmp_path / "m.npz", sampling=stored)
    with pytest.raises(ValueError, match="load_model: .* holds invalid OASIS parameters"):
        load_model(tmp_path / "m.npz")


def test_sampler_is_public():
    for name in ("ClassTriplets", "KNNTriplets", "SemiHardTriplets"):
        cls = getattr(tm.triplets, name)
        assert issubclass(cls, TripletSampler)
        assert name in tm.triplets.__all__


def test_save_refuses_a_subclass_of_a_tripletml_sampler(tmp_path):
    class MyKNN(KNNTriplets):
        pass

    X, y = wine()
    est = tm.OASIS(n_triplets=100, sampling=MyKNN(), random_state=0).fit(X, y)
    with pytest.raises(TypeError, match="MyKNN object, which a model file cannot store"):
        est.save(tmp_path / "m.npz")
