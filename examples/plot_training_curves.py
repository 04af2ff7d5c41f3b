"""
Training curves: duality gap, objective and rank
================================================

Every learner records what its solver tracks in ``history_`` (a dict of
equal-length lists with a ``step`` and a ``seconds`` column).
:func:`tripletml.plot.plot_history` draws one panel per quantity.
"""
# %%
import matplotlib.pyplot as plt
from sklearn.datasets import load_digits

import tripletml as tm
from tripletml.plot import plot_history

X, y = load_digits(return_X_y=True)
X = X / 16.0

# %%
# SDCA maximizes the dual of the regularized triplet hinge loss; the
# duality gap P - D bounds the distance to the optimum, and ``tol`` stops
# the solver when the *relative* gap ``gap / max(|P|, 1e-12)`` falls below
# it.  One point per pass over the triplets.
sdca = tm.SDCA(alpha=0.0025, n_triplets=10_000, max_iter=8, tol=None,
               random_state=0).fit(X, y)
fig = plot_history(sdca, ["primal", "dual", "gap", "rel_gap"],
                   title="SDCA on digits (8 passes over 10,000 triplets)")
for ax in fig.axes:
    ax.set_xlabel("triplet steps")
plt.show()

# %%
# SML (sparse metric learning) minimizes a Nesterov-smoothed objective over
# positive semi-definite matrices; its trace-norm regularizer drives the
# rank of M down as it converges (``rank_`` at the end).  One point per
# iteration; ``gap`` is the smoothed duality gap.
sml = tm.SML(alpha=1e-2, n_triplets=600, max_iter=100, tol=None,
             random_state=0).fit(X[:400], y[:400])
fig = plot_history(sml, ["objective", "gap"],
                   title=f"SML on 400 digits (100 iterations, final rank {sml.rank_} of 64)")
for ax in fig.axes:
    ax.set_xlabel("iteration")
plt.show()

# %%
# The rank along the way: LowRankDML records the rank of its iterate at
# every iteration (the incremental SVD keeps only the non-zero part), and
# its objective every ``eval_every`` iterations.  Here against seconds.
dml = tm.LowRankDML(n_triplets=5000, max_iter=80, eval_every=4,
                    random_state=0).fit(X, y)
fig = plot_history(dml, ["objective", "rank"], x="seconds",
                   title="LowRankDML on digits against time")
plt.show()
