"""The plot module draws exactly the numbers it is given (checked against
the artists' data), refuses bad input clearly, and writes readable PNGs."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from sklearn.datasets import load_iris  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402

import tripletml as tm  # noqa: E402
from tripletml.metrics import evaluate_retrieval  # noqa: E402
from tripletml.plot import (plot_embedding, plot_history, plot_matrix,  # noqa: E402
                            plot_precision_at_k)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_history_curves_are_the_recorded_values():
    hist = {"step": [1, 2, 3, 4], "seconds": [0.1, 0.2, 0.3, 0.4],
            "objective": [10.0, 5.0, 1.0, 0.05], "rank": [1, 2, None, 3], "note": ["a"] * 4}
    fig = plot_history(hist)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["objective", "rank"]                   # "note" is not numeric
    line = fig.axes[0].lines[0]
    assert np.array_equal(line.get_xdata(), [1, 2, 3, 4])
    assert np.array_equal(line.get_ydata(), [10.0, 5.0, 1.0, 0.05])
    assert fig.axes[0].get_yscale() == "log"                 # spans > 2 decades
    r = fig.axes[1].lines[0]
    assert np.array_equal(r.get_xdata(), [1, 2, 4]) and np.array_equal(r.get_ydata(), [1, 2, 3])
    fig.canvas.draw()                                        # a count gets whole-number ticks
    assert all(float(t).is_integer() for t in fig.axes[1].get_yticks())
    fig = plot_history(hist, ["objective"], x="seconds")
    assert np.allclose(fig.axes[0].lines[0].get_xdata(), [0.1, 0.2, 0.3, 0.4])
    with pytest.raises(ValueError, match="no column"):
        plot_history(hist, ["gap"])
    # a column asked for by name that holds no number is refused, not an empty panel
    with pytest.raises(ValueError, match=r"\['empty'\] hold no number"):
        plot_history({**hist, "empty": [None] * 4}, ["objective", "empty"])
    with pytest.raises(ValueError, match="x must be"):
        plot_history(hist, x="epoch")
    with pytest.raises(TypeError, match="plot_history"):
        plot_history([1, 2, 3])


def test_precision_curve_equals_evaluate_retrieval():
    X, y = load_iris(return_X_y=True)
    models = {"euclidean": tm.Euclidean().fit(X), "dot": tm.DotProduct().fit(X)}
    fig = plot_precision_at_k(models, X, y, ks=(1, 5, 10))
    ax = fig.axes[0]
    for line, m in zip(ax.lines, models.values()):
        ref = evaluate_retrieval(m, X, y, k=(1, 5, 10))
        assert np.allclose(line.get_ydata(), [ref[f"precision_at_{k}"] for k in (1, 5, 10)])
        assert f"{ref['map']:.3f}" in line.get_label()
    with pytest.raises(TypeError, match="non-empty mapping"):
        plot_precision_at_k({}, X, y)


def test_embedding_is_the_pca_of_transform():
    X, y = load_iris(return_X_y=True)
    m = tm.Euclidean().fit(X)
    fig = plot_embedding(m, X, y)
    Z = PCA(n_components=2).fit_transform(m.transform(X))
    pts = np.vstack([c.get_offsets() for c in fig.axes[0].collections])
    order = np.concatenate([np.flatnonzero(y == c) for c in np.unique(y)])
    assert np.allclose(pts, Z[order])
    with pytest.raises(TypeError, match="has no transform"):
        plot_embedding(object(), X, y)        # every learner transforms (issue 29)
    with pytest.raises(ValueError, match="method"):
        plot_embedding(m, X, y, method="umap")


def test_matrix_heat_map_and_spectrum():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(6, 6))
    fig = plot_matrix(A)
    assert np.array_equal(fig.axes[0].images[0].get_array(), A)
    spec = fig.axes[1].lines[0].get_ydata()
    assert np.allclose(spec, np.sort(np.linalg.eigvalsh(0.5 * (A + A.T)))[::-1])
    fig = plot_matrix(rng.normal(size=(3, 5)))
    assert fig.axes[1].get_title() == "singular values"
    X, _ = load_iris(return_X_y=True)
    fig = plot_matrix(tm.Euclidean().fit(X))
    assert np.array_equal(fig.axes[0].images[0].get_array(), np.eye(4))
    with pytest.raises(ValueError, match="2-D matrix"):
        plot_matrix(np.zeros(3))


def test_pictures_save(tmp_path):
    X, y = load_iris(return_X_y=True)
    m = tm.Euclidean().fit(X)
    for i, fig in enumerate([plot_matrix(m), plot_embedding(m, X, y),
                             plot_precision_at_k({"e": m}, X, y)]):
        p = tmp_path / f"{i}.png"
        fig.savefig(p, dpi=60)
        assert p.stat().st_size > 1000


def test_embedding_legend_sits_beside_the_points():
    X, y = load_iris(return_X_y=True)
    fig = plot_embedding(tm.Euclidean().fit(X), X, y)
    fig.canvas.draw()
    ax = fig.axes[0]
    leg = ax.get_legend().get_window_extent()
    assert leg.x0 >= ax.get_window_extent().x1 - 1      # right of the axes, not over them
