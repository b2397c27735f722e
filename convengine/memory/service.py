"""What the runtime asks of conversation memory, on the turn's connection and under its lock:
who may send a turn (user, lifecycle), what a completed or failed turn adds (user, lifecycle,
step row), undo and redo, and the reads (steps, lifecycle)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from convengine._internal.turn_io import TurnRequest
from convengine.audit import AuditBus, AuditEvent
from convengine.audit.collector import TurnAudit
from convengine.catalog import stages
from convengine.catalog import state as keys
from convengine.catalog.booleans import truthy
from convengine.catalog.chains import run_thread
from convengine.catalog.errors import (
    ConvEngineError,
    ConversationEndedError,
    ConversationNotFoundError,
    ErrorCode,
    UndoError,
)
from convengine.catalog.memory import UNDO_STAGE, Lifecycle
from convengine.catalog.state import RESET_PARAM_KEYS
from convengine.checkpointing import timeline
from convengine.checkpointing.bound import commit_turn_connection
from convengine.checkpointing.persistence import TurnExtra, insert_events
from convengine.db.models import (
    CeAudit,
    CeAuditTurn,
    CeChainRun,
    CeChainRunStep,
    CeConversation,
    CeConversationHistory,
    CeConversationVersion,
    CeLlmCallLog,
)
from convengine.memory import longterm, steps
from convengine.memory.host import MemoryHost
from convengine.nodes.bootstrap import RESET_COMMANDS
from convengine.nodes.context import TurnContext
from convengine.nodes.finish import json_safe, stored_assistant
from convengine.security.secrets import MASK, mask
from convengine.settings import EngineSettings

CONVERSATION = CeConversation.__table__
CHAIN_RUN, CHAIN_RUN_STEP = CeChainRun.__table__, CeChainRunStep.__table__
Write = Callable[[sa.Connection], None]
T = TypeVar("T")


def resets(request: TurnRequest) -> bool:
    """Whether the request resets the conversation (flag, reset param or reset command)."""
    if request.reset or any(truthy(request.params.get(k)) for k in RESET_PARAM_KEYS):
        return True
    return request.text.strip().lower() in RESET_COMMANDS


def lifecycle_of(state: str | None, settings: EngineSettings) -> str:
    """IN_PROGRESS, or ENDED when the conversation is in one of the pack's end states."""
    ended = state is not None and state in settings.conversation_memory.end_states
    return (Lifecycle.ENDED if ended else Lifecycle.IN_PROGRESS).value


@dataclass(frozen=True, slots=True)
class Admission:
    """What the turn lock's holder learnt about the conversation before its turn."""

    refused: ConvEngineError | None
    exists: bool
    user_id: str | None
    """The conversation's user: the stored one, else the request's."""
    owner: str | None = None
    """Whose user it is: the conversation's owner (stored, else the caller's for a new conversation);
    None for host code's users."""


def admission_query(conversation_id: str | sa.BindParameter[Any], *extra: sa.ColumnElement[Any]) -> sa.Select[Any]:
    """One row, whether or not the conversation exists: its id, user, lifecycle and owner (all NULL
    without a row), then the ``extra`` columns (the engine adds the version pin: one statement)."""
    one = sa.select(sa.literal(1).label("one")).subquery()
    joined = one.outerjoin(CONVERSATION, CONVERSATION.c.conversation_id == conversation_id)
    return sa.select(CONVERSATION.c.conversation_id, CONVERSATION.c.user_id, CONVERSATION.c.lifecycle,
                     CONVERSATION.c.owner_id, *extra).select_from(joined)


def judge(row: Sequence[Any], request: TurnRequest, owner: str | None = None) -> Admission:
    """Whether this turn may run (not another user's conversation, not an ended one) and who its user
    is, decided on a row of :func:`admission_query` (``owner``: the caller's identity, the owner of a
    conversation it creates). Nothing is written for a refused turn."""
    found, stored_user, lifecycle, stored_owner = row[:4]
    if found is None:
        return Admission(None, False, request.user_id, owner)
    cid = request.conversation_id
    if request.user_id is not None and stored_user != request.user_id:
        return Admission(ConversationNotFoundError(f"no conversation {cid}"), True, stored_user, stored_owner)
    if lifecycle == Lifecycle.ENDED.value and not resets(request):
        return Admission(ConversationEndedError(
            f"conversation {cid} has ended; send reset=true (or a reset command) to start it again",
            details={"conversationId": cid}), True, stored_user, stored_owner)
    return Admission(None, True, stored_user, stored_owner)


