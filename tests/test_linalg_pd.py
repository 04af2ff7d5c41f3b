"""The conditioning guard of the PD row-column updates (COMET) against dense
references: the predicted ||W'||_F^2 and tr(W'^-1) equal numpy's after the
update, the bound dominates the spectral condition number, and the guard
refuses exactly the steps that would pass its limit."""
import numpy as np
import pytest

from tripletml.linalg.pd_updates import (PD_COND_LIMIT, RowColumnConditioning,
                                         inverse_row_column_update, row_column_update,
                                         schur_step_bound)


def _pd(d, seed, cond=1e2):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (Q * np.geomspace(1.0, 1.0 / cond, d)) @ Q.T, rng


@pytest.mark.parametrize("seed, cond", [(0, 1e1), (1, 1e4), (2, 1e7)])
def test_predicted_frobenius_and_inverse_trace_match_dense(seed, cond):
    W, rng = _pd(9, seed, cond)
    Winv = np.linalg.inv(W)
    for k in (0, 3, 8):
        u = rng.normal(size=9)
        bound = schur_step_bound(W, Winv, k, u)
        c = RowColumnConditioning(W, Winv, k, u)
        for frac in (1e-3, 0.3, 0.9, 0.999):
            eta = frac * min(bound, 10.0)
            W2 = W.copy()
            row_column_update(W2, k, u, eta)
            fro, tr = c.after(eta, float(np.sum(W * W)), float(np.trace(Winv)))
            assert fro == pytest.approx(np.sum(W2 * W2), rel=1e-10)
            ref = np.trace(np.linalg.inv(W2))
            assert tr == pytest.approx(ref, rel=1e-6 * max(1.0, np.linalg.cond(W2) * 1e-6))
            # the bound dominates the spectral condition number
            assert RowColumnConditioning.bound(fro, tr) >= np.linalg.cond(W2) * (1 - 1e-9)


def test_trace_prediction_equals_the_woodbury_update():
    W, rng = _pd(7, 4, 1e3)
    Winv = np.linalg.inv(W)
    u = rng.normal(size=7)
    eta = 0.5 * schur_step_bound(W, Winv, 2, u)
    _, tr = RowColumnConditioning(W, Winv, 2, u).after(eta, 0.0, float(np.trace(Winv)))
    inverse_row_column_update(Winv, 2, u, eta)
    assert tr == pytest.approx(np.trace(Winv), rel=1e-12)


def test_guard_refuses_steps_past_the_limit_and_allows_the_way_back():
    d, k = 6, 1
    W = np.eye(d)
    W[0, 1] = W[1, 0] = 1.0 - 1e-5      # rows 0 and 1 nearly equal: cond ~ 2e5
    Winv = np.linalg.inv(W)
    fro, tr = float(np.sum(W * W)), float(np.trace(Winv))
    u = np.zeros(d)
    u[0] = 1.0                          # W_10 -> 1: towards the boundary
    eta_max = schur_step_bound(W, Winv, k, u)
    c = RowColumnConditioning(W, Winv, k, u)
    assert c.accepts(0.5 * eta_max, fro, tr)
    assert not c.accepts((1 - 1e-9) * eta_max, fro, tr)   # PD, but cond > 1e12
    W2 = W.copy()
    row_column_update(W2, k, u, (1 - 1e-9) * eta_max)
    assert np.linalg.cond(W2) > PD_COND_LIMIT
    # from a W past the limit a step that lowers the bound is accepted
    f2, t2 = float(np.sum(W2 * W2)), float(np.trace(np.linalg.inv(W2)))
    back = RowColumnConditioning(W2, np.linalg.inv(W2), k, -u)
    assert back.accepts(0.5 * (1 - 1e-9) * eta_max, f2, t2)
    # ... and one further towards the boundary is refused
    forth = RowColumnConditioning(W2, np.linalg.inv(W2), k, u)
    assert not forth.accepts(1e-10 * eta_max, f2, t2)
