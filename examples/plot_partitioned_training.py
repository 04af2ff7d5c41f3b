"""
Training over partitions: what K machines cost in quality
=========================================================

``learner.fit(collection)`` trains on a
:class:`~tripletml.distributed.sharded.ShardedCollection`: on a Dask cluster inside
:func:`tripletml.distributed.dask_search.use_cluster`, or, as here, in this process one
partition at a time.  The algorithm is the same either way (and so is the
model, for a fixed partitioning), so simulating K machines in one process
shows what data parallelism costs: SDCA by CoCoA+ (the partitions' dual
updates are added), OASIS and LORETA by iterative parameter mixing (local
passes, then a weighted average; LORETA's average re-truncated to rank k),
KISSME exactly from per-partition class statistics.  Triplets are sampled
within partitions, so more partitions also means fewer cross-partition
comparisons.
"""
# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tripletml as tm
from tripletml.metrics import evaluate_retrieval
from tripletml.distributed.sharded import ShardedCollection

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, stratify=y,
                                                    random_state=0)
learners = {
    "SDCA (CoCoA+)": lambda: tm.SDCA(n_triplets=8_000, max_iter=5, random_state=0),
    "OASIS (mixing)": lambda: tm.OASIS(n_triplets=8_000, max_iter=2, random_state=0),
    "LORETA k=10 (mixing)": lambda: tm.LORETA(rank=10, n_triplets=8_000, max_iter=2,
                                              random_state=0),
    "KISSME (exact)": lambda: tm.KISSME(),
}
Ks = [1, 2, 4, 8, 16]
scores = {name: [] for name in learners}
reference = {}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for name, make in learners.items():
        reference[name] = evaluate_retrieval(make().fit(X_train, y_train), X_test, y_test,
                                             k=())["map"]
        for K in Ks:
            coll = ShardedCollection.from_arrays(X_train, y_train, n_partitions=K)
            model = make().fit(coll)
            scores[name].append(evaluate_retrieval(model, X_test, y_test, k=())["map"])
        print(f"{name:22s} in memory {reference[name]:.3f}   K=1..16: "
              + " ".join(f"{s:.3f}" for s in scores[name])
              + f"   ({model.partitioned_['strategy']})")

# %%
# Test mAP against the number of partitions; the dotted lines are the
# in-memory fits.
fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
for (name, s), color in zip(scores.items(), plt.rcParams["axes.prop_cycle"].by_key()["color"]):
    ax.plot(Ks, s, "o-", color=color, label=name)
    ax.axhline(reference[name], color=color, ls=":", lw=1)
ax.set_xscale("log", base=2)
ax.set_xticks(Ks, [str(k) for k in Ks])
ax.set_xlabel("partitions K (simulated machines)")
ax.set_ylabel("test mAP (digits)")
ax.legend(fontsize=8)
plt.show()
