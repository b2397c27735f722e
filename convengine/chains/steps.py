"""What each chain step type does. Every step reuses the engine's own machinery:

- ``assistant``: one turn of the pack's assistant in the run's conversation (``Engine.aprocess``);
- ``agent``: the flows' agent planner loop (call site ``MCP_PLANNER``, the planner's plan format) over
  the step's own tools, through the engine's LLM gateway and tool runner;
- ``webhook``: the tool executor's HTTP runner and its SSRF guard, ``${env:NAME}`` secrets resolved
  when the step runs (the flows' service-node code) and never stored;
- ``decide``: the flows' expression language; ``notify``: an audit event, streamed live;
- ``human`` and ``schedule``: a LangGraph interrupt (the runtime records what the run waits for).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol
from urllib.parse import urlsplit

from langgraph.types import interrupt

from convengine.catalog import chains as vocab
from convengine.catalog import stages
from convengine.catalog.errors import ChainStepError, ConvEngineError, ErrorCode
from convengine.chains.model import Chain, config_of
from convengine.chains.store import now
from convengine.config.records import ChainStepRecord
from convengine.config.snapshot import ConfigSnapshot
from convengine.engine import Engine
from convengine.flows.agent import AgentSpec, run_instruction_agent
from convengine.flows.service import _fixed_origin, resolve_secrets
from convengine.rules.expr import ExpressionError, compile_expression
from convengine.security.redact import redact_text
from convengine.settings import HTTP_MAX_ATTEMPTS, HTTP_MAX_TIMEOUT_MS, EngineSettings
from convengine.templates.render import render_text
from convengine.tools.http import HttpRequest


class Auditor(Protocol):
    async def __call__(self, stage: str, payload: dict[str, Any]) -> None: ...


@dataclass
class StepRun:
    """One step of one run, as its executor sees it."""

    engine: Engine
    snapshot: ConfigSnapshot
    chain: Chain
    step: ChainStepRecord
    run: Mapping[str, Any]
    outputs: dict[str, Any]
    """Earlier steps' outputs by step id."""
    audit: Auditor
    seq: int
    input: dict[str, Any] = field(default_factory=dict)
    next: str | None = None
    """Where the run goes after this step (None: the step's ``next`` or the following step)."""

    @property
    def config(self) -> dict[str, Any]:
        return config_of(self.step)

    @property
    def settings(self) -> EngineSettings:
        return self.snapshot.settings

    @property
    def where(self) -> str:
        return f"chain {self.chain.code} step {self.step.step_id}"

    def scopes(self) -> dict[str, Any]:
        """What templates and expressions see: the run's ``input``, earlier ``steps`` and the ``run``."""
        return {"input": self.input, "steps": self.outputs,
                "run": {"id": self.run["run_id"], "chain": self.chain.code,
                        "conversationId": self.run["conversation_id"]}}

    def render(self, source: object) -> Any:
        if isinstance(source, str):
            return render_text(source, self.scopes(), template=self.where, limits=self.settings)
        if isinstance(source, dict):
            return {k: self.render(v) for k, v in source.items()}
        if isinstance(source, list):
            return [self.render(v) for v in source]
        return source

    def fail(self, message: str) -> ChainStepError:
        return ChainStepError(f"{self.where}: {message}", details={"chain": self.chain.code, "step": self.step.step_id,
                                                                   "runId": self.run["run_id"]})


Executor = Callable[[StepRun], Awaitable[Any]]


async def assistant(s: StepRun) -> Any:
    message = str(s.render(s.config["message"]))
    params = s.render(s.config.get("input_params") or {})
    result = await s.engine.aprocess(message, s.run["conversation_id"], params, owner=s.run.get("owner_id"))
    return {"reply": result.payload.value, "type": result.payload.type, "intent": result.intent,
            "state": result.state}


async def webhook(s: StepRun) -> Any:
    tools = s.engine.runtime.services.tools
    if tools is None:
        raise s.fail("webhook steps need the engine's tool runner")
    config, settings = s.config, s.settings.mcp.http_api
    try:
        spec = _request(s, config)
        result = await tools.http.execute(f"chain:{s.chain.code}:{s.step.step_id}", spec, settings)
    except ConvEngineError as exc:
        await s.audit(stages.CHAIN_WEBHOOK_REFUSED if exc.code is ErrorCode.URL_NOT_ALLOWED else stages.CHAIN_STEP_FAILED,
                      {"step": s.step.step_id, "errorCode": exc.code.value, "message": redact_text(exc.message)})
        if config.get("on_error"):
            s.next = str(config["on_error"])
            return {"error": exc.code.value, "message": redact_text(exc.message)}
        raise s.fail(f"{exc.code.value}: {redact_text(exc.message)}") from None
    return {"status": result["status"], "response": result["mapped"],
            "url": redact_text(f"{urlsplit(spec.url).scheme}://{urlsplit(spec.url).netloc}{urlsplit(spec.url).path}")}


