"""Replaying recorded conversations against a draft or a version, before it goes live.

Each picked conversation's recording (:mod:`convengine.engine.recording`) is sent again, turn by
turn (its user inputs, the caller's input params, resets), to an isolated engine: its own throwaway
SQLite database, the version's configuration, the LLM replies and tool results of the recording
served back for each turn. Nothing is written to the live conversations; no tool is called; the
model is called only with ``live_llm=True``, for calls the recording cannot answer. A tool call the
recording cannot answer (another tool, other arguments) fails in the replay and shows as a
difference. Host tasks run only when the caller passes them (``tasks=``): they are the host's code,
and their effects are not recorded.

Each replayed turn is compared with the recorded one: intent, state, status, reply, tool calls
(name and arguments) and flow position. Conversations whose recording cannot be replayed are
listed with the reason.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from convengine.audit.events import AuditEvent
from convengine.audit.turns import last_turn, tool_calls
from convengine.catalog.errors import ConvEngineError, InvalidInputError
from convengine.catalog.flows import EVENT_HANDOFF_RESUME, EVENT_WELCOME
from convengine.db.models import CeConversation, CeConversationVersion, CeMcpUserFeedback
from convengine.engine.recording import (
    RecordedTurn,
    RecordingSource,
    flow_position,
    read_recording,
)
from convengine.engine.replay_models import (
    MAX_REPLAY_TURNS,
    ConversationReplay,
    Difference,
    NotReplayable,
    ReplayReport,
    ReplaySelection,
    TurnDiff,
)
from convengine.engine.replay_serve import RecordedHttp, RecordedLLM, RecordedTools, plain, service_calls
from convengine.engine.results import EngineOptions, TurnResult
from convengine.engine.runtime import EngineRuntime
from convengine.llm.gateway import LlmBackend
from convengine.versions import Versions

CONVERSATION = CeConversation.__table__
FEEDBACK = CeMcpUserFeedback.__table__
PIN = CeConversationVersion.__table__
FEEDBACK_TYPES = {"up": "THUMBS_UP", "down": "THUMBS_DOWN"}


class ReplayEngine(Protocol):
    """What a replay needs of the isolated engine it opens (``convengine.Engine``)."""

    @property
    def runtime(self) -> EngineRuntime: ...

    async def aprocess(self, message: str, conversation_id: str | None = None,
                       input_params: Mapping[str, Any] | None = None, reset: bool = False) -> TurnResult: ...

    async def astart(self, conversation_id: str | None = None,
                     input_params: Mapping[str, Any] | None = None) -> TurnResult: ...

    async def aresume_from_handoff(self, conversation_id: str) -> TurnResult: ...

    async def aaudit(self, conversation_id: str, owner: str | None = None) -> list[AuditEvent]: ...

    async def aclose(self) -> None: ...


OpenReplayEngine = Callable[..., Awaitable[ReplayEngine]]
"""Opens the isolated engine on a URL with :meth:`convengine.Engine.aopen`'s options."""


async def pick(database: AsyncEngine, selection: ReplaySelection, owner: str | None) -> list[str]:
    """The ids of the conversations ``selection`` picks, newest activity first; only ``owner``'s when given."""
    query = (sa.select(CONVERSATION.c.conversation_id).where(*_filters(selection, owner))
             .order_by(ACTIVE.desc(), CONVERSATION.c.conversation_id).limit(selection.last))
    async with database.connect() as conn:
        return [str(cid) for cid in (await conn.execute(query)).scalars()]


ACTIVE = sa.func.coalesce(CONVERSATION.c.updated_at, CONVERSATION.c.created_at)
"""A conversation's last activity."""


def _filters(selection: ReplaySelection, owner: str | None) -> list[sa.ColumnElement[bool]]:
    def at(moment: datetime) -> sa.BindParameter[datetime]:
        return sa.bindparam(None, moment, type_=CONVERSATION.c.updated_at.type)

    found: list[sa.ColumnElement[bool]] = []
    if owner is not None:
        found.append(CONVERSATION.c.owner_id == owner)
    if selection.intent:
        found.append(CONVERSATION.c.intent_code == selection.intent)
    if selection.feedback:
        found.append(sa.exists().where(FEEDBACK.c.conversation_id == CONVERSATION.c.conversation_id,
                                       FEEDBACK.c.feedback_type == FEEDBACK_TYPES[selection.feedback]))
    if selection.since is not None:
        found.append(ACTIVE >= at(selection.since))
    if selection.until is not None:
        found.append(ACTIVE < at(selection.until))
    if selection.ran_on is not None:
        pinned = sa.select(PIN.c.conversation_id).where(PIN.c.version_no == selection.ran_on)
        found.append(sa.cast(CONVERSATION.c.conversation_id, sa.Text).in_(pinned))
    return found


