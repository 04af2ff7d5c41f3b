"""The package's import graph and its lazy top level.

* Every module of ``tripletml`` is parsed with :mod:`ast`; the graph of its
  imports of other ``tripletml`` modules -- at module level, inside
  functions, under ``if TYPE_CHECKING``, and ``importlib.import_module``
  calls with a constant name -- must have no circle (issue 25, item 4).
  Implicit parent-package imports (``tripletml.a.b`` loading ``tripletml.a``)
  are not edges: only what the source names.
* ``import tripletml`` loads no learner or solver module (their Numba
  kernels) until a learner is asked for, yet ``tripletml.OASIS``, ``from
  tripletml import OASIS`` and every name of ``__all__`` work.
* The reproductions use public names only.
"""
from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import _fork_each

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tripletml"


# The source tree does not change during a run: the module table, the parsed
# modules and the static import graph are made once per process and shared
# by the tests (each caller gets its own copy of the dicts and sets).
@functools.lru_cache(maxsize=None)
def _module_table() -> tuple[tuple[str, tuple[Path, bool]], ...]:
    mods = []
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods.append((".".join(parts), (path, is_pkg)))
    return tuple(mods)


def _modules() -> dict[str, tuple[Path, bool]]:
    """``{dotted name: (path, is_package)}`` of every module of the package."""
    return dict(_module_table())


@functools.lru_cache(maxsize=None)
def _source(path: Path) -> str:
    return path.read_text()


@functools.lru_cache(maxsize=None)
def _parse(source: str) -> ast.AST:
    """The parsed source (read only: the checks only walk it)."""
    return ast.parse(source)


def _tree(path: Path) -> ast.AST:
    return _parse(_source(path))


def _absolute(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    """The absolute name of a (possibly relative) import target."""
    if not level:
        return name or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _import_targets(module: str, is_pkg: bool, tree: ast.AST, mods) -> set[str]:
    """The modules of the package that ``module`` names in an import."""
    raw: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            raw += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            prefix = _absolute(module, is_pkg, node.level, node.module)
            for a in node.names:       # `from pkg import submodule` names the submodule
                sub = f"{prefix}.{a.name}"
                raw.append(sub if sub in mods else prefix)
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id == "import_module"))):
            target = node.args[0].value
            if target.startswith("."):
                anchor = module if is_pkg else module.rsplit(".", 1)[0]
                if len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                    anchor = node.args[1].value
                dots = len(target) - len(target.lstrip("."))
                anchor = ".".join(anchor.split(".")[:len(anchor.split(".")) - (dots - 1)])
                target = f"{anchor}.{target.lstrip('.')}"
            raw.append(target)
    out = set()
    for name in raw:
        if not (name == "tripletml" or name.startswith("tripletml.")):
            continue
        while name not in mods and "." in name:   # `from .a import func` -> module a
            name = name.rsplit(".", 1)[0]
        if name in mods and name != module:
            out.add(name)
    return out


def _dynamic_edges(registry: bool) -> dict[str, set[str]]:
    """The imports made with computed names, which ``ast`` cannot read: the
    package root's lazy names, learners and submodules (PEP 562) and, with
    ``registry``, the registry's import of each learner's module
    (``LearnerEntry.cls``, used by ``load_model``)."""
    import tripletml
    from tripletml.registry import REGISTRY

    learners = {f"tripletml.{e.module}" for e in REGISTRY}
    root = ({f"tripletml.{m}" for m in tripletml._LAZY_NAMES.values()}
            | {f"tripletml.{m}" for m in tripletml._SUBMODULES} | learners)
    edges = {"tripletml": root}
    if registry:
        edges["tripletml.registry"] = learners
    return edges


@functools.lru_cache(maxsize=None)
def _static_graph() -> dict[str, frozenset[str]]:
    mods = _modules()
    return {m: frozenset(_import_targets(m, is_pkg, _tree(path), mods))
            for m, (path, is_pkg) in mods.items()}


