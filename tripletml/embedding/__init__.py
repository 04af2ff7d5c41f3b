"""Feature-free ordinal embeddings: learn a point per item id from triplets alone.

A triplet ``(head, close, far)`` of item ids says that ``close`` was judged more
like ``head`` than ``far`` is (the format of
:func:`tripletml.datasets.load_comparisons` and
:func:`tripletml.datasets.read_triplets`).  The estimators here fit an
embedding ``embedding_`` of shape ``(n_items, n_components)`` whose Euclidean
distances agree with as many triplets as possible:

* :class:`SOE` -- soft ordinal embedding (Terada & von Luxburg, ICML 2014):
  squared hinge on the distance differences;
* :class:`STE` -- stochastic triplet embedding (van der Maaten & Weinberger,
  MLSP 2012): logistic loss of the difference of squared distances;
* :class:`TSTE` -- t-distributed stochastic triplet embedding (van der Maaten &
  Weinberger, MLSP 2012): log-likelihood under a Student-t kernel;
* :class:`BilinearEmbedding` -- a bilinear similarity learner (LORETA by
  default) on one-hot item rows: a low-rank similarity per pair of items.

:func:`choose_dimension` picks ``n_components`` by K-fold cross-validation over
the triplets with the one-standard-error rule.  The estimators also work with
:class:`sklearn.model_selection.GridSearchCV` directly (triplets as X, score
= triplet accuracy; pass ``n_items`` so that every fold embeds the same
items).  :func:`tripletml.save_model` / :func:`tripletml.load_model` store and
check all four (BilinearEmbedding with its fitted learner inside the file).
They are entries of :mod:`tripletml.registry` of kind ``"embedding"``
(``load_model``'s one allow-list), apart from the learners on features:
they are not in the ``tripletml`` namespace, ``tripletml fit`` or the demo.

There are no features: the estimators have no ``transform``; the learned
coordinates are ``embedding_`` (row ``i`` = item ``i``), and ``predict`` /
``score`` answer triplets about the items seen in ``fit``.  They cannot place
an item no one has judged (see the learners on features for that).

>>> import numpy as np
>>> from tripletml.embedding import SOE
>>> rng = np.random.default_rng(0)
>>> P = rng.normal(size=(20, 2))
>>> t = rng.integers(0, 20, size=(3000, 3))
>>> t = t[(t[:, 0] != t[:, 1]) & (t[:, 0] != t[:, 2]) & (t[:, 1] != t[:, 2])]
>>> d = lambda a, b: ((P[a] - P[b]) ** 2).sum(1)
>>> swap = d(t[:, 0], t[:, 1]) > d(t[:, 0], t[:, 2])
>>> t[swap, 1:] = t[swap, 2:0:-1]
>>> SOE(random_state=0).fit(t).score(t) > 0.95
True
"""
from tripletml.embedding._base import UnusedItemsWarning
from tripletml.embedding._select import DimensionChoice, choose_dimension
from tripletml.embedding.bilinear import BilinearEmbedding
from tripletml.embedding.soe import SOE
from tripletml.embedding.ste import STE
from tripletml.embedding.tste import TSTE

__all__ = ["SOE", "STE", "TSTE", "BilinearEmbedding", "choose_dimension", "DimensionChoice",
           "UnusedItemsWarning"]
