"""Conversation steps: one row per completed turn, built from the turn's audit events.

A step holds the turn's input, the rule actions that fired, the data its steps produced (tool
results, LLM outputs, extracted values), its output and the effects it had outside the engine
(tasks, tools). Rows are written in the turn's transaction and never changed afterwards, except
for the ``undone`` mark that undo and redo set.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from convengine._internal.jsontext import dumps
from convengine.audit.events import AuditEvent
from convengine.catalog import flows as flow_vocab
from convengine.catalog import stages
from convengine.catalog import state as keys
from convengine.catalog.memory import (
    ACTION_STAGE,
    DATA_STAGE_SUFFIX,
    DATA_STAGES,
    FALLBACK_STAGES,
    HANDOFF_STAGE,
    LLM_CALL_STAGE,
    SIDE_EFFECT_STAGES,
    UNMATCHED_STAGE,
)
from convengine.catalog.vocab import UNKNOWN
from convengine.checkpointing.persistence import sqlite_time
from convengine.db.models import STEP_STATS_COLUMNS, CeConversationHistory, CeConversationStep
from convengine.llm.spend import price
from convengine.nodes.finish import json_safe, stored_assistant
from convengine.settings import LlmSpendSettings

STEP = CeConversationStep.__table__
HISTORY = CeConversationHistory.__table__


def _stage(stage: str) -> str:
    return stage.partition(" ")[0]


Entry = tuple[str, str | None, dict[str, Any]]
"""An audit event as a step row reads it: stage, step, payload."""


def side_effects(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """What the turn did outside the engine, one entry per task run or tool call."""
    return _side_effects([(_stage(e.stage), e.step, e.payload) for e in events])


def _side_effects(staged: Sequence[Entry]) -> list[dict[str, Any]]:
    return [_side_effect(stage, step, payload) for stage, step, payload in staged if stage in SIDE_EFFECT_STAGES]


def _side_effect(stage: str, step: str | None, payload: dict[str, Any]) -> dict[str, Any]:
    what = (payload.get("taskBean") or payload.get("toolCode") or payload.get("tool_code")
            or payload.get("mcpToolCode") or payload.get("containerId"))
    return {"stage": stage, "step": step, "what": what}


def _tokens(usage: object, name: str) -> int:
    value = usage.get(name) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _call_stats(calls: Sequence[dict[str, Any]], prices: LlmSpendSettings) -> dict[str, Any]:
    """A turn's model calls (their LLM_CALL payloads): how many, their tokens and their price at ``prices``."""
    usages = [(_tokens(c.get("usage"), "input_tokens"), _tokens(c.get("usage"), "output_tokens")) for c in calls]
    cost = sum(price(prices, c.get("model"), {"input_tokens": i, "output_tokens": o})
               for c, (i, o) in zip(calls, usages, strict=True))
    return {"llm_calls": len(calls), "input_tokens": sum(i for i, _ in usages),
            "output_tokens": sum(o for _, o in usages), "llm_cost": cost}


def step_row(conversation_id: str, turn_key: str, final: dict[str, Any],
             events: Sequence[Entry], prices: LlmSpendSettings | None = None) -> dict[str, Any]:
    """The step row of a completed turn (its final state and its audit events as (stage, step, payload)):
    what analytics counts of it too (where it ended, whether a fallback answered it or it handed off,
    its model calls, their tokens and their price at ``prices``, ``llm.spend``). One pass over the events."""
    intent = final.get(keys.INTENT)
    actions: list[dict[str, Any]] = []
    data: list[dict[str, Any]] = []
    effects: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    fallback = handoff = False
    for full_stage, step, p in events:
        stage = full_stage.partition(" ")[0]
        if stage == ACTION_STAGE:
            actions.append({"ruleId": p.get("ruleId"), "action": p.get("action"), "phase": p.get("phase")})
        if stage in DATA_STAGES or stage.endswith(DATA_STAGE_SUFFIX):
            data.append({"stage": stage, "step": step, "payload": p})
        if stage in SIDE_EFFECT_STAGES:
            effects.append(_side_effect(stage, step, p))
        if stage == LLM_CALL_STAGE:
            calls.append(p)
        # a fallback answered: a fallback stage, a flow fallback node, or nothing recognised the message
        # and the turn ended without an intent
        fallback = fallback or (stage in FALLBACK_STAGES or (stage == UNMATCHED_STAGE and intent == UNKNOWN)
                                or (stage == stages.FLOW_NODE and p.get("type") == flow_vocab.FALLBACK))
        handoff = handoff or stage == HANDOFF_STAGE
    payload = final.get(keys.PAYLOAD) or {}
    return {"conversation_id": conversation_id, "turn_key": turn_key, "turn": int(final.get(keys.TURN) or 0),
            "input_text": final.get(keys.USER_TEXT) or "", "actions_json": json_safe(actions),
            "data_json": json_safe(data), "output_json": json_safe(stored_assistant(payload)) if payload else None,
            "side_effects_json": effects, "undone": False, "created_at": datetime.now(UTC),
            "intent_code": intent, "state_code": final.get(keys.STATE), "fallback": fallback, "handoff": handoff,
            **_call_stats(calls, prices or LlmSpendSettings())}


