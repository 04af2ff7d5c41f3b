"""Command line, demo, reproductions registry and progress reporting."""
import io

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

import tripletml as tm
from tripletml.cli import main
from tripletml.demo import run_demo


def test_demo_table_has_learners_above_euclidean():
    out = io.StringIO()
    rows = {r["learner"]: r for r in run_demo(out=out)}
    text = out.getvalue()
    for name in ("Euclidean", "DotProduct", "OASIS", "SDCA", "COMET", "LORETA k=10", "PA k=10",
                 "PA v2 k=10", "GD k=10"):
        assert name in text and name in rows
    assert "mAP" in text and "P@10" in text and "fit s" in text
    assert rows["OASIS"]["map"] > rows["Euclidean"]["map"] + 0.05
    assert rows["SDCA"]["map"] > rows["Euclidean"]["map"] + 0.05
    assert rows["LORETA k=10"]["map"] > rows["Euclidean"]["map"] + 0.05
    assert rows["COMET"]["map"] > rows["Euclidean"]["map"] + 0.05


def test_fit_and_evaluate_a_libsvm_file(tmp_path, capsys):
    rng = np.random.default_rng(0)
    y = np.arange(60) % 3
    X = rng.normal(size=(60, 4)) + y[:, None]
    dump_svmlight_file(X, y, str(tmp_path / "toy.svm"), zero_based=False)
    model_path = tmp_path / "toy.npz"
    assert main(["fit", "oasis", str(tmp_path / "toy.svm"), "-o", str(model_path),
                 "--param", "n_triplets=500", "--param", "C=0.5", "--seed", "1"]) == 0
    m = tm.load_model(model_path)
    assert isinstance(m, tm.OASIS) and m.C == 0.5 and m.n_triplets == 500
    assert m.random_state == 1
    assert main(["evaluate", str(model_path), str(tmp_path / "toy.svm")]) == 0
    out = capsys.readouterr().out
    assert "map" in out and "knn_error" in out and "precision_at_5" in out
    # a test file whose last feature is all zero still has the model's width
    Xt = X.copy()
    Xt[:, -1] = 0.0
    dump_svmlight_file(Xt, y, str(tmp_path / "test.svm"), zero_based=False)
    assert main(["evaluate", str(model_path), str(tmp_path / "test.svm")]) == 0


def test_cli_errors(tmp_path, capsys, monkeypatch):
    with pytest.raises(SystemExit, match="unknown learner 'bogus'"):
        main(["fit", "bogus", "vehicle", "-o", str(tmp_path / "x.npz")])
    monkeypatch.setenv("TRIPLETML_DATA", str(tmp_path / "nowhere"))
    assert main(["fit", "oasis", "vehicle", "-o", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err
    assert "tripletml: error:" in err and "nowhere" in err and "fetch" in err


def test_reproduce_list(capsys):
    assert main(["reproduce", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("sdca-table2", "euclidean-baseline", "loreta-20ng", "loreta-multilabel",
                 "comet-sparse"):
        assert name in out
    with pytest.raises(ValueError, match="unknown reproduction"):
        tm.reproduce.run("nope", "/tmp/x")


def test_progress_bar_only_when_asked(capsys):
    from tripletml._progress import progress
    X = np.random.default_rng(0).normal(size=(30, 3))
    y = np.arange(30) % 3
    tm.OASIS(n_triplets=50, n_epochs=3, verbose=0).fit(X, y)
    assert capsys.readouterr().err == ""
    tm.OASIS(n_triplets=50, n_epochs=3, verbose=1).fit(X, y)  # not a TTY: silent
    assert capsys.readouterr().err == ""
    tm.OASIS(n_triplets=50, n_epochs=3, verbose=2).fit(X, y)  # forced
    assert "OASIS" in capsys.readouterr().err
    assert list(progress(range(3), verbose=0)) == [0, 1, 2]


@pytest.mark.data
def test_euclidean_reproduces_sdca_table2_eucl_row(data_home):
    from tripletml.reproduce.euclidean import PAPER_EUCL, euclidean_map
    for name in ("vehicle", "vowel", "svmguide4", "segment"):
        ours = np.mean([euclidean_map(name, s, data_home) for s in range(5)])
        assert abs(ours - PAPER_EUCL[name]) < 0.015, (name, ours)
