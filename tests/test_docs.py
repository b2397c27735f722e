"""The documentation: the site builds strictly and offline, the generated reference is current, and
every code block of the README and the tutorial runs.

Code blocks: ``python`` blocks of one page run in order in one namespace; ``bash`` blocks run with
``bash -e`` (``convengine`` and ``.venv/bin/convengine`` are this checkout's CLI); both in a temporary
directory that holds a link to ``examples/``. A block preceded by ``<!-- docs-test: skip REASON -->``
is not run (servers, installs); ``<!-- docs-test: part-of FILE -->`` blocks, joined, must be FILE's text.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient import NotebookClient

from convengine import Engine

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 300

_FENCE = re.compile(r"^(?P<marker><!-- docs-test: (?P<kind>skip|part-of) (?P<arg>[^>]*?) -->\n)?"
                    r"```(?P<lang>[\w-]*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    body: str
    marker: str | None
    arg: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text(encoding="utf-8")
    return [Block(page, text.count("\n", 0, m.start("lang")) + 1, m["lang"], m["body"], m["kind"], (m["arg"] or "").strip())
            for m in _FENCE.finditer(text)]


def runnable(page: str, lang: str) -> list[Block]:
    return [b for b in blocks(page) if b.lang == lang and b.marker is None]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory like the repository root: examples/, and a .venv/bin/convengine running this checkout."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bindir = tmp_path / ".venv" / "bin"
    bindir.mkdir(parents=True)
    for name, module in (("convengine", "convengine.cli"), ("python", None)):
        target = bindir / name
        command = f'"{sys.executable}" -m {module}' if module else f'"{sys.executable}"'
        target.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        target.chmod(0o755)
    return tmp_path


def run_bash(block: Block, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{cwd / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.body], cwd=cwd, env=env, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S, check=False)


def run_python(page: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [m for m in sys.modules if m.endswith(("_scripted", "_tasks"))]:
        monkeypatch.delitem(sys.modules, name)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    try:
        for block in runnable(page, "python"):
            try:
                exec(compile(block.body, block.id, "exec"), namespace)  # noqa: S102 - the docs' own code
            except Exception as exc:
                raise AssertionError(f"python block at {block.id} failed: {exc!r}\n{block.body}") from exc
    finally:
        for value in namespace.values():
            if isinstance(value, Engine):
                value.close()  # blocks may leave their engine open, as a reader's session would


PAGES_WITH_CODE = ["README.md", "docs/tutorial.md", "docs/getting-started.md", "docs/templates.md",
                   "docs/http-api.md"]
BASH_BLOCKS = [b for page in PAGES_WITH_CODE for b in runnable(page, "bash")]


# --- the pages' code --------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES_WITH_CODE)
def test_python_blocks_run(page: str, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert runnable(page, "python"), f"{page} has no python block"
    run_python(page, workdir, monkeypatch)


@pytest.mark.parametrize("block", BASH_BLOCKS, ids=[b.id for b in BASH_BLOCKS])
def test_bash_blocks_run(block: Block, workdir: Path) -> None:
    done = run_bash(block, workdir)
    assert done.returncode == 0, f"{block.id} exited {done.returncode}:\n{block.body}\n{done.stdout}\n{done.stderr}"


def test_skipped_blocks_are_few_and_say_why() -> None:
    skipped = [b for page in PAGES_WITH_CODE for b in blocks(page) if b.marker == "skip"]
    assert all(b.arg for b in skipped), [b.id for b in skipped if not b.arg]
    assert len(skipped) <= 6, [b.id for b in skipped]


def test_tutorial_shows_exactly_the_pizza_pack_and_its_tests() -> None:
    parts: dict[str, list[str]] = {}
    for block in blocks("docs/tutorial.md"):
        if block.marker == "part-of":
            parts.setdefault(block.arg, []).append(block.body)
    assert set(parts) == {"examples/pizza.yaml", "examples/pizza.conv.yaml"}
    for path, bodies in parts.items():
        assert "\n".join(bodies) == (ROOT / path).read_text(encoding="utf-8"), f"the tutorial's {path} differs"


def test_tutorial_chat_transcript_is_what_chat_prints(workdir: Path) -> None:
    chat = next(b for b in runnable("docs/tutorial.md", "bash") if "convengine chat" in b.body)
    shown = next(b for b in blocks("docs/tutorial.md") if b.lang == "text" and b.body.startswith("you>")).body
    printed = run_bash(chat, workdir).stdout
    assert shown.strip() in printed, printed


def test_the_pizza_conversation_tests_pass_through_the_cli(workdir: Path) -> None:
    done = run_bash(Block("cli", 0, "bash", "convengine test examples/\n", None, ""), workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"PASS pizza\.conv\.yaml :: order a pizza in two turns", done.stdout)
    assert " 0 failed" in done.stdout


# --- the site -------------------------------------------------------------------------------


def test_generated_reference_is_current() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr + done.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import importlib.util

    assert importlib.util.find_spec("material"), "mkdocs-material is missing: pip install -e '.[dev]' (or '.[docs]')"
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert not warnings, warnings
    return out


def test_site_builds_strictly(site: Path) -> None:
    for page in ("index.html", "tutorial.html", "architecture.html", "reference/tables.html",
                 "reference/settings.html", "decisions.html", "security.html", "performance.html"):
        assert (site / page).is_file(), page


def test_api_reference_covers_the_public_python_api(site: Path) -> None:
    """Every name of ``convengine.__all__`` and every public member of the Engine has a rendered entry."""
    import convengine

    page = (site / "reference" / "api.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="(convengine\.[\w.]+)"', page))
    assert {f"convengine.{name}" for name in convengine.__all__} <= anchors, set(convengine.__all__) - {
        a.removeprefix("convengine.") for a in anchors}
    members = {name for name in vars(Engine) if not name.startswith("_")}
    assert len(members) > 50
    assert {f"convengine.Engine.{name}" for name in members} <= anchors
    process = page[page.index('id="convengine.Engine.process"'):page.index('id="convengine.Engine.aprocess"')]
    assert "conversation_id" in process and "Raises" in process  # the docstring's sections, rendered


def test_site_needs_no_network(site: Path) -> None:
    external = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""", re.IGNORECASE)
    offenders = {str(p.relative_to(site)): external.findall(p.read_text(encoding="utf-8"))
                 for p in site.rglob("*.html")}
    assert not {k: v for k, v in offenders.items() if v}
    assert "fonts.googleapis" not in "".join(p.read_text(encoding="utf-8") for p in site.rglob("*.html"))


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, str):
            listed.add(node)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config["nav"])
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages == listed