def import_graph(registry: bool = False) -> dict[str, set[str]]:
    mods = _modules()
    graph = {m: set(targets) for m, targets in _static_graph().items()}
    for m, targets in _dynamic_edges(registry).items():
        assert targets <= set(mods), sorted(targets - set(mods))
        graph[m] |= targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle ``[a, b, ..., a]`` of the graph, or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        color[v] = GREY
        stack.append(v)
        for w in sorted(graph[v]):
            if color[w] == GREY:
                return stack[stack.index(w):] + [w]
            if color[w] == WHITE:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        color[v] = BLACK
        return None

    for v in sorted(graph):
        if color[v] == WHITE:
            found = visit(v)
            if found:
                return found
    return None


def test_cycle_finder_finds_a_planted_circle():
    """The checker itself: a circle through a function-level import is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse("def f():\n    from .persistence import save_model\n"
                     "if TYPE_CHECKING:\n    from .core.base import LearnerBase\n"
                     "import importlib\nimportlib.import_module('.cli', 'tripletml')\n")
    targets = _import_targets("tripletml.x", False, tree, _modules())
    assert targets == {"tripletml.persistence", "tripletml.core.base", "tripletml.cli"}


def test_graph_sees_the_known_function_level_imports():
    graph = import_graph()
    assert "tripletml.core.model_writer" in graph["tripletml.core.base"]    # inside LearnerBase.save
    assert "tripletml.cli.search" in graph["tripletml.cli"]       # inside build_parser
    assert "tripletml.cli.data" in graph["tripletml.cli.search"]
    assert "tripletml.core.base" in graph["tripletml"]                  # the lazy __getattr__


def test_import_graph_has_no_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_import_graph_has_no_circle_through_the_registry():
    """With the registry's lazy lookup of learner classes counted as edges."""
    cycle = find_cycle(import_graph(registry=True))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_module_imports_the_package_root():
    """The root imports everything lazily; a module importing it back would
    close a circle through the lazy ``__getattr__``."""
    graph = import_graph()
    offenders = sorted(m for m, deps in graph.items() if "tripletml" in deps)
    assert offenders == []


def test_persistence_is_typed_against_a_protocol():
    from tripletml import persistence
    from tripletml.registry import entries

    graph = import_graph(registry=True)
    assert "tripletml.core.base" not in graph["tripletml.persistence"]
    # the writer needs no learner: only the file helpers, which import nothing of the package
    assert graph["tripletml.core.model_writer"] == {"tripletml.core.files"}
    assert graph["tripletml.core.files"] == set()
    for e in entries():
        assert isinstance(e.make(), persistence.SavableModel), e.name


#: The checks that need an interpreter where no tripletml module was ever
#: imported, as code that prints its result (JSON) on its last line.
_FRESH_CHECKS = {
    "learners": (
        "import json, sys, tripletml\n"
        "assert tripletml.__file__.startswith(%r), tripletml.__file__\n"
        "before = sorted(m for m in sys.modules if m.startswith('tripletml.algorithms.'))\n"
        "numba = 'numba' in sys.modules\n"
        "from tripletml import OASIS\n"
        "after = sorted(m for m in sys.modules if m.startswith('tripletml.algorithms'))\n"
        "print(json.dumps({'before': before, 'after': after,"
        " 'numba': numba, 'name': OASIS.__module__}))\n" % str(PKG)),
    "subpackages": (
        "import json, tripletml\n"
        "bad = []\n"
        "for n in %r:\n"
        "    try:\n"
        "        getattr(tripletml, n)\n"
        "    except AttributeError:\n"
        "        bad.append(n)\n"
        "print(json.dumps(bad))\n" % (
            sorted(p.stem for p in PKG.glob("*.py") if not p.stem.startswith("_")) + sorted(
                p.name for p in PKG.iterdir() if (p / "__init__.py").exists()))),
    "moved": (
        "import json, warnings, importlib, tripletml\n"
        "from tripletml._moved import MOVED\n"
        "res = {}\n"
        "for old, new in MOVED.items():\n"
        "    with warnings.catch_warnings(record=True) as w:\n"
        "        warnings.simplefilter('always')\n"
        "        mod = importlib.import_module(old)\n"
        "    res[old] = [mod is importlib.import_module(new), [str(x.message) for x in w]]\n"
        "print(json.dumps(res))\n"),
}

