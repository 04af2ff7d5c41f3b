"""bench/bench_distributed.py (issue 28, "Measure") end to end on its smallest
configuration, in this process only (``--quick --local``: no LocalCluster)."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bd():
    """bench.bench_distributed, imported from the repository root (``pytest``
    alone does not put the root on ``sys.path``; ``python -m pytest`` does)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT))
        return importlib.import_module("bench.bench_distributed")


def test_mixture_partitions_are_seeded_and_labeled(bd):
    X1, y1 = bd.make_part(3, 2, 50, 8, 4, "float32")
    X2, y2 = bd.make_part(3, 2, 50, 8, 4, "float32")
    X3, _ = bd.make_part(3, 1, 50, 8, 4, "float32")
    assert X1.dtype == np.float32 and X1.shape == (50, 8) and y1.shape == (50,)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    assert not np.array_equal(X1, X3)
    assert set(np.unique(y1)) <= set(range(4))
    assert bd.shares(10, 3) == [3, 4, 3] and sum(bd.shares(10 ** 6, 7)) == 10 ** 6


def test_all_sections_quick_in_process(bd, tmp_path, capsys):
    pytest.importorskip("dask")        # the bigdata section builds Delayed partitions
    out = tmp_path / "distributed"
    assert bd.main(["all", "--quick", "--local", "--plot", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for s in bd.SECTIONS:
        md = (out / f"{s}.md").read_text()
        assert "## Provenance" in md and "python -m bench.bench_distributed all --quick" in md
        assert "git:" in md and "nproc=" in md
        assert json.loads((out / f"{s}.json").read_text())["rows"]
    assert (out / "efficiency.png").stat().st_size > 0
    # speedup: every learner timed in-process and by fit_stream (not KISSME)
    sp = {r["learner"]: r for r in json.loads((out / "speedup.json").read_text())["rows"]}
    assert set(sp) == {"SDCA", "OASIS", "LORETA", "KISSME"}
    assert all(sp[n]["in-process s"] > 0 and sp[n]["fit_stream s"] > 0
               for n in ("SDCA", "OASIS", "LORETA"))
    assert "dask-ml Incremental: skipped" in printed
    # efficiency: in-memory reference + K = 1, 2, 4 for each learner, goal verdicts
    eff = json.loads((out / "efficiency.json").read_text())["rows"]
    runs = [r for r in eff if "K" in r]
    assert {(r["learner"], str(r["K"])) for r in runs} == {
        (n, k) for n in bd.ITERATIVE for k in ("in-memory", "1", "2", "4")}
    assert all(0 < r["test mAP"] <= 1 for r in runs)
    sdca = [r for r in runs if r["learner"] == "SDCA"]
    assert all(r["gap"] >= -1e-9 for r in sdca)           # SDCA reports a duality gap
    goals = [r for r in eff if "goal" in r]
    assert len(goals) == 3 and {g["goal"] for g in goals} <= {"pass", "miss"}
    assert printed.count("goal ") >= 3
    # bigdata: passes counted by the generator, memory and rates reported
    big = json.loads((out / "bigdata.json").read_text())["rows"]
    assert {r["learner"] for r in big} == {"KISSME", "SDCA"}
    for r in big:
        assert r["passes"] >= 1 and r["peak RSS per worker MiB"] > 0
        assert r["rows/s per worker"] > 0
    # costmodel: a dense W costs d^2 * 8 bytes each way per partition
    cost = json.loads((out / "costmodel.json").read_text())["rows"]
    oasis = [r for r in cost if r.get("strategy", "").startswith("mixing (OASIS")]
    assert {r["d"]: r["bytes up / partition"] for r in oasis} == {64: 64 * 64 * 8,
                                                                  1024: 1024 * 1024 * 8}
    assert "largest d at which a dense W is worth shipping" in (out / "costmodel.md").read_text()
