"""Command line, demo, reproductions registry and progress reporting."""
import io

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

import tripletml as tm
from tripletml.cli import main
from tripletml.cli.demo import DEMO_LEARNERS, run_demo


#: the demo rows whose mAP must beat Euclidean's by 0.05
_DEMO_ABOVE_EUCLIDEAN = ("OASIS", "SDCA", "LORETA k=10", "COMET")


@pytest.fixture(scope="module")
def euclidean_demo_row():
    return run_demo(out=io.StringIO(), learners=[DEMO_LEARNERS[0]])[0]


def test_demo_table_lists_every_demo_learner():
    """The table's rows are the registry's demo entries, in order (each row is
    fitted by test_demo_row below: one learner per test, so that no test runs
    the whole half-minute demo)."""
    from tripletml.registry import entries
    shown = [e.demo_label for e in entries() if e.demo is not None]
    assert [label for label, _ in DEMO_LEARNERS] == shown
    for name in ("Euclidean", "DotProduct", "OASIS", "SDCA", "COMET", "LORETA k=10", "PA k=10",
                 "PA v2 k=10", "GD k=10", "LowRankDML", "SML"):
        assert name in shown
    out = io.StringIO()
    rows = run_demo(out=out, learners=DEMO_LEARNERS[:2])
    text = out.getvalue()
    assert [r["learner"] for r in rows] == shown[:2]
    assert "mAP" in text and "P@10" in text and "fit s" in text
    assert all(label in text for label in shown[:2])


@pytest.mark.parametrize("index", range(2, len(DEMO_LEARNERS)),
                         ids=[label for label, _ in DEMO_LEARNERS[2:]])
def test_demo_row(index, euclidean_demo_row):
    """Every demo learner fits at its demo settings and prints its row; the
    four of _DEMO_ABOVE_EUCLIDEAN beat Euclidean's mAP by 0.05."""
    label, factory = DEMO_LEARNERS[index]
    out = io.StringIO()
    (row,) = run_demo(out=out, learners=[(label, factory)])
    assert row["learner"] == label and label in out.getvalue()
    assert 0.0 < row["map"] <= 1.0 and 0.0 <= row["precision_at_10"] <= 1.0
    if label in _DEMO_ABOVE_EUCLIDEAN:
        assert row["map"] > euclidean_demo_row["map"] + 0.05


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
    # a test file whose last feature is all zero: LIBSVM does not record the width,
    Xt = X.copy()
    Xt[:, -1] = 0.0
    dump_svmlight_file(Xt, y, str(tmp_path / "test.svm"), zero_based=False)
    # so it is refused unless --pad-features says the missing features are zero
    assert main(["evaluate", str(model_path), str(tmp_path / "test.svm")]) == 2
    assert "--pad-features" in capsys.readouterr().err
    assert main(["evaluate", str(model_path), str(tmp_path / "test.svm"),
                 "--pad-features"]) == 0


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
    from tripletml.registry import FEATURE_KINDS, entries
    from tripletml.cli import build_parser
    with pytest.raises(SystemExit) as info:
        main(["fit", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    sub = [a for a in build_parser()._actions if a.dest == "command"][0].choices["fit"]
    learner = [a for a in sub._actions if a.dest == "learner"][0]
    for e in entries(FEATURE_KINDS):
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



def _toy_file(path, n=60, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, 4)) + y[:, None]
    dump_svmlight_file(X, y, str(path), zero_based=False)
    return X, y


def test_every_command_takes_verbose():
    import argparse

    from tripletml.cli import build_parser

    def leaves(parser, path):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield path, parser
            return
        for name, sub in subs[0].choices.items():
            yield from leaves(sub, path + (name,))

    top = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)][0]
    assert set(top.choices) == {"demo", "reproduce", "fit", "evaluate", "datasets", "fetch",
                                "index", "search"}
    found = list(leaves(build_parser(), ()))
    assert ("index", "build") in [p for p, _ in found]
    for path, sub in found:
        flags = {o for a in sub._actions for o in a.option_strings}
        assert {"-v", "--verbose"} <= flags, " ".join(path)
        v = [a for a in sub._actions if "-v" in a.option_strings][0]
        assert isinstance(v, argparse._CountAction) and v.default == 0, " ".join(path)


