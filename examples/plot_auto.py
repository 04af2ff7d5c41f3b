"""
AutoSimilarity: pick and tune the learner in one call
=====================================================

:class:`tripletml.AutoSimilarity` races candidate learners (and their key
hyper-parameters) by successive halving: every round fits the survivors on
the *fit items* of a stratified split of the training rows, scores them by
the retrieval mAP of the held-out *validation items*, keeps the best third
and triples their budget.  The winner is refitted on all training rows and
the fitted AutoSimilarity is an ordinary model.
"""
# %%
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split

import tripletml as tm
from tripletml.metrics import evaluate_retrieval
from tripletml.plot import plot_history

# Wine's 13 features have very different scales (proline is in the
# hundreds, hue around 1): the race includes standardized and whitened
# variants, and the no-learning Euclidean baselines.
X, y = load_wine(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, stratify=y,
                                                    random_state=0)
auto = tm.AutoSimilarity(time_budget=20.0, random_state=0).fit(X_train, y_train)
print("winner:", auto.best_params_)
print(f"validation mAP {auto.best_score_:.3f}, stopped by {auto.stop_reason_}")
print(f"test mAP {evaluate_retrieval(auto, X_test, y_test, k=())['map']:.3f} "
      f"(Euclidean: {evaluate_retrieval(tm.Euclidean().fit(X_train), X_test, y_test, k=())['map']:.3f})")

# %%
# ``cv_results_`` holds one entry per (candidate, round): the validation
# score of every candidate at every budget it reached.  Halving discards
# two thirds of the candidates per round.
res = auto.cv_results_
fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
for c in np.unique(res["candidate"]):
    rows = res["candidate"] == c
    label = f"{res['learner'][rows][0]} ({res['preprocessing'][rows][0]})"
    ax.plot(res["round"][rows], res["mean_validation_score"][rows], marker="o",
            lw=1, label=label if rows.sum() > 1 else None, alpha=0.8)
ax.set_xlabel("round (budget x3 per round)")
ax.set_ylabel("validation mAP")
ax.set_xticks(sorted(set(res["round"].tolist())))
ax.legend(fontsize=7, title="survivors", title_fontsize=8)
ax.grid(alpha=0.3)
plt.show()

# %%
# ``history_`` has one record per round, so :func:`tripletml.plot.plot_history`
# draws the race: how many candidates were left and the best score so far.
fig = plot_history(auto, ["n_candidates", "best_validation_score"], x="seconds",
                   title="AutoSimilarity on wine")
plt.show()