#: One fresh interpreter for all of them (tests/_fork_each.py): it imports
#: the third-party libraries only (numpy, SciPy, scikit-learn: never numba,
#: never tripletml), then runs each check in its own forked copy with fresh
#: globals -- a copy in which no tripletml module was ever imported, whatever
#: the other checks import.
_FRESH_PRELUDE = """
import sys
import numpy, scipy.sparse, scipy.linalg, sklearn.base, sklearn.utils.validation
import sklearn.model_selection, sklearn.preprocessing, sklearn.neighbors, sklearn.metrics
loaded = [m for m in sys.modules if m.split(".")[0] in ("tripletml", "numba")]
assert not loaded, loaded
"""


@functools.lru_cache(maxsize=None)
def _fresh_run() -> tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    script = _fork_each.script(_FRESH_PRELUDE, _FRESH_CHECKS, fresh_globals=True)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def _fresh(name: str) -> str:
    """The last line printed by ``_FRESH_CHECKS[name]`` in an interpreter
    that had imported no tripletml module (one run, shared by the tests)."""
    code, stdout, stderr = _fresh_run()
    lines = stdout.splitlines()
    begin, end = f"BEGIN {name}", f"END {name} 0"
    assert begin in lines and end in lines, (
        f"check {name!r} failed (interpreter exit status {code})\n{stdout}\n{stderr[-3000:]}")
    section = lines[lines.index(begin) + 1:lines.index(end)]
    assert section, (name, stdout, stderr[-3000:])
    return section[-1]


def test_import_tripletml_loads_no_learner_until_asked():
    out = json.loads(_fresh("learners"))
    assert out["before"] == []
    assert out["numba"] is False        # not even the shared Numba kernels
    assert "tripletml.algorithms.oasis.estimator" in out["after"]
    assert out["name"] == "tripletml.algorithms.oasis.estimator"


def test_every_public_name_resolves():
    import tripletml
    from tripletml.registry import FEATURE_KINDS, learner_names

    for name in tripletml.__all__:
        assert getattr(tripletml, name) is not None, name
    assert set(learner_names(FEATURE_KINDS)) <= set(tripletml.__all__)
    assert {"save_model", "load_model", "AutoSimilarity", "LearnerBase"} <= set(tripletml.__all__)
    assert set(tripletml.__all__) <= set(dir(tripletml))
    from tripletml import OASIS, load_model, save_model  # noqa: F401
    assert tripletml.OASIS is OASIS
    assert tripletml.search.index.__name__ == "tripletml.search.index"
    with pytest.raises(AttributeError, match="no attribute 'NoSuchLearner'"):
        tripletml.NoSuchLearner


