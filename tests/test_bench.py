"""The benchmark scripts' home (issue 25, item 7): code lives in ``bench/`` (a
package, run as ``python -m bench.NAME`` from the repository root), none under
``results/``, and the scripts share ``bench/_protocol.py`` without editing
``sys.path``."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_"))


def test_no_python_under_results():
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results").rglob("*.py")) == []


def test_bench_is_a_package_without_path_hacks():
    assert (ROOT / "bench" / "__init__.py").is_file()
    offenders = [p.name for p in (ROOT / "bench").glob("*.py")
                 if re.search(r"sys\.path\.(insert|append)", p.read_text())]
    assert offenders == []


@pytest.mark.parametrize("name", SCRIPTS)
def test_bench_script_starts_as_a_module(name):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep), MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-m", f"bench.{name}", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout


def test_documented_bench_commands_name_existing_scripts():
    """Every ``python -m bench.NAME`` in the docs and results names a script."""
    texts = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *ROOT.glob("docs/**/*.rst"),
             *ROOT.glob("results/**/*.md")]
    named = {m for p in texts for m in re.findall(r"python -m bench\.(\w+)", p.read_text())}
    assert named and named <= set(SCRIPTS), sorted(named - set(SCRIPTS))


def test_bench_defaults_all_smallest_run(tmp_path):
    """bench/bench_defaults_all.py end to end on its smallest configuration:
    one tiny set and a rescaled copy, one seed, two methods, no metric-learn
    environment (``--no-peers``)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep), MPLBACKEND="Agg")
    out = tmp_path / "dall"
    proc = subprocess.run([sys.executable, "-m", "bench.bench_defaults_all", "--sets", "iris",
                           "--scales", "1,1e3", "--seeds", "0", "--methods",
                           "Euclidean,OASIS[None]", "--no-peers", "--timeout", "120",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    import csv
    with open(out / "defaults_all.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["set"], r["method"]) for r in rows} == {
        (s, m) for s in ("iris", "iris*1e3") for m in ("Euclidean", "OASIS[None]")}
    assert all(r["status"] == "ok" and 0 < float(r["map"]) <= 1 and r["knn1"] for r in rows)
    md = (out / "defaults_all.md").read_text()
    assert "## Goal misses" in md and "### iris*1e3" in md
