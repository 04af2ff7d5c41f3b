"""Shared fixtures.

Data-backed tests use the ``data_home`` fixture.  It resolves, in order, the
``TRIPLETML_DATA`` environment variable and ``../shared/data`` beside the
repository.  When neither exists the test is skipped with the reason, unless
``TRIPLETML_REQUIRE_DATA=1`` (set by ``.ci/run``), in which case it fails:
CI must run the data-backed tests, never skip them.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Numba's on-disk cache does not notice when a kernel that a cached function
# calls has changed (tripletml.linalg edited, caller untouched), so tests
# compile into a fresh cache: they always run the current code.
os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="tripletml-numba-")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _find_data_home() -> Path | None:
    env = os.environ.get("TRIPLETML_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data")
    for c in candidates:
        if (c / "MANIFEST.md").is_file() or (c / "vehicle").is_dir():
            return c.resolve()
    return None


@pytest.fixture(scope="session")
def data_home() -> Path:
    home = _find_data_home()
    if home is None:
        msg = ("real data not found: set TRIPLETML_DATA or place the data sets in "
               f"{REPO.parent / 'shared' / 'data'}")
        if os.environ.get("TRIPLETML_REQUIRE_DATA") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return home


@pytest.fixture
def raw_rows(monkeypatch):
    """Train on the rows as given: the feature unit of ``preprocessing=None``
    and ``"center"`` (:func:`tripletml.core.preprocessing.feature_unit`) is 1.

    For the tests that compare a solver with its paper's formulas on raw
    rows (step sizes, margins and duality gaps in the caller's numbers);
    the unit itself is tested in test_preprocessing.py and
    test_scale_equivariance.py."""
    import tripletml.core.preprocessing as prep
    monkeypatch.setattr(prep, "feature_unit", lambda X, mean=None: 1.0)
