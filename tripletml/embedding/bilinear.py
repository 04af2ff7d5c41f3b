"""A bilinear similarity learner on one-hot item features as an ordinal
embedding of item ids."""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.base import LearnerBase
from tripletml.core.params import Interval
from tripletml.datasets.comparisons import check_item_triplets
from tripletml.embedding._base import check_item_counts, fit_items

__all__ = ["BilinearEmbedding"]

#: ``n_items`` may be at most ``2 x (items named) + 1000``
_UNNAMED_FACTOR = 2
_UNNAMED_SLACK = 1000


class BilinearEmbedding(LearnerBase):
    r"""Item similarities from triplets alone, learnt by a bilinear learner on
    one-hot item features.

    ``fit(triplets)`` fits ``clone(learner)`` on the identity matrix
    ``X = I_n`` (sparse CSR, row ``i`` = item ``i``) with the triplets as
    explicit ``(query, positive, negative)`` row indices.  A bilinear learner
    then learns a matrix ``W`` (``A B^T`` of rank ``k`` for LORETA) and the
    similarity of items ``i`` and ``j`` is simply ``S(i, j) = e_i^T W e_j =
    W[i, j]``: one free (low-rank) similarity per pair of items, the
    bilinear counterpart of :class:`SOE` / :class:`STE`'s free coordinates.

    ``predict`` and ``score`` answer a triplet ``(head, close, far)`` by the
    learner's similarity, ``S(head, close) > S(head, far)`` (the learner's own
    ``triplet_score``), *not* by Euclidean distances in ``embedding_``: W need
    not be symmetric or positive semi-definite, and the distance of the
    transformed rows orders the pairs differently.

    A planted ``d``-dimensional Euclidean configuration needs rank ``d + 2``
    (``-|x_i - x_j|^2 = -|x_i|^2 + 2 x_i^T x_j - |x_j|^2`` is a bilinear form
    of rank ``d + 2`` in the one-hot vectors), so ``n_components`` is a rank,
    not a Euclidean dimension.

    Parameters
    ----------
    learner : estimator, optional
        A tripletml bilinear triplet learner (``fit(X, triplets=...)``,
        ``triplet_score``); cloned in ``fit``.  Default
        ``LORETA(rank=n_components or 4, max_iter=20, preprocessing=None,
        random_state=random_state)`` (20 passes over the triplets; no
        preprocessing: the one-hot rows are kept as they are).
    n_components : int, optional
        The rank: passed to the learner as ``rank`` (a given learner without a
        ``rank`` parameter then raises ValueError).  None: the learner's own
        rank (4 for the default learner).
    n_items : int, optional
        Number of items; default ``max id + 1``.  Items no triplet names are
        allowed up to ``2 x (items named) + 1000`` items in all (above, a
        ValueError before anything is allocated): every step of the learner
        costs time in proportion to ``n_items`` on one-hot rows.
    random_state : int, Generator, RandomState or None
        Seeds the default learner (a given learner keeps its own).

    Attributes
    ----------
    learner_ : estimator
        The fitted learner (on ``X = I_{n_items_}``).
    embedding_ : ndarray of shape (n_items_, k') or None
        ``learner_.transform`` of the identity rows (for LORETA: the positive
        part of the symmetric part of W, ``k' <= rank``); None when the learner
        has no ``transform``.  For plotting and retrieval; ``predict`` does not
        use it.
    n_items_ : int
    n_features_in_ : int
        3 (a triplet).

    Notes
    -----
    :func:`tripletml.save_model` stores the fitted learner inside the model
    file (its class, parameters and fitted attributes; its arrays as
    ``learner_<name>``), and :func:`tripletml.load_model` checks it as a model
    of its own: a registered triplet learner, its parameters and arrays
    validated.  A given ``learner`` is stored as its class and parameters.

    Examples
    --------
    >>> from tripletml.embedding import BilinearEmbedding
    >>> emb = BilinearEmbedding(n_components=4, random_state=0)   # doctest: +SKIP
    >>> emb.fit(triplets).score(held_out)                          # doctest: +SKIP
    """

    _parameter_constraints = {
        "learner": ["no_validation"],
        "n_components": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "n_items": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "random_state": ["no_validation"],
    }
    #: the fitted arrays a model file may hold (``load_model``); the
    #: learner's own arrays are declared by its class
    _fitted_arrays = {"embedding_": ArraySpec(("n_items_", None), optional=True)}
    #: the parameter and the fitted attribute holding a registry model (of
    #: these kinds): a model file stores them as nested records
    _accepts_sparse = False
    _nested_models = {"learner": ("triplet",), "learner_": ("triplet",)}

    def __init__(self, learner=None, *, n_components=None, n_items=None, random_state=None):
        self.learner = learner
        self.n_components = n_components
        self.n_items = n_items
        self.random_state = random_state

    def _make_learner(self):
        if self.learner is None:
            # late: LORETA's module loads Numba (0.6 s), which the embeddings need not
            from tripletml.algorithms.loreta.estimator import LORETA
            return LORETA(rank=self.n_components or 4, max_iter=20, preprocessing=None,
                          random_state=self.random_state)
        if not (hasattr(self.learner, "fit") and hasattr(self.learner, "triplet_score")):
            raise TypeError("BilinearEmbedding: learner must be a tripletml triplet learner "
                            "with fit(X, triplets=...) and triplet_score, got "
                            f"{type(self.learner).__name__}.")
        est = clone(self.learner)
        if self.n_components is not None:
            if "rank" not in est.get_params(deep=False):
                raise ValueError(f"BilinearEmbedding: n_components={self.n_components} is "
                                 f"passed as rank, but {type(est).__name__} has no rank "
                                 "parameter; leave n_components=None.")
            est.set_params(rank=self.n_components)
        return est

    def fit(self, triplets, y=None):
        """Fit the learner on one-hot item rows with these triplets.

        Parameters
        ----------
        triplets : array-like of int, shape (m, 3)
            ``(head, close, far)`` rows of item ids (see :class:`SOE`).
        y : None
            Ignored.

        Returns
        -------
        self

        Warns
        -----
        UnusedItemsWarning
            (a ``UserWarning``) When some items appear in no triplet: their
            similarities stay at the learner's initial values.
        """
        self._reset_fitted()
        self._validate_params()
        # every step of the learner costs O(n_items x rank) on one-hot rows
        # (400 triplets and 10**6 items: 46 s), so few items may go unnamed
        t, n, _ = fit_items(self, triplets, y, "their similarities stay at the learner's "
                            "initial values.", factor=_UNNAMED_FACTOR, slack=_UNNAMED_SLACK,
                            why="every step of the learner costs time in proportion to "
                                "n_items on one-hot rows, and items in no triplet learn "
                                "nothing")
        learner = self._make_learner()
        X = sp.identity(n, format="csr", dtype=np.float64)
        learner.fit(X, triplets=t)
        self.learner_ = learner
        self.embedding_ = learner.transform(X) if hasattr(learner, "transform") else None
        self.n_items_ = n
        self._set_fitted(3)
        return self

    def _identity(self):
        return sp.identity(self.n_items_, format="csr", dtype=np.float64)

    def similarity(self) -> np.ndarray:
        """The learnt similarity matrix ``S[i, j] = S(item i, item j)``,
        shape ``(n_items_, n_items_)`` (rows: heads)."""
        check_is_fitted(self, "learner_")
        return self.learner_.similarity(self._identity())

    def decision_function(self, triplets) -> np.ndarray:
        """``S(head, close) - S(head, far)`` per triplet (positive: the model
        agrees with the answer)."""
        check_is_fitted(self, "learner_")
        t = check_item_triplets(triplets, self.n_items_, who=f"{type(self).__name__}: triplets")
        return self.learner_.triplet_score(self._identity(), t)

    def predict(self, triplets) -> np.ndarray:
        """+1 where ``S(head, close) > S(head, far)`` (the learner's
        similarity), else -1 (ties included).

        Returns
        -------
        ndarray of int8, shape (m,)
        """
        return np.where(self.decision_function(triplets) > 0, 1, -1).astype(np.int8)

    def score(self, triplets, y=None) -> float:
        """Triplet accuracy: the fraction of ``triplets`` predicted +1."""
        return float(np.mean(self.predict(triplets) == 1))

    # ------------------------------------------------------------ persistence
    def _saved_form(self) -> "BilinearEmbedding":
        """The model as the file holds it: ``embedding_`` left out when None
        (a learner without ``transform``)."""
        if self.__dict__.get("embedding_", 0) is not None:
            return self
        flat = type(self).__new__(type(self))
        flat.__dict__.update(self.__dict__)
        del flat.__dict__["embedding_"]
        return flat

    def _check_loaded(self) -> None:
        """Consistency of a model built by ``load_model`` (the learner was
        checked as a model of its own): ``n_features_in_ == 3``, ``n_items_``
        a positive int agreeing with ``n_items``, ``learner_`` of the class
        ``fit`` makes, fitted on ``n_items_`` one-hot columns (at rank
        ``n_components`` when set), ``embedding_`` there exactly when the
        learner has ``transform``."""
        check_item_counts(self)
        n = self.n_items_
        self._validate_params()
        learner = getattr(self, "learner_", None)
        want = type(self._make_learner())
        if type(learner) is not want:
            raise ValueError(f"learner_ is a {type(learner).__name__}, expected {want.__name__}")
        if learner.n_features_in_ != n:
            raise ValueError(f"learner_ was fitted on {learner.n_features_in_} features, not "
                             f"the n_items_={n} one-hot columns")
        if self.n_components is not None and learner.rank != self.n_components:
            raise ValueError(f"learner_ has rank={learner.rank}, not "
                             f"n_components={self.n_components}")
        if hasattr(learner, "transform") != ("embedding_" in self.__dict__):
            raise ValueError("embedding_ must be stored exactly when the learner has transform")
        if not hasattr(learner, "transform"):
            self.embedding_ = None
        super()._check_loaded()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = True
        return tags