async def before_run(conn: AsyncConnection | None, admission: Admission, ctx: TurnContext) -> None:
    """The admitted turn's context gets its user and, for a new conversation, the user's long-term
    properties (merged by the scopes hook)."""
    ctx.user_id = admission.user_id
    ctx.has_row = admission.exists
    names = ctx.settings.conversation_memory.long_term
    if conn is None or admission.exists or admission.user_id is None or not names:
        return
    async with longterm.bound(conn) as store:
        ctx.long_term_loaded = await longterm.load(store, admission.user_id, names, admission.owner)


async def after_run(conn: AsyncConnection | None, request: TurnRequest, final: dict[str, Any], ctx: TurnContext,
                    settings: EngineSettings, owner: str | None = None) -> TurnExtra:
    """Save changed long-term properties of ``owner``'s user in the turn's transaction, mask secrets
    in its audit batch; the memory rows to write with the turn."""
    names = settings.conversation_memory.long_term
    changes: dict[str, Any] = {}
    if conn is not None and ctx.user_id is not None and names:
        async with longterm.bound(conn) as store:
            changes = await longterm.save_changes(store, ctx.user_id, final.get(keys.CONTEXT) or {}, names, owner)
        if changes:
            ctx.audit.emit(stages.LONG_TERM_PROPERTIES_SAVED, {"properties": sorted(changes)},
                           intent=final.get(keys.INTENT), state=final.get(keys.STATE))
    secrets = ctx.secret_values
    if secrets:
        ctx.audit.events.replace(_masked(ctx.audit.events, secrets))
    row = steps.step_row(request.conversation_id, request.turn_id, final, ctx.audit.events.entries(),
                         settings.llm.spend)
    row["properties_json"] = changes or None
    lifecycle = lifecycle_of(final.get(keys.STATE), settings)
    row = {**row, "conversation_id": request.conversation_id}
    return TurnExtra(partial(_write_turn, user_id=request.user_id, lifecycle=lifecycle, row=row),
                     request.user_id, lifecycle, partial(steps.turn_step_cte, row))


def publish_deferred(ctx: TurnContext, bus: AuditBus) -> None:
    """Stream the turn's (masked) events now when they were held back for its secrets."""
    if ctx.settings.conversation_memory.secret:
        for event in ctx.audit.events:
            bus.publish(event)


def mask_failed(ctx: TurnContext, params: Mapping[str, object] | None, declared: Collection[str],
                failure: AuditEvent) -> AuditEvent:
    """A failed turn's events with the secrets it had declared masked: the values the turn saw
    before it failed, and the declared properties the caller sent in its params. Returns ``failure``
    (the event that reports the failure, whose message may quote a secret) masked alike."""
    secrets = list(ctx.secret_values)
    for name in declared:
        value = (params or {}).get(name)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value):
            secrets.append(str(value))
    secrets = sorted(set(secrets), key=len, reverse=True)
    names = frozenset(declared)
    if secrets or names:
        ctx.audit.events.replace(_masked(ctx.audit.events, secrets, names))
        failure = _masked([failure], secrets, names)[0]
    return failure


def _masked(events: Sequence[AuditEvent], secrets: list[str], names: frozenset[str] = frozenset()) -> list[AuditEvent]:
    """``events`` with every secret value masked in their payload and meta, and in their payload the
    values of keys in ``names``."""
    return [replace(e, payload=mask(_mask_named(e.payload, names) if names else e.payload, secrets),
                    meta=mask(e.meta, secrets)) for e in events]


