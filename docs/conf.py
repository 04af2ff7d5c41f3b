"""Sphinx configuration of the tripletml documentation.

Build offline with warnings as errors: ``make -C docs html`` (runs
``sphinx-build -W --keep-going -b html . _build/html``).  Needs the ``docs``
extra (``pip install -e ".[docs]"``) and, for the 20 Newsgroups example, a
data home (``TRIPLETML_DATA``); without it that example falls back to digits.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the repository (tests build a copy of docs/ elsewhere and point here with the variable)
ROOT = Path(os.environ.get("TRIPLETML_DOCS_ROOT", HERE.parent)).resolve()
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

import tripletml  # noqa: E402
from tripletml.registry import entries  # noqa: E402

project = "tripletml"
author = "the tripletml developers"
copyright = "the tripletml developers"
release = version = tripletml.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]
if os.environ.get("TRIPLETML_DOCS_VIEWCODE", "1") == "0":
    # tests/test_docs.py: the highlighted source pages ("[source]" links, a
    # third of the pages) are Pygments over the modules' code, not the
    # docstrings or cross-references the test checks
    extensions.remove("sphinx.ext.viewcode")

# no network: intersphinx is not loaded at all
templates_path = ["_templates"]
exclude_patterns = ["_build", "generated/*.examples", "auto_examples/*.ipynb",
                    "auto_examples/*.py", "auto_examples/*.zip", "auto_examples/*.json",
                    "auto_examples/*.md5", "auto_examples/*.codeobj.json"]
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"show-inheritance": True}
autodoc_typehints = "none"            # numpydoc documents the types
numpydoc_show_class_members = False    # autosummary lists them; avoids stub warnings
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
default_role = "literal"               # `x` in docstrings is code, not a broken reference
suppress_warnings = ["config.cache"]   # sphinx-gallery's callables in the config

html_theme = "pydata_sphinx_theme"
html_title = f"tripletml {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
    "github_url": None,
    "icon_links": [],
}
html_static_path: list[str] = []
html_last_updated_fmt = None
# mathjax from a CDN only matters in a browser; the build itself is offline

def _zappos_data() -> bool:
    """Whether the zappos comparison files are reachable (TRIPLETML_DATA, or
    the shared data beside the repository, which then becomes TRIPLETML_DATA
    for the examples); examples that need them run only then."""
    env = os.environ.get("TRIPLETML_DATA")
    for home in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        if (home / "zappos" / "deconflicted_triplets.csv.zip").is_file():
            os.environ["TRIPLETML_DATA"] = str(home.resolve())
            return True
    return False


sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    # examples that need data that is not bundled are shown, not run, without it
    "filename_pattern": r"/plot_" if _zappos_data() else r"/plot_(?!zappos)",
    "download_all_examples": False,
    "remove_config_comments": True,
    "image_scrapers": ("matplotlib",),
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "plot_gallery": "True",
    "abort_on_example_error": True,
    "line_numbers": False,
    "min_reported_time": 0,
}


def _write_learner_api() -> None:
    """docs/api/learners.rst: one autosummary row per registry entry, so a
    learner added to the registry is documented without editing the docs."""
    lines = ["Learners", "========", "",
             "Every public learner, in the order of :mod:`tripletml.registry` (the one "
             "list the command line, ``load_model`` and the tests read).", "",
             ".. currentmodule:: tripletml", ""]
    for kind, heading in (("triplet", "Similarity and metric learners (triplets)"),
                          ("multilabel", "Multi-label rankers")):
        lines += [heading, "-" * len(heading), "", ".. autosummary::",
                  "   :toctree: ../generated/", "   :nosignatures:", ""]
        lines += [f"   {e.name}" for e in entries(kind)]
        lines.append("")
    out = HERE / "api" / "learners.rst"
    text = "\n".join(lines)
    if not out.exists() or out.read_text() != text:
        out.write_text(text)


_write_learner_api()


# --------------------------------------------------------------------------- docstring hygiene
import re  # noqa: E402

_LITERAL = re.compile(r"``.*?``|`[^`]*`|:\w+:`[^`]*`")
_TRAILING_US = re.compile(r"(?<![\\\w])([A-Za-z][A-Za-z0-9_]*?)_(?=[\s,.;:)\]/^]|$)")
_BARS = re.compile(r"(?<![|\\])\|([^|`\s][^|`]*)\|")
_NAME_LINE = re.compile(r"^(\s*[\w*]+(?:, [\w*]+)* : )")


def _escape_text(text: str) -> str:
    """Escape what reST would misread in plain docstring text: a fitted
    attribute such as ``rank_`` (a reference to target "rank") and ``|x|``
    (a substitution)."""
    out, last = [], 0
    for m in _LITERAL.finditer(text):
        out.append(_BARS.sub(r"\\|\1\\|", _TRAILING_US.sub(r"\1\\_", text[last:m.start()])))
        out.append(m.group(0))
        last = m.end()
    out.append(_BARS.sub(r"\\|\1\\|", _TRAILING_US.sub(r"\1\\_", text[last:])))
    return "".join(out)


def _process_docstring(app, what, name, obj, options, lines) -> None:
    """Runs before numpydoc (priority 100): escape trailing underscores of
    fitted-attribute names and |x| in the text of tripletml's docstrings
    (parameter and attribute names at the start of a line stay as they are)."""
    if not name.startswith("tripletml"):
        return
    for i, line in enumerate(lines):
        m = _NAME_LINE.match(line)
        head = m.group(1) if m else ""
        lines[i] = head + _escape_text(line[len(head):])


def _skip_member(app, what, name, obj, skip, options):
    """Leave out what scikit-learn's base classes contribute (metadata
    routing, get/set_params): documented by scikit-learn, and their
    docstrings point at its user guide."""
    module = getattr(obj, "__module__", "") or ""
    if module.startswith("sklearn") or (name.startswith("set_") and name.endswith("_request")):
        return True
    return skip


def _numpydoc_template_once() -> None:
    """numpydoc 1.x loads its Jinja template anew for every docstring
    (``numpydoc.docscrape_sphinx.get_doc_object``: a new environment, a new
    loader and a template compile, 1,835 of them, ~15 % of the build):
    load it once per builder and hand the same template to numpydoc's own
    code, which renders every docstring exactly as before."""
    try:
        import numpydoc.numpydoc as npd
        from numpydoc import docscrape_sphinx as nds
    except ImportError:  # pragma: no cover - numpydoc is in the docs extra
        return
    if not hasattr(nds, "get_doc_object_orig"):  # pragma: no cover - another numpydoc
        return
    from jinja2 import FileSystemLoader
    from jinja2.sandbox import SandboxedEnvironment
    from sphinx.jinja2glue import BuiltinTemplateLoader

    cache: dict = {}
    dirs = [os.path.join(os.path.dirname(nds.__file__), "templates")]

    def get_doc_object(obj, what=None, doc=None, config=None, builder=None):
        config = {} if config is None else config
        key = id(builder)
        if key not in cache:
            if builder is not None:
                loader = BuiltinTemplateLoader()
                loader.init(builder, dirs=dirs)
            else:
                loader = FileSystemLoader(dirs)
            cache[key] = (builder, SandboxedEnvironment(loader=loader).get_template(
                "numpydoc_docstring.rst"))
        config["template"] = cache[key][1]
        return nds.get_doc_object_orig(obj, what=what, doc=doc, config=config,
                                       class_doc=nds.SphinxClassDoc,
                                       func_doc=nds.SphinxFunctionDoc,
                                       obj_doc=nds.SphinxObjDoc)

    npd.get_doc_object = get_doc_object


def setup(app) -> None:
    app.connect("autodoc-process-docstring", _process_docstring, priority=100)
    app.connect("autodoc-skip-member", _skip_member)
    _numpydoc_template_once()
