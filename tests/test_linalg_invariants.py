"""Invariant checks of fitted matrices (tripletml.linalg.invariants) and the
tampered model files they refuse on load: a file whose arrays contradict each
other or the learner's promises (PD, PSD, rank, factors, counters) is refused
by load_model, not loaded to fail later."""

import numpy as np
import pytest

import tripletml as tm
from tripletml import load_model
from tripletml.linalg.invariants import (check_factor, check_inverse, check_positive_definite,
                                         check_psd, check_symmetric)
from _model_files import read_model_file as _read, write_model_file as _write


def test_checks_accept_consistent_matrices_at_any_scale():
    rng = np.random.default_rng(0)
    L = rng.normal(size=(3, 5))
    for c in (1e-6, 1.0, 1e6):
        M = c * (L.T @ L)
        check_psd(M, "M")
        check_factor(np.sqrt(c) * L, M, "L", rtol=1e-8)
        W = M + c * np.eye(5)
        check_positive_definite(W, "W")
        check_inverse(W, np.linalg.inv(W), "W_inv")


@pytest.mark.parametrize("bad, check, msg", [
    (lambda M: M + np.triu(np.ones_like(M), 1), check_symmetric, "not symmetric"),
    (lambda M: -M - np.eye(len(M)), check_positive_definite, "not positive definite"),
    (lambda M: M - 2 * np.eye(len(M)) * np.abs(M).max(), check_psd, "not positive semi-definite"),
])
def test_checks_refuse_with_the_arrays_name(bad, check, msg):
    rng = np.random.default_rng(1)
    L = rng.normal(size=(5, 5))
    with pytest.raises(ValueError, match=f"M is {msg}"):
        check(bad(L.T @ L), "M")


def test_factor_and_inverse_mismatch():
    rng = np.random.default_rng(2)
    L = rng.normal(size=(2, 4))
    with pytest.raises(ValueError, match="L is not a factor"):
        check_factor(L, 2 * L.T @ L, "L", rtol=1e-8)
    W = L.T @ L + np.eye(4)
    with pytest.raises(ValueError, match="W_inv is not the inverse"):
        check_inverse(W, np.eye(4), "W_inv")


# ------------------------------------------------------ tampered model files



def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5))
    y = np.repeat(np.arange(3), 20)
    X[:, 0] += 2 * y
    return X, y


def _tampered(tmp_path, est, edit):
    X, y = _data()
    est.fit(X, y)
    est.save(tmp_path / "good.npz")
    load_model(tmp_path / "good.npz")                  # the untouched file loads
    meta, arrays = _read(tmp_path / "good.npz")
    edit(meta, arrays)
    _write(tmp_path / "bad.npz", meta, arrays)
    return tmp_path / "bad.npz"


def _negate(name):
    def edit(meta, arrays):
        arrays[name] = -arrays[name]
    return edit


def _set_param(name, value):
    def edit(meta, arrays):
        meta["params"][name] = value
    return edit


def _set_attr(name, value):
    def edit(meta, arrays):
        meta["attributes"][name] = value
    return edit


@pytest.mark.parametrize("make, edit, msg", [
    (lambda: tm.COMET(max_iter=2, tol=None, n_triplets=300, random_state=0), _negate("W_"),
     "W_ is not positive definite"),
    (lambda: tm.COMET(max_iter=2, tol=None, n_triplets=300, random_state=0),
     lambda m, a: a.__setitem__("components_", 2 * a["components_"]), "components_ is not a factor"),
    (lambda: tm.COMET(max_iter=2, tol=None, n_triplets=300, random_state=0),
     lambda m, a: a.__setitem__("W_inv_", np.eye(len(a["W_inv_"]))), "W_inv_ is not the inverse"),
    (lambda: tm.KISSME(), _negate("M_"), "M_ is not positive semi-definite"),
    (lambda: tm.KISSME(),
     lambda m, a: a.__setitem__("similar_covariance_", 2 * a["similar_covariance_"]),
     "M_ is not the KISSME matrix"),
    (lambda: tm.ITML(max_iter=20, tol=None, random_state=0), _negate("dual_"), "dual_ has negative"),
    (lambda: tm.ITML(max_iter=20, tol=None, random_state=0), _negate("M_"), "M_ is not positive definite"),
    (lambda: tm.SML(max_iter=20, tol=None, n_triplets=200, random_state=0),
     lambda m, a: a.__setitem__("components_", 3 * a["components_"]), "components_ is not a factor"),
    (lambda: tm.LowRankDML(max_iter=20, n_triplets=300, random_state=0), _negate("s_"),
     "s_ has negative"),
    (lambda: tm.LowRankDML(max_iter=20, n_triplets=300, random_state=0),
     lambda m, a: a.__setitem__("components_", 2 * a["components_"]), "components_ is not"),
    (lambda: tm.LORETA(rank=2, n_triplets=300, random_state=0), _set_param("rank", 1),
     "rank_=2 but the parameters give rank 1"),
    (lambda: tm.LORETA(rank=2, n_triplets=300, random_state=0),
     lambda m, a: a.__setitem__("pinv_A_", 2 * a["pinv_A_"]), "pinv_A_ is not the pseudo-inverse"),
    (lambda: tm.FactoredGD(rank=2, n_triplets=300, random_state=0), _set_param("rank", 1),
     "rank_=2 but the parameters give rank 1"),
    (lambda: tm.OASIS(n_triplets=300, random_state=0), _set_attr("t_", "abc"),
     "t_='abc' must be a non-negative integer"),
    (lambda: tm.SDCA(n_triplets=300, random_state=0), _set_attr("t_", -1),
     "t_=-1 must be a non-negative integer"),
    (lambda: tm.OASIS(n_triplets=300, random_state=0), _set_attr("stop_reason_", "bored"),
     "stop_reason_='bored' must be one of"),
])
def test_tampered_files_are_refused_on_load(tmp_path, make, edit, msg):
    bad = _tampered(tmp_path, make(), edit)
    with pytest.raises(ValueError, match=msg):
        load_model(bad)


@pytest.mark.parametrize("check", [
    lambda A: check_symmetric(A, "M"), lambda A: check_positive_definite(A, "M"),
    lambda A: check_psd(A, "M"), lambda A: check_factor(A, np.eye(3), "M", rtol=1e-8),
    lambda A: check_inverse(np.eye(3), A, "M")])
@pytest.mark.parametrize("bad, msg", [(np.nan, "non-finite"), (np.inf, "non-finite")])
def test_non_finite_or_non_2d_input_is_refused_by_name(check, bad, msg):
    A = np.eye(3)
    A[0, 1] = A[1, 0] = bad
    with pytest.raises(ValueError, match=f"M has {msg}"):
        check(A)
    with pytest.raises(ValueError, match="M must be a 2-D array"):
        check(np.ones(3))
