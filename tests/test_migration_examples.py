"""The migration guide for metric-learn users runs: every ``python`` code block
of ``docs/user_guide/migration.rst`` and every script of
``examples/migration/`` (metric-learn's own examples, ported).

An example that needs an API not on the main branch yet says so: a
``.. needs: NAME`` comment line right above its code block, or an entry in
:data:`SCRIPT_NEEDS`; NAME must be in :data:`PLANNED`, and the example is
skipped with that name.  Once the API lands, ``test_planned_apis_are_still_missing``
fails until NAME leaves :data:`PLANNED` (and the example runs).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "user_guide" / "migration.rst"
SCRIPTS = sorted((ROOT / "examples" / "migration").glob("*.py"))
TIMEOUT = 300           # only stops a hung subprocess; each script takes seconds


def _has_learner(name: str):
    def check() -> bool:
        import tripletml
        return hasattr(tripletml, name)
    return check


#: APIs an example may need, and how to tell that they exist
APIS = {
    "LMNN": _has_learner("LMNN"),
    "NCA": _has_learner("NCA"),
}
#: APIs not on the main branch yet (the guide's "Planned" section)
PLANNED: set[str] = set()
#: what each script of examples/migration/ needs from PLANNED
SCRIPT_NEEDS: dict[str, set[str]] = {}


def _blocks() -> list[tuple[int, str, set[str]]]:
    """(line, code, needs) of every ``.. code-block:: python`` of the guide."""
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


def _skip_planned(needs: set[str]) -> None:
    unknown = needs - set(APIS)
    assert not unknown, f"unknown API names {unknown}; known: {sorted(APIS)}"
    waiting = sorted(needs & PLANNED)
    if waiting:
        pytest.skip(f"needs {', '.join(waiting)}: not on main yet (issue 29, planned)")


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


def test_planned_apis_are_still_missing():
    """A planned API that landed must leave PLANNED (and its skips go)."""
    landed = sorted(name for name in PLANNED if APIS[name]())
    assert not landed, (f"{landed} landed on main: remove them from PLANNED, from the "
                        "'.. needs:' markers and from the guide's Planned section")


def test_markers_name_planned_apis():
    for line, _, needs in BLOCKS:
        assert needs <= PLANNED, (line, needs - PLANNED)
    for name, needs in SCRIPT_NEEDS.items():
        assert (ROOT / "examples" / "migration" / name).is_file(), name
        assert needs <= PLANNED, (name, needs - PLANNED)


@pytest.mark.parametrize("line,code,needs", BLOCKS, ids=[f"rst-line{b[0]}" for b in BLOCKS])
def test_guide_code_block_runs(line, code, needs, tmp_path, monkeypatch, capsys):
    _skip_planned(needs)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__migration_example__"}
    exec(compile(code, f"{GUIDE.name}:{line}", "exec"), namespace)


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["MPLCONFIGDIR"] = str(tmp_path / "mpl")
    return env


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_ported_script_runs(script, tmp_path):
    """Run the script as a user would (``python script.py``, figures not shown)."""
    _skip_planned(SCRIPT_NEEDS.get(script.name, set()))
    runner = ("import runpy, matplotlib\n"
              "matplotlib.use('Agg')\n"
              "import matplotlib.pyplot as plt\n"
              "plt.show = lambda *a, **k: None\n"
              f"runpy.run_path({str(script)!r}, run_name='__main__')\n"
              "print('DONE')\n")
    proc = subprocess.run([sys.executable, "-c", runner], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.rstrip().endswith("DONE")
