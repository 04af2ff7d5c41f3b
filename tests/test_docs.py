"""The documentation: the README's examples run offline in a fresh
interpreter; the gallery's examples compile here and run in the Sphinx
build with warnings as errors, ``docs/check_build.py`` (a step of
``.ci/run``), which fails when one raises and checks each one's figure."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import _fork_each
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("plot_*.py"))


def test_there_are_examples_for_every_plot_function():
    assert len(EXAMPLES) >= 4
    text = "\n".join(p.read_text() for p in EXAMPLES)
    for func in ("plot_history", "plot_precision_at_k", "plot_embedding", "plot_matrix"):
        assert f"{func}(" in text, func
    for p in EXAMPLES:                     # sphinx-gallery needs a title docstring
        head = p.read_text().lstrip()
        assert head.startswith('"""') and re.search(r"\n=+\n", head[:400]), p.name


def test_every_example_compiles_and_the_docs_job_runs_them():
    """The examples run in the documentation job (``docs/check_build.py``,
    sphinx-gallery with ``abort_on_example_error``; their first figures are
    checked pages), one interpreter for all of them (issue 40); here each
    only has to compile."""
    for p in EXAMPLES:
        compile(p.read_text(), str(p), "exec")
    build = (ROOT / "docs" / "check_build.py").read_text()
    assert "plot_gallery=0" not in build and "sphx_glr_" in build
    conf = (ROOT / "docs" / "conf.py").read_text()
    assert '"abort_on_example_error": True' in conf and '"plot_gallery": "True"' in conf


def test_ci_builds_the_site_with_warnings_as_errors():
    """The Sphinx build is a documentation job of ``.ci/run``
    (``docs/check_build.py``: a copy of docs/, ``-W``, the API page of every
    registry learner, the gallery and the user guide present), run after the
    suite and failing CI when it fails; it left the suite in issue 40 (25-37 s
    on one worker, "no test above 20 s")."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    steps = [ln.strip() for ln in ci if ln.strip() and not ln.lstrip().startswith("#")]
    assert "python docs/check_build.py" in steps
    assert steps.index("python docs/check_build.py") > next(
        i for i, ln in enumerate(steps) if ln.startswith("pytest "))
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import check_build
    finally:
        sys.path.remove(str(ROOT / "docs"))
    from tripletml.registry import FEATURE_KINDS, entries
    pages = check_build.expected_pages()
    n_run = sum(not p.stem.startswith("plot_zappos") or check_build._runs_zappos()
                for p in EXAMPLES)
    assert len(pages) == len(set(pages)) == len(entries(FEATURE_KINDS)) + len(EXAMPLES) + n_run + 1
    assert all(f"_images/sphx_glr_{p.stem}_001.png" in pages for p in EXAMPLES
               if not p.stem.startswith("plot_zappos"))
    assert "generated/tripletml.OASIS.html" in pages and "user_guide/choosing.html" in pages


def _readme_commands() -> list[str]:
    """The commands of the README's first code block (comments stripped)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[0].startswith("```"), "the README opens with the newcomer's commands"
    block = lines[1:lines.index("```", 1)]
    return [ln.split("#", 1)[0].strip() for ln in block if ln.split("#", 1)[0].strip()]


def test_readme_opens_with_install_and_the_parallel_test_command():
    install, test = _readme_commands()
    assert install.startswith("pip install") and "tripletml demo" in install
    assert test.split()[:3] == ["pytest", "-n", "2"] and "--durations=20" in test.split()


def test_ci_runs_exactly_the_readme_test_command_and_fails_on_no_tests():
    _, test = _readme_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    runs = [ln.split("||", 1)[0].strip() for ln in ci.splitlines()
            if ln.strip().startswith("pytest")]
    assert runs == [test]
    assert "set -euo pipefail" in ci and '"$status" -eq 5' in ci


def _readme_python_blocks() -> list[tuple[int, str]]:
    """(line, code) of every ```python block of the README."""
    lines = (ROOT / "README.md").read_text().splitlines()
    out, start = [], None
    for i, ln in enumerate(lines):
        if ln.strip() == "```python":
            start = i + 1
        elif ln.strip() == "```" and start is not None:
            out.append((start + 1, "\n".join(lines[start:i])))
            start = None
    return out


def test_readme_has_python_examples_and_marks_those_that_need_data():
    blocks = _readme_python_blocks()
    assert len(blocks) >= 3
    # the first examples a newcomer meets run on bundled data
    assert not blocks[0][1].startswith("# needs:") and not blocks[1][1].startswith("# needs:")


#: One fresh interpreter runs every README example (tests/_fork_each.py): it
#: imports the third-party libraries the examples use (NumPy, SciPy,
#: scikit-learn, Numba: seconds of CPU each time), never tripletml, then runs
#: each example in its own forked copy with fresh globals -- a copy in which
#: no tripletml module was ever imported, whatever the other examples import.
_README_PRELUDE = """
import sys
import numpy, scipy.sparse, scipy.linalg, scipy.stats, numba
import sklearn.base, sklearn.utils.validation, sklearn.datasets, sklearn.model_selection
import sklearn.preprocessing, sklearn.neighbors, sklearn.metrics
loaded = [m for m in sys.modules if m.split(".")[0] == "tripletml"]
assert not loaded, loaded
"""


def _readme_case(line: int, code: str, folder: Path) -> str:
    """The forked copy's code: move to ``folder``, then run the example with
    its own fresh globals, compiled as README.md with the README's line
    numbers (a traceback names the README line)."""
    source = "\n" * (line - 1) + code
    return (f"import os\nos.chdir({str(folder)!r})\n"
            f"exec(compile({source!r}, 'README.md', 'exec'), {{'__name__': '__main__'}})\n")


@pytest.mark.parametrize("part", [0, 1, 2])
def test_readme_python_examples_run_offline(tmp_path, part):
    """Each README example not marked ``# needs: <data set>`` runs on a fresh
    machine: no data home (an empty TRIPLETML_DATA), files written to a
    scratch folder of its own, in a fresh interpreter (a forked copy of one
    that imported only third-party libraries, see _README_PRELUDE; a crash
    or an exception fails that example and names its line).  Every third
    example per test: three interpreters, which ``pytest -n 2`` spreads over
    its workers (one interpreter took 18 s beside a busy core)."""
    examples = [b for b in _readme_python_blocks() if not b[1].startswith("# needs:")]
    assert len(examples) >= 6
    examples = examples[part::3]
    cases = {}
    for line, code in examples:
        folder = tmp_path / f"line{line}"
        folder.mkdir()
        cases[f"line{line}"] = _readme_case(line, code, folder)
    env = {**os.environ, "TRIPLETML_DATA": str(tmp_path / "no-data"), "MPLBACKEND": "Agg",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("TRIPLETML_REQUIRE_DATA", None)
    script = _fork_each.script(_README_PRELUDE, cases, fresh_globals=True)
    res = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    tail = f"interpreter exit status {res.returncode}; stderr:\n{res.stderr[-3000:]}"
    failed = [f"README example at line {name[4:]} failed (exit status {status}):\n"
              + "\n".join(lines)[-3000:] + "\n" + tail
              for name, (status, lines) in _fork_each.parse(res.stdout, cases).items()
              if status != 0]
    assert not failed, "\n\n".join(failed)