def _public_api_violations(source: str, module: str, is_pkg: bool = False) -> list[str]:
    """Imports of private tripletml names (``_x``) or private modules, other
    than the reproduce package's own helpers (``tripletml.reproduce._common``)
    and the version string (``tripletml._version``, ``tripletml.__version__``)."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            target = _absolute(module, is_pkg, node.level, node.module)
            fulls = [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            fulls = [a.name for a in node.names]
        else:
            continue
        for full in fulls:
            if not full.startswith("tripletml"):
                continue
            if full.startswith("tripletml.reproduce") or full.startswith("tripletml._version"):
                continue
            if any(part.startswith("_") for part in full.split(".")):
                bad.append(f"{module}: {full}")
    return bad


def test_reproductions_use_public_names_only():
    bad = []
    for p in sorted((PKG / "reproduce").glob("*.py")):
        is_pkg = p.stem == "__init__"
        module = "tripletml.reproduce" + ("" if is_pkg else f".{p.stem}")
        bad += _public_api_violations(p.read_text(), module, is_pkg)
    assert bad == []


def test_public_api_checker_flags_private_imports():
    src = ("from ..metrics import _topk_sorted\nfrom ..core._validation import check_X\n"
           "from ..metrics import evaluate_retrieval\nfrom ._common import run_jobs\n"
           "import tripletml._moved\n")
    bad = _public_api_violations(src, "tripletml.reproduce.probe")
    assert bad == ["tripletml.reproduce.probe: tripletml.metrics._topk_sorted",
                   "tripletml.reproduce.probe: tripletml.core._validation.check_X",
                   "tripletml.reproduce.probe: tripletml._moved"]


def test_every_subpackage_is_an_attribute_of_a_fresh_import():
    """``import tripletml; tripletml.core.base`` works whatever was imported
    before (the lazy table lists every public module of the package)."""
    out = json.loads(_fresh("subpackages"))
    assert out == []


def test_the_moved_module_paths_of_0_1_import_with_a_warning():
    """The 0.1 public module paths give the modules at their new place, with
    a FutureWarning naming it; a 0.1 pickle (class path
    ``tripletml.learners.oasis``) loads as the same class."""
    import pickle
    import warnings

    import tripletml
    from tripletml._moved import MOVED

    out = json.loads(_fresh("moved"))
    for old, (same, messages) in out.items():
        assert same, old
        assert any(MOVED[old] in m for m in messages), (old, messages)
    est = tripletml.OASIS(n_triplets=50, random_state=0).fit(*_toy())
    # protocol 2 names classes with GLOBAL opcodes (plain text, no lengths)
    blob = pickle.dumps(est, protocol=2).replace(b"tripletml.algorithms.oasis.estimator",
                                     b"tripletml.learners.oasis")
    assert b"tripletml.learners.oasis" in blob
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        back = pickle.loads(blob)
    assert type(back) is tripletml.OASIS
    np.testing.assert_array_equal(back.W_, est.W_)
    with pytest.raises(ModuleNotFoundError):
        __import__("tripletml.solvers.oasis")


def _toy():
    rng = np.random.default_rng(0)
    return rng.normal(size=(20, 3)), np.arange(20) % 2


# ---------------------------------------------------------------------------
# the layers point one way (issue 37, item 1)
# ---------------------------------------------------------------------------
#: the shared layers: they serve the algorithms and never reach back into them
LOWER_LAYERS = ("tripletml.core", "tripletml.engine", "tripletml.distributed",
                "tripletml.linalg")
ALGORITHMS = "tripletml.algorithms"


def _under(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``"a -> b"`` for every import (any level, in functions too) of an
    algorithm module ``b`` by a module ``a`` of the lower layers."""
    return sorted(f"{m} -> {t}" for m, deps in graph.items() if _under(m, LOWER_LAYERS)
                  for t in deps if _under(t, (ALGORITHMS,)))


def _named_modules(tree: ast.AST) -> list[str]:
    """String constants that are exactly the dotted name of an algorithm
    module (what ``importlib.import_module(TABLE[name])`` would load,
    invisible to the import graph); docstrings and messages do not match."""
    return sorted(node.value for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and re.fullmatch(r"tripletml\.algorithms(\.\w+)+", node.value))


def test_lower_layers_import_no_algorithm():
    """No module of core, engine, distributed or linalg imports a module of
    tripletml.algorithms (module level, in functions, by constant name): an
    algorithm hands its strategy and model kind to them."""
    assert _layer_violations(import_graph()) == []
    named = []
    for m, (path, _) in _modules().items():
        if _under(m, LOWER_LAYERS):
            named += [f"{m}: {n}" for n in _named_modules(_tree(path))]
    assert named == []


def test_layer_check_finds_planted_arrows():
    mods = _modules()
    src = ("def f():\n    from tripletml.algorithms.oasis.kernels import oasis_margins\n"
           "from ..algorithms.sdca import distributed\n")
    graph = {"tripletml.distributed.probe": _import_targets(
        "tripletml.distributed.probe", False, ast.parse(src), mods),
        "tripletml.algorithms.oasis.probe": {"tripletml.distributed.mixing"}}
    assert _layer_violations(graph) == [
        "tripletml.distributed.probe -> tripletml.algorithms.oasis.kernels",
        "tripletml.distributed.probe -> tripletml.algorithms.sdca.distributed"]
    table = ast.parse('"""See tripletml.algorithms.sdca.distributed."""\n'
                      'STRATEGIES = {"cocoa": "tripletml.algorithms.sdca.distributed"}\n')
    assert _named_modules(table) == ["tripletml.algorithms.sdca.distributed"]


