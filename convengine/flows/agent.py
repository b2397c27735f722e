"""agent nodes: instructions, a tool list and ``max_steps`` on the MCP planner's plan format.

Each plan comes from the planner call site (``MCP_PLANNER``, the planner's JSON schema): CALL_TOOL
runs a tool of the node's own list through the engine's tool runner and adds the observation;
ANSWER says the answer. The node keeps its memory (the last exchanges) in the session variable
``_agent_memory_<node_id>``. With a ``greeting`` it speaks first and waits for the user; with
``stay: true`` it keeps the conversation (each message is answered) until another intent digresses.
The node's optional ``model`` and ``temperature`` apply to its own planner calls only.
"""

from __future__ import annotations

import json
from typing import Any

from convengine.catalog import flows as vocab
from convengine.catalog import stages
from convengine.catalog.errors import ConvEngineError
from convengine.config.flows import Flow
from convengine.config.records import FlowNodeRecord
from convengine.flows.walk_state import WAIT, Result, Walk
from convengine.nodes.planner import PLANNER_SCHEMA
from convengine.security.redact import redact_text

CALL_SITE = "MCP_PLANNER"
MEMORY_TURNS = 10
MAX_OBSERVATION_CHARS = 4000


def memory_key(node: FlowNodeRecord) -> str:
    return f"_agent_memory_{node.node_id}"


async def agent(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    config = node.config if isinstance(node.config, dict) else {}
    where = f"ce_flow_node[{flow.code}/{node.node_id}]"
    if mode in (vocab.MODE_ENTER, vocab.MODE_REASK) and config.get("greeting"):
        walk.say(walk.render(config["greeting"], where))
        return WAIT
    question = walk.input or ""
    answer = await _loop(walk, flow, node, config, question)
    if answer is None:
        return Result("next", vocab.ERROR)
    walk.say(answer)
    memory = list(walk.variables.get(memory_key(node)) or [])
    memory.append({"user": question, "agent": answer})
    walk.variables[memory_key(node)] = memory[-MEMORY_TURNS:]
    return WAIT if config.get("stay") else Result("next")


async def _loop(walk: Walk, flow: Flow, node: FlowNodeRecord, config: dict[str, Any], question: str) -> str | None:
    llm = walk.turn.ctx.services.llm
    audit = {"flow": flow.code, "node": node.node_id}
    if llm is None:
        walk.turn.audit(stages.FLOW_AGENT_FAILED, {**audit, "reason": "NO_LLM_CONFIGURED"})
        return None
    allowed = [str(t) for t in config.get("tools") or []]
    observations: list[dict[str, Any]] = []
    system = _system(walk, config, allowed, node)
    for step in range(1, _max_steps(config) + 1):
        user = json.dumps({"question": question, "observations": observations}, ensure_ascii=False, default=str)
        try:
            plan = await llm.json(walk.turn, CALL_SITE, system=system, user=user, schema=PLANNER_SCHEMA,
                                  **_options(config))
        except ConvEngineError as exc:
            walk.turn.audit(stages.FLOW_AGENT_FAILED, {**audit, "step": step, "errorCode": exc.code.value})
            return None
        if plan.get("action") == "ANSWER" and plan.get("answer"):
            walk.turn.audit(stages.FLOW_AGENT_ANSWERED, {**audit, "steps": step, "model": config.get("model"),
                                                        "temperature": config.get("temperature")})
            return str(plan["answer"])
        observations.append(await _tool(walk, audit, allowed, str(plan.get("tool_code") or ""),
                                        plan.get("args") or {}))
    walk.turn.audit(stages.FLOW_AGENT_FAILED, {**audit, "reason": "MAX_STEPS", "maxSteps": _max_steps(config)})
    return None


def _max_steps(config: dict[str, Any]) -> int:
    """The node's ``max_steps`` (checked at load), never past :data:`vocab.AGENT_MAX_STEPS` whatever reached it."""
    return min(int(config.get("max_steps") or vocab.AGENT_DEFAULT_STEPS), vocab.AGENT_MAX_STEPS)


def _options(config: dict[str, Any]) -> dict[str, Any]:
    """The node's ``model`` / ``temperature`` for its planner calls (validated at load)."""
    options: dict[str, Any] = {}
    if config.get("model") is not None:
        options["model"] = str(config["model"])
    if config.get("temperature") is not None:
        options["temperature"] = float(config["temperature"])
    return options


def _system(walk: Walk, config: dict[str, Any], allowed: list[str], node: FlowNodeRecord) -> str:
    runner = walk.turn.ctx.services.tools
    tools = []
    for code in allowed:
        row = runner.find(walk.turn, code) if runner is not None else None
        tools.append({"tool_code": code, "description": row.description if row else None})
    memory = walk.variables.get(memory_key(node)) or []
    return (f"{config.get('instructions') or 'Help the user.'}\n\nTools you may call: {json.dumps(tools)}\n"
            f"Earlier in this conversation: {json.dumps(memory, ensure_ascii=False)}\n"
            "Reply with JSON: action CALL_TOOL (tool_code, args) or ANSWER (answer).")


async def _tool(walk: Walk, audit: dict[str, Any], allowed: list[str], code: str, args: object) -> dict[str, Any]:
    runner = walk.turn.ctx.services.tools
    row = runner.find(walk.turn, code) if runner is not None and code in allowed else None
    if runner is None or row is None or not isinstance(args, dict):
        walk.turn.audit(stages.FLOW_AGENT_TOOL, {**audit, "tool": code, "status": "REFUSED"})
        return {"tool": code, "error": f"tool {code!r} is not available to this agent"}
    try:
        result = await runner.execute(walk.turn, row, args)
    except ConvEngineError as exc:
        walk.turn.audit(stages.FLOW_AGENT_TOOL, {**audit, "tool": code, "status": "ERROR",
                                                "message": redact_text(exc.message)})
        return {"tool": code, "error": redact_text(exc.message)}
    walk.turn.audit(stages.FLOW_AGENT_TOOL, {**audit, "tool": code, "status": "OK"})
    return {"tool": code, "result": json.dumps(result, default=str)[:MAX_OBSERVATION_CHARS]}
