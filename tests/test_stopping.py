"""The shared stopping rule: stop_reason_, n_iter_, ConvergenceWarning, LossWatch."""
import math
import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning

from tripletml.engine.stopping import LossWatch, finish, relative_change


class _Est:
    pass


def test_relative_change_is_scale_free():
    assert relative_change(100.0, 101.0) == pytest.approx(1 / 101)
    assert relative_change(1e-3, 1.01e-3) == pytest.approx(0.01 / 1.01)
    assert relative_change(0.0, 0.0) == 0.0
    assert relative_change(1.0, math.nan) == math.inf


def test_finish_warns_only_when_tol_not_met():
    e = _Est()
    with pytest.warns(ConvergenceWarning, match=r"_Est: stopped at max_iter=7 .*tol=0.001"):
        finish(e, 7, "max_iter", tol=1e-3, criterion=0.5)
    assert (e.n_iter_, e.stop_reason_) == (7, "max_iter")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        finish(e, 3, "tol", tol=1e-3, criterion=1e-4)
        finish(e, 9, "max_iter", tol=None)          # a fixed budget was asked for
    assert (e.n_iter_, e.stop_reason_) == (9, "max_iter")
    with pytest.raises(ValueError, match="unknown stop reason"):
        finish(e, 1, "bored")


def test_loss_watch_raises_on_growth_and_nan():
    w = LossWatch(_Est(), factor=10.0, floor=0.0)
    w.update(5.0, "epoch 1")
    w.update(40.0, "epoch 2")                       # below 10 x 5
    with pytest.raises(FloatingPointError, match=r"_Est: training diverged .*epoch 3"):
        w.update(60.0, "epoch 3")
    with pytest.raises(FloatingPointError, match="non-finite"):
        LossWatch(_Est()).update(math.inf, "step 1")


def test_triplet_hinge_matches_its_definition():
    import numpy as np

    from tripletml.losses import triplet_hinge, triplet_hinge_array
    m = np.array([-2.0, 0.0, 0.5, 1.0, 3.0])
    ref = np.array([max(0.0, 1.0 - v) for v in m])
    assert np.array_equal(triplet_hinge_array(m), ref)
    assert [triplet_hinge(v) for v in m] == list(ref)
