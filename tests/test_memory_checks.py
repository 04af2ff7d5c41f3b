"""Dense d x d learners refuse, before allocating, a model that does not fit
in the memory available (issue 27: the defaults benchmark hit raw NumPy
MemoryErrors on dexter, 20,000 features, under an address-space cap)."""
import subprocess
import sys

import numpy as np
import pytest

import tripletml as tm
import tripletml.core.validation as val

SQUARE = ["OASIS", "SDCA", "COMET", "SparseCOMET", "SML"]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", SQUARE)
def test_square_learners_refuse_clearly_before_training(name, monkeypatch):
    X = np.random.default_rng(0).normal(size=(30, 40))
    y = np.arange(30) % 3
    est = getattr(tm, name)(random_state=0)
    d = 41 if est._auto_preprocessing == "sphere" else 40
    need = est._square_arrays * 8 * d * d
    monkeypatch.setattr(val, "available_memory", lambda: need - 1)
    with pytest.raises(MemoryError, match=rf"{name}: {est._square_arrays} dense {d} x {d} "
                                          r"arrays .* do not fit; reduce the dimension"):
        est.fit(X, y)
    assert not hasattr(est, "scaler_") and not hasattr(est, "n_features_in_")
    if hasattr(est, "partial_fit"):
        with pytest.raises(MemoryError, match=f"{name}: "):
            est.partial_fit(X, [[0, 3, 1]])
        assert not hasattr(est, "scaler_")
    monkeypatch.setattr(val, "available_memory", lambda: need)     # just enough
    est.fit(X, y)


def test_available_memory_honours_an_address_space_limit():
    code = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, resource.RLIM_INFINITY))\n"
        "from tripletml.core.validation import available_memory\n"
        "print(available_memory())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert 0 < int(out.stdout) < 3 * 2**30
