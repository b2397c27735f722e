"""Instruction agents: instructions, a declared tool list and ``max_steps`` on the MCP planner's plan format.

:func:`run_instruction_agent` is the one entry point (the flow ``agent`` node below, and any other
runtime with an agent node, call it): each plan comes from the planner call site (``MCP_PLANNER``,
the planner's JSON schema); CALL_TOOL runs a tool **declared on the node** through the engine's tool
runner and adds the observation; ANSWER says the answer. A tool the node does not declare is never
run, whatever the model asks: the refusal is audited and the model is told which tools it has. Out
of steps, the agent fails (the flow node takes its ``error`` edge).

The agent's memory (its last exchanges, bounded in count and size) is a session variable,
``_agent_memory_<node_id>``, so it survives turns. The node's ``model`` (a plain name or a
provider-qualified one, see :mod:`convengine.llm.providers`) and ``temperature`` apply to its own
planner calls only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from convengine.catalog import flows as vocab
from convengine.catalog import stages
from convengine.catalog.errors import ConvEngineError
from convengine.config.flows import Flow
from convengine.config.records import FlowNodeRecord
from convengine.flows.walk_state import WAIT, Result, Walk
from convengine.llm.session import LlmSession
from convengine.nodes.planner import PLANNER_SCHEMA
from convengine.security.redact import redact_text
from convengine.tools.base import ToolSession

__all__ = ["AgentOutcome", "AgentSpec", "agent", "memory_key", "remember", "run_instruction_agent"]

CALL_SITE = "MCP_PLANNER"
MEMORY_TURNS = 10
"""Exchanges an agent remembers (the oldest are dropped)."""
MEMORY_MAX_CHARS = 2000
"""Characters kept of each remembered question and answer."""
MAX_OBSERVATION_CHARS = 4000
NOT_DECLARED, UNKNOWN_TOOL, BAD_ARGS = "NOT_DECLARED", "UNKNOWN_TOOL", "BAD_ARGS"
"""Why a tool the model asked for was refused (``FLOW_AGENT_TOOL`` status ``REFUSED``, ``reason``)."""


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """How an instruction agent node is configured (checked at load: see docs/flows.md)."""

    instructions: str
    tools: tuple[str, ...] = ()
    model: str | None = None
    temperature: float | None = None
    max_steps: int = vocab.AGENT_DEFAULT_STEPS
    greeting: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AgentSpec:
        """From a node's JSON config; ``max_steps`` never past :data:`vocab.AGENT_MAX_STEPS`, whatever reached it."""
        steps = config.get("max_steps")
        tools = config.get("tools")
        return cls(instructions=str(config.get("instructions") or "Help the user."),
                   tools=tuple(str(t) for t in tools) if isinstance(tools, list) else (),
                   model=str(config["model"]) if config.get("model") is not None else None,
                   temperature=float(config["temperature"]) if config.get("temperature") is not None else None,
                   max_steps=max(1, min(int(steps) if isinstance(steps, int) else vocab.AGENT_DEFAULT_STEPS,
                                        vocab.AGENT_MAX_STEPS)),
                   greeting=str(config["greeting"]) if config.get("greeting") else None)


@dataclass(frozen=True, slots=True)
class AgentOutcome:
    """What one run did: the ``answer`` (None when it failed, ``reason`` saying why: ``MAX_STEPS``,
    ``NO_LLM_CONFIGURED`` or the LLM's error code), the planner calls it made and the memory to keep."""

    answer: str | None
    memory: list[dict[str, str]]
    steps: int
    reason: str | None = None
    observations: tuple[dict[str, Any], ...] = ()
    """What each tool call it made returned (or why it was refused), in order."""


class AgentSession(LlmSession, ToolSession, Protocol):
    """What an instruction agent runs in: a flow or workflow node's turn, or a chain's agent step."""


def memory_key(node: FlowNodeRecord | str) -> str:
    """The session variable holding a node's memory."""
    return f"_agent_memory_{node if isinstance(node, str) else node.node_id}"


def remember(memory: object, question: str, answer: str | None = None) -> list[dict[str, str]]:
    """``memory`` (whatever a session variable held) as at most :data:`MEMORY_TURNS` bounded exchanges,
    with this one added when ``answer`` is given."""
    kept = [{"user": str(m.get("user", ""))[:MEMORY_MAX_CHARS], "agent": str(m.get("agent", ""))[:MEMORY_MAX_CHARS]}
            for m in (memory if isinstance(memory, list) else []) if isinstance(m, dict)]
    if answer is not None:
        kept.append({"user": question[:MEMORY_MAX_CHARS], "agent": answer[:MEMORY_MAX_CHARS]})
    return kept[-MEMORY_TURNS:]


