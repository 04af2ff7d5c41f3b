"""The docstring text of the two parameters every triplet learner shares
for ``transform`` and index inputs: ``n_components`` (the width of
``transform``, where the learner has no ``rank``) and ``preprocessor``
(metric-learn's name).  :func:`document_transform` replaces the lines
``    {n_components}`` and ``    {preprocessor}`` of a class docstring."""
from __future__ import annotations

__all__ = ["N_COMPONENTS_BILINEAR_DOC", "N_COMPONENTS_MAHALANOBIS_DOC", "PREPROCESSOR_DOC",
           "document_transform", "N_COMPONENTS_PARAM"]

from numbers import Integral

from tripletml.core.params import Interval

#: the declaration of ``n_components``
N_COMPONENTS_PARAM = [Interval(Integral, 1, None, closed="left"), None]

N_COMPONENTS_BILINEAR_DOC = """\
    n_components : int or None, default=None
        Width of ``transform``: the embedding keeps the ``n_components``
        largest positive eigenvalues of the symmetric part of W (see
        :class:`~tripletml.core.base.BilinearMixin`); None keeps every positive
        one.  ``transform`` always has exactly ``n_components`` columns:
        when fewer eigenvalues are positive (how many depends on the fit),
        the columns beyond them are zeros.  Changes ``transform`` only, never
        the similarity; ``transform_fidelity_`` says what it keeps.
"""

N_COMPONENTS_MAHALANOBIS_DOC = """\
    n_components : int or None, default=None
        Width of ``transform``: the first ``n_components`` rows of
        ``components_``, the directions of the largest eigenvalues of M
        (after ``rank_tol`` has dropped the negligible ones).  ``transform``
        always has exactly ``n_components`` columns: beyond ``rank_`` they
        are zeros.  None: all ``rank_``.  Changes ``transform`` only, never
        the learned distance (see :class:`~tripletml.core.base.MahalanobisMixin`);
        ``transform_fidelity_`` says what it keeps.
"""

PREPROCESSOR_DOC = """\
    preprocessor : array-like, callable or None, default=None
        metric-learn's preprocessor: an array of rows, or a callable mapping
        a 1-D array of indices to their rows.  When set, integer inputs are
        indices resolved through it: a 1-D array stands for rows (``fit(idx,
        y)``, ``transform(idx)``), ``(n, 2)`` / ``(n, 3)`` arrays for index
        pairs / triplets (each distinct index looked up once; floats of
        integral values are read as indices, others refused); other float
        rows pass through unchanged.  Without it, an integer ``(n, 2)``
        array with pair labels y (values in {-1, 1} or {0, 1}) is refused
        as index pairs that need it (``X.astype(float)`` fits genuine
        two-feature rows).  None: inputs are rows.  Not saved in model
        files (a loaded model has None).
"""


def document_transform(cls: type) -> type:
    """Class decorator: fill ``{n_components}`` (the bilinear or the
    Mahalanobis wording, by the class's family) and ``{preprocessor}``."""
    from tripletml.core.base import BilinearMixin

    doc = cls.__doc__
    if doc:
        nc = N_COMPONENTS_BILINEAR_DOC if issubclass(cls, BilinearMixin) \
            else N_COMPONENTS_MAHALANOBIS_DOC
        doc = doc.replace("    {n_components}\n", nc).replace("    {preprocessor}\n",
                                                               PREPROCESSOR_DOC)
        cls.__doc__ = doc
    return cls