def _algorithm_of(module: str) -> str | None:
    """``"oasis"`` for ``tripletml.algorithms.oasis.estimator``, else None."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["tripletml", "algorithms"] else None


def _root_names() -> dict[str, str]:
    """The package root's lazy names (learners through the registry) ->
    their modules."""
    return dict(_root_table())


@functools.lru_cache(maxsize=None)
def _root_table() -> tuple[tuple[str, str], ...]:
    import tripletml
    from tripletml.registry import REGISTRY

    out = {n: f"tripletml.{m}" for n, m in tripletml._LAZY_NAMES.items()}
    out.update({e.name: f"tripletml.{e.module}" for e in REGISTRY})
    return tuple(out.items())


def _foreign_isinstance(source: str, module: str, is_pkg: bool = False) -> list[str]:
    """``isinstance`` / ``issubclass`` tests of ``module`` against a class
    of an algorithm's folder other than its own: a name imported from
    ``tripletml.algorithms.<name>...`` (or from the package root, which
    hands out the learners), or an attribute of an imported algorithm
    module (or of ``tripletml``)."""
    own = _algorithm_of(module)
    mods, root = _modules(), _root_names()
    tree = _parse(source)
    names: dict[str, str] = {}        # local class name -> algorithm folder
    modules: dict[str, str] = {}      # local module alias -> algorithm folder
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _absolute(module, is_pkg, node.level, node.module)
            for a in node.names:
                full = f"{target}.{a.name}"
                if full in mods:
                    algo, table = _algorithm_of(full), modules
                elif target == "tripletml" and a.name in root:
                    algo, table = _algorithm_of(root[a.name]), names
                else:
                    algo, table = _algorithm_of(target), names
                if algo is not None:
                    table[a.asname or a.name] = algo
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and _algorithm_of(a.name) is not None:
                    modules[a.asname] = _algorithm_of(a.name)
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2):
            continue
        classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
        for cls in classes:
            algo = None
            if isinstance(cls, ast.Name):
                algo = names.get(cls.id)
            elif isinstance(cls, ast.Attribute) and isinstance(cls.value, ast.Name):
                if cls.value.id == "tripletml" and cls.attr in root:
                    algo = _algorithm_of(root[cls.attr])
                else:
                    algo = modules.get(cls.value.id)
            if algo is not None and algo != own:
                bad.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    return bad


def test_no_isinstance_on_an_algorithm_outside_its_folder():
    """Only an algorithm's own folder tests its classes with isinstance: the
    shared code asks the learner what it is (``_model_kind``,
    ``_partitioned_strategy``)."""
    bad = []
    for m, (path, is_pkg) in _modules().items():
        bad += _foreign_isinstance(_source(path), m, is_pkg)
    assert bad == []


def test_isinstance_check_finds_planted_tests():
    src = ("from tripletml.algorithms.factored.estimator import FactoredBilinearMixin\n"
           "from tripletml.algorithms.sml import estimator as sml\n"
           "from tripletml import OASIS, load_model\n"
           "import tripletml\n"
           "def kind(x):\n"
           "    if isinstance(x, FactoredBilinearMixin):\n"
           "        return 1\n"
           "    if isinstance(x, (sml.SML, int)):\n"
           "        return 2\n"
           "    return isinstance(x, OASIS) or isinstance(x, tripletml.SDCA) or isinstance(x, str)\n")
    bad = _foreign_isinstance(src, "tripletml.distributed.probe")
    assert [b.split(":")[1] for b in bad] == ["6", "8", "10", "10"], bad
    # inside the algorithm's own folder the test is its own business
    own = ("from tripletml.algorithms.sml.estimator import SML\n"
           "def f(x):\n    return isinstance(x, SML)\n")
    assert _foreign_isinstance(own, "tripletml.algorithms.sml.distributed") == []
    assert _foreign_isinstance(own, "tripletml.algorithms.lowrank_dml.distributed") != []
