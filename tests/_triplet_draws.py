"""Random index triplets for tests: three distinct rows per triplet.

Training refuses degenerate triplets (q = p+, q = p- or p+ = p-;
:func:`tripletml.core.validation.check_triplets` with ``allow_degenerate=False``),
so tests that draw triplets at random draw them here: ``rng.integers`` rows,
the degenerate ones drawn again until none is left (uniform over the triplets
of distinct indices).  Identical points at distinct indices remain possible,
and are what a test of a zero difference ``x_p+ - x_p-`` should use.
"""
from __future__ import annotations

import numpy as np


def distinct_triplets(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    """``m`` random (query, positive, negative) triplets of distinct indices
    into ``n >= 3`` rows, as an int64 array of shape (m, 3)."""
    if n < 3:
        raise ValueError(f"distinct_triplets: {n} rows; a triplet needs 3 distinct rows")
    T = rng.integers(0, n, size=(m, 3))
    while True:
        bad = (T[:, 0] == T[:, 1]) | (T[:, 0] == T[:, 2]) | (T[:, 1] == T[:, 2])
        if not bad.any():
            return T.astype(np.int64)
        T[bad] = rng.integers(0, n, size=(int(bad.sum()), 3))


def hidden_answers(rng: np.random.Generator, Z: np.ndarray, m: int, noise: float = 0.0
                   ) -> np.ndarray:
    """``m`` answers ``(head, close, far)`` about the rows of a hidden
    configuration ``Z``, each triplet of three distinct items drawn with
    ``rng.choice`` and ordered by the distances in ``Z``, then a share
    ``noise`` of them flipped (crowd answers)."""
    n = Z.shape[0]
    T = np.array([rng.choice(n, 3, replace=False) for _ in range(m)])
    dp = ((Z[T[:, 0]] - Z[T[:, 1]]) ** 2).sum(1)
    dn = ((Z[T[:, 0]] - Z[T[:, 2]]) ** 2).sum(1)
    flip = (dp > dn) ^ (rng.random(m) < noise)
    T[flip] = T[flip][:, [0, 2, 1]]
    return T


def spy_on_split(monkeypatch, module) -> dict:
    """Record the item split a held-out choice draws: ``module``'s
    ``split_by_items`` is wrapped so that ``seen["hold"]`` is its last
    result (the answers fitted by the probes and those scored)."""
    seen = {}
    split = module.split_by_items

    def spy(t, fraction, rng, **kw):
        seen["hold"] = split(t, fraction, rng, **kw)
        return seen["hold"]

    monkeypatch.setattr(module, "split_by_items", spy)
    return seen
