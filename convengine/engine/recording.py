"""What a conversation's recording holds, turn by turn: the inputs it was sent (user text, the caller's
input params, a reset) and what answered them (the LLM replies from ``ce_llm_call_log``, the tool
results from the audit), with what happened (intent, state, status, reply, tool calls, flow position).

One reading for the two things that replay a conversation: ``export-test`` writes it as a
``.conv.yaml`` test, ``replay`` runs it against a draft. Turns that were undone or failed are left out
(neither changed the conversation). A turn whose recording cannot answer a replay (its LLM calls
were not logged, its input params were too large to audit, a tool result is missing) carries the
reason in :attr:`RecordedTurn.missing`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from convengine.audit.events import AuditEvent
from convengine.audit.turns import (
    TOOL_CALL_STAGES,
    TOOL_RESULT_STAGES,
    completed,
    logged_llm_call,
    split_turns,
    tool_calls,
    undone_marks,
)
from convengine.catalog import stages
from convengine.catalog.errors import InvalidInputError
from convengine.db.models import CeLlmCallLog

LLM_LOG = CeLlmCallLog.__table__


class RecordingError(InvalidInputError):
    """The conversation's recording cannot be replayed (the message says why)."""


class RecordingSource(Protocol):
    """What reading a recording needs of an engine (``convengine.Engine``)."""

    async def aaudit(self, conversation_id: str, owner: str | None = None) -> list[AuditEvent]: ...

    async def asteps(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]: ...


@dataclass
class RecordedTurn:
    """One completed turn as recorded."""

    number: int
    events: list[AuditEvent]
    user: str
    params: dict[str, Any] | None
    reset: bool
    result: dict[str, Any]
    llm: list[tuple[str, Any]] = field(default_factory=list)
    """The LLM replies the turn used, in call order: (call site, reply)."""
    missing: str | None = None
    """Why the recording cannot replay this turn (None: it can)."""
    event: str | None = None
    """``welcome`` or ``handoff_resume`` for an event turn (no user text)."""

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tool calls: ``{tool, args, result, error}`` in order."""
        return tool_calls(self.events)

    @property
    def llm_sites(self) -> dict[str, int]:
        return dict(Counter(str(e.payload.get("callSite")) for e in self.events if e.stage == stages.LLM_CALL))


async def llm_log(database: AsyncEngine, conversation_id: str) -> list[dict[str, Any]]:
    """The conversation's ``ce_llm_call_log`` rows in the order they were written (empty when
    ``llm.log_calls`` is off)."""
    query = (sa.select(LLM_LOG.c.llm_call_id, LLM_LOG.c.user_context, LLM_LOG.c.prompt_text,
                       LLM_LOG.c.response_text, LLM_LOG.c.success, LLM_LOG.c.error_message)
             .where(LLM_LOG.c.conversation_id == conversation_id).order_by(LLM_LOG.c.llm_call_id))
    async with database.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [dict(r._mapping) for r in rows]


async def read_recording(source: RecordingSource, database: AsyncEngine, conversation_id: str, *,
                         owner: str | None = None) -> list[RecordedTurn]:
    """The conversation's completed, not undone turns (ConversationNotFoundError when ``owner`` may
    not read it); ``database`` is the engine's, holding ``ce_llm_call_log``."""
    events = await source.aaudit(conversation_id, owner=owner)
    steps = await source.asteps(conversation_id, owner=owner)
    rows = await llm_log(database, conversation_id)
    return recorded_turns(split_turns(events), steps, rows)


def recorded_turns(turns: list[list[AuditEvent]], steps: Sequence[dict[str, Any]],
                   rows: list[dict[str, Any]]) -> list[RecordedTurn]:
    by_turn = _rows_by_turn(turns, rows)
    marks = undone_marks(turns, steps)
    return [_turn(number, events, by_turn[number])
            for number, (events, undone) in enumerate(zip(turns, marks, strict=True), start=1)
            if completed(events) and not undone]


