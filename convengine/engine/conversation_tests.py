"""Running conversation tests: one engine per file, a fresh conversation per test, checks per turn."""

from __future__ import annotations

import json
import re
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from convengine.audit.events import AuditEvent
from convengine.audit.turns import last_turn, turn_steps
from convengine.catalog import stages as audit_stages
from convengine.catalog import state as keys
from convengine.catalog.errors import ConfigError, ConvEngineError, ToolError
from convengine.config_loader.companions import pack_options
from convengine.engine.conversation_specs import (
    ConversationTest,
    Expect,
    FlowExpectation,
    TestFile,
    ToolStub,
    Turn,
    load_test_file,
)
from convengine.engine.results import TurnResult
from convengine.knowledge import HashingEmbeddings, Knowledge
from convengine.llm.scripted import ScriptedLLM

_MISSING = object()


@dataclass
class TurnOutcome:
    index: int
    user: str
    result: TurnResult | None = None
    error: ConvEngineError | None = None
    events: list[AuditEvent] = field(default_factory=list)
    llm_sites: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    flow: dict[str, Any] = field(default_factory=dict)
    workflow: dict[str, Any] = field(default_factory=dict)

    def trace(self) -> str:
        """The turn's steps and their stages, one line per step (a failed step ends with its error)."""
        lines = []
        for step in turn_steps(self.events):
            stages = "".join(f" {stage['stage']}" for stage in step["stages"])
            failed = f" failed: {step['error']}" if step["status"] == "ERROR" else ""
            lines.append(f"  {step['step']}:{stages}{failed}")
        return "\n".join(lines)


@dataclass
class TestOutcome:
    file: Path
    name: str
    turns: list[TurnOutcome] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.error is None and all(not t.failures for t in self.turns)

    def report(self) -> str:
        """A readable account of what failed, with the failing turn's trace."""
        if self.error:
            return f"{self.name}: {self.error}"
        parts = []
        for turn in self.turns:
            if turn.failures:
                got = (f"{turn.result.intent}/{turn.result.state}: {turn.result.payload.value!r}" if turn.result
                       else f"error {turn.error.code.value}: {turn.error.message}" if turn.error else "nothing")
                parts.append(f"turn {turn.index} ({turn.user!r}) got {got}\n"
                             + "\n".join(f"  - {f}" for f in turn.failures) + "\n  trace:\n" + turn.trace())
        return f"{self.name}:\n" + "\n".join(parts)


class StubBoard:
    """Tool stubs of the test being run, and the calls they received."""

    def __init__(self) -> None:
        self.stubs: dict[str, list[ToolStub]] = {}
        self.counts: dict[str, int] = defaultdict(int)

    def load(self, stubs: dict[str, ToolStub | list[ToolStub]]) -> None:
        self.stubs = {code.lower(): (s if isinstance(s, list) else [s]) for code, s in stubs.items()}
        self.counts.clear()

    def handler(self, code: str) -> Any:
        def stub(args: dict[str, Any]) -> Any:
            replies = self.stubs.get(code.lower())
            if not replies:
                raise ToolError(f"conversation test: no stub for tool {code} in this test")
            n = self.counts[code.lower()]
            self.counts[code.lower()] += 1
            reply = replies[min(n, len(replies) - 1)]
            if reply.error:
                raise ToolError(reply.error)
            return reply.result

        return stub


class RunnableEngine(Protocol):
    """What a conversation test needs of an engine (``convengine.Engine``)."""

    def process(self, message: str, conversation_id: str | None = None,
                input_params: Mapping[str, Any] | None = None, reset: bool = False) -> TurnResult: ...

    def start(self, conversation_id: str | None = None,
              input_params: Mapping[str, Any] | None = None) -> TurnResult: ...

    def resume_from_handoff(self, conversation_id: str) -> TurnResult: ...

    def seed(self, conversation_id: str, *, context: Mapping[str, Any] | None = None,
             input_params: Mapping[str, Any] | None = None) -> str: ...

    def state(self, conversation_id: str) -> Mapping[str, Any]: ...

    def audit(self, conversation_id: str) -> list[AuditEvent]: ...

    @property
    def knowledge(self) -> Knowledge: ...

    def close(self) -> None: ...


OpenEngine = Callable[..., RunnableEngine]
"""Opens an engine on a URL with :meth:`convengine.Engine.open`'s options (``Engine.open``)."""