def _request(s: StepRun, config: dict[str, Any]) -> HttpRequest:
    """The webhook's request: secrets first (``${env:NAME}``, never stored), then templates; a rendered URL
    may not change a configured scheme and host."""
    allowed = s.settings.security.pack_env_names
    url_template = resolve_secrets(str(config["url"]), s.where, allowed)
    url = str(s.render(url_template))
    origin = _fixed_origin(url_template)
    if origin and "/".join(url.split("/", 3)[:3]).lower() != origin:
        raise s.fail("the rendered URL changed the configured scheme or host")
    defaults = s.settings.mcp.http_api.defaults
    timeout_ms = min(int(config.get("timeout_ms", defaults.read_timeout_ms)), HTTP_MAX_TIMEOUT_MS)
    policy = defaults.model_copy(update={"max_attempts": min(int(config.get("retries", 0)) + 1, HTTP_MAX_ATTEMPTS),
                                         "read_timeout_ms": timeout_ms,
                                         "connect_timeout_ms": min(timeout_ms, defaults.connect_timeout_ms)})
    headers = s.render(resolve_secrets(config.get("headers") or {}, s.where, allowed))
    body = s.render(resolve_secrets(config.get("body"), s.where, allowed))
    return HttpRequest(url=url, method=str(config.get("method", "POST")).upper(),
                       headers={str(k): str(v) for k, v in headers.items()}, body=body, policy=policy)


async def decide(s: StepRun) -> Any:
    for i, branch in enumerate(s.config["branches"]):
        try:
            taken = compile_expression(branch["when"]).truth(s.scopes())
        except ExpressionError as exc:
            raise s.fail(f"branches[{i}].when {branch['when'][:80]!r} failed: {exc}") from None
        if taken:
            s.next = str(branch["goto"])
            return {"branch": i, "goto": s.next}
    s.next = str(s.config.get("otherwise") or s.chain.following(s.step.step_id))
    return {"branch": None, "goto": s.next}


async def notify(s: StepRun) -> Any:
    text = str(s.render(s.config["text"]))[:vocab.MAX_NOTIFY_CHARS]
    data = s.render(s.config.get("data"))
    await s.audit(stages.CHAIN_NOTIFY, {"step": s.step.step_id, "text": text, "data": data})
    return {"text": text, "data": data}


async def human(s: StepRun) -> Any:
    """Pause until a person resumes the run; their answer (any JSON) is the step's output."""
    prompt = str(s.render(s.config["prompt"]))
    answer = interrupt({"kind": vocab.HUMAN, "step": s.step.step_id, "seq": s.seq, "prompt": prompt})
    return {"prompt": prompt, "answer": answer}


async def schedule(s: StepRun) -> Any:
    """Pause until the step's time; the scheduler resumes the run with when it fired."""
    due = _due(s)
    fired = interrupt({"kind": vocab.SCHEDULE, "step": s.step.step_id, "seq": s.seq, "dueAt": due.isoformat()})
    return fired if isinstance(fired, dict) else {"dueAt": due.isoformat(), "firedAt": fired}


def _due(s: StepRun) -> datetime:
    if s.config.get("delay_s") is not None:
        return now() + timedelta(seconds=min(float(s.config["delay_s"]), vocab.MAX_DELAY_S))
    text = str(s.render(s.config["at"]))
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise s.fail(f"at {text[:60]!r} is not an ISO date and time") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=now().tzinfo)


# --- agent ----------------------------------------------------------------------------------


@dataclass
class ChainSession:
    """The slice of a turn the LLM gateway and the tool runner see, for a chain step (LlmSession, ToolSession)."""

    step: StepRun
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    ctx: Any = None

    def __post_init__(self) -> None:
        self.ctx = _SessionContext(self.step.engine.runtime.services)

    @property
    def settings(self) -> EngineSettings:
        return self.step.settings

    @property
    def snapshot(self) -> ConfigSnapshot:
        return self.step.snapshot

    @property
    def conversation_id(self) -> str:
        return str(self.step.run["conversation_id"])

    @property
    def intent(self) -> str:
        return "UNKNOWN"

    @property
    def state(self) -> str:
        return "UNKNOWN"

    @property
    def user_text(self) -> str:
        return json.dumps(self.step.input, default=str)

    def read_params(self) -> Mapping[str, Any]:
        return dict(self.step.input)

    def read_context(self) -> Mapping[str, Any]:
        return {}

    def audit(self, stage: str, payload: Mapping[str, Any] | None = None) -> None:
        self.events.append((stage, dict(payload or {})))


@dataclass
class _SessionContext:
    services: Any
    secret_values: list[str] = field(default_factory=list)


async def agent(s: StepRun) -> Any:
    """The flows' instruction agent (:func:`~convengine.flows.agent.run_instruction_agent`) on the step's
    ``instructions``, ``tools``, ``model``, ``temperature`` and ``max_steps``: each plan CALLs one of the
    step's own tools or ANSWERs; the step fails when it has no answer (no model, out of steps)."""
    session = ChainSession(s)
    spec = AgentSpec.from_config(s.config)
    question = str(s.render(s.config.get("input") or "{{ input }}"))
    try:
        outcome = await run_instruction_agent(session, spec, question, [], trace={"chain": s.chain.code,
                                                                                  "step": s.step.step_id})
    finally:
        for stage, payload in session.events:
            await s.audit(stage, {**payload, "step": s.step.step_id})
    if outcome.answer is None:
        raise s.fail(f"no answer ({outcome.reason}) within max_steps {spec.max_steps}")
    return {"answer": outcome.answer, "steps": outcome.steps, "tools": list(outcome.observations)}


EXECUTORS: dict[str, Executor] = {
    vocab.ASSISTANT: assistant, vocab.AGENT: agent, vocab.WEBHOOK: webhook, vocab.HUMAN: human,
    vocab.DECIDE: decide, vocab.NOTIFY: notify, vocab.SCHEDULE: schedule,
}
