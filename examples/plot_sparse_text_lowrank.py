"""
Sparse text, low rank: LORETA on 20 Newsgroups
==============================================

LORETA learns a rank-k bilinear similarity ``x^T A B^T y`` with O(d k)
memory, so it scales to tens of thousands of tf-idf features where a d x d
matrix would not fit.  Here: four newsgroups, 5000 tf-idf terms chosen by
information gain on the training messages, CSR input, one pass over 50,000
triplets.  The full-size version (50,000 features, all 20 groups) is
``tripletml reproduce loreta-20ng``.

The messages come from the data home (``TRIPLETML_DATA``) when it holds
20 Newsgroups (``tripletml fetch 20newsgroups``); otherwise the example falls
back to scikit-learn's bundled digits as CSR, so that it always runs offline.
"""
# %%
import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp

import tripletml as tm
from tripletml import datasets
from tripletml.plot import plot_precision_at_k

GROUPS = ["comp.graphics", "rec.sport.hockey", "sci.space", "talk.politics.mideast"]
home = datasets.get_data_home()
try:
    corpus = datasets.load("20newsgroups", subset="all")
except (FileNotFoundError, OSError, ValueError) as exc:
    corpus = None
    print(f"20 Newsgroups not in {home} ({type(exc).__name__}); using digits instead")

if corpus is not None:
    from tripletml.datasets.text import NewsgroupsVectorizer

    names = list(corpus.target_names)
    keep = np.isin(corpus.target, [names.index(g) for g in GROUPS])
    train = np.array([f.startswith("20news-bydate-train/") for f in corpus.filenames])
    docs = np.array(corpus.data, dtype=object)
    y_all = np.asarray(corpus.target)
    vec = NewsgroupsVectorizer(n_features=5000)
    X_train = vec.fit_transform(list(docs[keep & train]), y_all[keep & train])
    X_test = vec.transform(list(docs[keep & ~train]))
    y_train, y_test = y_all[keep & train], y_all[keep & ~train]
    title = "20 Newsgroups, 4 groups, 5000 tf-idf terms"
    baseline = "cosine (tf-idf)"
    # a random 600 of the test messages query each other (keeps it fast)
    pick = np.random.default_rng(0).choice(X_test.shape[0], 600, replace=False)
    X_test, y_test = X_test[pick], y_test[pick]
else:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = sp.csr_matrix(X / 16.0)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, stratify=y,
                                                        random_state=0)
    title = "digits as CSR (20 Newsgroups not in the data home)"
    baseline = "dot product (pixels)"
print(f"{title}: train {X_train.shape[0]} x {X_train.shape[1]} "
      f"({X_train.nnz / X_train.shape[0]:.0f} non-zeros per row), test {X_test.shape[0]}")

# %%
# LORETA at rank 10, one pass over 50,000 random class triplets.  The
# model is A and B (d x k each), never the d x d matrix.
lor = tm.LORETA(rank=10, eta0=1.0 if corpus is not None else 0.01, n_triplets=50_000,
                random_state=0).fit(X_train, y_train)
print(f"memory of the model: {lor.n_features_in_} x {lor.rank} x 2 numbers")

# %%
# Precision@k of the held-out messages against each other: the learned
# rank-10 similarity against the cosine similarity of the tf-idf vectors
# (``DotProduct``: rows are l2-normalized).
fig = plot_precision_at_k({baseline: tm.DotProduct().fit(X_train),
                           "LORETA k=10": lor}, X_test, y_test,
                          ks=(1, 2, 5, 10, 20, 50), title=title)
plt.show()

# %%
# The running loss is recorded once per pass; with a single pass the
# history holds its mean hinge loss and mistake rate:
print({k: round(float(v[-1]), 4) for k, v in lor.history_.items() if k != "step"})
