"""The migration guide for metric-learn users runs: every ``python`` code block
of ``docs/user_guide/migration.rst`` and every script of
``examples/migration/`` (metric-learn's own examples, ported), without
metric-learn; and the guide names every metric-learn 0.7.0 estimator and
method.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import _fork_each

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "user_guide" / "migration.rst"
SCRIPTS = sorted((ROOT / "examples" / "migration").glob("*.py"))
TIMEOUT = 300           # per script, only stops a hung run; each takes seconds


#: metric-learn 0.7.0's estimators and the public methods and parameters of
#: its learners: each must appear in the guide
METRIC_LEARN_ESTIMATORS = (
    "Covariance", "ITML", "ITML_Supervised", "LFDA", "LMNN", "LSML", "LSML_Supervised", "MLKR",
    "MMC", "MMC_Supervised", "NCA", "RCA", "RCA_Supervised", "SDML", "SDML_Supervised", "SCML",
    "SCML_Supervised")
METRIC_LEARN_METHODS = (
    "fit", "transform", "fit_transform", "get_mahalanobis_matrix", "get_metric", "pair_score",
    "score_pairs", "pair_distance", "decision_function", "predict", "score",
    "calibrate_threshold", "set_threshold", "preprocessor", "n_components", "prior",
    "n_neighbors", "n_constraints", "calibration_params")


def _blocks() -> list[tuple[int, str, set[str]]]:
    """(line, code, needs) of every ``.. code-block:: python`` of the guide
    (``needs``: the names of a ``.. needs: A, B`` comment right above it)."""
    lines = GUIDE.read_text().splitlines()
    out = []
    for i, ln in enumerate(lines):
        if ln.strip() != ".. code-block:: python":
            continue
        indent = len(ln) - len(ln.lstrip())
        needs, j = set(), i - 1
        while j >= 0 and (not lines[j].strip() or lines[j].strip().startswith(".. needs:")):
            if lines[j].strip().startswith(".. needs:"):
                needs |= {n.strip() for n in lines[j].split(":", 1)[1].split(",") if n.strip()}
            j -= 1
        body, k = [], i + 1
        while k < len(lines) and (not lines[k].strip()
                                  or len(lines[k]) - len(lines[k].lstrip()) > indent):
            body.append(lines[k])
            k += 1
        while body and not body[-1].strip():
            body.pop()
        strip = min(len(b) - len(b.lstrip()) for b in body if b.strip())
        code = "\n".join(b[strip:] for b in body)
        out.append((i + 1, code, needs))
    return out


BLOCKS = _blocks()


def test_the_guide_has_examples_and_the_examples_folder_has_scripts():
    assert len(BLOCKS) >= 10
    assert {p.name for p in SCRIPTS} >= {"walkthrough.py", "sandwich.py", "weakly_supervised.py"}
    imports_metric_learn = re.compile(r"^\s*(from|import)\s+metric_learn\b", re.M)
    for line, code, _ in BLOCKS:                     # metric-learn is never imported
        assert not imports_metric_learn.search(code), line
    for p in SCRIPTS:
        text = p.read_text()
        assert text.lstrip().startswith('"""'), p.name           # says what it ports
        assert not imports_metric_learn.search(text), p.name
        assert "import tripletml" in text or "from tripletml import" in text, p.name


def test_the_guide_is_in_the_user_guide_toctree():
    assert "user_guide/migration" in (ROOT / "docs" / "index.rst").read_text()


def test_the_guide_names_every_metric_learn_estimator_and_method():
    text = GUIDE.read_text()
    for name in METRIC_LEARN_ESTIMATORS + METRIC_LEARN_METHODS:
        assert re.search(rf"``[^`]*\b{name}\b[^`]*``", text), name


def test_no_example_waits_for_an_api():
    """Every API the guide shows is on this branch: no block is marked as
    needing one (``.. needs:``) and no section is left "Planned"."""
    assert all(not needs for _, _, needs in BLOCKS)
    assert "\nPlanned\n" not in GUIDE.read_text()


@pytest.mark.parametrize("line,code,needs", BLOCKS, ids=[f"rst-line{b[0]}" for b in BLOCKS])
def test_guide_code_block_runs(line, code, needs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__migration_example__"}
    exec(compile(code, f"{GUIDE.name}:{line}", "exec"), namespace)


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["MPLCONFIGDIR"] = str(tmp_path / "mpl")
    return env


#: One fresh interpreter runs every script (tests/_fork_each.py): it imports
#: the third-party libraries the scripts use (NumPy, SciPy, scikit-learn,
#: Numba, Matplotlib with the Agg backend and ``plt.show`` a no-op: figures not
#: shown), never tripletml, then runs each script in its own forked copy with
#: fresh globals -- a copy in which no tripletml module was ever imported.
_SCRIPT_PRELUDE = """
import sys
import numpy, scipy.sparse, scipy.linalg, scipy.stats, numba
import sklearn.base, sklearn.datasets, sklearn.decomposition, sklearn.metrics
import sklearn.model_selection, sklearn.neighbors, sklearn.preprocessing
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
plt.show = lambda *a, **k: None
loaded = [m for m in sys.modules if m.split(".")[0] == "tripletml"]
assert not loaded, loaded
"""


def test_ported_scripts_run(tmp_path):
    """Run each script as a user would (``python script.py``, figures not
    shown), in its own scratch folder; a crash or an exception fails that
    script and names it."""
    cases = {}
    for script in SCRIPTS:
        folder = tmp_path / script.stem
        folder.mkdir()
        cases[script.stem] = (f"import os, runpy\nos.chdir({str(folder)!r})\n"
                              f"runpy.run_path({str(script)!r}, run_name='__main__')\n"
                              "print('DONE')\n")
    script = _fork_each.script(_SCRIPT_PRELUDE, cases, fresh_globals=True)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=TIMEOUT * len(SCRIPTS))
    tail = f"interpreter exit status {proc.returncode}; stderr:\n{proc.stderr[-3000:]}"
    failed = [f"{name}: exit status {status}\n" + "\n".join(lines)[-3000:] + "\n" + tail
              for name, (status, lines) in _fork_each.parse(proc.stdout, cases).items()
              if status != 0 or lines[-1:] != ["DONE"]]
    assert not failed, "\n\n".join(failed)
