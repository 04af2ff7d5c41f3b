"""
Algorithms walkthrough, ported from metric-learn
================================================

metric-learn's walkthrough of its algorithms on a synthetic data set: 100
points in 3 classes (two clusters each), 3 informative features and 2 noise
features of large magnitude.  Each learner is fitted on the labels and the
data drawn in its ``transform`` space; the k-nearest-neighbor accuracy there
is printed.  The last part learns from pairs built by hand, as metric-learn's
"weaker supervision" section does.

Changes from metric-learn's script: the imports and class names; learners
metric-learn has and tripletml does not are replaced (SDML by KISSME, LSML by
SML; MLKR is left out, see the migration guide).  The plots show the first two principal components of each
embedding instead of a t-SNE map, which takes a while to compute.
"""
import itertools

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_classification
from sklearn.decomposition import PCA
from sklearn.model_selection import cross_val_score
from sklearn.neighbors import KNeighborsClassifier

# before: import metric_learn
import tripletml

X, y = make_classification(n_samples=100, n_classes=3, n_clusters_per_class=2,
                           n_informative=3, class_sep=4., n_features=5,
                           n_redundant=0, shuffle=True,
                           scale=[1, 1, 20, 20, 20], random_state=42)


def plot_embedding(X, y, title, ax):
    Z = PCA(n_components=2).fit_transform(X) if X.shape[1] > 2 else X
    if Z.shape[1] == 1:                      # a rank-1 metric: points on a line
        Z = np.column_stack([Z[:, 0], np.zeros(len(Z))])
    ax.scatter(Z[:, 0], Z[:, 1], c=y, cmap=plt.cm.Paired)
    knn = cross_val_score(KNeighborsClassifier(n_neighbors=3), X, y, cv=5).mean()
    ax.set_title(f"{title}: 3-NN {knn:.2f}", fontsize=9)
    ax.set_xticks(())
    ax.set_yticks(())
    print(f"{title:32s} 3-NN accuracy {knn:.3f}")


fig, axes = plt.subplots(3, 4, figsize=(14, 10))
for ax in axes.ravel()[10:]:
    ax.set_axis_off()
axes = iter(axes.ravel())
plot_embedding(X, y, "input space", next(axes))

# LMNN: before lmnn = metric_learn.LMNN(n_neighbors=5, learn_rate=1e-6)
lmnn = tripletml.LMNN(n_neighbors=5)
lmnn.fit(X, y)
plot_embedding(lmnn.transform(X), y, "LMNN", next(axes))

# ITML: before metric_learn.ITML_Supervised()
itml = tripletml.ITML(random_state=0)
plot_embedding(itml.fit_transform(X, y), y, "ITML", next(axes))

# MMC: before metric_learn.MMC_Supervised()
mmc = tripletml.MMC(random_state=0)
plot_embedding(mmc.fit_transform(X, y), y, "MMC", next(axes))

# SDML has no counterpart: KISSME learns from the same kind of pairs, in closed form
# before: metric_learn.SDML_Supervised(sparsity_param=0.1, balance_param=0.0015,
#                                     prior='covariance')
kissme = tripletml.KISSME(random_state=0)
plot_embedding(kissme.fit_transform(X, y), y, "KISSME (for SDML)", next(axes))

# LSML has no counterpart: SML learns a Mahalanobis metric from triplets
# before: metric_learn.LSML_Supervised(tol=0.0001, max_iter=10000, prior='covariance')
sml = tripletml.SML(random_state=0)
plot_embedding(sml.fit_transform(X, y), y, "SML (for LSML)", next(axes))

# NCA: before metric_learn.NCA(max_iter=1000)
nca = tripletml.NCA(max_iter=1000)
plot_embedding(nca.fit_transform(X, y), y, "NCA", next(axes))

# LFDA: before metric_learn.LFDA(k=2, n_components=2)
lfda = tripletml.LFDA(k=2, n_components=2)
plot_embedding(lfda.fit_transform(X, y), y, "LFDA", next(axes))

# RCA: every class is one chunklet
# before: metric_learn.RCA_Supervised(n_chunks=30, chunk_size=2)
rca = tripletml.RCA()
plot_embedding(rca.fit_transform(X, y), y, "RCA", next(axes))


# Weaker supervision: pairs of row indices labeled +1 (same class) or -1,
# metric-learn's create_constraints, fitted by the pair learner ITML
def create_constraints(labels, rng):
    sim = np.array([p for c in np.unique(labels)
                    for p in itertools.combinations(np.flatnonzero(labels == c), 2)])
    dis = np.array([(i, j) for i, j in itertools.combinations(range(len(labels)), 2)
                    if labels[i] != labels[j]])
    dis = dis[rng.choice(len(dis), size=len(sim), replace=False)]
    return (np.vstack([sim, dis]),
            np.concatenate([np.ones(len(sim)), -np.ones(len(dis))]))


pairs, pairs_labels = create_constraints(y, np.random.default_rng(42))
print(pairs[:3], pairs_labels[:3])

# 3,300 constraints need about 3,800 passes: metric-learn stops at its max_iter=1000
# without a word; tripletml warns (ConvergenceWarning) unless given the passes
# before: itml = metric_learn.ITML(preprocessor=X); itml.fit(pairs, pairs_labels)
itml = tripletml.ITML(preprocessor=X, max_iter=5000, random_state=0)
itml.fit(pairs, pairs_labels)
plot_embedding(itml.transform(X), y, "ITML on pairs", next(axes))
# or without a preprocessor: tripletml.ITML().fit(X, pairs=pairs, y=pairs_labels)
plt.tight_layout()
plt.show()
