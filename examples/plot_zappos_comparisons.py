"""
Human comparisons: Zappos shoes
===============================

283,770 crowd-sourced triplets over 85 shoes ("is shoe *b* or shoe *c* more
like shoe *a*?", Wilber et al. 2014) and a 4096-d AlexNet feature vector per
shoe.  First a feature-free ordinal embedding (SOE) of the 85 shoes, then a
similarity learned from the features on 57 shoes and scored on the 28 shoes it
never saw, against the cosine of the CNN features.

The data are not bundled: set ``TRIPLETML_DATA`` to a folder holding
``zappos/`` (see :func:`tripletml.datasets.load_comparisons`).  Without them
this example prints where to get them and stops.
"""
# %%
import sys

import matplotlib.pyplot as plt
import numpy as np

import tripletml as tm
from tripletml.datasets import load_comparisons, split_items
from tripletml.embedding import SOE
from tripletml.metrics import triplet_accuracy

try:
    data = load_comparisons("zappos")
except FileNotFoundError as err:   # the shared data are not here: say where to get them
    print("This example needs the Zappos comparison data (not bundled).\n"
          f"{err}\nSet TRIPLETML_DATA to the folder that holds zappos/ and run it again.")
    sys.exit(0)

T, X = data.triplets, data.features
print(f"{len(T)} triplets (head, close, far) over {data.n_items} shoes; features {X.shape}")

# %%
# A 2-D ordinal embedding from 20,000 of the triplets alone (no features):
# SOE places the shoes so that "close" lies nearer to "head" than "far" does,
# for as many triplets as it can.  The labels are the item ids.
rng = np.random.default_rng(0)
soe = SOE(2, random_state=0).fit(T[rng.choice(len(T), 20_000, replace=False)])
E = soe.embedding_
print(f"SOE 2-D: accuracy on all {len(T)} triplets {soe.score(T):.3f}")

fig, ax = plt.subplots(figsize=(6, 6))
ax.scatter(E[:, 0], E[:, 1], s=12, c="tab:blue")
for i, (u, v) in enumerate(E):
    ax.annotate(str(i), (u, v), fontsize=7, xytext=(2, 2), textcoords="offset points")
ax.set_title("Zappos: 2-D SOE of the 85 shoes from 20,000 triplets")
ax.set_aspect("equal")
plt.show()

# %%
# Five nearest neighbors of a few shoes in the embedding.
D = np.linalg.norm(E[:, None] - E[None], axis=-1)
for i in (0, 20, 40, 60, 80):
    nn = [int(j) for j in np.argsort(D[i]) if j != i][:5]
    print(f"shoe {i:2d}: nearest {nn}")

# %%
# Unseen shoes.  Split the *items* 57 / 28 with
# :func:`tripletml.datasets.split_items` (as ``bench/bench_zappos_unseen.py``
# does), train on triplets among the 57 training shoes only, score the
# triplets whose head is one of the 28 others.  The learner is
# :class:`~tripletml.LinearTSTE` at its defaults on the features as they come:
# ``preprocessing="auto"`` recognises a network's features (dense,
# non-negative, many columns) and l2-normalizes the rows, so the learner starts
# from the cosine and learns a linear map from the answers (t-STE's likelihood,
# pulled towards its start by a penalty in units of the rows' own spread).
# The baseline is the cosine itself (the Euclidean distance on l2-normalized
# rows), on the same unseen shoes.  One fit per size of the training set:
# the first n triplets of one random order.
Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
sizes = [250, 1000, 4000, 20000]
accs, cos = [], []
for seed in (0, 1):
    s = split_items(T, data.n_items, test_size=28, random_state=seed)
    train, T_tr, T_te = s.train_items, s.train, s.test_head   # T_tr indexes X[train]
    cos.append(triplet_accuracy(tm.Euclidean().fit(Xn[train], triplets=T_tr), Xn, T_te))
    T_tr = T_tr[np.random.default_rng(seed).permutation(len(T_tr))]
    row = [triplet_accuracy(tm.LinearTSTE(random_state=seed).fit(X[train], triplets=T_tr[:n]),
                            X, T_te) for n in sizes]
    accs.append(row)
    print(f"split {seed}: cosine {cos[-1]:.3f}, LinearTSTE "
          + ", ".join(f"{n}: {a:.3f}" for n, a in zip(sizes, row)))
accs = np.array(accs)

fig, ax = plt.subplots(figsize=(6, 4))
ax.errorbar(sizes, accs.mean(0), yerr=accs.std(0), marker="o", capsize=3,
            label="LinearTSTE (defaults, raw features)")
ax.axhline(np.mean(cos), color="k", ls="--", label=f"cosine {np.mean(cos):.3f}")
ax.set_xscale("log")
ax.set_xlabel("training triplets (among the 57 training shoes)")
ax.set_ylabel("accuracy, triplets headed by an unseen shoe")
ax.set_title("Zappos: a learned similarity for unseen shoes (2 item splits)")
ax.legend()
plt.show()