class FileRun:
    """Runs every test of one file on one engine, opened by ``open_engine`` (``Engine.open``: the
    runner is given it, since publishing a configuration version runs conversation tests from inside
    the engine)."""

    def __init__(self, spec: TestFile, url: str | None = None, *, open_engine: OpenEngine) -> None:
        self.spec = spec
        self.url = url
        self.open_engine = open_engine
        self.llm = ScriptedLLM()
        self.stubs = StubBoard()

    def _engine(self, workdir: Path) -> RunnableEngine:
        pack = self.spec.resolve(self.spec.pack)
        tasks = self.spec.resolve(self.spec.tasks) if self.spec.tasks else None
        options = pack_options(pack, tasks)
        codes = {code for test in self.spec.tests for code in test.tools}
        options["tools"] = {**dict(options.get("tools") or {}), **{c: self.stubs.handler(c) for c in codes}}
        if any(test.llm or test.llm_default is not None for test in self.spec.tests):
            options["llm"] = self.llm
        if self.spec.embeddings == "hashing":
            options["embeddings"] = HashingEmbeddings()
        url = self.url or f"sqlite:///{workdir / 'conversation-tests.db'}"
        options["replace"] = True  # a test run imports its file's pack, whatever a --url database held
        engine = self.open_engine(url, **options, **self.spec.settings)
        try:
            for kb, paths in self.spec.knowledge.items():
                report = engine.knowledge.ingest(kb, [self.spec.resolve(p) for p in paths])
                if not report.ok:
                    raise ConfigError(f"knowledge base {kb}: " + "; ".join(str(p) for p in report.failed))
        except BaseException:
            engine.close()
            raise
        return engine

    def run(self) -> list[TestOutcome]:
        with tempfile.TemporaryDirectory(prefix="convengine-tests-") as workdir:
            try:
                engine = self._engine(Path(workdir))
            except ConvEngineError as exc:
                assert self.spec.path is not None
                return [TestOutcome(self.spec.path, t.name, error=f"cannot open the engine: {exc.message}")
                        for t in self.spec.tests]
            try:
                return [self._run_test(engine, test) for test in self.spec.tests]
            finally:
                engine.close()

    def _run_test(self, engine: RunnableEngine, test: ConversationTest) -> TestOutcome:
        assert self.spec.path is not None
        outcome = TestOutcome(self.spec.path, test.name)
        started = time.perf_counter()
        kwargs = {"default": test.llm_default} if test.llm_default is not None else {}
        self.llm.load(test.llm, **kwargs)
        self.stubs.load(test.tools)
        cid = str(uuid.uuid4())
        if test.context or test.input_params:
            engine.seed(cid, context=test.context, input_params=test.input_params)
        for index, turn in enumerate(test.turns, start=1):
            outcome.turns.append(self._run_turn(engine, cid, index, turn))
            if outcome.turns[-1].failures:
                break
        outcome.seconds = time.perf_counter() - started
        return outcome

    def _run_turn(self, engine: RunnableEngine, cid: str, index: int, turn: Turn) -> TurnOutcome:
        outcome = TurnOutcome(index, turn.user)
        before = len(self.llm.calls)
        try:
            outcome.result = _send(engine, cid, turn)
        except ConvEngineError as exc:
            outcome.error = exc
        if turn.expect.flow is not None and outcome.error is None:
            outcome.flow = dict(engine.state(cid).get(keys.FLOW) or {})
        if turn.expect.workflow is not None and outcome.error is None:
            outcome.workflow = dict(engine.state(cid).get(keys.WORKFLOW) or {})
        outcome.llm_sites = [c.call.call_site for c in self.llm.calls[before:]]
        try:
            events = engine.audit(cid)
        except ConvEngineError:
            events = []
        outcome.events = last_turn(events)
        outcome.failures = check(turn.expect, outcome)
        return outcome


def _send(engine: RunnableEngine, cid: str, turn: Turn) -> TurnResult:
    if turn.event == "welcome":
        return engine.start(cid, turn.params or None)
    if turn.event == "handoff_resume":
        return engine.resume_from_handoff(cid)
    return engine.process(turn.user, cid, turn.params or None, turn.reset)


def run_file(path: str | Path, *, url: str | None = None, open_engine: OpenEngine) -> list[TestOutcome]:
    """Every test of one ``*.conv.yaml`` file (``convengine.testing.run_file`` supplies ``Engine.open``)."""
    return FileRun(load_test_file(path), url, open_engine=open_engine).run()


def discover(paths: list[str | Path]) -> list[Path]:
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(path.rglob("*.conv.yaml")))
        else:
            found.append(path)
    return found


# --- expectations --------------------------------------------------------------------------


def check(expect: Expect, turn: TurnOutcome) -> list[str]:
    failures: list[str] = []
    if expect.error is not None or turn.error is not None:
        got = turn.error.code.value if turn.error else None
        if got != expect.error:
            detail = f" ({turn.error.message})" if turn.error else ""
            failures.append(f"error: expected {expect.error or 'none'}, got {got or 'none'}{detail}")
        if turn.error is not None:
            return failures
    result = turn.result
    assert result is not None
    for name in ("intent", "state", "status"):
        wanted = getattr(expect, name)
        if wanted is not None and getattr(result, name) != wanted:
            failures.append(f"{name}: expected {wanted!r}, got {getattr(result, name)!r}")
    failures += _payload(expect, result)
    failures += _context(expect, result)
    failures += _stages(expect, [e.stage for e in turn.events])
    failures += _llm(expect, turn.llm_sites)
    failures += _tools(expect, turn.events)
    failures += _flow(expect.flow, turn.flow, "flow")
    failures += _flow(expect.workflow, turn.workflow, "workflow")
    return failures