def tool_codes(content: Mapping[str, Any], recordings: list[list[RecordedTurn]]) -> set[str]:
    """Every tool the version configures or a recording called: each is answered from the recording."""
    codes = {str(row.get("tool_code")) for row in content.get("ce_mcp_tool") or [] if row.get("tool_code")}
    return codes | {str(c["tool"]) for turns in recordings for t in turns for c in t.tools if c.get("tool")}


async def read_all(source: RecordingSource, database: AsyncEngine, ids: list[str],
                   owner: str | None) -> tuple[dict[str, list[RecordedTurn]], list[NotReplayable]]:
    """The recordings of ``ids`` that can be replayed, and why the others cannot."""
    good: dict[str, list[RecordedTurn]] = {}
    bad: list[NotReplayable] = []
    budget = MAX_REPLAY_TURNS
    for cid in ids:
        turns = await read_recording(source, database, cid, owner=owner)
        reason = next((t.missing for t in turns if t.missing), None) or (
            None if turns else "no completed turn was recorded")
        if not reason and len(turns) > budget:
            reason = (f"its {len(turns)} turns would pass the {MAX_REPLAY_TURNS} turns one replay sends again "
                      "(replay fewer conversations: last, intent, since, until)")
        if reason:
            bad.append(NotReplayable(conversation_id=cid, reason=reason))
        else:
            good[cid] = turns
            budget -= len(turns)
    return good, bad


async def replay_recordings(recordings: dict[str, list[RecordedTurn]], content: Mapping[str, Any], *,
                            open_engine: OpenReplayEngine, live: LlmBackend | None = None,
                            options: Mapping[str, Any] | None = None, with_llm: bool = True) -> list[ConversationReplay]:
    """Each recording replayed on one isolated engine serving ``content`` (``options``: more of
    :meth:`convengine.Engine.aopen`'s keywords, e.g. the host's ``tasks``; ``with_llm``: whether the
    recording engine had a model, so the replay has one too)."""
    served = Served(RecordedLLM(live), RecordedTools(), RecordedHttp())
    llm, tools = served.llm, served.tools
    handlers = {code: tools.handler(code) for code in tool_codes(content, list(recordings.values()))}
    chosen = {**dict(options or {}), "pack": _isolated(content), "replace": True, "tools": handlers}
    if with_llm:
        chosen["llm"] = llm
    with tempfile.TemporaryDirectory(prefix="convengine-replay-") as workdir:
        engine = await open_engine(f"sqlite:///{Path(workdir) / 'replay.db'}", **chosen)
        try:
            await _serve_http(engine, served.http)
            return [await _conversation(engine, cid, turns, served) for cid, turns in recordings.items()]
        finally:
            await engine.aclose()


def _isolated(content: Mapping[str, Any]) -> dict[str, Any]:
    """The version's pack without what would reach outside the replay (real MCP servers)."""
    pack = dict(content)
    settings = dict(pack.get("settings") or {})
    mcp = dict(settings.get("mcp") or {})
    mcp.pop("servers", None)
    if mcp:
        settings["mcp"] = mcp
    else:
        settings.pop("mcp", None)
    pack["settings"] = settings
    return pack


@dataclass(frozen=True, slots=True)
class Served:
    """What answers the isolated engine from the recording, loaded turn by turn."""

    llm: RecordedLLM
    tools: RecordedTools
    http: RecordedHttp

    def load(self, turn: RecordedTurn) -> None:
        self.llm.load({site: [r for s, r in turn.llm if s == site] for site, _ in turn.llm})
        self.tools.load(turn)
        self.http.load(turn)


async def _serve_http(engine: ReplayEngine, http: RecordedHttp) -> None:
    """Flow service nodes of the isolated engine get the recorded responses instead of the network."""
    runner = engine.runtime.services.tools
    if runner is not None:
        await runner.http.aclose()
        runner.http = http  # type: ignore[assignment]  # the same execute() and aclose(), answered from the recording


async def _conversation(engine: ReplayEngine, cid: str, turns: list[RecordedTurn],
                        served: Served) -> ConversationReplay:
    replay_id = str(uuid.uuid4())
    llm = served.llm
    before = llm.live_calls
    diffs = []
    for turn in turns:
        served.load(turn)
        differences = await _turn(engine, replay_id, turn)
        if differences:
            diffs.append(TurnDiff(turn=turn.number, user=turn.user, differences=differences))
    return ConversationReplay(conversation_id=cid, turns=len(turns), diffs=diffs, live_llm_calls=llm.live_calls - before)