def _mask_named(value: object, names: frozenset[str]) -> object:
    """``value`` with the values of keys named like a secret property replaced (a value a step had
    just produced, e.g. an extraction, before the turn failed)."""
    if not names:
        return value
    if isinstance(value, dict):
        return {k: MASK if k in names and v is not None else _mask_named(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_named(v, names) for v in value]
    return value


def _write_turn(conn: sa.Connection, *, user_id: str | None, lifecycle: str, row: dict[str, Any]) -> None:
    """A completed turn's memory rows: the user (set once), the lifecycle and the step row."""
    steps.insert_turn_step(conn, row, user_id, lifecycle)


def failure_writes(request: TurnRequest) -> Write:
    """A failed turn: the conversation (if its row exists) is INTERRUPTED; its user is set once."""
    return partial(_set_user_and_lifecycle, cid=request.conversation_id, user_id=request.user_id,
                   lifecycle=Lifecycle.INTERRUPTED.value)


def _set_user_and_lifecycle(conn: sa.Connection, *, cid: str, user_id: str | None, lifecycle: str) -> None:
    conn.execute(_user_and_lifecycle(cid, user_id, lifecycle))


def _user_and_lifecycle(cid: str, user_id: str | None, lifecycle: str) -> sa.Update:
    return sa.update(CONVERSATION).where(CONVERSATION.c.conversation_id == cid).values(
        user_id=sa.func.coalesce(CONVERSATION.c.user_id, user_id), lifecycle=lifecycle)


# --- undo and redo ---------------------------------------------------------------------


async def move(host: MemoryHost, conn: AsyncConnection | None, conversation_id: str, kind: str) -> timeline.UndoResult:
    """Undo or redo on the turn's connection (under the conversation's lock), committed with its
    projection, history marks and audit event."""
    settings = host.settings()
    memory = settings.conversation_memory
    saver = host.saver
    async with saver.bind(conn):
        if kind == UNDO_STAGE:
            planned = await timeline.plan_undo(saver, conversation_id, memory.undo_depth)
        else:
            planned = await timeline.plan_redo(saver, conversation_id)
        step = await _run(host, conn, lambda c: steps.find_step(c, conversation_id, planned.moved_turn))
        effects = list((step or {}).get("side_effects_json") or [])
        if kind == UNDO_STAGE and effects and not memory.undo_past_side_effects:
            raise UndoError(f"turn {step['turn'] if step else '?'} had effects outside the engine "
                            f"({', '.join(e['stage'] for e in effects)}) and this pack forbids undoing past it "
                            "(settings conversation_memory.undo_past_side_effects)",
                            code=ErrorCode.UNDO_FORBIDDEN, details={"conversationId": conversation_id})
        values = await timeline.apply(saver, planned, kind.lower())
        await _restore_long_term(conn, step, kind)
        result = _result(conversation_id, kind, planned, values, effects, memory.undo_depth)
        audit = TurnAudit(conversation_id, audit_filter=host.audit_filter, bus=host.bus,
                          persist_meta=settings.audit.persist_meta)
        audit.emit(kind, {**result.to_dict(), "restoredCheckpoint": planned.target.config["configurable"]
                          ["checkpoint_id"]}, intent=result.intent, state=result.state)
        write = _restore_writes(conversation_id, values, planned.moved_turn, kind, audit.events, settings)
        await _run(host, conn, write)
        if conn is not None:
            await commit_turn_connection(conn)
    return result


async def _restore_long_term(conn: AsyncConnection | None, step: dict[str, Any] | None, kind: str) -> None:
    """Undo puts back the long-term values the turn replaced; redo saves its values again (the runtime
    set the store up before taking the lock)."""
    changes = (step or {}).get("properties_json") or {}
    if not changes or conn is None or step is None:
        return
    row = (await conn.execute(sa.select(CONVERSATION.c.user_id, CONVERSATION.c.owner_id).where(
        CONVERSATION.c.conversation_id == step["conversation_id"]))).first()
    if row is None or row.user_id is None:
        return
    side = "before" if kind == UNDO_STAGE else "after"
    async with longterm.bound(conn) as store:
        await longterm.put_values(store, row.user_id, {n: c.get(side) for n, c in changes.items()}, row.owner_id)


def _result(cid: str, kind: str, planned: timeline.Move, values: dict[str, Any], effects: list[dict[str, Any]],
            max_depth: int) -> timeline.UndoResult:
    here = planned.new_position
    return timeline.UndoResult(cid, kind, int(values.get(keys.TURN) or 0), values.get(keys.INTENT) or "UNKNOWN",
                               values.get(keys.STATE) or "UNKNOWN", planned.moved_turn, effects,
                               can_undo=here.before is not None and here.depth < max_depth,
                               can_redo=bool(here.forward), values=values)


def _restore_writes(cid: str, values: dict[str, Any], moved_turn: str | None, kind: str,
                    events: Sequence[AuditEvent], settings: EngineSettings) -> Write:
    """The ce_conversation projection as the restored state has it, the moved turn's rows marked."""
    payload = values.get(keys.PAYLOAD)
    projection = {
        "status": values.get(keys.STATUS) or "RUNNING", "intent_code": values.get(keys.INTENT) or "UNKNOWN",
        "state_code": values.get(keys.STATE) or "UNKNOWN", "context_json": json_safe(values.get(keys.CONTEXT) or {}),
        "last_user_text": values.get(keys.USER_TEXT) or None,
        "last_assistant_json": json_safe(stored_assistant(payload)) if payload else None,
        "input_params_json": json_safe(values.get(keys.INPUT_PARAMS) or {}),
        "lifecycle": lifecycle_of(values.get(keys.STATE), settings) if values.get(keys.TURN) else Lifecycle.READY.value,
        "updated_at": datetime.now(UTC),
    }

    def write(conn: sa.Connection) -> None:
        conn.execute(sa.update(CONVERSATION).where(CONVERSATION.c.conversation_id == cid).values(**projection))
        steps.mark_undone(conn, cid, moved_turn, undone=kind == UNDO_STAGE)
        insert_events(conn, events)

    return write


async def _run(host: MemoryHost, conn: AsyncConnection | None, fn: Callable[[sa.Connection], T]) -> T:
    if conn is not None:
        return await conn.run_sync(fn)
    async with host.async_engine.begin() as own:
        return await own.run_sync(fn)


async def read_steps(host: MemoryHost, conversation_id: str) -> list[dict[str, Any]]:
    async with host.async_engine.connect() as conn:
        return await conn.run_sync(lambda c: steps.read_steps(c, conversation_id))


async def read_lifecycle(host: MemoryHost, conversation_id: str) -> str | None:
    """The stored lifecycle; READY for a conversation seeded but not yet started; None if unknown."""
    async with host.async_engine.connect() as conn:
        row = (await conn.execute(sa.select(CONVERSATION.c.lifecycle).where(
            CONVERSATION.c.conversation_id == conversation_id))).first()
    if row is not None:
        return row[0] or Lifecycle.IN_PROGRESS.value
    snap = await host.read_state(timeline.config(conversation_id))
    return Lifecycle.READY.value if snap.values else None


# --- erasure -----------------------------------------------------------------------------


async def forget_user(host: MemoryHost, user_id: str, conversations: bool, owner: str | None = None) -> dict[str, int]:
    """Erase ``owner``'s user's long-term properties (None: host code's user); with ``conversations``
    also every conversation of theirs (its rows in every ce_* table and its checkpoints), each under
    its turn lock. Without it, the values the user's turns saved are cleared from their step rows, so
    undo cannot bring them back. Another owner's user of the same id is not touched."""
    erased = await longterm.forget(await host.long_term_store(), user_id, owner)
    owned_by = CONVERSATION.c.owner_id.is_(None) if owner is None else CONVERSATION.c.owner_id == owner
    async with host.async_engine.connect() as conn:
        owned = [r[0] for r in await conn.execute(sa.select(CONVERSATION.c.conversation_id)
                                                  .where(CONVERSATION.c.user_id == user_id, owned_by))]
    for cid in owned:
        async with host.locks.hold(cid) as held, host.saver.bind(held):
            if conversations:
                await host.saver.adelete_thread(cid)
                for run_id in await _run(host, held, partial(_chain_runs, cid=cid)):
                    await host.saver.adelete_thread(run_thread(run_id))  # a chain run's paused state
            await _run(host, held, _erase_rows(cid, conversations))
            if held is not None:
                await commit_turn_connection(held)
    return {"properties": erased, "conversations": len(owned) if conversations else 0}


def _chain_runs(conn: sa.Connection, *, cid: str) -> list[str]:
    """The chain runs held in a conversation (their rows go with it; their steps by cascade)."""
    return [str(r[0]) for r in conn.execute(sa.select(CHAIN_RUN.c.run_id).where(CHAIN_RUN.c.conversation_id == cid))]


def _erase_rows(cid: str, conversations: bool) -> Write:
    def write(conn: sa.Connection) -> None:
        if not conversations:
            conn.execute(sa.update(steps.STEP).where(steps.STEP.c.conversation_id == cid).values(properties_json=None))
            return
        runs = sa.select(CHAIN_RUN.c.run_id).where(CHAIN_RUN.c.conversation_id == cid)
        conn.execute(sa.delete(CHAIN_RUN_STEP).where(CHAIN_RUN_STEP.c.run_id.in_(runs)))  # SQLite: no cascade by default
        for model in (CeLlmCallLog, CeAudit, CeAuditTurn, CeConversationHistory, CeConversationVersion, CeChainRun):
            table = model.__table__
            conn.execute(sa.delete(table).where(table.c.conversation_id == cid))
        conn.execute(sa.delete(steps.STEP).where(steps.STEP.c.conversation_id == cid))
        conn.execute(sa.delete(CONVERSATION).where(CONVERSATION.c.conversation_id == cid))

    return write