async def run_instruction_agent(turn: AgentSession, spec: AgentSpec, question: str, memory: object, *,
                                trace: Mapping[str, Any]) -> AgentOutcome:
    """Run the planner loop for ``question`` with the agent's ``memory``; ``trace`` (e.g. flow and node)
    goes into each ``FLOW_AGENT_*`` audit row."""
    audit = dict(trace)
    past = remember(memory, question)
    llm = turn.ctx.services.llm
    if llm is None:
        turn.audit(stages.FLOW_AGENT_FAILED, {**audit, "reason": "NO_LLM_CONFIGURED"})
        return AgentOutcome(None, past, 0, "NO_LLM_CONFIGURED")
    observations: list[dict[str, Any]] = []
    system = _system(turn, spec, past)
    for step in range(1, spec.max_steps + 1):
        user = json.dumps({"question": question, "observations": observations}, ensure_ascii=False, default=str)
        try:
            plan = await llm.json(turn, CALL_SITE, system=system, user=user, schema=PLANNER_SCHEMA,
                                  model=spec.model, temperature=spec.temperature)
        except ConvEngineError as exc:
            turn.audit(stages.FLOW_AGENT_FAILED, {**audit, "step": step, "errorCode": exc.code.value})
            return AgentOutcome(None, past, step, exc.code.value)
        if plan.get("action") == "ANSWER" and plan.get("answer"):
            answer = str(plan["answer"])
            turn.audit(stages.FLOW_AGENT_ANSWERED, {**audit, "steps": step, "model": spec.model,
                                                   "temperature": spec.temperature})
            return AgentOutcome(answer, remember(past, question, answer), step, observations=tuple(observations))
        observations.append(await _tool(turn, audit, spec.tools, str(plan.get("tool_code") or ""),
                                        plan.get("args") or {}))
    turn.audit(stages.FLOW_AGENT_FAILED, {**audit, "reason": "MAX_STEPS", "maxSteps": spec.max_steps})
    return AgentOutcome(None, past, spec.max_steps, "MAX_STEPS", tuple(observations))


async def agent(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    """The flow ``agent`` node: greet and wait, or answer this turn's message (``error`` edge on failure)."""
    config = node.config if isinstance(node.config, dict) else {}
    spec = AgentSpec.from_config(config)
    if mode in (vocab.MODE_ENTER, vocab.MODE_REASK) and spec.greeting:
        walk.say(walk.render(spec.greeting, f"ce_flow_node[{flow.code}/{node.node_id}]"))
        return WAIT
    outcome = await run_instruction_agent(walk.turn, spec, walk.input or "", walk.variables.get(memory_key(node)),
                                          trace={"flow": flow.code, "node": node.node_id})
    walk.variables[memory_key(node)] = outcome.memory
    if outcome.answer is None:
        return Result("next", vocab.ERROR)
    walk.say(outcome.answer)
    return WAIT if config.get("stay") else Result("next")


def _system(turn: AgentSession, spec: AgentSpec, memory: Sequence[dict[str, str]]) -> str:
    runner = turn.ctx.services.tools
    tools = []
    for code in spec.tools:
        row = runner.find(turn, code) if runner is not None else None
        tools.append({"tool_code": code, "description": row.description if row else None})
    return (f"{spec.instructions}\n\nTools you may call (no others): {json.dumps(tools)}\n"
            f"Earlier in this conversation: {json.dumps(list(memory), ensure_ascii=False)}\n"
            "Reply with JSON: action CALL_TOOL (tool_code, args) or ANSWER (answer).")


def _refused(turn: AgentSession, audit: dict[str, Any], declared: Sequence[str], code: str, reason: str) -> dict[str, Any]:
    turn.audit(stages.FLOW_AGENT_TOOL, {**audit, "tool": code[:200], "status": "REFUSED", "reason": reason})
    told = {NOT_DECLARED: "is not one of this agent's tools", UNKNOWN_TOOL: "is not available",
            BAD_ARGS: "needs its args as a JSON object"}[reason]
    return {"tool": code[:200], "error": f"refused: tool {code[:200]!r} {told}; the tools you may call are "
                                         f"{json.dumps(list(declared))}"}


async def _tool(turn: AgentSession, audit: dict[str, Any], declared: Sequence[str], code: str, args: object) -> dict[str, Any]:
    """Run a tool the node declares (``args`` a JSON object); anything else is refused and the model told."""
    if code not in declared:
        return _refused(turn, audit, declared, code, NOT_DECLARED)
    runner = turn.ctx.services.tools
    row = runner.find(turn, code) if runner is not None else None
    if runner is None or row is None:
        return _refused(turn, audit, declared, code, UNKNOWN_TOOL)
    if not isinstance(args, dict):
        return _refused(turn, audit, declared, code, BAD_ARGS)
    try:
        result = await runner.execute(turn, row, args)
    except ConvEngineError as exc:
        turn.audit(stages.FLOW_AGENT_TOOL, {**audit, "tool": code, "status": "ERROR", "message": redact_text(exc.message)})
        return {"tool": code, "error": redact_text(exc.message)}
    turn.audit(stages.FLOW_AGENT_TOOL, {**audit, "tool": code, "status": "OK"})
    return {"tool": code, "result": json.dumps(result, default=str)[:MAX_OBSERVATION_CHARS]}