def test_docs_cite_nothing_a_user_does_not_have() -> None:
    """Docs, docstrings and examples never point at notes outside this repository."""
    banned = re.compile(r"reference §|DESIGN\.md|/work/shared|(?<![.\w])seeds?\b|\bseed \d", re.IGNORECASE)
    texts = {p: p.read_text(encoding="utf-8") for p in [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]}
    found = {str(p.relative_to(ROOT)): banned.findall(t) for p, t in texts.items()}
    in_code = re.compile(r"reference §|DESIGN(?:\.md| §)|/work/shared|\bseed \d{3}\b")
    code = [*(ROOT / "convengine").rglob("*.py"), *(ROOT / "examples").rglob("*.yaml"), *(ROOT / "bench").rglob("*.py")]
    found.update({str(p.relative_to(ROOT)): in_code.findall(p.read_text(encoding="utf-8")) for p in code})
    assert not {k: v for k, v in found.items() if v}


def test_decisions_keep_one_line_per_decision() -> None:
    lines = (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8").splitlines()
    body = lines[next(i for i, line in enumerate(lines) if line.startswith("## ")):]
    assert sum(line.startswith("## ") for line in body) >= 6
    assert sum(line.startswith("- ") for line in body) >= 70
    assert all(line.startswith(("## ", "- ")) for line in body if line.strip()), "sections of one-line decisions"


# --- JSONPath semantics as documented --------------------------------------------------------


def jsonpath_table() -> tuple[list[str], dict[str, list[bool]]]:
    """The matrix in docs/jsonpath.md: column values of ``x`` and, per path, match or not."""
    text = (ROOT / "docs" / "jsonpath.md").read_text(encoding="utf-8")
    start = text.index("<!-- jsonpath-matrix -->")
    rows = [r for r in text[start:].splitlines()[1:] if r.startswith("|")]
    header = [c.strip().strip("`") for c in rows[0].strip("|").split("|")][1:]
    matrix = {}
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        matrix[cells[0].strip("`")] = [c == "yes" for c in cells[1:]]
    return header, matrix


_CASES = {"missing": None, "null": {"x": None}, "false": {"x": False}, "true": {"x": True}, "0": {"x": 0},
          "\"\"": {"x": ""}, "\"late\"": {"x": "late"}, "[]": {"x": []}}


def test_jsonpath_matrix_is_what_rules_do(db_url: str) -> None:
    header, matrix = jsonpath_table()
    assert header == [f"x is {name}" if name == "missing" else f"x = {name}" for name in _CASES]
    paths = list(matrix)
    pack = {
        "ce_intent": [{"intent_code": "ANYTHING", "description": "unused"}],
        "ce_rule": [{"rule_id": i, "intent_code": "ANY", "state_code": "ANY", "rule_type": "JSON_PATH",
                     "match_pattern": p, "action": "SET_INPUT_PARAM", "action_value": f"hit{i}"}
                    for i, p in enumerate(paths, start=1)],
        "ce_response": [{"state_code": "ANY", "exact_text": "ok"}],
    }
    engine = Engine.open(db_url, pack=pack)
    try:
        for column, params in enumerate(_CASES.values()):
            result = engine.process("hi", input_params=params or {})
            fired = {e.payload["ruleId"] for e in engine.audit(result.conversation_id)
                     if e.stage == "RULE_MATCH (RulesStep)"}
            expected = {i for i, p in enumerate(paths, start=1) if matrix[p][column]}
            assert fired == expected, (header[column], sorted(fired), sorted(expected))
    finally:
        engine.close()


# --- notebooks ---------------------------------------------------------------------------------


def test_notebook_runs_from_another_directory(tmp_path: Path) -> None:
    notebook = nbformat.read(ROOT / "notebooks" / "01_quickstart.ipynb", as_version=4)
    NotebookClient(notebook, timeout=RUN_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


def test_nbconvert_executes_a_notebook_as_documented(tmp_path: Path) -> None:
    assert shutil.which("jupyter", path=str(Path(sys.executable).parent)), "nbconvert is missing: pip install -e '.[dev]'"
    command = textwrap.dedent(f"""
        cd {ROOT}
        {Path(sys.executable).parent}/jupyter nbconvert --to notebook --execute notebooks/02_rules_and_state_graph.ipynb \\
            --output-dir {tmp_path}
    """)
    done = subprocess.run(["bash", "-e", "-c", command], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "02_rules_and_state_graph.ipynb").is_file()


# --- the architecture page's layers ------------------------------------------------------------


def _gen_docs() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_layer_picture_draws_the_import_contract() -> None:
    """The picture of docs/architecture.md lists exactly the layers import-linter enforces, in order."""
    gen = _gen_docs()
    drawn = [layer for _, _, layers in gen.LAYER_GROUPS for layer in layers]  # type: ignore[attr-defined]
    assert drawn == gen.import_layers()  # type: ignore[attr-defined]


def test_conversation_test_format_shown_is_accepted(tmp_path: Path) -> None:
    from convengine.engine.conversation_specs import load_test_file

    shown = next(b for b in blocks("docs/conversation-tests.md") if b.lang == "yaml")
    (tmp_path / "shown.conv.yaml").write_text(shown.body, encoding="utf-8")
    spec = load_test_file(tmp_path / "shown.conv.yaml")
    expect = spec.tests[0].turns[0].expect
    assert expect.stages and expect.tool_calls and expect.error == "LLM_TIMEOUT"


# --- the reference's allowed values are what validation enforces ----------------------------------

_BASE_ROWS = {
    "ce_rule": {"intent_code": "PIZZA", "state_code": "MENU", "rule_type": "EXACT", "match_pattern": "ANY",
                "action": "SET_INPUT_PARAM", "action_value": "seen"},
    "ce_intent_classifier": {"intent_code": "PIZZA", "state_code": "MENU", "rule_type": "CONTAINS",
                             "pattern": "pizza", "priority": 1},
    "ce_policy": {"rule_type": "CONTAINS", "pattern": "password", "response_text": "No."},
    "ce_response": {"intent_code": "PIZZA", "state_code": "MENU", "response_type": "EXACT", "exact_text": "Hi"},
    "ce_prompt_template": {"intent_code": "PIZZA", "state_code": "MENU", "output_format": "TEXT"},
    "ce_mcp_tool": {"tool_code": "menu.lookup", "tool_group": "DB"},
    "ce_verbose": {"step_value": "$.a", "determinant": "x", "step_match": "EXACT"},
}
_FITTING = {  # other columns a value needs to be valid
    ("rule_type", "REGEX"): {"match_pattern": "pizza"},
    ("rule_type", "JSON_PATH"): {"match_pattern": "$.a"},
    ("rule_type", "CONTEXT_JSON_PATH"): {"match_pattern": "$.a"},
    ("action", "SET_STATE"): {"action_value": "MENU"},
    ("action", "SET_INTENT"): {"action_value": "PIZZA"},
    ("action", "SET_DIALOGUE_ACT"): {"action_value": "AFFIRM"},
    ("action", "SET_TASK"): {"action_value": "shop:order"},
    ("action", "SET_JSON"): {"action_value": "size:$.size"},
}
_ALLOWED = _gen_docs().ALLOWED_VALUES  # type: ignore[attr-defined]


def _violations_on(table: str, column: str, value: str) -> list[str]:
    from convengine import ConfigValidationError, validate_pack

    row = {**_BASE_ROWS[table], column: value, **_FITTING.get((column, value), {})}
    pack = {"ce_intent": [{"intent_code": "PIZZA", "description": "Order a pizza"}],
            "ce_rule": [_BASE_ROWS["ce_rule"]], "ce_response": [_BASE_ROWS["ce_response"]]}
    pack[table] = [row] if table not in ("ce_rule", "ce_response") else [*pack[table], row]
    try:
        validate_pack(pack)
    except ConfigValidationError as exc:
        return [v for v in exc.details["violations"] if f".{column}:" in v]
    return []


@pytest.mark.parametrize(("table", "column"), list(_ALLOWED), ids=[f"{t}.{c}" for t, c in _ALLOWED])
def test_reference_allowed_values_are_what_validation_accepts(table: str, column: str) -> None:
    for value in _ALLOWED[(table, column)]:
        assert _violations_on(table, column, value) == [], (table, column, value)
    refused = _violations_on(table, column, "NOT_A_" + column.upper())
    assert refused, f"{table}.{column} accepted a value the reference does not list"


def test_settings_reference_names_working_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from convengine import EngineSettings

    rows = [[c.strip().strip("`") for c in re.split(r"(?<!\\)\|", line.strip("|"))]
            for line in (ROOT / "docs" / "reference" / "settings.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")]
    rows = [row for row in rows if len(row) == 5]  # the settings tables (not the ce_config overrides)
    flags = [(key, env, default == "true") for key, kind, default, env, _ in rows if kind == "bool"]
    assert len(flags) > 30 and any(row[3] == "SCHEMA" for row in rows)
    for key, env, default in flags:
        monkeypatch.setenv(env, "false" if default else "true")
    settings = EngineSettings()
    for key, env, default in flags:
        value: object = settings
        for part in key.replace("-", "_").split("."):
            value = getattr(value, part)
        assert value is (not default), (key, env)