def _flow(expect: FlowExpectation | None, flow: dict[str, Any], what: str) -> list[str]:
    if expect is None:
        return []
    failures = []
    stack = flow.get("stack") or []
    at = f"{stack[-1]['flow']}/{stack[-1]['node']}" if stack else "root"
    if expect.at is not None and at != expect.at:
        failures.append(f"{what} position: expected {expect.at}, got {at}")
    for path, wanted in expect.vars.items():
        got = _dig(flow.get("vars") or {}, path)
        if got is _MISSING or got != wanted:
            shown = "missing" if got is _MISSING else repr(got)
            failures.append(f"{what} variable {path}: expected {wanted!r}, got {shown}")
    return failures


def _payload(expect: Expect, result: TurnResult) -> list[str]:
    p = expect.payload
    if p is None:
        return []
    failures = []
    value = result.payload.value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if p.type is not None and result.payload.type != p.type:
        failures.append(f"payload type: expected {p.type}, got {result.payload.type}")
    if p.equals is not None and value != p.equals:
        failures.append(f"payload: expected {p.equals!r}, got {value!r}")
    if p.contains is not None and p.contains not in text:
        failures.append(f"payload: expected it to contain {p.contains!r}, got {text!r}")
    if p.regex is not None and not re.search(p.regex, text):
        failures.append(f"payload: expected it to match /{p.regex}/, got {text!r}")
    if p.source is not None:
        best = result.payload.sources[0].get("source") if result.payload.sources else None
        if best != p.source:
            failures.append(f"payload source: expected {p.source!r}, got {best!r}")
    return failures


def _dig(data: object, path: str) -> Any:
    for part in path.split("."):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return _MISSING
    return data


def _context(expect: Expect, result: TurnResult) -> list[str]:
    failures = []
    for path, wanted in expect.context.items():
        got = _dig(result.context, path)
        if got is _MISSING and wanted is not None:
            failures.append(f"context.{path}: expected {wanted!r}, but it is missing")
        elif got is not _MISSING and got != wanted:
            failures.append(f"context.{path}: expected {wanted!r}, got {got!r}")
    return failures


def _stages(expect: Expect, stages: list[str]) -> list[str]:
    failures = []
    position = 0
    for stage in expect.stages:
        try:
            position = stages.index(stage, position) + 1
        except ValueError:
            where = "missing" if stage not in stages else "out of order"
            failures.append(f"stage {stage} {where} (expected order: {', '.join(expect.stages)})")
            break
    failures += [f"stage {s} should not appear" for s in expect.absent_stages if s in stages]
    return failures


def _llm(expect: Expect, sites: list[str]) -> list[str]:
    if expect.llm_calls is None:
        return []
    counts = {s: sites.count(s) for s in set(sites)}
    wanted = {k.upper(): v for k, v in expect.llm_calls.items()}
    failures = [f"LLM calls to {site}: expected {n}, got {counts.get(site, 0)}"
                for site, n in wanted.items() if counts.get(site, 0) != n]
    failures += [f"LLM calls to {site}: expected none, got {n}" for site, n in counts.items() if site not in wanted]
    return failures


def _tool_calls(events: list[AuditEvent]) -> dict[str, list[dict[str, Any]]]:
    calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event.stage in (audit_stages.MCP_TOOL_CALL, audit_stages.TOOL_ORCHESTRATION_REQUEST) and event.payload.get("tool_code"):
            calls[event.payload["tool_code"].lower()].append(event.payload.get("args") or {})
        elif event.stage == audit_stages.WORKFLOW_TOOL_EXECUTED and event.payload.get("tool"):
            calls[event.payload["tool"].lower()].append(event.payload.get("args") or {})
    return calls


def _tools(expect: Expect, events: list[AuditEvent]) -> list[str]:
    if expect.tool_calls is None:
        return []
    calls = _tool_calls(events)
    failures = []
    for code, wanted in expect.tool_calls.items():
        got = calls.get(code.lower(), [])
        if isinstance(wanted, int) and len(got) != wanted:
            failures.append(f"tool {code}: expected {wanted} call(s), got {len(got)}")
        elif isinstance(wanted, list) and got != wanted:
            failures.append(f"tool {code}: expected calls {wanted!r}, got {got!r}")
    failures += [f"tool {code}: expected no calls, got {len(args)}" for code, args in calls.items()
                 if code not in {c.lower() for c in expect.tool_calls}]
    return failures
