"""``tripletml.linalg.sparse_rows.triplet_products``: ``x_q . (x_p - x_n)``,
``||x_q||^2`` and ``||x_p - x_n||^2`` of every triplet, by the distinct
rows' Gram matrix (few rows) and by sparse dots per triplet (many rows),
against the dense formulas; rows repeated within a triplet; bad input."""
import numpy as np
import pytest
import scipy.sparse as sp

from tripletml.linalg.sparse_rows import _GRAM_ROWS, triplet_products


@pytest.mark.parametrize("n_rows", [40, 3000])
def test_both_routes_equal_the_dense_formulas(n_rows):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(n_rows, 20))
    X[rng.random(X.shape) < 0.6] = 0.0
    t = rng.integers(0, n_rows, size=(4000, 3))
    t[:5, 1] = t[:5, 0]                     # q = p+
    t[5:10, 2] = t[5:10, 1]                 # p+ = p-
    t[10:15, 2] = t[10:15, 0]               # q = p-
    assert (np.unique(t).size <= _GRAM_ROWS) == (n_rows == 40)
    V = X[t[:, 1]] - X[t[:, 2]]
    qv, qq, vv = triplet_products(sp.csr_matrix(X), t)
    np.testing.assert_allclose(qv, np.einsum("ij,ij->i", X[t[:, 0]], V), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(qq, (X[t[:, 0]] ** 2).sum(1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vv, (V ** 2).sum(1), rtol=1e-12, atol=1e-12)
    assert np.all(vv[5:10] == 0.0)


def test_bad_input_is_refused():
    Xc = sp.csr_matrix(np.eye(4))
    with pytest.raises(ValueError, match=r"in \[0, 4\)"):
        triplet_products(Xc, np.array([[0, 1, 4]]))
    with pytest.raises(ValueError, match=r"in \[0, 4\)"):
        triplet_products(Xc, np.array([[-1, 1, 2]]))
    with pytest.raises(ValueError, match="shape"):
        triplet_products(Xc, np.array([0, 1, 2]))
    with pytest.raises(TypeError, match="CSR"):
        triplet_products(np.eye(4), np.array([[0, 1, 2]]))
    qv, qq, vv = triplet_products(Xc, np.zeros((0, 3), dtype=int))
    assert qv.shape == qq.shape == vv.shape == (0,)
