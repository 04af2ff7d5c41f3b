"""Command line, demo, reproductions registry and progress reporting."""
import io

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

import tripletml as tm
from tripletml.cli import main
from tripletml.demo import run_demo


def test_demo_table_has_learners_above_euclidean():
    from tripletml._registry import entries
    out = io.StringIO()
    rows = {r["learner"]: r for r in run_demo(out=out)}
    text = out.getvalue()
    shown = [e.demo_label for e in entries() if e.demo is not None]
    assert list(rows) == shown
    for name in ("Euclidean", "DotProduct", "OASIS", "SDCA", "COMET", "LORETA k=10", "PA k=10",
                 "PA v2 k=10", "GD k=10", "LowRankDML", "SML"):
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
    assert main(["fit", "oAsIs", str(tmp_path / "toy.svm"), "-o", str(model_path),
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
    with pytest.raises(SystemExit) as info:
        main(["fit", "bogus", "vehicle", "-o", str(tmp_path / "x.npz")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown learner 'bogus'" in err and "MatrixPerceptron" in err
    monkeypatch.setenv("TRIPLETML_DATA", str(tmp_path / "nowhere"))
    assert main(["fit", "oasis", "vehicle", "-o", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err
    assert "tripletml: error:" in err and "nowhere" in err and "fetch" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    # every error is one line, never a traceback; 2 = input, 1 = runtime
    cases = [
        (["fit", "oasis", "vehicle", "-o", "x.npz", "--param", "nope"], 2, "NAME=VALUE"),
        (["fit", "oasis", "vehicle", "-o", "x.npz", "--param", "bogus=1"], 2,
         "OASIS has no parameter"),
        (["evaluate", str(tmp_path / "missing.npz"), "vehicle"], 2, "no such file"),
        (["fetch", "vehicle", "--data-home", str(tmp_path / "h"), "--mirror",
          "http://127.0.0.1:9"], 1, "--mirror"),
    ]
    (tmp_path / "junk.npz").write_bytes(b"junk")
    cases.append((["evaluate", str(tmp_path / "junk.npz"), "vehicle"], 2, "not a readable"))
    for argv, code, msg in cases:
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert err.startswith("tripletml: error:") and msg in err, (argv, err)
        assert err.count("\n") == 1 and "Traceback" not in err


def test_fit_accepts_every_registry_learner_and_lists_them(capsys):
    from tripletml._registry import entries
    from tripletml.cli import build_parser
    with pytest.raises(SystemExit) as info:
        main(["fit", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    sub = [a for a in build_parser()._actions if a.dest == "command"][0].choices["fit"]
    learner = [a for a in sub._actions if a.dest == "learner"][0]
    for e in entries():
        assert e.name in out
        for spelling in (e.name, e.name.lower(), e.name.upper()):
            assert learner.type(spelling) == e.name


def test_no_argument_prints_help_and_version(capsys):
    import tripletml
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "usage: tripletml" in out and "fit" in out and "fetch" in out
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"tripletml {tripletml.__version__}"


def test_every_argument_has_help():
    """Walk the parser: every subcommand and every action has a help string."""
    import argparse

    from tripletml.cli import build_parser
    missing = []

    def walk(parser, where):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for name, sub in action.choices.items():
                    if not helps.get(name):
                        missing.append(f"{where} {name}")
                    walk(sub, f"{where} {name}")
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{where} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "tripletml")
    assert missing == []


def test_fit_a_multilabel_learner_from_a_libsvm_file(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4))
    Y = np.zeros((40, 3), dtype=int)
    Y[np.arange(40), np.arange(40) % 3] = 1
    Y[np.arange(40), (np.arange(40) + (X[:, 0] > 0)) % 3] = 1
    dump_svmlight_file(X, Y, str(tmp_path / "ml.svm"), zero_based=False, multilabel=True)
    assert main(["fit", "matrixperceptron", str(tmp_path / "ml.svm"), "-o",
                 str(tmp_path / "m.npz"), "--seed", "0"]) == 0
    m = tm.load_model(tmp_path / "m.npz")
    assert isinstance(m, tm.MatrixPerceptron) and m.n_labels_ == 3
    assert main(["evaluate", str(tmp_path / "m.npz"), str(tmp_path / "ml.svm")]) == 0
    assert "label_ranking_map" in capsys.readouterr().out



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
    tm.OASIS(n_triplets=50, max_iter=3, verbose=0).fit(X, y)
    assert capsys.readouterr().err == ""
    tm.OASIS(n_triplets=50, max_iter=3, verbose=1).fit(X, y)  # not a TTY: silent
    assert capsys.readouterr().err == ""
    tm.OASIS(n_triplets=50, max_iter=3, verbose=2).fit(X, y)  # forced
    assert "OASIS" in capsys.readouterr().err
    assert list(progress(range(3), verbose=0)) == [0, 1, 2]


@pytest.mark.data
def test_euclidean_reproduces_sdca_table2_eucl_row(data_home):
    from tripletml.reproduce.euclidean import PAPER_EUCL, euclidean_map
    for name in ("vehicle", "vowel", "svmguide4", "segment"):
        ours = np.mean([euclidean_map(name, s, data_home) for s in range(5)])
        assert abs(ours - PAPER_EUCL[name]) < 0.015, (name, ours)
