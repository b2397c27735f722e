"""The MCP planner loop as graph edges: mcp_planner <-> mcp_tool_call.

mcp_planner runs ``PRE_AGENT_MCP`` rules and the skip checks on its first visit in a turn, then
asks the planner (call site MCP_PLANNER) for the next step. A tool call goes to mcp_tool_call,
which executes it and comes back. An answer, a guard, a tool error or the loop limit ends the
loop, runs ``POST_AGENT_MCP`` and continues to the rules step.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from convengine.catalog import ce_config, names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.catalog.errors import ConvEngineError
from convengine.catalog.vocab import POST_AGENT_MCP, POST_SEMANTIC_INTERPRET, PRE_AGENT_MCP
from convengine.llm.prompts import PLANNER_SYSTEM, PLANNER_USER, config_prompt, render_for
from convengine.nodes.common import dig, most_specific, run_rules
from convengine.nodes.schema_scope import current_schema
from convengine.nodes.slot_schema import compute_facts
from convengine.nodes.turn import Turn

PLANNER_SCHEMA: dict[str, Any] = {"type": "object", "required": ["action", "tool_code", "args", "answer", "operation_tag"],
                                  "properties": {"action": {"type": "string", "enum": ["CALL_TOOL", "ANSWER"]},
                                                 "tool_code": {"type": ["string", "null"]},
                                                 "args": {"type": ["object", "null"]},
                                                 "answer": {"type": ["string", "null"]},
                                                 "operation_tag": {"type": ["string", "null"]}}}
SEMANTIC_INTERPRET_TOOL = "db.semantic.interpret"
"""After a successful call of this tool, POST_SEMANTIC_INTERPRET rules run (ConvEngine's McpToolStep)."""
CANNOT_PLAN = "I couldn't plan tool usage safely. Can you rephrase your question?"
CANNOT_DECIDE = "I couldn't decide the next tool step safely."
RESTRICTED = "This request is restricted by policy. Read-only operations are allowed."
SEQUENCE_BLOCKED = "Tool sequence guardrail blocked this action. Please rephrase or provide missing details."
TOOL_FAILED = "Tool execution failed"
GREETING = re.compile(r"^\s*(hi|hello|hey|greetings|good morning|good afternoon|good evening)\b", re.IGNORECASE)
SUMMARY_FIELDS = ("status", "summary", "message", "error", "queryCode", "rowCount", "valid", "canExecute",
                  "selectedCase", "selectedPlaybook", "outcome", "finalSummary", "graphError")
BACKTICKED = re.compile(r"`([A-Za-z0-9_.-]+\.[A-Za-z0-9_.-]+)`")


def planner_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    """Route past the planner when no PRE_AGENT_MCP rule could change the scope and no tool applies."""
    runner = turn.ctx.services.tools
    if turn.snapshot.rules_for(PRE_AGENT_MCP) or (runner is not None and runner.has_tools(turn)):
        return None
    return stages.MCP_NO_TOOLS_AVAILABLE, {"intent": turn.intent, "state": turn.state, "reason": "NO_TOOLS_FOR_SCOPE"}


# --- lifecycle bookkeeping ---------------------------------------------------------------


def _mcp(turn: Turn) -> dict[str, Any]:
    return turn.context.setdefault("mcp", {})


def _lifecycle(turn: Turn, status: str, outcome: str, **extra: object) -> None:
    finished = outcome not in ("IN_PROGRESS",)
    _mcp(turn)["lifecycle"] = {"phase": POST_AGENT_MCP, "status": status, "outcome": outcome, "finished": finished,
                               "blocked": outcome == "BLOCKED", "error": outcome == "ERROR", **extra}
    turn.params[pk.MCP_STATUS] = status


def _loop(turn: Turn) -> dict[str, Any]:
    loop = dict(turn.get(keys.MCP_LOOP) or {})
    turn.set(keys.MCP_LOOP, loop)
    return loop


async def _finish(turn: Turn, *, planner_ran: bool) -> None:
    """End the loop: POST_AGENT_MCP when the planner ran, then on to the rules step."""
    if planner_ran:
        await run_rules(turn, POST_AGENT_MCP, "McpToolStep PostMcp", origin="RULES_STEP")
    turn.route_to(names.AFTER_MCP_LOOP)


def _answer(turn: Turn, answer: str, *, status: str = "ANSWER", outcome: str = "ANSWERED", **extra: object) -> None:
    mcp = _mcp(turn)
    mcp.update(finalAnswer=answer, finalAnswerDetermined=status == "ANSWER")
    turn.params[pk.MCP_FINAL_ANSWER] = answer
    _lifecycle(turn, status, outcome, **extra)


# --- first visit: rules and skip checks --------------------------------------------------


def _skip_reason(turn: Turn) -> tuple[str, str, dict[str, Any]] | None:
    """(status, audit stage, payload) of ConvEngine's skip checks, in order."""
    params = turn.read_params()
    if params.get(pk.SKIP_TOOL_EXECUTION) or params.get(pk.GUARDRAIL_BLOCKED):
        return "SKIPPED_BY_GUARDRAIL", "MCP_SKIPPED_GUARDRAIL", {}
    record = current_schema(turn)
    if record is not None:
        facts = compute_facts(record, turn.read_context())
        if not facts["complete"]:
            return "SKIPPED_SCHEMA_INCOMPLETE", stages.MCP_SKIPPED_SCHEMA_INCOMPLETE, {"missing_fields": facts["missing"]}
    act = turn.dialogue_act
    if act in ("NEGATE", "RESET", "EDIT") or (act == "AFFIRM" and params.get(pk.ROUTING_DECISION) != "PROCEED_CONFIRMED"):
        return "SKIPPED_DIALOGUE_ACT", stages.MCP_SKIPPED_DIALOGUE_ACT, {"dialogueAct": act}
    if GREETING.match(turn.user_text):
        return "SKIPPED_GREETING", stages.MCP_SKIPPED_GREETING, {}
    if dig(turn.read_context(), "pending_clarification", "question"):
        return "SKIPPED_PENDING_CLARIFICATION", stages.MCP_SKIPPED_PENDING_CLARIFICATION, {}
    if not turn.ctx.services.tools or not turn.ctx.services.tools.has_tools(turn):
        return "NO_TOOLS_FOR_SCOPE", stages.MCP_NO_TOOLS_AVAILABLE, {"intent": turn.intent, "state": turn.state}
    if turn.ctx.services.llm is None:
        return "SKIPPED_NO_LLM", stages.MCP_PLAN_SKIPPED, {"reason": "NO_LLM_CONFIGURED", "callSite": "MCP_PLANNER"}
    return None


async def _first_visit(turn: Turn) -> bool:
    """PRE_AGENT_MCP rules, skip checks, per-turn reset; False when the loop should not run."""
    await run_rules(turn, PRE_AGENT_MCP, "McpToolStep PreMcp")
    skip = _skip_reason(turn)
    if skip is not None:
        status, stage, payload = skip
        _lifecycle(turn, status, "NO_TOOLS" if status == "NO_TOOLS_FOR_SCOPE" else "SKIPPED")
        turn.audit(stage, payload)
        return False
    mcp = _mcp(turn)
    for key in ("finalAnswer", "finalAnswerDetermined", "toolExecutionAbrupted", "toolExecutionAbruptionLimit",
                "observations", "lifecycle", "semantic", "toolExecutionError"):
        mcp.pop(key, None)
    mcp["observations"] = []
    turn.audit(stages.MCP_CONTEXT_CLEARED, {})
    _loop(turn).update(started=True, iterations=0, executed=[])
    return True


# --- the planner ------------------------------------------------------------------------


async def plan_step(turn: Turn) -> None:
    loop = turn.get(keys.MCP_LOOP) or {}
    if not loop.get("started") and not await _first_visit(turn):
        await _finish(turn, planner_ran=False)
        return
    loop = _loop(turn)
    limit = turn.settings.mcp.tool_max_loops
    if loop.get("iterations", 0) >= limit:
        _mcp(turn).update(toolExecutionAbrupted=True, finalAnswerDetermined=False, toolExecutionAbruptionLimit=limit)
        turn.audit(stages.MCP_LOOP_LIMIT_REACHED, {"limit": limit})
        await _finish(turn, planner_ran=True)
        return
    loop["iterations"] = loop.get("iterations", 0) + 1
    decision = normalise(await _ask_planner(turn))
    await _act(turn, loop, decision)


async def _act(turn: Turn, loop: dict[str, Any], decision: dict[str, Any]) -> None:
    turn.params.update(mcp_action=decision["action"], mcp_tool_code=decision["tool_code"],
                       mcp_tool_args=decision["args"], mcp_operation_tag=decision["operation_tag"])
    if decision["action"] == "ANSWER":
        _answer(turn, decision["answer"] or "")
        turn.audit(stages.MCP_FINAL_ANSWER, {"answer": decision["answer"]})
        await _finish(turn, planner_ran=True)
        return
    stop = _guard(turn, loop, decision)
    if stop is not None:
        await _finish(turn, planner_ran=True)
        return
    loop["pending"] = {"tool_code": decision["tool_code"], "args": decision["args"]}
    turn.audit(stages.MCP_TOOL_CALL, {"tool_code": decision["tool_code"], "args": decision["args"], "action": "CALL_TOOL",
                                 "intent": turn.intent, "state": turn.state,
                                 "routing_decision": turn.read_params().get(pk.ROUTING_DECISION),
                                 "observation_count": len(_mcp(turn).get("observations") or []),
                                 "current_observation_tool": _last_tool(turn)})
    turn.route_to(names.MCP_TOOL_CALL)


def _guard(turn: Turn, loop: dict[str, Any], decision: dict[str, Any]) -> str | None:
    """Policy tag, duplicate call and next-tool guardrail; returns why the loop stopped."""
    if (decision["operation_tag"] or "").upper() == "POLICY_RESTRICTED_OPERATION":
        _answer(turn, RESTRICTED, status="GUARDRAIL_BLOCKED_NEXT_TOOL", outcome="BLOCKED")
        turn.audit(stages.MCP_TOOL_ERROR, {"tool_code": decision["tool_code"], "error": "POLICY_RESTRICTED_OPERATION"})
        return "RESTRICTED"
    signature = _signature(decision["tool_code"], decision["args"])
    if signature in loop.get("executed", []):
        observations = _mcp(turn).get("observations") or []
        answer = _summary_text(observations[-1]["json"]) if observations else CANNOT_DECIDE
        _answer(turn, answer)
        turn.audit(stages.MCP_DUPLICATE_TOOL_CALL_SUPPRESSED, {"tool_code": decision["tool_code"], "args": decision["args"]})
        return "DUPLICATE"
    if not _sequence_allowed(turn, decision["tool_code"]):
        _answer(turn, SEQUENCE_BLOCKED, status="GUARDRAIL_BLOCKED_NEXT_TOOL", outcome="BLOCKED")
        turn.audit(stages.MCP_TOOL_ERROR, {"tool_code": decision["tool_code"], "error": "NEXT_TOOL_GUARDRAIL",
                                      "after": _last_tool(turn) or "__START__"})
        return "SEQUENCE"
    return None


def _sequence_allowed(turn: Turn, tool_code: str) -> bool:
    guard = turn.settings.mcp.guardrail
    if not guard.enabled:
        return True
    current = _last_tool(turn) or "__START__"
    allowed = {k.lower(): [v.lower() for v in vs] for k, vs in guard.allowed_next_by_current_tool.items()}
    if current.lower() not in allowed:
        return not guard.fail_closed
    return tool_code.lower() in allowed[current.lower()]


def _last_tool(turn: Turn) -> str | None:
    observations = _mcp(turn).get("observations") or []
    return observations[-1]["toolCode"] if observations else None


def _signature(tool_code: str, args: object) -> str:
    return f"{tool_code.lower()}|{json.dumps(args, sort_keys=True, default=str)}"


def normalise(raw: object) -> dict[str, Any]:
    """ConvEngine's planner-output normalisation with its safe fallback answers."""
    if not isinstance(raw, dict):
        return {"action": "ANSWER", "tool_code": None, "args": {}, "answer": CANNOT_PLAN, "operation_tag": None}
    action = str(raw.get("action") or "").strip().upper()
    code = str(raw.get("tool_code") or "").strip() or None
    if not action:
        action = "CALL_TOOL" if code else "ANSWER"
    tag = raw.get("operation_tag")
    if action not in ("CALL_TOOL", "ANSWER"):
        return {"action": "ANSWER", "tool_code": None, "args": {}, "answer": CANNOT_PLAN, "operation_tag": tag}
    if action == "CALL_TOOL" and not code:
        return {"action": "ANSWER", "tool_code": None, "args": {}, "answer": CANNOT_DECIDE, "operation_tag": tag}
    args = raw.get("args") if isinstance(raw.get("args"), dict) else {}
    if action == "ANSWER":
        return {"action": "ANSWER", "tool_code": None, "args": {}, "answer": str(raw.get("answer") or ""),
                "operation_tag": tag}
    return {"action": "CALL_TOOL", "tool_code": code, "args": args, "answer": None, "operation_tag": tag}


async def _ask_planner(turn: Turn) -> Any:
    system, user, source = _prompts(turn)
    runner = turn.ctx.services.tools
    assert runner is not None, "the planner runs on an engine with its tool runner"
    tools = _filter_tools(await runner.catalogue(turn), system + user)
    observations, stats = compact_observations(turn)
    extra = {"mcp_tools": tools, "tools": tools, "available_tools": tools, "tool_list": tools, "mcpTools": tools,
             "mcp_observations": observations, "observations": observations, "mcpObservations": observations,
             "context": dict(turn.read_context())}
    system_text = render_for(turn, system, template=f"{source}.system_prompt", extra=extra)
    user_text = render_for(turn, user, template=f"{source}.user_prompt", extra=extra)
    turn.audit(stages.MCP_PLAN_LLM_INPUT, {"source": source, "system_prompt": system_text, "user_prompt": user_text,
                                      "tools": [t["tool_code"] for t in tools], "compaction": stats})
    llm = turn.ctx.services.llm
    assert llm is not None  # _skip_reason routes past the planner without one
    try:
        reply = await llm.json(turn, "MCP_PLANNER", system=system_text, user=user_text, schema=PLANNER_SCHEMA,
                               validate=False)
    except ConvEngineError as exc:
        if exc.code.value in ("LLM_INVALID_RESPONSE",):
            reply = None
        else:
            raise
    turn.audit(stages.MCP_PLAN_LLM_OUTPUT, {"output": reply})
    return reply


def _prompts(turn: Turn) -> tuple[str, str, str]:
    row = most_specific(turn.snapshot.planners, turn.intent, turn.state, tie=lambda r: r.planner_id)
    if row is not None:
        return row.system_prompt, row.user_prompt, f"ce_mcp_planner[{row.planner_id}]"
    system, sname = config_prompt(turn, ce_config.PLANNER_SYSTEM_PROMPT, PLANNER_SYSTEM)
    user, _ = config_prompt(turn, ce_config.PLANNER_USER_PROMPT, PLANNER_USER)
    return system, user, sname.rsplit(".", 1)[0]


def _filter_tools(tools: list[dict[str, Any]], prompt_text: str) -> list[dict[str, Any]]:
    """Only the tools the prompts name in backticks, when they name any that exist."""
    named = {m.lower() for m in BACKTICKED.findall(prompt_text)}
    chosen = [t for t in tools if t["tool_code"].lower() in named]
    return chosen or tools


def compact_observations(turn: Turn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The last N distinct observations, summarised and capped (ConvEngine's compaction)."""
    settings = turn.settings.mcp
    observations = _mcp(turn).get("observations") or []
    unique: list[dict[str, Any]] = []
    seen: set[str] = set()
    for obs in reversed(observations):
        key = json.dumps(obs, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            unique.append(obs)
        if len(unique) >= settings.planner_max_observations:
            break
    unique.reverse()
    compacted = [{"toolCode": o["toolCode"], **_summarise(o["json"], settings.planner_max_observation_chars)}
                 for o in unique]
    return compacted, {"total": len(observations), "shown": len(compacted),
                       "maxChars": settings.planner_max_observation_chars}


def _summarise(value: object, max_chars: int) -> dict[str, Any]:
    summary = {k: value[k] for k in SUMMARY_FIELDS if isinstance(value, dict) and k in value}
    rows = value if isinstance(value, list) else (value.get("rows") if isinstance(value, dict) else None)
    if isinstance(rows, list):
        summary.update(rowCount=len(rows), rowsPreview=rows[:2])
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
        summary["json"] = text if len(text) <= max_chars else text[:max_chars] + "...(truncated)"
    return summary


def _summary_text(value: object) -> str:
    if isinstance(value, dict):
        for key in ("finalSummary", "summary", "message", "text"):
            if isinstance(value.get(key), str):
                return value[key]
    return json.dumps(value, ensure_ascii=False, default=str)[:2000]


# --- the tool call -----------------------------------------------------------------------


async def call_step(turn: Turn) -> None:
    loop = _loop(turn)
    pending = loop.pop("pending", None) or {}
    code, args = str(pending.get("tool_code") or ""), dict(pending.get("args") or {})
    runner = turn.ctx.services.tools
    tool = runner.find(turn, code) if runner else None
    try:
        if runner is None or tool is None or not runner.in_scope(turn, tool):
            raise ConvEngineError(f"tool {code!r} is not enabled for {turn.intent}/{turn.state}")
        await _delay(turn, len(loop.get("executed", [])))
        result = await runner.execute(turn, tool, args)
    except Exception as exc:  # noqa: BLE001 - a tool error ends the loop with a safe answer
        await _tool_failed(turn, code, tool.group if tool else None, args, exc)
        return
    loop.setdefault("executed", []).append(_signature(code, args))
    observations = _mcp(turn).setdefault("observations", [])
    observations.append({"toolCode": code, "json": result})
    turn.params.update(mcp_observations=observations, mcp_tool_group=tool.group)
    _lifecycle(turn, "TOOL_RESULT", "IN_PROGRESS", toolExecuted=True, lastAction="CALL_TOOL", lastToolCode=code,
               lastToolGroup=tool.group, lastToolArgs=args)
    rows = len(result) if isinstance(result, list) else None
    turn.audit(stages.MCP_TOOL_RESULT, {"tool_code": code, "tool_group": tool.group, "rows": rows, "result": result})
    if code.lower() == SEMANTIC_INTERPRET_TOOL:  # a host-registered interpreter: its rules run as in ConvEngine
        await run_rules(turn, POST_SEMANTIC_INTERPRET, "McpToolStep PostSemanticInterpret")
    turn.route_to(names.MCP_PLANNER)


async def _delay(turn: Turn, calls_done: int) -> None:
    """``tool-call-delay-ms`` before every call, plus ``-after-ms`` once ``-after-calls`` calls were made."""
    s = turn.settings.mcp
    pause = s.tool_call_delay_ms + (s.tool_call_delay_after_ms if calls_done >= s.tool_call_delay_after_calls else 0)
    if pause > 0:
        await asyncio.sleep(pause / 1000)


async def _tool_failed(turn: Turn, code: str, group: str | None, args: dict[str, Any], exc: Exception) -> None:
    message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    turn.audit(stages.MCP_TOOL_ERROR, {"tool_code": code, "tool_group": group, "args": args, "error": message,
                                  "errorType": type(exc).__name__})
    root: BaseException = exc
    while root.__cause__ is not None:
        root = root.__cause__
    turn.audit(stages.MCP_TOOL_ROOT_CAUSE, {"tool_code": code, "rootType": type(root).__name__, "rootMessage": str(root)})
    _mcp(turn)["toolExecutionError"] = {"toolCode": code, "error": message}
    turn.params[pk.MCP_TOOL_EXECUTION_ERROR] = message
    _answer(turn, TOOL_FAILED, status="TOOL_ERROR", outcome="ERROR", errorMessage=message, lastToolCode=code)
    await _finish(turn, planner_ran=True)
