"""
Weakly supervised metric learning, ported from metric-learn
===========================================================

metric-learn's "weakly supervised" user guide as one script: pairs of points
with +1 / -1 labels (here drawn from the wine classes), a pair learner fitted
on them, pair verification (``predict`` at a calibrated threshold,
``decision_function``, ``score`` = ROC AUC), model selection with pairs as X,
and learning from triplets.  The metric-learn lines it replaces are in the
comments; only the imports and class names changed.
"""
import numpy as np
from sklearn.datasets import load_wine
from sklearn.model_selection import GridSearchCV, cross_val_score, train_test_split

# before: from metric_learn import ITML, MMC, SCML
from tripletml import ITML, KISSME, MMC, SCML

X, classes = load_wine(return_X_y=True)
rng = np.random.RandomState(42)

# pairs of row indices, labeled +1 when both rows are of one class
pairs_indices = rng.randint(X.shape[0], size=(600, 2))
pairs_indices = pairs_indices[pairs_indices[:, 0] != pairs_indices[:, 1]]
y = np.where(classes[pairs_indices[:, 0]] == classes[pairs_indices[:, 1]], 1, -1)
pairs = X[pairs_indices]                     # metric-learn's 3D form: (n_pairs, 2, 13)

# split the pairs as one splits rows: train, validation (for the threshold), test
idx_train, idx_test, y_train, y_test = train_test_split(pairs_indices, y, random_state=0)
idx_train, idx_valid, y_train, y_valid = train_test_split(idx_train, y_train, random_state=0)
pairs_train, pairs_valid, pairs_test = X[idx_train], X[idx_valid], X[idx_test]

# ---------------------------------------------------------------- fitting on pairs
itml = ITML(random_state=42)
itml.fit(pairs_train, y_train)               # threshold_ calibrated for accuracy here

mmc = MMC(random_state=42).fit(pairs_train, y_train)
print("MMC test ROC AUC:", mmc.score(pairs_test, y_test))

# ------------------------------------------------------- prediction and threshold
print("predicted:", itml.predict(pairs_test[:8]))
print("true:     ", y_test[:8])
itml.calibrate_threshold(pairs_valid, y_valid)                    # best accuracy
print("accuracy threshold:", itml.threshold_)
itml.calibrate_threshold(pairs_valid, y_valid, strategy="max_tpr", min_rate=0.9)
print("threshold keeping a true negative rate of 0.9:", itml.threshold_)
itml.calibrate_threshold(pairs_valid, y_valid, strategy="f_beta", beta=2)
itml.set_threshold(float(np.median(itml.decision_function(pairs_valid))))

# -------------------------------------------------------------------- scoring
print("scores (minus the distance):", itml.decision_function(pairs_test[:3]))
print("ROC AUC on the test pairs:", itml.score(pairs_test, y_test))

# distances, metric function, Mahalanobis matrix, transform
# before: itml.pair_distance(pairs_test[:3])
print(itml.pair_distance(pairs_test[:3, 0], pairs_test[:3, 1]))
metric_fun = itml.get_metric()
print(metric_fun(pairs_test[0, 0], pairs_test[0, 1]))
print(itml.get_mahalanobis_matrix().shape, itml.transform(X[:2]).shape)

# the same pairs as row indices into a preprocessor (the rows, or a function of the ids)
itml_idx = ITML(preprocessor=X, random_state=42).fit(idx_train, y_train)
print("fitted on index pairs:", itml_idx.score(idx_test, y_test))
# or without a preprocessor: ITML().fit(X, pairs=idx_train, y=y_train)

# ------------------------------------------------------ scikit-learn model selection
print("cross-validated ROC AUC:", cross_val_score(ITML(random_state=0), pairs, y, cv=3))
print("cross-validated accuracy:",
      cross_val_score(KISSME(), pairs, y, cv=3, scoring="accuracy"))
search = GridSearchCV(ITML(random_state=0), {"gamma": [0.1, 1.0, 10.0]}, cv=3)
search.fit(pairs_train, y_train)
print("best gamma:", search.best_params_["gamma"], "test AUC:", search.score(pairs_test, y_test))

# ------------------------------------------------------------ learning on triplets
# (query, positive, negative) rows: the query's class is the positive's, not the negative's
T = rng.randint(X.shape[0], size=(3000, 3))
T = T[(classes[T[:, 0]] == classes[T[:, 1]]) & (classes[T[:, 0]] != classes[T[:, 2]])
      & (T[:, 0] != T[:, 1])]
triplets = X[T]                              # (n_triplets, 3, 13)
triplets_train, triplets_test = train_test_split(triplets, random_state=0)
scml = SCML(random_state=42).fit(triplets_train)
print("triplets predicted:", scml.predict(triplets_test[:8]))
print("fraction of test triplets ordered right:", scml.score(triplets_test))
