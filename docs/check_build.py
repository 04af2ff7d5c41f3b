"""Build the Sphinx site offline with warnings as errors and check its pages.

Run by ``.ci/run`` after the test suite (``python docs/check_build.py``); a
developer runs it the same way.  The build works on a copy of ``docs/`` so the
tree stays clean, and checks that the API page of every registry learner, every
gallery page and the user guide were produced.

The gallery's examples are executed (sphinx-gallery, ``abort_on_example_error``):
an example that raises fails the build, and each must leave a figure (its first
image is one of the checked pages).  They left the test suite in issue 40, as in
scikit-learn's CI, where the documentation job runs the examples: one
interpreter for all of them instead of one per example.  The Zappos example
needs the shared data (``TRIPLETML_DATA``); without it the page is shown, not
run, unless ``TRIPLETML_REQUIRE_DATA=1`` (CI), where a missing figure fails.

One part of ``make -C docs html`` is left out, not a check of the docstrings
or cross-references this script is for: the highlighted source pages of
``sphinx.ext.viewcode`` (``TRIPLETML_DOCS_VIEWCODE=0``, ``docs/conf.py``), a
third of the pages, Pygments over the modules' code.

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


def _runs_zappos() -> bool:
    """Whether the build runs the Zappos example: the shared data is found
    (``docs/conf.py``) or required (CI)."""
    if os.environ.get("TRIPLETML_REQUIRE_DATA") == "1":
        return True
    env = os.environ.get("TRIPLETML_DATA")
    homes = ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]
    return any((h / "zappos" / "deconflicted_triplets.csv.zip").is_file() for h in homes)


def expected_pages() -> list[str]:
    """The pages (relative to the html output) the build must produce."""
    sys.path.insert(0, str(ROOT))
    from tripletml.registry import FEATURE_KINDS, entries
    pages = [f"generated/tripletml.{e.name}.html" for e in entries(FEATURE_KINDS)]
    examples = sorted((ROOT / "examples").glob("plot_*.py"))
    pages += [f"auto_examples/{p.stem}.html" for p in examples]
    # every example ran and drew (sphinx-gallery's scraper saved its first figure)
    pages += [f"_images/sphx_glr_{p.stem}_001.png" for p in examples
              if not p.stem.startswith("plot_zappos") or _runs_zappos()]
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
    if env.get("TRIPLETML_DATA"):     # the build runs elsewhere: a relative path must not move
        env["TRIPLETML_DATA"] = os.path.abspath(env["TRIPLETML_DATA"])
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           "html", "-d", str(workdir / "doctrees"),
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
