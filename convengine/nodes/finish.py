"""memory, persist_conversation and pipeline_end_guard: the turn's end."""

from __future__ import annotations

import json
import re
from typing import Any

from convengine.errors import ErrorCode, InvalidInputError, StepError
from convengine.graph import names
from convengine.jsontext import dumps
from convengine.nodes.common import Step, now_ms
from convengine.nodes.schema_scope import settle_schema_scope
from convengine.nodes.summary import assistant_text, memory_row, summarise
from convengine.nodes.turn import Turn
from convengine.state import persistent_params

_SPACES = re.compile(r"\s+")


def deterministic_summary(turn: Turn, recent: int, max_chars: int) -> str:
    """ConvEngine's summary string, built from the newest turns (not the oldest)."""
    window = (turn.get("recent_turns") or [])[-recent:] if recent > 0 else []
    turns = ", ".join(f"{{u={t.get('user')}, a={_as_text(t.get('assistant'))}}}" for t in window)
    text = (f"intent={turn.intent}, state={turn.state}, user={turn.user_text}, recentTurns=[{turns}], "
            f"response={assistant_text(turn.get('payload'))}")
    return _SPACES.sub(" ", text).strip()[:max_chars]


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


async def memory(turn: Turn) -> None:
    cfg = turn.settings.flow.memory
    row = memory_row(turn)
    if row is not None and turn.ctx.services.llm is not None and len(turn.get("recent_turns") or []) >= row.recent_turns:
        summary, source = await summarise(turn, row), "LLM"
    else:
        limit = row.summary_max_chars if row is not None else cfg.summary_max_chars
        summary, source = deterministic_summary(turn, cfg.recent_turns_for_summary, limit), "DETERMINISTIC"
    turn.context.setdefault("memory", {})["session_summary"] = summary
    turn.params["memory_session_summary"] = summary
    turn.audit("MEMORY_UPDATED", {"summaryChars": len(summary), "source": source,
                                  "memoryId": row.memory_id if row else None, "intent": turn.intent,
                                  "state": turn.state})


def _memory_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    if turn.settings.flow.memory.enabled:
        return None
    return "MEMORY_SKIPPED", {"reason": "MEMORY_DISABLED"}


def json_safe(value: Any) -> Any:
    """Round-trip through JSON (what the JSON columns will hold)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def stored_assistant(payload: dict[str, Any]) -> Any:
    """ConvEngine's last_assistant_json: ``{type, value}`` for text, the raw JSON otherwise."""
    if payload.get("type") == "JSON":
        return payload.get("value")
    return {"type": payload.get("type", "TEXT"), "value": payload.get("value")}


async def persist_conversation(turn: Turn) -> None:
    payload = turn.get("payload")
    if not payload:
        raise StepError("the turn produced no response payload (no step set one)",
                        code=ErrorCode.PIPELINE_NO_RESPONSE_PAYLOAD)
    blocked = turn.get("status") == "BLOCKED"
    settle_schema_scope(turn)
    status = turn.get("status") if turn.get("status") in ("BLOCKED", "HANDOFF") else "RUNNING"
    context = json_safe(turn.read_context())
    params = json_safe(persistent_params(turn.read_params(), _kept_keys(turn)))
    _check_params_size(turn, params)
    turn.replace_context(context)
    turn.set("input_params", params)
    turn.set("status", status)
    if not blocked:  # blocked text stays out of the history used for prompts
        window = list(turn.get("recent_turns") or [])
        window.append({"user": turn.user_text, "assistant": _window_value(payload), "at": now_ms(turn)})
        turn.set("recent_turns", window[-turn.settings.flow.conversation_history.max_turns:])
    _prepare_commit(turn, payload, context, params, blocked)
    turn.ctx.commit.projection["status"] = status
    turn.audit("ENGINE_RETURN", {"intent": turn.intent, "state": turn.state, "payload": payload,
                                 "status": status})


def _check_params_size(turn: Turn, params: dict[str, Any]) -> None:
    """Persisted params are re-read and re-checkpointed every turn: they may not grow without bound."""
    limit = turn.settings.api.max_persisted_params_bytes
    size = len(dumps(params))
    if size > limit:
        raise InvalidInputError(f"the conversation's params would persist {size} bytes; the limit is {limit} "
                                "(settings api.max_persisted_params_bytes): send fewer or smaller inputParams, "
                                "or reset the conversation")


def _kept_keys(turn: Turn) -> list[str]:
    """Params that persist: those persisted before, the caller's of this turn, those a rule or task kept."""
    request = (turn.get("turn_input") or {}).get("params") or {}
    return [*(turn.get("input_params") or {}), *request, *(turn.get("kept_params") or [])]


def _window_value(payload: dict[str, Any]) -> Any:
    return payload.get("value") if payload.get("type") != "ERROR" else None


def _prepare_commit(turn: Turn, payload: dict[str, Any], context: Any, params: Any, blocked: bool) -> None:
    assistant = json_safe(stored_assistant(payload))
    turn.ctx.commit.projection = {
        "conversation_id": turn.conversation_id, "status": "BLOCKED" if blocked else "RUNNING",
        "intent_code": turn.intent, "state_code": turn.state, "context_json": context,
        "last_user_text": turn.user_text, "last_assistant_json": assistant, "input_params_json": params,
    }
    turn.ctx.commit.history = {"conversation_id": turn.conversation_id, "user_input": turn.user_text,
                               "assistant_output": assistant}


async def pipeline_end_guard(turn: Turn) -> None:
    audit = turn.ctx.audit
    steps = ", ".join(f"{name}={ms:.1f}ms" for name, ms in audit.timings)
    turn.audit("PIPELINE_TIMING", {"totalMs": round(audit.total_ms(), 2), "steps": steps})
    store = turn.ctx.services.store
    if turn.ctx.autocommit and store is not None:
        await store.commit_turn(None, conversation_id=turn.conversation_id, projection=turn.ctx.commit.projection,
                                history=turn.ctx.commit.history, events=list(audit.events))


STEPS = (
    Step(names.MEMORY, memory, skip=_memory_skip),
    Step(names.PERSIST_CONVERSATION, persist_conversation),
    Step(names.PIPELINE_END_GUARD, pipeline_end_guard),
)
