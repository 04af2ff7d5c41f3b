"""Linear-algebra kernels shared by the solvers, one family per module.

* :mod:`.sparse_rows` -- CSR row differences, sparse bilinear forms and
  rank-one updates touching only non-zero rows/columns (OASIS, SDCA, the
  factored learners).
* :mod:`.pinv` -- full-column-rank factors and Meyer's rank-one
  pseudo-inverse update (LORETA's Theorem 1, the multi-label rankers).
* :mod:`.pd_updates` -- Cholesky root updates, the Woodbury inverse update
  and the Schur step bound of a symmetric row-column update, plus the
  conditioning guard that keeps W positive definite in floating point (COMET).
* :mod:`.eig_update` -- Brand's incremental eigen-update in named steps, PSD
  projections, the PSD factor L of a Mahalanobis matrix and the closed form
  of SML's Lemma 3 (low-rank DML, SML, KISSME).
* :mod:`.pairwise` -- blocked squared distances and the weighted sum of
  outer products of row differences (the gradients of LMNN and NCA; the
  pair scatters of KISSME and RCA over the distinct rows the pairs name).
* :mod:`.span` -- the span route of few rows with many features: an
  orthonormal basis of the rows' span, the rows' coordinates in it, and the
  lift of a model fitted there back to ``d x d`` (identity kept on the
  complement), with the PSD factor of the lift (``tests/test_span_route.py``).
* :mod:`.topk` -- the running top-k accumulator (:class:`~.topk.TopK`) of
  every exact search: the index scan, the metrics' rankings, the merge of
  sharded results.

Every kernel has its own tests: ``tests/test_linalg.py`` (sparse rows,
pseudo-inverses, PD updates), ``tests/test_linalg_pd.py``,
``tests/test_linalg_pinv.py``, ``tests/test_linalg_eig.py``,
``tests/test_linalg_pairwise.py`` and ``tests/test_linalg_topk.py``.
"""
from __future__ import annotations

from tripletml.linalg._flags import FAST
from tripletml.linalg.eig_update import (GRAM_COL_RTOL, GRAM_COND_RTOL, lowrank_eig_update,
                         orthonormality_error, project_psd, project_spectrum,
                         psd_factor, psd_factor_of_rows, reorthonormalize_eig,
                         solve_lemma3)
from tripletml.linalg.pd_updates import (PD_COND_LIMIT, RowColumnConditioning, chol_downdate, chol_update,
                         chol_update_downdate, inverse_row_column_update, row_column_update,
                         schur_coefficients, schur_step_bound)
from tripletml.linalg.pinv import (balanced_factors, pinv_drift, pinv_full_column_rank, pinv_update_apply,
                   pinv_update_prepare, rank_one_update_with_pinv)
from tripletml.linalg.sparse_rows import (as_csr, bilinear_margins, csr_row_diff, diff_buffers, rowwise_dot, sparse_bilinear,
                          sparse_rank_one_update, triplet_rows)
from tripletml.linalg.topk import TopK, topk

__all__ = [
    "FAST", "GRAM_COL_RTOL", "GRAM_COND_RTOL",
    "as_csr", "bilinear_margins", "csr_row_diff", "triplet_rows", "sparse_bilinear", "sparse_rank_one_update",
    "diff_buffers", "rowwise_dot",
    "pinv_full_column_rank", "pinv_drift", "balanced_factors", "rank_one_update_with_pinv",
    "pinv_update_prepare", "pinv_update_apply",
    "chol_update", "chol_downdate", "chol_update_downdate", "row_column_update",
    "schur_step_bound", "schur_coefficients", "inverse_row_column_update", "PD_COND_LIMIT",
    "RowColumnConditioning",
    "lowrank_eig_update", "project_spectrum", "project_psd", "psd_factor", "psd_factor_of_rows",
    "orthonormality_error",
    "reorthonormalize_eig", "solve_lemma3",
    "TopK", "topk",
]
