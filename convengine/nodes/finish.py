"""memory, persist_conversation and pipeline_end_guard: the turn's end."""

from __future__ import annotations

import json
from typing import Any

from convengine._internal.jsontext import dumps, roundtrip
from convengine.catalog import names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.catalog.errors import ErrorCode, InvalidInputError, StepError
from convengine.catalog.state import persistent_params
from convengine.nodes.common import Step, now_ms
from convengine.nodes.recorded import context_changes
from convengine.nodes.response import transform
from convengine.nodes.schema_scope import settle_schema_scope
from convengine.nodes.summary import assistant_text, memory_row, summarise
from convengine.nodes.turn import Turn


def deterministic_summary(turn: Turn, recent: int, max_chars: int) -> str:
    """ConvEngine's summary string, built from the newest turns (not the oldest)."""
    window = (turn.get(keys.RECENT_TURNS) or [])[-recent:] if recent > 0 else []
    turns = ", ".join(f"{{u={t.get('user')}, a={_as_text(t.get('assistant'))}}}" for t in window)
    text = (f"intent={turn.intent}, state={turn.state}, user={turn.user_text}, recentTurns=[{turns}], "
            f"response={assistant_text(turn.get(keys.PAYLOAD))}")
    return " ".join(text.split())[:max_chars]  # whitespace runs as one space, as ConvEngine's \s+ collapse


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


async def memory(turn: Turn) -> None:
    cfg = turn.settings.flow.memory
    row = memory_row(turn)
    if row is not None and turn.ctx.services.llm is not None and len(turn.get(keys.RECENT_TURNS) or []) >= row.recent_turns:
        summary, source = await summarise(turn, row), "LLM"
    else:
        limit = row.summary_max_chars if row is not None else cfg.summary_max_chars
        summary, source = deterministic_summary(turn, cfg.recent_turns_for_summary, limit), "DETERMINISTIC"
    turn.context.setdefault("memory", {})["session_summary"] = summary
    turn.params[pk.MEMORY_SESSION_SUMMARY] = summary
    turn.audit(stages.MEMORY_UPDATED, {"summaryChars": len(summary), "source": source,
                                  "memoryId": row.memory_id if row else None, "intent": turn.intent,
                                  "state": turn.state})


def _memory_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    if turn.settings.flow.memory.enabled:
        return None
    return stages.MEMORY_SKIPPED, {"reason": "MEMORY_DISABLED"}


def json_safe(value: object) -> Any:
    """Round-trip through JSON (what the JSON columns will hold)."""
    return roundtrip(value)


def stored_assistant(payload: dict[str, Any]) -> Any:
    """ConvEngine's last_assistant_json: ``{type, value}`` for text, the raw JSON otherwise."""
    if payload.get("type") == "JSON":
        return payload.get("value")
    return {"type": payload.get("type", "TEXT"), "value": payload.get("value")}


async def persist_conversation(turn: Turn) -> None:
    payload = turn.get(keys.PAYLOAD)
    if not payload:
        raise StepError("the turn produced no response payload (no step set one)",
                        code=ErrorCode.PIPELINE_NO_RESPONSE_PAYLOAD)
    blocked = turn.get(keys.STATUS) == "BLOCKED"
    settle_schema_scope(turn)
    status = turn.get(keys.STATUS) if turn.get(keys.STATUS) in ("BLOCKED", "HANDOFF") else "RUNNING"
    context = json_safe(turn.read_context())
    params = json_safe(persistent_params(turn.read_params(), _kept_keys(turn)))
    _check_params_size(turn, params)
    turn.replace_context(context)
    turn.set(keys.INPUT_PARAMS, params)
    turn.set(keys.STATUS, status)
    if not blocked:  # blocked text stays out of the history used for prompts
        window = list(turn.get(keys.RECENT_TURNS) or [])
        window.append({"user": turn.user_text, "assistant": _window_value(payload), "at": now_ms(turn)})
        turn.set(keys.RECENT_TURNS, window[-turn.settings.flow.conversation_history.max_turns:])
    turn.set(keys.PERSISTED, True)  # the caller commits the row from this state (convengine.engine.commit)
    result = {"intent": turn.intent, "state": turn.state, "payload": payload, "status": status}
    changes = context_changes(turn, context)
    turn.audit(stages.ENGINE_RETURN, {**result, "contextChanges": changes} if changes else result)


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
    request = (turn.get(keys.TURN_INPUT) or {}).get("params") or {}
    return [*(turn.get(keys.INPUT_PARAMS) or {}), *request, *(turn.get(keys.KEPT_PARAMS) or [])]


def _window_value(payload: dict[str, Any]) -> Any:
    return payload.get("value") if payload.get("type") != "ERROR" else None


async def pipeline_end_guard(turn: Turn) -> None:
    audit = turn.ctx.audit
    steps = ", ".join(f"{name}={ms:.1f}ms" for name, ms in audit.timings)
    turn.audit(stages.PIPELINE_TIMING, {"totalMs": round(audit.total_ms(), 2), "steps": steps})
    await final_reply(turn)


async def final_reply(turn: Turn) -> None:
    """The FINAL response transformer changes what the turn returns (``reply``), not the stored answer."""
    payload = turn.get(keys.PAYLOAD)
    if payload and (turn.intent, turn.state, "FINAL") in turn.ctx.services.registries.response_transformers:
        turn.set(keys.REPLY, await transform(turn, dict(payload), "FINAL"))


STEPS = (
    Step(names.MEMORY, memory, skip=_memory_skip),
    Step(names.PERSIST_CONVERSATION, persist_conversation),
    Step(names.PIPELINE_END_GUARD, pipeline_end_guard),
)