_COLUMNS = ("conversation_id", "turn_key", "turn", "input_text", "actions_json", "data_json", "output_json",
            "side_effects_json", "properties_json", "undone", "created_at", *STEP_STATS_COLUMNS)
_BOOLEANS = ("undone", "fallback", "handoff")
_INSERT_SQLITE = (f"INSERT INTO ce_conversation_step ({', '.join(_COLUMNS)}, history_id) VALUES "
                  f"({', '.join('?' for _ in _COLUMNS)}, (SELECT max(history_id) FROM ce_conversation_history "
                  "WHERE conversation_id = ?))")


_LIFECYCLE_SQLITE = ("UPDATE ce_conversation SET user_id = coalesce(user_id, ?), lifecycle = ? "
                     "WHERE conversation_id = ?")


_STEP_CTE_PG = (f"step AS (INSERT INTO ce_conversation_step ({', '.join(_COLUMNS)}, history_id) SELECT "
                f"{', '.join(f'%(s_{c})s' + ('::jsonb' if c.endswith('_json') else '') for c in _COLUMNS)}, "
                "history_id FROM hist)")


def turn_step_cte(row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The step row as a CTE of the turn's PostgreSQL statement (linked to the history row the
    statement inserts, ``hist``) and its parameters (``s_`` + column)."""
    return _STEP_CTE_PG, {f"s_{c}": v for c, v in _pg_values(row).items()}


def _pg_values(row: dict[str, Any]) -> dict[str, Any]:
    row = {**dict.fromkeys(STEP_STATS_COLUMNS), **row}
    json_values = {c: None if row[c] is None else dumps(row[c]) for c in _COLUMNS if c.endswith("_json")}
    truth = {c: None if row[c] is None else bool(row[c]) for c in _BOOLEANS}
    return {c: v for c, v in {**row, **json_values, **truth}.items() if c in _COLUMNS}


def insert_turn_step(conn: sa.Connection, row: dict[str, Any], user_id: str | None, lifecycle: str) -> None:
    """A completed turn's memory rows on SQLite, as prepared driver statements (no statement building):
    the conversation's user (set once) and lifecycle, and the step row, linked to the history row the
    turn just wrote. Values bound as SQLAlchemy's column types would: JSON text, booleans, timestamps.
    (On PostgreSQL the turn's own statement writes them: :func:`turn_step_cte`.)"""
    row = {**dict.fromkeys(STEP_STATS_COLUMNS), **row}
    json_values = {c: None if row[c] is None else dumps(row[c]) for c in _COLUMNS if c.endswith("_json")}
    conn.exec_driver_sql(_LIFECYCLE_SQLITE, (user_id, lifecycle, row["conversation_id"]))
    flags = {c: None if row[c] is None else int(bool(row[c])) for c in _BOOLEANS}
    values = {**row, **json_values, **flags, "created_at": sqlite_time(row["created_at"])}
    conn.exec_driver_sql(_INSERT_SQLITE, (*(values[c] for c in _COLUMNS), row["conversation_id"]))


def find_step(conn: sa.Connection, conversation_id: str, turn_key: str | None) -> dict[str, Any] | None:
    if turn_key is None:
        return None
    found = conn.execute(sa.select(STEP).where(STEP.c.conversation_id == conversation_id,
                                               STEP.c.turn_key == turn_key)).first()
    return dict(found._mapping) if found else None


def mark_undone(conn: sa.Connection, conversation_id: str, turn_key: str | None, undone: bool) -> None:
    """Mark a turn's step and history rows undone (or redone); nothing is deleted."""
    step = find_step(conn, conversation_id, turn_key)
    if step is None:
        return
    conn.execute(sa.update(STEP).where(STEP.c.step_id == step["step_id"]).values(undone=undone))
    if step["history_id"] is not None:
        conn.execute(sa.update(HISTORY).where(HISTORY.c.history_id == step["history_id"])
                     .values(undone=undone, modified_at=datetime.now(UTC)))


def read_steps(conn: sa.Connection, conversation_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(sa.select(STEP).where(STEP.c.conversation_id == conversation_id)
                        .order_by(STEP.c.step_id))
    return [public_step(dict(r._mapping)) for r in rows]


def public_step(row: dict[str, Any]) -> dict[str, Any]:
    """A step as the Python and HTTP APIs return it (read-only copies)."""
    created = row.get("created_at")
    return {"turn": row["turn"], "turnId": row["turn_key"], "input": row["input_text"],
            "actions": row["actions_json"] or [], "data": row["data_json"] or [], "output": row["output_json"],
            "sideEffects": row["side_effects_json"] or [], "undone": bool(row["undone"]),
            "createdAt": created.isoformat() if created is not None else None}
