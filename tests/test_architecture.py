"""The package's import structure: the layers and the rings import-linter checks, no lazy imports.

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``): every package imports only the
layers below it, and no sibling modules or packages import each other in a ring, at any depth.
import-linter builds its graph with grimp, which counts every import, at module level, inside
functions and under ``TYPE_CHECKING``, so an import cannot hide from the contracts by moving into a
function. ``scripts/test`` runs ``lint-imports`` before the suite; the tests below run the same
contracts, and show they fail on an import against them.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "convengine"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
PROJECT = ROOT.parent

# Imports inside functions are for optional dependencies (and modules some platforms lack) only.
OPTIONAL = ("psycopg", "psycopg_pool", "langgraph.checkpoint.postgres", "langgraph.store.postgres",
            "langchain_openai", "mcp", "pypdf", "uvicorn", "fastapi", "fastapi_offline", "readline", "resource",
            "pyseccomp", "apsw", "sqlite_vec")  # pyseccomp loads libseccomp.so.2 when imported, which a host may lack
LAZY_ALLOWED = {
    "cli/__init__.py",  # the console entry point: importing convengine.cli must not build the typer app
    # the CLI's commands import what they run, so `convengine --help` starts in a tenth of a second
    "cli/app.py", "cli/knowledge.py", "cli/guard.py", "cli/export.py", "cli/versions.py", "cli/schema.py", "cli/chains.py",
    "cli/replay.py",

    "cli/stats.py",
    "__init__.py",  # `import convengine` resolves its public names on first use (start-up time)
    # run_file opens engines; the pytest plugin's package stays importable without the engine
    "testing/__init__.py",
}


LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _lint_imports(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--no-cache"], check=False, cwd=project,
                          capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(project), "PATH": "/usr/bin:/bin"})


def test_import_contracts_hold() -> None:
    done = _lint_imports(PROJECT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


@pytest.mark.parametrize(("module", "probe", "broken"), [
    # a rule (configuration layer) reaching up into the graph (turn layer)
    ("rules/scope.py", "import convengine.graph.builder", "Each package imports only the layers below it BROKEN"),
    # the steps' shared module importing a step that imports it
    ("nodes/common.py", "import convengine.nodes.response", "import each other in a ring, at any depth BROKEN"),
])
def test_import_contracts_catch_an_import_against_them(tmp_path: Path, module: str, probe: str, broken: str) -> None:
    """The contracts can fail: a copy of the package with one import against them is refused."""
    copy = tmp_path / "project"
    shutil.copytree(ROOT, copy / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copy(PROJECT / "pyproject.toml", copy / "pyproject.toml")
    target = copy / PACKAGE / module
    target.write_text(target.read_text() + f"\n{probe}  # probe\n")
    done = _lint_imports(copy)
    assert done.returncode != 0
    assert broken in done.stdout, done.stdout


def test_every_package_is_in_a_layer() -> None:
    """``exhaustive``: a new package or top-level module must be given its layer."""
    contracts = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")
    assert layers["exhaustive"] is True
    listed = {name.strip() for layer in layers["layers"] for name in layer.split("|")}
    present = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert listed == present


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
    # packages whose public names load on first use (convengine/_internal/lazy.py): the block names them for
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


def test_every_package_has_its_tests_folder() -> None:
    """Tests live beside the package whose behaviour they show: ``tests/<package>/`` (``_internal``
    is tested in ``tests/internal/``); the scenario, security and fuzz folders cross packages."""
    tests = PROJECT / "tests"
    packages = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists())
    missing = [name for name in packages if not (tests / name.lstrip("_") / "__init__.py").exists()]
    assert not missing, f"packages without a tests/<package>/ folder: {missing}"


def test_every_session_protocol_extends_the_turn_view() -> None:
    """What tasks, templates, LLM calls and tools see of a turn starts from one base (convengine/turn_view.py):
    the settings, the conversation, intent and state, params and context read-only, and the audit."""
    from convengine.llm.session import LlmSession, PromptSession
    from convengine.nodes.turn import Turn
    from convengine.registry import TaskSession
    from convengine.templates.variables import TemplateSession
    from convengine.tools.base import ToolSession
    from convengine.turn_view import TurnView

    protocols = (LlmSession, PromptSession, TaskSession, TemplateSession, ToolSession)
    assert [p.__name__ for p in protocols if TurnView not in p.__mro__] == []
    members = {name for p in protocols for name in vars(p) if not name.startswith("_")}
    assert sorted(name for name in members | set(vars(TurnView)) if not hasattr(Turn, name)
                  and not name.startswith("_")) == []
