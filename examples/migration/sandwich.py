"""
Sandwich demo, ported from metric-learn
=======================================

metric-learn's sandwich demo: six classes of points, each a horizontal layer
of the "sandwich"; in the input space a point's nearest neighbor is often in
the layer above or below.  Each learner is fitted on the labels and the data
drawn in its ``transform`` space with the nearest-neighbor graph (an edge's
color is its point's class).

metric-learn's demo fits LMNN, ITML_Supervised, SDML_Supervised and
LSML_Supervised.  tripletml's ``ITML`` is ITML_Supervised; SDML and LSML have
no counterpart and are replaced by ``KISSME`` (a pair learner with a closed
form) and ``SML`` (a Mahalanobis metric from triplets).
"""
import numpy as np
from matplotlib import pyplot as plt
from sklearn.neighbors import NearestNeighbors

# before: from metric_learn import LMNN, ITML_Supervised, LSML_Supervised, SDML_Supervised
from tripletml import ITML, KISSME, LMNN, SML


def sandwich_data(rng, n_classes=6, n_points=9, dist=0.7):
    """Points of class i around (x, dist * i) for x = -4.5 .. 3.5."""
    x_centers = np.arange(n_points, dtype=float) - n_points / 2
    y_centers = dist * (np.arange(n_classes, dtype=float) - n_classes / 2)
    data = np.empty((n_classes, n_points, 2))
    data[..., 0] = rng.normal(x_centers[None, :], 0.1, size=(n_classes, n_points))
    data[..., 1] = rng.normal(y_centers[:, None], 0.1, size=(n_classes, n_points))
    labels = np.repeat(np.arange(n_classes), n_points)
    return data.reshape(-1, 2), labels


def nearest_neighbors(X, k=2):
    return NearestNeighbors(n_neighbors=k).fit(X).kneighbors(X, return_distance=False)


def plot_sandwich(x, y, nn, ax, colors="rbgmky"):
    for i, cls in enumerate(np.unique(y)):
        ax.scatter(*x[y == cls].T, s=50, facecolors="none", edgecolors=colors[i])
    for i, a in enumerate(x):
        b = x[nn[i, 1]]
        ax.plot((a[0], b[0]), (a[1], b[1]), colors[y[i]])
    ax.set_xticks([])
    ax.set_yticks([])


def same_class_neighbor(nn, y):
    """Share of points whose nearest other point is of their class."""
    return float(np.mean(y[nn[:, 1]] == y))


rng = np.random.default_rng(0)
x, y = sandwich_data(rng)
knn = nearest_neighbors(x)
fig = plt.figure(figsize=(8, 9))
ax = fig.add_subplot(3, 1, 1)
plot_sandwich(x, y, knn, ax)
ax.set_title(f"input space ({same_class_neighbor(knn, y):.0%} same-class neighbors)")
ax.set_aspect("equal")

learners = [
    LMNN(),                                  # before: LMNN()
    ITML(n_triplets=200, random_state=0),    # before: ITML_Supervised(n_constraints=200)
    KISSME(n_triplets=200, random_state=0),  # before: SDML_Supervised(n_constraints=200)
    SML(n_triplets=200, random_state=0),     # before: LSML_Supervised(n_constraints=200)
]
for ax_num, ml in enumerate(learners, start=3):
    tx = ml.fit(x, y).transform(x)
    if tx.shape[1] == 1:                     # a rank-1 metric: draw it on a line
        tx = np.column_stack([tx[:, 0], np.zeros(len(tx))])
    ml_knn = nearest_neighbors(tx)
    ax = fig.add_subplot(3, 2, ax_num)
    plot_sandwich(tx[:, :2], y, ml_knn, ax)
    share = same_class_neighbor(ml_knn, y)
    ax.set_title(f"{type(ml).__name__} ({share:.0%})")
    print(f"{type(ml).__name__:8s} same-class nearest neighbors: {share:.0%}")
plt.show()