def test_datasets_shows_the_data_home_and_what_is_present(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRIPLETML_DATA", str(tmp_path))
    (tmp_path / "vehicle").mkdir()
    (tmp_path / "vehicle" / "vehicle.scale").write_text("1 1:0.5\n")  # the plain original
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert f"data home: {tmp_path} (from the TRIPLETML_DATA environment variable)" in out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[2:-1]}
    assert rows["vehicle"] == "yes" and rows["digits"] == "bundled"
    assert rows["vowel"] == "no" and rows["letter"] == "no"
    assert "3 of 14 available" not in out and "4 of" in out   # digits, iris, wine, vehicle
    other = tmp_path / "elsewhere"
    assert main(["datasets", "--data-home", str(other), "-v"]) == 0
    out = capsys.readouterr().out
    assert f"data home: {other} (does not exist) (from --data-home)" in out
    assert "missing" in out and str(other / "vehicle" / "vehicle.scale.gz") in out


def test_missing_file_is_file_not_found_not_unknown_data_set(tmp_path, capsys):
    _toy_file(tmp_path / "toy.svm")
    for argv in (["fit", "oasis", str(tmp_path / "nope.svm"), "-o", str(tmp_path / "m.npz")],
                 ["fit", "oasis", "nope.svm", "-o", str(tmp_path / "m.npz")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "file not found: " in err and "nope.svm" in err
        assert "unknown data set" not in err and err.count("\n") == 1
    assert main(["fit", "oasis", "vehcle", "-o", str(tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err
    assert "unknown data set 'vehcle'" in err and "vehicle" in err
    assert main(["fit", "oasis", str(tmp_path), "-o", str(tmp_path / "m.npz")]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_evaluate_says_what_it_scores_on(tmp_path, capsys):
    X, y = _toy_file(tmp_path / "toy.svm")
    data, model = str(tmp_path / "toy.svm"), str(tmp_path / "m.npz")
    fit = ["fit", "oasis", data, "-o", model, "--param", "n_triplets=300"]
    # fitted on everything: evaluate says it is in-sample and how to hold out
    assert main(fit + ["--seed", "0"]) == 0
    capsys.readouterr()
    assert main(["evaluate", model, data]) == 0
    err = capsys.readouterr().err
    assert "tripletml: note: scoring on the data the model was fitted on" in err
    assert "--test-size 0.3 --seed S" in err
    assert main(["evaluate", model, data, "--test-size", "0.3", "--seed", "0"]) == 0
    assert "seen in training" in capsys.readouterr().err
    # fitted on a held-out split: the same options score on the 18 held-out rows
    assert main(fit + ["--seed", "4", "--test-size", "0.3", "--force"]) == 0
    m = tm.load_model(model)
    assert m.training_data_["n_samples"] == 42 and m.training_data_["test_size"] == 0.3
    assert m.training_data_["seed"] == 4
    capsys.readouterr()
    assert main(["evaluate", model, data, "--test-size", "0.3", "--seed", "4"]) == 0
    cap = capsys.readouterr()
    assert "held-out part of" in cap.err and "(18 rows) that the model was not fitted on" \
        in cap.err
    heldout_map = float(cap.out.split()[1])
    assert main(["evaluate", model, data]) == 0
    cap = capsys.readouterr()
    assert "includes the 42 rows the model was fitted on" in cap.err
    assert "--test-size 0.3 --seed 4" in cap.err
    assert float(cap.out.split()[1]) != heldout_map      # a different set of queries
    assert main(["evaluate", model, data, "--test-size", "0.3", "--seed", "5"]) == 0
    assert "not the one the model was fitted with" in capsys.readouterr().err
    # a model saved from Python carries no record
    tm.OASIS(n_triplets=300, random_state=0).fit(X, y).save(tmp_path / "py.npz")
    assert main(["evaluate", str(tmp_path / "py.npz"), data]) == 0
    err = capsys.readouterr().err
    assert f"scoring on {data}; pass --test-size 0.3 --seed S for a held-out split" in err
    # bad fractions are usage errors
    for bad in ("0", "1", "x"):
        with pytest.raises(SystemExit) as info:
            main(["evaluate", model, data, "--test-size", bad])
        assert info.value.code == 2
    capsys.readouterr()


def test_fingerprint_dense_and_sparse_agree():
    import scipy.sparse as sp

    from tripletml.cli import fingerprint
    X = np.random.default_rng(0).normal(size=(5, 3))
    X[0, 1] = 0.0
    assert fingerprint(X) == fingerprint(sp.csr_matrix(X)) == fingerprint(X.tolist())
    Y = X.copy()
    Y[4, 2] += 1e-12
    assert fingerprint(Y) != fingerprint(X)
    assert fingerprint(X[:4]) != fingerprint(X)


def test_fit_verbose_bar_advances_within_one_pass(tmp_path, capsys, monkeypatch):
    """``fit -v`` forces the bar (verbose=2) and a single pass of an online
    learner updates it once per block, not once per pass (the training
    driver's bar)."""
    import tripletml.engine.driver as driver

    calls = []

    class Bar:
        def __init__(self, total, verbose, desc, unit):
            calls.append({"total": total, "verbose": verbose, "updates": []})

        def update(self, k):
            calls[-1]["updates"].append(k)

        def close(self):
            pass

    monkeypatch.setattr(driver, "progress_bar",
                        lambda total, *, verbose=0, desc=None, unit="it": Bar(total, verbose,
                                                                             desc, unit))
    _toy_file(tmp_path / "toy.svm")
    for learner in ("loreta", "oasis"):
        calls.clear()
        assert main(["fit", learner, str(tmp_path / "toy.svm"), "-o",
                     str(tmp_path / f"{learner}.npz"), "--param", "n_triplets=5000", "--param", "max_iter=1", "--seed", "0",
                     "-v"] + (["--param", "rank=2"] if learner == "loreta" else [])) == 0
        assert len(calls) == 1 and calls[0]["verbose"] == 2 and calls[0]["total"] == 5000
        assert len(calls[0]["updates"]) >= 5 and sum(calls[0]["updates"]) == 5000, calls
    err = capsys.readouterr().err
    assert "fitting OASIS on" in err and "stopped by max_iter" in err


def test_reproduce_list(capsys):
    assert main(["reproduce", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("sdca-table2", "euclidean-baseline", "loreta-20ng", "loreta-multilabel",
                 "comet-sparse"):
        assert name in out
    with pytest.raises(ValueError, match="unknown reproduction"):
        tm.reproduce.run("nope", "/tmp/x")


def test_progress_bar_only_when_asked(capsys):
    from tripletml.engine.progress import progress
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


def test_param_values_parse_as_json_or_infinity():
    from tripletml.cli import _parse_params
    got = _parse_params(["gamma=inf", "g2=-inf", "bounds=[1.0, 30.0]", "n_triplets=500",
                         "preprocessing=whiten", "tol=null", "name=information"])
    assert got == {"gamma": float("inf"), "g2": float("-inf"), "bounds": [1.0, 30.0],
                   "n_triplets": 500, "preprocessing": "whiten", "tol": None,
                   "name": "information"}


# ---------------------------------------------------------------------------
# the command line never destroys data (issue 26, item 8)
# ---------------------------------------------------------------------------
def _toy_files(tmp_path, n=80, d=5):
    rng = np.random.default_rng(7)
    y = np.arange(n) % 3
    X = np.abs(rng.normal(size=(n, d)) + y[:, None]) + 0.1     # every feature present
    dump_svmlight_file(X, y, str(tmp_path / "db.svm"), zero_based=False)
    dump_svmlight_file(X[:6], y[:6], str(tmp_path / "q.svm"), zero_based=False)
    return X, y


_FIT = ["fit", "oasis", "--param", "n_triplets=200", "--seed", "0"]


def test_fit_refuses_to_overwrite_a_file_that_is_not_a_model(tmp_path, capsys):
    _toy_files(tmp_path)
    data = str(tmp_path / "db.svm")
    # an input data file whose name ends in .npz, a text file (-o x.txt writes
    # x.txt.npz), an archive of another program, a zip declaring another format
    important = tmp_path / "important.txt.npz"
    np.savez(important, X=np.arange(5))
    (tmp_path / "notes.txt.npz").write_text("keep me")
    import zipfile
    with zipfile.ZipFile(tmp_path / "fake.npz", "w") as zf:
        buf = io.BytesIO()
        np.save(buf, np.frombuffer(b'{"format": "other"}', dtype=np.uint8))
        zf.writestr("__meta__.npy", buf.getvalue())
    (tmp_path / "folder.npz").mkdir()
    before = {p: p.read_bytes() for p in (important, tmp_path / "notes.txt.npz",
                                          tmp_path / "fake.npz")}
    for out in (important, tmp_path / "notes.txt", tmp_path / "fake.npz",
                tmp_path / "folder.npz"):
        assert main(_FIT[:2] + [data, "-o", str(out)] + _FIT[2:] + ["--force"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tripletml: error:") and "refusing to overwrite" in err, err
    for p, content in before.items():
        assert p.read_bytes() == content
    assert (tmp_path / "folder.npz").is_dir()


def test_model_recognition_reads_only_a_small_bounded_member(tmp_path):
    import zipfile

    from tripletml.cli.output import is_model_file

    X, y = np.random.default_rng(0).normal(size=(30, 3)), np.arange(30) % 3
    tm.KISSME().fit(X, y).save(tmp_path / "m.npz")
    assert is_model_file(tmp_path / "m.npz")
    # a header declaring 10**12 bytes in a tiny member is not allocated
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w") as zf:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "|u1", "fortran_order": False, "shape": (10**12,)})
        zf.writestr("__meta__.npy", header.getvalue() + b'{"format": "tripletml-model"}')
    assert not is_model_file(tmp_path / "bomb.npz")
    for name, data in (("text.npz", b"hello"), ("empty.npz", b"")):
        (tmp_path / name).write_bytes(data)
        assert not is_model_file(tmp_path / name)
    assert not is_model_file(tmp_path)


def test_fit_replaces_a_model_only_with_force(tmp_path, capsys):
    _toy_files(tmp_path)
    data, model = str(tmp_path / "db.svm"), tmp_path / "m.npz"
    assert main(_FIT[:2] + [data, "-o", str(model)] + _FIT[2:]) == 0
    first = model.read_bytes()
    assert main(_FIT[:2] + [data, "-o", str(model), "--param", "C=0.5"] + _FIT[2:]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert model.read_bytes() == first
    assert main(_FIT[:2] + [data, "-o", str(model), "--param", "C=0.5", "--force"]
                + _FIT[2:]) == 0
    assert tm.load_model(model).C == 0.5


def _index(tmp_path, capsys):
    _toy_files(tmp_path)
    model, index = tmp_path / "m.npz", tmp_path / "idx"
    assert main(_FIT[:2] + [str(tmp_path / "db.svm"), "-o", str(model)] + _FIT[2:]) == 0
    assert main(["index", "build", str(model), str(tmp_path / "db.svm"), "-o", str(index),
                 "--backend", "numpy"]) == 0
    capsys.readouterr()
    return model, index


def test_index_build_and_search_outputs_are_not_overwritten(tmp_path, capsys):
    model, index = _index(tmp_path, capsys)
    db, q = str(tmp_path / "db.svm"), str(tmp_path / "q.svm")
    build = ["index", "build", str(model), db, "--backend", "numpy", "-o"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "photo.jpg").write_bytes(b"\xff\xd8")
    # a data file, the model, a directory of the user's: refused, --force or not
    for target in (tmp_path / "db.svm", model, mine):
        assert main(build + [str(target), "--force"]) == 2
        assert "refusing to overwrite" in capsys.readouterr().err
    assert (mine / "photo.jpg").read_bytes() == b"\xff\xd8" and tm.load_model(model)
    # an index: only with --force
    assert main(build + [str(index)]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert main(build + [str(index), "--force"]) == 0
    # search results: .npz and text
    search = ["search", str(index), q, "-k", "3", "-o"]
    for name in ("res.npz", "res.tsv"):
        out = tmp_path / name
        assert main(search + [str(out)]) == 0
        assert main(search + [str(out)]) == 2
        assert "pass --force" in capsys.readouterr().err
        assert main(search + [str(out), "--force"]) == 0
    for target in (tmp_path / "db.svm", model, tmp_path / "q.svm"):
        before = target.read_bytes()
        assert main(search + [str(target), "--force"]) == 2
        assert "refusing to overwrite" in capsys.readouterr().err
        assert target.read_bytes() == before


def test_search_k_larger_than_the_index_is_an_error(tmp_path, capsys):
    _, index = _index(tmp_path, capsys)
    for k in ("81", "5000", "0"):
        assert main(["search", str(index), str(tmp_path / "q.svm"), "-k", k]) == 2
        err = capsys.readouterr().err
        assert "1 <= k <= 80" in err and f"got {k}" in err
    assert main(["search", str(index), str(tmp_path / "q.svm"), "-k", "80"]) == 0


def test_query_with_fewer_features_is_refused_unless_padded(tmp_path, capsys):
    X, y = _toy_files(tmp_path)
    _, index = _index(tmp_path, capsys)
    dump_svmlight_file(X[:4, :4], y[:4], str(tmp_path / "q4.svm"), zero_based=False)
    assert main(["search", str(index), str(tmp_path / "q4.svm"), "-k", "2"]) == 2
    err = capsys.readouterr().err
    assert "has 4 features" in err and "expects 5" in err and "--pad-features" in err
    assert main(["search", str(index), str(tmp_path / "q4.svm"), "-k", "2",
                 "--pad-features"]) == 0
    (tmp_path / "q6.svm").write_text("1 1:0.5 6:1\n")
    assert main(["search", str(index), str(tmp_path / "q6.svm"), "-k", "2",
                 "--pad-features"]) == 2
    assert "has 6 features" in capsys.readouterr().err


def test_huge_libsvm_index_is_a_clear_input_error(tmp_path, capsys):
    _, index = _index(tmp_path, capsys)
    (tmp_path / "big.svm").write_text("1 1:0.5 1000000000000:1\n")
    assert main(["search", str(index), str(tmp_path / "big.svm")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tripletml: error:") and "too large" in err
    assert main(_FIT[:2] + [str(tmp_path / "big.svm"), "-o", str(tmp_path / "b.npz")]
                + _FIT[2:]) == 2
    assert "too large" in capsys.readouterr().err


def test_broken_pipe_exits_quietly(tmp_path, capsys, monkeypatch):
    import sys

    _, index = _index(tmp_path, capsys)

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    status = main(["search", str(index), str(tmp_path / "q.svm"), "-k", "3"])
    monkeypatch.undo()
    assert status == 141
    assert capsys.readouterr().err == ""


def test_broken_pipe_in_a_real_pipe_prints_nothing(tmp_path, capsys):
    import os
    import subprocess
    import sys

    _, index = _index(tmp_path, capsys)
    many = tmp_path / "many.svm"
    X, y = _toy_files(tmp_path)
    dump_svmlight_file(np.tile(X, (30, 1)), np.tile(y, 30), str(many), zero_based=False)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(tm.__file__))] + sys.path))
    proc = subprocess.Popen([sys.executable, "-m", "tripletml.cli", "search", str(index),
                             str(many), "-k", "50"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout.readline().decode() == "query\trank\tid\tscore\n"
    proc.stdout.close()                       # the reader goes away, as head does
    err = proc.stderr.read().decode()
    assert proc.wait() == 141, err
    assert "Broken pipe" not in err and "Traceback" not in err and err == ""
