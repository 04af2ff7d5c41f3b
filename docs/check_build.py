"""Build the Sphinx site offline with warnings as errors and check its pages.

Run by ``.ci/run`` after the test suite (``python docs/check_build.py``); a
developer runs it the same way.  The build works on a copy of ``docs/`` so the
tree stays clean, and checks that the API page of every registry learner, every
gallery page and the user guide were produced.

Two parts of ``make -C docs html`` are left out, neither of them a check of
the docstrings or cross-references this script is for:

- the gallery's examples are not executed (``-D plot_gallery=0``,
  sphinx-gallery's ``html-noplot``): each already runs in a fresh interpreter
  and must leave figures in ``tests/test_docs.py``;
- the highlighted source pages of ``sphinx.ext.viewcode``
  (``TRIPLETML_DOCS_VIEWCODE=0``, ``docs/conf.py``): a third of the pages,
  Pygments over the modules' code.

Every docstring is still parsed by autodoc and numpydoc and every reference
resolved, with warnings as errors.  The build left the test suite in issue 40
(25-37 s on one of its two workers; "no test above 20 s"): it is a
documentation job, as in scikit-learn's CI, and CI fails when it fails.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def expected_pages() -> list[str]:
    """The pages (relative to the html output) the build must produce."""
    sys.path.insert(0, str(ROOT))
    from tripletml.registry import FEATURE_KINDS, entries
    pages = [f"generated/tripletml.{e.name}.html" for e in entries(FEATURE_KINDS)]
    pages += [f"auto_examples/{p.stem}.html" for p in sorted((ROOT / "examples").glob("plot_*.py"))]
    return pages + ["user_guide/choosing.html"]


def build(workdir: Path) -> list[str]:
    """Build a copy of docs/ under ``workdir``; return the problems found
    (the build's own output when it fails, else the missing pages)."""
    src = workdir / "docs"
    shutil.copytree(ROOT / "docs", src, ignore=shutil.ignore_patterns(
        "_build", "generated", "auto_examples", "sg_execution_times.rst"))
    out = workdir / "html"
    env = dict(os.environ, MPLBACKEND="Agg", TRIPLETML_DOCS_ROOT=str(ROOT),
               TRIPLETML_DOCS_VIEWCODE="0", MPLCONFIGDIR=str(workdir / "mpl"))
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           "html", "-D", "plot_gallery=0", "-d", str(workdir / "doctrees"),
                           str(src), str(out)],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=1500)
    if proc.returncode != 0:
        return [f"sphinx-build exited {proc.returncode}", proc.stdout[-2000:], proc.stderr[-4000:]]
    return [f"missing page: {p}" for p in expected_pages() if not (out / p).is_file()]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tripletml-docs-") as tmp:
        problems = build(Path(tmp))
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"docs: the site built with warnings as errors; {len(expected_pages())} "
              "checked pages present")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
