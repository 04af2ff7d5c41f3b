"""The house's structural rules (issue 37, item 5), checked on the source.

* (a) No function or method of the package is over :data:`MAX_LINES` lines
  (``end_lineno - lineno + 1`` of its ``def``, decorators excluded,
  docstring included).
* (b) At most :data:`MAX_PRIVATE_TOP` private modules (``_name.py``, other
  than ``__init__`` / ``__main__``) sit directly in ``tripletml/``.
* (c) Fewer than :data:`MAX_LOCAL_IMPORTS` function-local imports of the
  package's own modules: an import inside a function hides an arrow of the
  import graph from a reader, so it is kept only where it avoids an optional
  dependency or a real start-up cost.

Each checker is a function of source text or of names, tested on planted
snippets first, so that a rule that can no longer fail is noticed.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tripletml"

MAX_LINES = 100
MAX_PRIVATE_TOP = 6
MAX_LOCAL_IMPORTS = 40



def _sources():
    for path in sorted(PKG.rglob("*.py")):
        yield path, path.read_text(encoding="utf-8")


# --------------------------------------------------------------------------
# the checkers
# --------------------------------------------------------------------------
def _tree(source: str | ast.AST) -> ast.AST:
    """``source`` parsed (an already parsed module is taken as it is)."""
    return source if isinstance(source, ast.AST) else ast.parse(source)


def long_functions(source: str | ast.AST, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """``(qualified name, lines)`` of every function or method of ``source``
    (text, or its parsed module) longer than ``limit`` lines, nested ones
    included."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                n = child.end_lineno - child.lineno + 1
                if n > limit:
                    out.append((name, n))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(_tree(source), "")
    return out


def private_top_modules(names) -> list[str]:
    """The private module file names among ``names`` (``_x.py``; not
    ``__init__.py`` / ``__main__.py``)."""
    return sorted(n for n in names if n.endswith(".py") and n.startswith("_")
                  and n not in ("__init__.py", "__main__.py"))


def local_package_imports(source: str | ast.AST) -> list[int]:
    """Line numbers of the import statements inside a function (at any
    depth) of ``source`` (text, or its parsed module) that name a module of
    the package: ``import tripletml...``,
    ``from tripletml... import ...`` or a relative ``from . import ...``.
    Each statement counts once, however deeply nested."""
    lines: set[int] = set()
    for node in ast.walk(_tree(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import):
                if any(a.name.split(".")[0] == "tripletml" for a in sub.names):
                    lines.add(sub.lineno)
            elif isinstance(sub, ast.ImportFrom):
                if sub.level > 0 or (sub.module or "").split(".")[0] == "tripletml":
                    lines.add(sub.lineno)
    return sorted(lines)


# --------------------------------------------------------------------------
# the checkers on planted snippets
# --------------------------------------------------------------------------
def _function(name: str, n_lines: int, indent: str = "") -> str:
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(n_lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return None\n"


def test_long_function_checker_on_planted_snippets():
    assert long_functions(_function("ok", 100)) == []
    assert long_functions(_function("long", 101)) == [("long", 101)]
    src = ("class A:\n" + _function("method", 120, "    ")
           + _function("outer", 5) + "@decorator\n" + _function("decorated", 100))
    assert long_functions(src) == [("A.method", 120)]
    nested = "def outer():\n" + _function("inner", 101, "    ") + "    return inner\n"
    assert long_functions(nested) == [("outer", 103), ("outer.inner", 101)]


def test_private_module_checker_on_planted_names():
    names = ["__init__.py", "__main__.py", "_a.py", "b.py", "_c.py", "_d.txt", "e_.py"]
    assert private_top_modules(names) == ["_a.py", "_c.py"]


def test_local_import_checker_on_planted_snippets():
    src = ("import tripletml.metrics\n"               # module level: not counted
           "from tripletml.core import base\n"
           "def f():\n"
           "    import numpy\n"                       # not the package
           "    from tripletml.metrics import knn_error\n"   # 5
           "    import tripletml.plot as p\n"                # 6
           "    def g():\n"
           "        from .core.files import open_regular\n"  # 8: nested, counted once
           "    return g\n"
           "class C:\n"
           "    def m(self):\n"
           "        from ..registry import entries\n"        # 12
           "        import os, tripletml\n")                 # 13
    assert local_package_imports(src) == [5, 6, 8, 12, 13]
    assert local_package_imports("import tripletml\nfrom . import x\n") == []


# --------------------------------------------------------------------------
# the rules on the package
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def package_findings() -> dict[str, tuple[list[tuple[str, int]], list[int]]]:
    """``{module path: (long_functions, local_package_imports)}`` of every
    module of the package, each parsed once for both rules."""
    out = {}
    for path, source in _sources():
        tree = ast.parse(source)
        out[path.relative_to(PKG).as_posix()] = (long_functions(tree),
                                                 local_package_imports(tree))
    return out


def test_no_function_over_100_lines(package_findings):
    found = [f"{rel}: {name} ({n} lines)" for rel, (long, _) in package_findings.items()
             for name, n in long]
    assert found == [], "functions over %d lines: %s" % (MAX_LINES, "; ".join(found))


def test_at_most_six_private_top_level_modules():
    private = private_top_modules(p.name for p in PKG.glob("*.py"))
    assert len(private) <= MAX_PRIVATE_TOP, (
        f"{len(private)} private modules at tripletml's top level (at most "
        f"{MAX_PRIVATE_TOP}): {private}")


def test_few_function_local_imports_of_the_package(package_findings):
    per_file = {rel: len(lines) for rel, (_, lines) in package_findings.items() if lines}
    total = sum(per_file.values())
    worst = sorted(per_file.items(), key=lambda kv: -kv[1])[:8]
    assert total < MAX_LOCAL_IMPORTS, (
        f"{total} function-local imports of tripletml modules (want < "
        f"{MAX_LOCAL_IMPORTS}); most in: {worst}")
