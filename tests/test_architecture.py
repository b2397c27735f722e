"""The package's import structure: no import cycles, the layering contracts, no lazy imports.

The import graph comes from grimp; it counts every import, at module level, inside functions and
under ``TYPE_CHECKING``, so an import cannot hide a cycle by moving into a function.
"""

from __future__ import annotations

import ast
import copy
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import grimp
import pytest

PACKAGE = "convengine"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

KNOWN_CYCLES: tuple[frozenset[str], ...] = ()

# (importer, imported): the importer must not reach the imported package, directly or through others.
FORBIDDEN: tuple[tuple[str, str], ...] = (
    *((low, "convengine.nodes") for low in ("convengine.llm", "convengine.tools", "convengine.rules",
                                            "convengine.templates", "convengine.registry",
                                            "convengine.config_loader", "convengine.audit",
                                            "convengine.memory.secrets", "convengine.memory.namespaces")),
    *((low, f"convengine.graph.{part}") for low in ("convengine.nodes", "convengine.llm", "convengine.tools")
      for part in ("builder", "plan", "wrapper")),
    ("convengine.llm", "convengine.tools"),
    ("convengine.tools", "convengine.llm"),
    *(("convengine.nodes", high) for high in ("convengine.api", "convengine.cli", "convengine.engine",
                                              "convengine.studio", "convengine.testing")),
)

# Imports inside functions are for optional dependencies (and modules some platforms lack) only.
OPTIONAL = ("psycopg", "psycopg_pool", "langgraph.checkpoint.postgres", "langgraph.store.postgres",
            "langchain_openai", "mcp", "pypdf", "uvicorn", "fastapi", "fastapi_offline", "readline", "resource",
            "pyseccomp")  # pyseccomp loads libseccomp.so.2 when imported, which a host may lack
LAZY_ALLOWED = {
    "cli/__init__.py",  # the console entry point: importing convengine.cli must not build the typer app
    # the CLI's commands import what they run, so `convengine --help` starts in a tenth of a second
    "cli/app.py", "cli/knowledge.py", "cli/guard.py", "cli/export.py", "cli/versions.py",
    "__init__.py",  # `import convengine` resolves its public names on first use (start-up time)
    # run_file opens engines, and the engine imports the runner (publishing runs conversation tests)
    "testing/__init__.py",
}


@cache
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE)


def strongly_connected(g: grimp.ImportGraph) -> list[frozenset[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that import each other (size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(g.modules):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(g.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check below can fail: a module pair that imports each other is reported."""
    g = copy.deepcopy(graph())
    assert not any("convengine.vocab" in c for c in strongly_connected(g))
    g.add_import(importer="convengine.vocab", imported="convengine.nodes.turn")
    cycles = strongly_connected(g)
    assert any({"convengine.vocab", "convengine.nodes.turn"} <= c for c in cycles)


def test_no_import_cycles() -> None:
    cycles = [c for c in strongly_connected(graph()) if c not in KNOWN_CYCLES]
    assert not cycles, "import cycles:\n" + "\n".join(", ".join(sorted(c)) for c in cycles)


@pytest.mark.parametrize(("importer", "imported"), FORBIDDEN, ids=[f"{a}->{b}" for a, b in FORBIDDEN])
def test_layering_contract(importer: str, imported: str) -> None:
    g = graph()
    assert importer in g.modules and imported in g.modules
    chains = g.find_shortest_chains(importer, imported, as_packages=True)
    assert not chains, f"{importer} must not import {imported}; it does through:\n" + "\n".join(
        " -> ".join(chain) for chain in sorted(chains))


def _lazy_imports(path: Path) -> Iterator[tuple[int, str]]:
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.module:
                    yield node.lineno, node.module
                elif isinstance(node, ast.Import):
                    yield from ((node.lineno, alias.name) for alias in node.names)


def test_imports_inside_functions_are_for_optional_dependencies_only() -> None:
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where in LAZY_ALLOWED:
            continue
        for line, module in _lazy_imports(path):
            if not any(module == opt or module.startswith(opt + ".") for opt in OPTIONAL):
                wrong.append(f"{PACKAGE}/{where}:{line} imports {module} inside a function")
    assert not wrong, "\n".join(wrong)


TYPE_CHECKING_ALLOWED = {
    # Services names the engine's collaborators; importing them would load httpx, psycopg and numpy at
    # `import convengine` (the engine imports them when it opens). The graph above still counts these.
    "nodes/context.py",
    # packages whose public names load on first use (convengine/_lazy.py): the block names them for
    # type checkers, and the graph above counts them
    "config_loader/__init__.py", "rules/__init__.py", "api/__init__.py", "engine/__init__.py",
}


def test_no_type_checking_imports_of_the_package() -> None:
    """An import only under TYPE_CHECKING is how a cycle hides from the interpreter; types come from
    the narrow session protocols (llm/session.py, tools/base.py, registry.py, templates/variables.py)."""
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where in LAZY_ALLOWED | TYPE_CHECKING_ALLOWED:
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                wrong.append(f"{PACKAGE}/{where}:{node.lineno}")
    assert not wrong, "TYPE_CHECKING imports:\n" + "\n".join(wrong)


IMPORT_EACH = """
import importlib, pkgutil, sys
import convengine
names = sorted(m.name for m in pkgutil.walk_packages(convengine.__path__, "convengine.")
               if not m.name.endswith("__main__"))
failed = []
for name in names:
    for loaded in [m for m in sys.modules if m == "convengine" or m.startswith("convengine.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        if "circular import" in str(exc) or "partially initialized" in str(exc):
            failed.append(f"{name}: {exc}")
    except BaseException:
        pass  # optional dependencies and platform modules are not this test's business
print("\\n".join(failed))
"""


def test_every_module_imports_on_its_own_first() -> None:
    """Package ``__init__`` files run when a submodule is imported, which the import graph does not
    show: import each module first, in a fresh ``convengine``, so no order of imports meets a
    partially initialised module."""
    done = subprocess.run([sys.executable, "-c", IMPORT_EACH], capture_output=True, text=True, timeout=300,
                          cwd=ROOT.parent, check=True)
    assert done.stdout.strip() == ""