def _rows_by_turn(turns: list[list[AuditEvent]], rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The LLM log rows of each turn: calls are logged in the order they are audited."""
    out: dict[int, list[dict[str, Any]]] = {}
    position = 0
    for number, events in enumerate(turns, start=1):
        count = sum(1 for e in events if logged_llm_call(e))
        out[number] = rows[position:position + count]
        position += count
    return out


def _turn(number: int, events: list[AuditEvent], rows: list[dict[str, Any]]) -> RecordedTurn:
    user_input = next((e.payload for e in events if e.stage == stages.USER_INPUT), {})
    result = next((e.payload for e in reversed(events) if e.stage == stages.ENGINE_RETURN), {})
    reset = any(e.stage == stages.CONVERSATION_RESET and str(e.payload.get("reason", "")).startswith("INPUT_PARAM")
                for e in events)
    turn = RecordedTurn(number, events, str(user_input.get("text") or ""), user_input.get("inputParams") or None,
                        reset, result, event=user_input.get("event") or None)
    turn.missing = _params_missing(number, user_input) or _llm_missing(number, events, rows) \
        or _tool_missing(number, events)
    if turn.missing is None:
        turn.llm = _llm_replies(events, rows)
    return turn


def _params_missing(number: int, user_input: dict[str, Any]) -> str | None:
    omitted = user_input.get("inputParamsOmitted")
    if not omitted:
        return None
    return (f"turn {number}'s inputParams ({omitted.get('bytes')} bytes) were too large for the audit to record "
            "them, so the turn cannot be replayed")


def _llm_missing(number: int, events: list[AuditEvent], rows: list[dict[str, Any]]) -> str | None:
    calls = [e for e in events if e.stage == stages.LLM_CALL]
    logged = [e for e in events if logged_llm_call(e)]
    if calls and len(rows) < len(logged):
        return (f"turn {number} called the LLM {len(logged)} time(s) but ce_llm_call_log holds {len(rows)} of "
                "them: set llm.log_calls=true (CONVENGINE_LLM__LOG_CALLS=true) before recording conversations to "
                "replay")
    return None


def _tool_missing(number: int, events: list[AuditEvent]) -> str | None:
    """A tool call without its result event (a tool may return null: that is a result)."""
    pending: Counter[str] = Counter()
    for event in events:
        code = str(event.payload.get("tool_code") or "").lower()
        if event.stage in TOOL_CALL_STAGES and code:
            pending[code] += 1
        elif event.stage in TOOL_RESULT_STAGES and pending[code] > 0:
            pending[code] -= 1
    lost = next((code for code, n in pending.items() if n > 0), None)
    return None if lost is None else f"turn {number} called tool {lost} but the audit holds no result for it"


def _llm_replies(events: list[AuditEvent], rows: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    replies = []
    logged = [e for e in events if logged_llm_call(e)]
    for event, row in zip(logged, rows, strict=False):
        if event.stage != stages.LLM_CALL:
            continue  # a failed attempt: the retry's reply is what the turn used
        site = str(event.payload.get("callSite") or row.get("user_context"))
        replies.append((site, _reply(row.get("response_text") or "", bool(event.payload.get("json")))))
    return replies


def _reply(text: str, wants_json: bool) -> Any:
    if wants_json:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def flow_position(events: Sequence[AuditEvent]) -> str | None:
    """Where the turn left its flow or workflow: ``flow/node`` of the last node it ran or waits at."""
    at = None
    for event in events:
        if event.stage in (stages.FLOW_NODE, stages.FLOW_WAITING, stages.WORKFLOW_NODE, stages.WORKFLOW_WAITING):
            p = event.payload
            at = f"{p.get('flow') or p.get('workflow')}/{p.get('node')}"
        elif event.stage in (stages.FLOW_COMPLETED, stages.WORKFLOW_COMPLETED):
            at = None
    return at
