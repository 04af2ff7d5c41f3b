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


#: runs every script as ``python -m bench.NAME --help`` would (``runpy`` with
#: ``run_name="__main__"``, the package set, ``sys.argv`` as given), in ONE
#: fresh interpreter: the imports (NumPy, SciPy, scikit-learn, Numba: seconds
#: each time) are paid once instead of once per script
_HELP_RUNNER = """
import contextlib, io, json, runpy, sys, traceback
out = {}
for name in sys.argv[1:]:
    so, se, code = io.StringIO(), io.StringIO(), 0
    sys.argv = [name, "--help"]
    try:
        with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
            runpy.run_module("bench." + name, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        code, _ = 1, se.write(traceback.format_exc())
    out[name] = [code, so.getvalue(), se.getvalue()]
sys.stdout.write("RESULTS" + json.dumps(out))
"""


def test_bench_scripts_start_as_modules():
    """Every script starts as ``python -m bench.NAME`` from the repository
    root (the package's relative imports, no ``sys.path`` edits) and prints
    its ``--help``; one interpreter runs them all (see ``_HELP_RUNNER``)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep), MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", _HELP_RUNNER, *SCRIPTS], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "RESULTS" in proc.stdout, proc.stderr[-3000:]
    import json
    res = json.loads(proc.stdout.split("RESULTS", 1)[1])
    assert sorted(res) == SCRIPTS
    bad = {n: (code, err[-1500:]) for n, (code, out, err) in res.items()
           if code != 0 or "usage:" not in out}
    assert bad == {}


def test_help_runner_reports_a_broken_script(tmp_path):
    """The runner above can fail: a script that raises at import, one that
    exits non-zero and one that prints no usage are each reported."""
    pkg = tmp_path / "bench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "boom.py").write_text("raise ImportError('no such thing')\n")
    (pkg / "exits.py").write_text("import sys\nsys.exit(2)\n")
    (pkg / "silent.py").write_text("print('hello')\n")
    (pkg / "good.py").write_text("import argparse\nif __name__ == '__main__':\n"
                                 "    argparse.ArgumentParser().parse_args()\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", _HELP_RUNNER, "boom", "exits", "silent", "good"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    import json
    res = json.loads(proc.stdout.split("RESULTS", 1)[1])
    assert res["boom"][0] == 1 and "ImportError" in res["boom"][2]
    assert res["exits"][0] == 2
    assert res["silent"][0] == 0 and "usage:" not in res["silent"][1]
    assert res["good"][0] == 0 and "usage:" in res["good"][1]


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
