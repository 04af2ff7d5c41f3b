"""Pictures of what was learned (matplotlib).

* :func:`plot_history` -- training curves from a model's ``history_``
  (objective, gap, loss, rank, ... against step or seconds).
* :func:`plot_precision_at_k` -- precision@k curves of several models on one
  figure, computed by :func:`tripletml.metrics.evaluate_retrieval` (chunked,
  never the n x n matrix).
* :func:`plot_embedding` -- a 2-D view of ``transform`` output (PCA or t-SNE)
  colored by class.
* :func:`plot_matrix` -- the learned d x d matrix as a heat map beside its
  spectrum.

Every function takes an optional ``ax`` (or ``axes``) and returns the
matplotlib ``Figure``; nothing is shown or saved, so the caller decides
(``fig.savefig(...)``).  matplotlib is imported when a function is called.
"""
from __future__ import annotations

import numbers
from typing import Any, Mapping, Sequence

import numpy as np

from tripletml.metrics import evaluate_retrieval

__all__ = ["plot_history", "plot_precision_at_k", "plot_embedding", "plot_matrix"]

#: history_ columns that are bookkeeping, not curves
_NOT_CURVES = {"step", "seconds", "train_seconds"}


def _plt():
    import matplotlib.pyplot as plt

    return plt


def _history_of(model_or_history: Any) -> dict:
    hist = getattr(model_or_history, "history_", model_or_history)
    if not isinstance(hist, Mapping) or "step" not in hist:
        raise TypeError("plot_history: expected a fitted tripletml model or its history_ "
                        f"dict (with a 'step' column), got {type(model_or_history).__name__}.")
    return hist


def _numeric(col: Sequence) -> np.ndarray:
    return np.array([np.nan if v is None or not isinstance(v, numbers.Real) else float(v)
                     for v in col], dtype=float)


