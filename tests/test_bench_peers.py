"""Smoke tests of bench/bench_peers.py's aggregation, goals, report and plot on
fake rows (no virtual environment, no metric-learn, no fitting)."""
from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bp():
    spec = importlib.util.spec_from_file_location("bench_peers", ROOT / "bench" / "bench_peers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(bp, set_name, method, seed, m, s, status="ok", message=""):
    return {"set": set_name, "method": method, "family": bp.family_of(method), "seed": seed,
            "status": status, "map": m, "fit_s": s, "n_train": 70, "n_test": 30,
            "n_features": 4, "n_classes": 3, "message": message}


def _fake_rows(bp):
    # set "a": ITML best of metric-learn (.60, 10 s); SML reaches it in 1 s (<= 2 s);
    # OASIS below Euclidean (.40 < .50) and below DotProduct (.45); auto .65 in 3 s.
    spec = {"ITML": (0.60, 10.0), "RCA": (0.55, 0.01), "LMNN": (None, None),
            "Euclidean": (0.50, 0.0), "DotProduct": (0.45, 0.0), "OASIS": (0.40, 0.1),
            "SML": (0.62, 1.0), "AutoSimilarity": (0.65, 3.0)}
    rows = []
    for seed, jitter in ((0, -0.01), (1, 0.0), (2, 0.01)):
        for meth, (m, s) in spec.items():
            if m is None:
                rows.append(_row(bp, "a", meth, seed, None, None, "timeout", "killed"))
            else:
                rows.append(_row(bp, "a", meth, seed, m + jitter, s))
    # set "b": nothing of ours reaches metric-learn; auto slower; no learner below Euclidean
    for seed in (0, 1, 2):
        rows += [_row(bp, "b", "NCA", seed, 0.9, 2.0), _row(bp, "b", "Euclidean", seed, 0.7, 0.0),
                 _row(bp, "b", "SDCA", seed, 0.8, 0.1),
                 _row(bp, "b", "AutoSimilarity", seed, 0.85, 5.0)]
    return rows


def test_summarize_and_goals(bp):
    rows = _fake_rows(bp)
    summ = bp.summarize(rows)
    a = summ["a"]
    assert a["ITML"]["map"] == pytest.approx(0.60)
    assert a["ITML"]["map_sd"] == pytest.approx(0.01)
    assert a["ITML"]["fit_s"] == pytest.approx(10.0)
    assert a["LMNN"]["map"] is None and a["LMNN"]["bad"] == ["timeout"] * 3
    g = bp.goals(summ, bilinear=["DotProduct", "OASIS"])
    ga, gb = g["a"], g["b"]
    assert ga["ml_best"] == "ITML" and ga["tml_best"] == "SML"
    assert ga["auto_map"]["ok"] is True and ga["auto_time"]["ok"] is True
    assert ga["fifth"]["ok"] is True and "SML" in ga["fifth"]["text"]
    assert ga["below_eucl"]["ok"] is True and "OASIS" in ga["below_eucl"]["text"]
    assert "SML" not in ga["below_eucl"]["text"]
    assert "DotProduct" not in ga["below_eucl"]["text"]   # a baseline, not a learner
    assert ga["below_dot"]["ok"] is True and "OASIS" in ga["below_dot"]["text"]
    assert gb["ml_best"] == "NCA"
    assert gb["auto_map"]["ok"] is False and gb["auto_time"]["ok"] is False
    assert gb["fifth"]["ok"] is False and "none reaches" in gb["fifth"]["text"]
    assert gb["below_eucl"]["ok"] is False
    assert gb["below_dot"]["ok"] is None          # no DotProduct on "b"


def test_fifth_rule_is_strict_about_time(bp):
    rows = [_row(bp, "c", "ITML", 0, 0.6, 10.0), _row(bp, "c", "SML", 0, 0.61, 2.5),
            _row(bp, "c", "Euclidean", 0, 0.5, 0.0)]
    g = bp.goals(bp.summarize(rows))["c"]
    assert g["fifth"]["ok"] is False              # 2.5 s > 10 s / 5
    assert g["auto_map"]["ok"] is None            # no auto row


def test_csv_roundtrip_resume_and_report(bp, tmp_path):
    rows = _fake_rows(bp)
    bp.write_csv(rows, tmp_path / "peers.csv")
    # an interrupted worker left a jsonl with one newer row and a cut line
    (tmp_path / "rows").mkdir()
    newer = _row(bp, "a", "ITML", 0, 0.7, 9.0)
    (tmp_path / "rows" / "a.jsonl").write_text(json.dumps(newer) + "\n{\"set\": \"a\", \"meth")
    got = bp.read_rows(tmp_path)
    assert len(got) == len(rows)
    assert got[("a", "ITML", 0)]["map"] == pytest.approx(0.7)
    assert got[("a", "LMNN", 1)]["status"] == "timeout"
    assert got[("a", "LMNN", 1)]["map"] is None
    summ = bp.report(tmp_path, {"runs": [{"command": "python bench/bench_peers.py"}],
                                "bilinear": ["DotProduct", "OASIS"]})
    assert summ["a"]["ITML"]["map"] == pytest.approx((0.7 + 0.6 + 0.61) / 3)
    assert not (tmp_path / "rows").exists()       # merged into peers.csv
    with open(tmp_path / "peers.csv", newline="") as fh:
        back = list(csv.DictReader(fh))
    assert len(back) == len(rows)
    assert tuple(back[0]) == bp.CSV_FIELDS
    md = (tmp_path / "peers.md").read_text()
    for needle in ("## Goals of issue #14", "## PROVENANCE", "| a |", "| b |", "ITML",
                   "python bench/bench_peers.py", "timeout"):
        assert needle in md
    png = tmp_path / "peers.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_validation(bp):
    with pytest.raises(SystemExit):
        bp.parse_args(["--sets", "nope"])
    with pytest.raises(SystemExit):
        bp.parse_args(["--methods", "ITML,Nope"])
    a = bp.parse_args(["--sets", "iris,wine", "--methods", "ITML,SML", "--seeds", "3,4"])
    assert a.sets == ["iris", "wine"] and a.methods == ["ITML", "SML"] and a.seeds == [3, 4]
    assert bp.parse_args([]).methods == bp.all_methods()


def test_seconds_format(bp):
    assert bp._fmt_s(5e-5) == "<1 ms"
    assert bp._fmt_s(0.0123) == "12.3 ms"
    assert bp._fmt_s(24.04) == "24 s"
    assert bp._fmt_s(None) == "-"


def test_tripletml_methods_come_from_the_registry(bp):
    import tripletml
    names = tripletml.learner_names("triplet")
    assert len(bp.TML_METHODS) == len(names)
    # tripletml's ITML has its own row name; metric-learn's keeps "ITML"
    assert "ITML (tripletml)" in bp.TML_METHODS and "ITML" not in bp.TML_METHODS
    assert bp.family_of("ITML (tripletml)") == "tripletml" and bp.family_of("ITML") == "metric-learn"
    est = bp.make_estimator("ITML (tripletml)", 3)
    assert type(est) is tripletml.ITML and est.random_state == 3
    assert "ITML (tripletml)" not in bp._bilinear_methods() and "OASIS" in bp._bilinear_methods()


def test_every_tripletml_row_is_tripletml(bp):
    """A learner metric-learn also has (LMNN, NCA, SCML, ...) gets its own
    tripletml row name: with one shared name tripletml's LMNN, NCA and SCML
    were classified as metric-learn's rows, so ``--no-peers`` dropped them
    and the defaults benchmark ran metric-learn's class in their place."""
    import tripletml
    for row in bp.TML_METHODS:
        assert bp.family_of(row) == "tripletml", row
        est = bp.make_estimator(row, 0)
        assert type(est).__module__.startswith("tripletml"), row
    for name in ("LMNN", "NCA", "SCML"):
        assert f"{name} (tripletml)" in bp.TML_METHODS and name not in bp.TML_METHODS
        assert type(bp.make_estimator(f"{name} (tripletml)", 0)) is getattr(tripletml, name)