async def _turn(engine: ReplayEngine, replay_id: str, turn: RecordedTurn) -> list[Difference]:
    try:
        result = await _send(engine, replay_id, turn)
    except ConvEngineError as exc:
        return [Difference(aspect="error", recorded=None, replayed=f"{exc.code.value}: {exc.message}")]
    events = last_turn(await engine.aaudit(replay_id))
    recorded = turn.result
    pairs: list[tuple[str, Any, Any]] = [
        ("intent", recorded.get("intent"), result.intent), ("state", recorded.get("state"), result.state),
        ("status", recorded.get("status"), result.status),
        ("reply", (recorded.get("payload") or {}).get("value"), result.payload.value),
        ("tools", _calls(turn.events), _calls(events)),
        ("flow", flow_position(turn.events), flow_position(events)),
    ]
    return [Difference(aspect=aspect, recorded=was, replayed=now)
            for aspect, was, now in pairs if plain(was) != plain(now)]


async def _send(engine: ReplayEngine, replay_id: str, turn: RecordedTurn) -> TurnResult:
    """The recorded turn sent again: its event, or its text with the caller's params and reset."""
    if turn.event == EVENT_WELCOME:
        return await engine.astart(replay_id, turn.params)
    if turn.event == EVENT_HANDOFF_RESUME:
        return await engine.aresume_from_handoff(replay_id)
    return await engine.aprocess(turn.user, replay_id, turn.params, turn.reset)


def _calls(events: list[AuditEvent]) -> list[dict[str, Any]]:
    """The tool calls (name and arguments) and flow service calls (service, method, URL) of a turn."""
    return [*({"tool": c["tool"], "args": c["args"]} for c in tool_calls(events)),
            *({"service": c["service"], "method": c["method"], "url": c["url"]} for c in service_calls(events))]


async def replay(source: RecordingSource, database: AsyncEngine, content: Mapping[str, Any],
                 selection: ReplaySelection, *, version: int, draft: bool, open_engine: OpenReplayEngine,
                 owner: str | None = None, live: LlmBackend | None = None,
                 options: Mapping[str, Any] | None = None, with_llm: bool = True) -> ReplayReport:
    """Replay the conversations ``selection`` picks (``owner``'s only, when given) against ``content``
    (with a model when ``with_llm`` or a recording called one: the recorded replies answer it)."""
    ids = await pick(database, selection, owner)
    recordings, bad = await read_all(source, database, ids, owner)
    with_llm = with_llm or any(t.llm for turns in recordings.values() for t in turns)
    replayed = await replay_recordings(recordings, content, open_engine=open_engine, live=live,
                                       options=options, with_llm=with_llm) if recordings else []
    return ReplayReport(version=version, draft=draft, replayed=replayed, not_replayable=bad)


class ReplayHost(RecordingSource, Protocol):
    """The engine whose recorded conversations are replayed (``convengine.Engine``)."""

    @property
    def runtime(self) -> EngineRuntime: ...

    @property
    def versions(self) -> Versions: ...

    options: EngineOptions


CARRIED = ("embeddings", "rule_types", "rule_actions", "response_transformers", "container_providers", "steps",
           "hooks", "knowledge_bases")
"""The host's code the isolated engine is given too (it decides, it does not reach outside)."""


def target(versions: Versions, draft: bool | int | None, version: int | None) -> tuple[int, bool]:
    """The version a replay runs on, and whether it is a draft: the draft (``draft=True``), the draft
    numbered ``draft``, or ``version``."""
    if version is not None and draft not in (None, False, True):
        raise InvalidInputError("name the draft (draft=N) or a version (version=N), not both")
    if version is not None:
        versions.info(version)  # VersionNotFoundError when there is none
        return version, False
    if isinstance(draft, int) and not isinstance(draft, bool):
        versions.info(draft)
        return draft, True
    return versions.draft_version, True


async def replay_on(host: ReplayHost, open_engine: OpenReplayEngine, *, draft: bool | int | None = True,
                    version: int | None = None, selection: ReplaySelection, owner: str | None = None,
                    live_llm: bool = False, tasks: Mapping[str, Any] | None = None) -> ReplayReport:
    """Replay ``selection`` of ``host``'s conversations against the draft or ``version`` (see the module
    docstring); ``owner``: only the conversations that caller created."""
    number, is_draft = await asyncio.to_thread(target, host.versions, draft, version)
    content = await asyncio.to_thread(host.versions.content, number)
    services = host.runtime.services
    live = services.llm.backend if live_llm and services.llm is not None else None
    if live_llm and live is None:
        raise InvalidInputError("live_llm needs the engine to have a model (Engine.open(..., llm=...))")
    options = {name: getattr(host.options, name) for name in CARRIED if getattr(host.options, name)}
    options["tasks"] = dict(tasks or {})
    return await replay(host, host.runtime.store.engine, content, selection, version=number, draft=is_draft,
                        open_engine=open_engine, owner=owner, live=live, options=options,
                        with_llm=services.llm is not None)
