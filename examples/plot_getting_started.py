"""
Getting started: two learners on digits
=======================================

Fit two similarity learners on scikit-learn's bundled digits (offline), then
compare their precision@k with the Euclidean baseline on held-out images:
each test image queries the other test images, and precision@k is the share
of its k nearest neighbors (by the learned similarity) of the same digit.
"""
# %%
# Data: 1797 8x8 images, pixel intensities scaled to [0, 1], a stratified
# 70/30 split.  The learners fit on the training part only.
import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tripletml as tm
from tripletml.plot import plot_precision_at_k

X, y = load_digits(return_X_y=True)
X = X / 16.0
X_train, X_test, y_train, y_test = train_test_split(
    X, y, test_size=0.3, stratify=y, random_state=0)

# %%
# Two learners: OASIS (an online passive-aggressive bilinear similarity
# ``x^T W y``) and SDCA (the same model trained by dual coordinate ascent).
# ``fit(X, y)`` samples ``n_triplets`` random class triplets (q, p+, p-)
# from the labels.
oasis = tm.OASIS(C=0.1, n_triplets=20_000, max_iter=2, random_state=0).fit(X_train, y_train)
sdca = tm.SDCA(alpha=0.0025, n_triplets=20_000, max_iter=3, tol=None,
               random_state=0).fit(X_train, y_train)
euclid = tm.Euclidean().fit(X_train, y_train)

# %%
# Precision@k of the three, test images against the other test images
# (leave-one-out).  The legend gives each model's mean average precision.
fig = plot_precision_at_k({"Euclidean": euclid, "OASIS": oasis, "SDCA": sdca},
                          X_test, y_test, ks=(1, 2, 5, 10, 20, 50),
                          title="digits: precision@k on held-out images")
plt.show()

# %%
# ``model.score(X, y)`` is the same leave-one-out mean average precision:
for name, model in [("Euclidean", euclid), ("OASIS", oasis), ("SDCA", sdca)]:
    print(f"{name:10s} mAP {model.score(X_test, y_test):.3f}")