def plot_history(model_or_history: Any, keys: Sequence[str] | None = None, *,
                 x: str = "step", axes=None, title: str | None = None):
    """Training curves from ``history_``, one panel per recorded quantity.

    Parameters
    ----------
    model_or_history : fitted model or dict
        A tripletml model (its ``history_`` is used) or a ``history_`` dict.
    keys : sequence of str, optional
        Columns to draw (default: every numeric column except ``step`` and
        the clocks).
    x : {"step", "seconds"}, default="step"
        The horizontal axis.
    axes : array of matplotlib Axes, optional
        One per key; a new figure is made when omitted.
    title : str, optional
        Figure title (default: the model's class name).

    Returns
    -------
    matplotlib.figure.Figure
    """
    hist = _history_of(model_or_history)
    if x not in ("step", "seconds"):
        raise ValueError(f"plot_history: x must be 'step' or 'seconds', got {x!r}.")
    if keys is None:
        keys = [k for k in hist if k not in _NOT_CURVES
                and np.isfinite(_numeric(hist[k])).any()]
    else:
        missing = [k for k in keys if k not in hist]
        if missing:
            raise ValueError(f"plot_history: history_ has no column(s) {missing}; it has "
                             f"{sorted(hist)}.")
        empty = [k for k in keys if not np.isfinite(_numeric(hist[k])).any()]
        if empty:
            raise ValueError(f"plot_history: history_ column(s) {empty} hold no number (None "
                             "or NaN at every step); nothing to draw.")
    if not keys:
        raise ValueError("plot_history: history_ holds no numeric curve to draw.")
    plt = _plt()
    if axes is None:
        fig, axes = plt.subplots(1, len(keys), figsize=(3.6 * len(keys), 3.0),
                                 squeeze=False, layout="constrained")
        axes = axes[0]
    else:
        axes = np.atleast_1d(axes)
        if len(axes) != len(keys):
            raise ValueError(f"plot_history: {len(keys)} keys need {len(keys)} axes, got "
                             f"{len(axes)}.")
        fig = axes[0].figure
    xs = _numeric(hist[x])
    for ax, key in zip(axes, keys):
        ys = _numeric(hist[key])
        ok = np.isfinite(xs) & np.isfinite(ys)
        ax.plot(xs[ok], ys[ok], marker="." if ok.sum() < 50 else None, lw=1.2)
        pos = ys[ok][ys[ok] > 0]
        if pos.size == ok.sum() and pos.size > 1 and pos.max() / pos.min() > 100:
            ax.set_yscale("log")
        if ok.any() and np.all(ys[ok] == np.round(ys[ok])):   # counts (rank): whole ticks
            from matplotlib.ticker import MaxNLocator
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("seconds" if x == "seconds" else "step")
        ax.set_title(key.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.locator_params(axis="x", nbins=5)
    if title is None and not isinstance(model_or_history, Mapping):
        title = type(model_or_history).__name__
    if title:
        fig.suptitle(title)
    return fig


def plot_precision_at_k(models: Mapping[str, Any], X_query, y_query, X_db=None, y_db=None,
                        *, ks: Sequence[int] = (1, 2, 5, 10, 20), ax=None,
                        title: str = "precision@k"):
    """Precision@k of several fitted models on one figure.

    Parameters
    ----------
    models : mapping name -> fitted model
    X_query, y_query, X_db, y_db
        As :func:`tripletml.metrics.evaluate_retrieval` (``X_db=None``:
        leave-one-out within the queries).
    ks : sequence of int
        The cut-offs (x axis).
    ax : matplotlib Axes, optional
    title : str

    Returns
    -------
    matplotlib.figure.Figure
    """

    if not isinstance(models, Mapping) or not models:
        raise TypeError("plot_precision_at_k: models must be a non-empty mapping name -> "
                        "fitted model.")
    ks = sorted({int(k) for k in ks})
    plt = _plt()
    fig, ax = (plt.subplots(figsize=(5, 3.6), layout="constrained") if ax is None
               else (ax.figure, ax))
    for name, model in models.items():
        r = evaluate_retrieval(model, X_query, y_query, X_db, y_db, k=ks)
        ax.plot(ks, [r[f"precision_at_{k}"] for k in ks], marker="o",
                label=f"{name} (mAP {r['map']:.3f})")
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k (retrieved items)")
    ax.set_ylabel("precision@k")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def plot_embedding(model: Any, X, y, *, method: str = "pca", ax=None,
                   random_state: int | None = 0, title: str | None = None):
    """A 2-D picture of ``model.transform(X)`` colored by class.

    Parameters
    ----------
    model : fitted model with ``transform`` (every tripletml learner)
    X : array-like or sparse matrix
    y : array-like of labels
    method : {"pca", "tsne"}, default="pca"
        How the embedding is brought to two dimensions (scikit-learn's PCA
        or t-SNE); an embedding of dimension <= 2 is drawn as it is.
    ax : matplotlib Axes, optional
    random_state : int or None
        For t-SNE.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    if not hasattr(model, "transform"):
        raise TypeError(f"plot_embedding: {type(model).__name__} has no transform; give a "
                        "fitted tripletml learner (every learner embeds its input).")
    if method not in ("pca", "tsne"):
        raise ValueError(f"plot_embedding: method must be 'pca' or 'tsne', got {method!r}.")
    Z = np.asarray(model.transform(X), dtype=float)
    y = np.asarray(y)
    if y.shape[0] != Z.shape[0]:
        raise ValueError(f"plot_embedding: y has {y.shape[0]} labels for {Z.shape[0]} rows.")
    if Z.shape[1] > 2:
        if method == "pca":
            from sklearn.decomposition import PCA
            Z = PCA(n_components=2).fit_transform(Z)
        else:
            from sklearn.manifold import TSNE
            Z = TSNE(n_components=2, init="pca", random_state=random_state,
                     perplexity=min(30.0, max(2.0, (Z.shape[0] - 1) / 3))).fit_transform(Z)
    elif Z.shape[1] < 2:
        Z = np.hstack([Z, np.zeros((Z.shape[0], 2 - Z.shape[1]))])
    plt = _plt()
    fig, ax = (plt.subplots(figsize=(5.2, 4.0), layout="constrained") if ax is None
               else (ax.figure, ax))
    classes = np.unique(y)
    cmap = plt.get_cmap("tab10" if len(classes) <= 10 else "tab20")
    for i, c in enumerate(classes):
        sel = y == c
        ax.scatter(Z[sel, 0], Z[sel, 1], s=8, color=cmap(i % cmap.N), label=str(c), alpha=0.8)
    if len(classes) <= 20:          # beside the axes, never over the points
        ax.legend(fontsize="x-small", markerscale=2, title="class", loc="center left",
                  bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.set_xlabel(f"{method.upper()} 1")
    ax.set_ylabel(f"{method.upper()} 2")
    ax.set_title(title or f"{type(model).__name__}: transform(X)")
    return fig


def plot_matrix(model_or_matrix: Any, *, axes=None, title: str | None = None,
                max_size: int = 2000):
    """The learned matrix as a heat map (symmetric color scale) beside its
    spectrum (eigenvalues of the symmetric part, or singular values when
    the matrix is not square).

    Parameters
    ----------
    model_or_matrix : fitted model or ndarray
        A bilinear learner (``get_bilinear_matrix()``), a Mahalanobis learner
        (``get_mahalanobis_matrix()``) or a 2-D array.
    axes : pair of matplotlib Axes, optional
    title : str, optional
    max_size : int, default=2000
        Refuse larger matrices (a d x d heat map of more is unreadable and
        its eigen-decomposition slow).

    Returns
    -------
    matplotlib.figure.Figure
    """
    M = model_or_matrix
    if hasattr(M, "get_mahalanobis_matrix"):
        M, kind = M.get_mahalanobis_matrix(), "M"
    elif hasattr(M, "get_bilinear_matrix"):
        M, kind = M.get_bilinear_matrix(), "W"
    else:
        kind = "matrix"
    M = np.asarray(M, dtype=float)
    if M.ndim != 2 or max(M.shape) > max_size:
        raise ValueError(f"plot_matrix: expected a 2-D matrix of at most {max_size} rows and "
                         f"columns, got shape {M.shape}.")
    if M.shape[0] == M.shape[1]:
        spec = np.sort(np.linalg.eigvalsh(0.5 * (M + M.T)))[::-1]
        spec_name = "eigenvalues (symmetric part)"
    else:
        spec = np.linalg.svd(M, compute_uv=False)
        spec_name = "singular values"
    plt = _plt()
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.6), layout="constrained",
                                 gridspec_kw={"width_ratios": [1.1, 1]})
    else:
        fig = axes[0].figure
    lim = float(np.max(np.abs(M))) or 1.0
    im = axes[0].imshow(M, cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
    fig.colorbar(im, ax=axes[0], shrink=0.85)
    axes[0].set_title(f"{kind} ({M.shape[0]} x {M.shape[1]})")
    axes[0].set_xlabel("feature")
    axes[0].set_ylabel("feature")
    idx = np.arange(1, spec.size + 1)
    axes[1].plot(idx, spec, marker="." if spec.size <= 100 else None)
    axes[1].axhline(0.0, color="0.5", lw=0.8)
    axes[1].set_xlabel("index")
    axes[1].set_ylabel("value")
    axes[1].set_title(spec_name)
    axes[1].grid(alpha=0.3)
    if title is None and not isinstance(model_or_matrix, np.ndarray):
        title = type(model_or_matrix).__name__
    if title:
        fig.suptitle(title)
    return fig
