"""
What a Mahalanobis learner learned: embedding and matrix
========================================================

A Mahalanobis learner learns ``M = L^T L``; ``transform(X) = X L^T`` maps the
data to a space where the Euclidean distance is the learned one.  Here
LowRankDML learns a low-rank M on digits; we draw the 2-D PCA view of the
embedding of held-out images, colored by digit, and the 64 x 64 matrix M as
a heat map beside its eigenvalues.
"""
# %%
import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tripletml as tm
from tripletml.plot import plot_embedding, plot_matrix

X, y = load_digits(return_X_y=True)
X = X / 16.0
X_train, X_test, y_train, y_test = train_test_split(
    X, y, test_size=0.3, stratify=y, random_state=0)

model = tm.LowRankDML(n_triplets=10_000, max_iter=150, eval_every=0,
                      random_state=0).fit(X_train, y_train)
print(f"rank of M: {model.components_.shape[0]} of {X.shape[1]}; "
      f"held-out mAP {model.score(X_test, y_test):.3f} "
      f"(Euclidean {tm.Euclidean().fit(X_train).score(X_test, y_test):.3f})")

# %%
# The embedding of the held-out images, brought to two dimensions by PCA.
fig, axes = plt.subplots(1, 2, figsize=(9.2, 4.0), layout="constrained")
pixels = tm.Euclidean().fit(X_train)    # the identity map: raw pixels
plot_embedding(pixels, X_test, y_test, ax=axes[0], title="raw pixels (PCA)")
plot_embedding(model, X_test, y_test, ax=axes[1], title="LowRankDML transform (PCA)")
axes[0].get_legend().remove()
plt.show()

# %%
# The learned matrix: pixels on the border of the 8x8 images carry no
# information and get (near) zero weight; the spectrum shows the low rank.
fig = plot_matrix(model, title="LowRankDML on digits: M and its spectrum")
plt.show()
