"""Engine: open a database (and optionally a pack), then process turns.

``Engine.open(url)`` works from synchronous code and inside Jupyter (a private loop thread
runs the engine); ``await Engine.aopen(url)`` binds it to the running loop. One call to
:meth:`Engine.process` / :meth:`Engine.aprocess` is one turn: one run of the compiled graph
on ``thread_id = conversation_id``, serialised per conversation. A failed turn leaves the
conversation exactly as it was after the previous turn and raises a :class:`ConvEngineError`.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Self

from pydantic import ValidationError

from convengine import analytics
from convengine._internal.portal import Portal
from convengine._internal.turn_io import check_params, check_request, normalise_conversation_id
from convengine.analytics import Stats, StatsQuery
from convengine.audit import AuditBus, AuditEvent, Subscription
from convengine.audit.trace import build_trace
from convengine.catalog import stages
from convengine.catalog import state as keys
from convengine.catalog.defaults import DEFAULT_DATABASE_URL, DEFAULT_IDLE_AFTER_S
from convengine.catalog.errors import ConfigError, InvalidInputError
from convengine.catalog.state import EngineState
from convengine.checkpointing.timeline import UndoResult
from convengine.config_loader import ConfigSnapshot
from convengine.config_loader.requirements import unregistered_tasks, unregistered_tools
from convengine.engine.cache_report import cache_report
from convengine.engine.feedback import Feedback, check_feedback
from convengine.engine.publish_gate import conversation_test_gate
from convengine.engine.replay import replay_on
from convengine.engine.replay_models import ReplayReport, ReplaySelection
from convengine.engine.results import EngineOptions, TurnResult
from convengine.engine.runtime import EngineRuntime, TurnGraph
from convengine.engine.turn import no_configuration
from convengine.flows.control import event_request
from convengine.knowledge import Knowledge
from convengine.security.users import check_user_id
from convengine.settings import EngineSettings
from convengine.tools.db import RAW_SQL_TOOLS
from convengine.versions import Versions
from convengine.versions.lifecycle import ReplayVerdict
from convengine.versions.serving import pick_of

logger = logging.getLogger(__name__)


class Engine:
    """The conversational engine: a database (and optionally a pack) behind one compiled LangGraph graph.

    Open it with [open][convengine.Engine.open] (scripts, Jupyter) or
    [aopen][convengine.Engine.aopen] (inside a running event loop). Each call to
    [process][convengine.Engine.process] is one turn, serialised per conversation; a failed turn
    leaves the conversation as it was after the previous turn and raises a
    [ConvEngineError][convengine.ConvEngineError]. Every method has an awaitable twin named with
    an ``a`` prefix (``aprocess``, ``aaudit``...).
    """

    def __init__(self, url: str, options: EngineOptions, portal: Portal, runtime: EngineRuntime) -> None:
        """Use :meth:`open` or :meth:`aopen`: they start the runtime this wraps."""
        self.url = url
        self.options = options
        self._portal = portal
        self.bus = runtime.bus
        self._runtime = runtime
        self._closed = False
        for warning in self.warnings:
            logger.warning("convengine: %s", warning)
        self.versions.replay_gate = self.replay_verdict

    # --- opening and closing --------------------------------------------------------------

    @classmethod
    def open(cls, url: str = DEFAULT_DATABASE_URL, **options: Any) -> Engine:
        """Open synchronously (scripts, Jupyter): the engine runs on a private event-loop thread.

        Args:
            url: ``sqlite:///FILE`` (embedded default) or ``postgresql://...``.
            **options: see :class:`EngineOptions` (``pack``, ``llm``, ``tasks``, ``tools``, ``steps``,
                ``hooks``...); ``settings={...}`` and any other keyword are
                :class:`~convengine.EngineSettings` fields (``settings={"llm": {"timeout_s": 5}}``).

        Raises:
            ConfigError: bad settings, an invalid pack or invalid rows in the database.
        """
        portal, chosen = Portal(), _with_gate(EngineOptions.from_keywords(options))
        try:
            runtime = portal.call(EngineRuntime.start(url, chosen, AuditBus()))
        except BaseException:
            portal.stop()
            raise
        engine = cls(url, chosen, portal, runtime)
        atexit.register(engine.close)
        return engine

    @classmethod
    async def aopen(cls, url: str = DEFAULT_DATABASE_URL, **options: Any) -> Engine:
        """Open on the running event loop (servers, async applications)."""
        chosen = _with_gate(EngineOptions.from_keywords(options))
        runtime = await EngineRuntime.start(url, chosen, AuditBus())
        return cls(url, chosen, Portal(asyncio.get_running_loop()), runtime)

    def close(self) -> None:
        """Stop the engine: close its database pools and its loop thread (safe to call twice)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._portal.call(self._runtime.stop())
        finally:
            self._portal.stop()

    async def aclose(self) -> None:
        """The awaitable form of :meth:`close`."""
        if self._closed:
            return
        self._closed = True
        await self._portal.acall(self._runtime.stop())
        self._portal.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- turns ------------------------------------------------------------------------

    def process(self, message: str, conversation_id: str | None = None, input_params: Mapping[str, Any] | None = None,
                reset: bool = False, *, owner: str | None = None, user_id: str | None = None,
                draft: bool = False, version: int | None = None) -> TurnResult:
        """Process one user message; returns the turn's result or raises a ConvEngineError.

        The turn runs on the configuration version the conversation is pinned to (a new or reset
        conversation: the version of the engine's channel). ``draft=True`` runs it on the draft (the
        simulator) and ``version=N`` on version N, pinning the conversation there; neither publishes.

        ``owner`` (an opaque caller identity, e.g. from the HTTP API's authentication) is stored with a
        new conversation; a turn by another owner on an existing conversation raises
        ConversationNotFoundError before anything runs or is written. None (host code) skips the check.
        ``user_id`` (the end user) is stored with the conversation on its first turn and never changes:
        a turn naming another user raises ConversationNotFoundError unrun; None continues as stored.
        The user is ``owner``'s: its long-term properties are those ``owner``'s conversations saved for
        that id, never another owner's of the same id.
        A message to an ENDED conversation raises ConversationEndedError unless it resets.

        Args:
            message: the user's text.
            conversation_id: the conversation to continue; None starts a new one (its id is in the result).
            input_params: values for rules and templates (``inputParams``), merged into the conversation's.
            reset: start the conversation over from a fresh state (the same id).
            owner: the caller's identity; None for host code (no ownership check).
            user_id: the end user, stored on the first turn.
            draft: run on the draft configuration (the simulator).
            version: run on configuration version N.

        Raises:
            InvalidInputError: the message, id or params are malformed or too large.
            ConversationNotFoundError: no such conversation for this owner or user.
            ConvEngineError: the turn failed (LLM, tool, template...); nothing of it was saved.
        """
        request = check_request(message, conversation_id, input_params, reset, self.settings, user_id)
        pick = pick_of(draft, version)
        return self._portal.call(self._runtime.process(request, _owner(owner), pick))

    async def aprocess(self, message: str, conversation_id: str | None = None,
                       input_params: Mapping[str, Any] | None = None, reset: bool = False, *,
                       owner: str | None = None, user_id: str | None = None,
                       draft: bool = False, version: int | None = None) -> TurnResult:
        """Async :meth:`process`."""
        request = check_request(message, conversation_id, input_params, reset, self.settings, user_id)
        pick = pick_of(draft, version)
        return await self._portal.acall(self._runtime.process(request, _owner(owner), pick))

    def start(self, conversation_id: str | None = None, input_params: Mapping[str, Any] | None = None, *,
              owner: str | None = None, draft: bool = False, version: int | None = None) -> TurnResult:
        """Start a conversation with the welcome event: the bot speaks first (``flows.welcome_flow``).
        ``draft=True`` / ``version=N`` start it on the draft or on version N, as :meth:`process` does."""
        return self._portal.call(self.astart(conversation_id, input_params, owner=owner, draft=draft,
                                             version=version))

    async def astart(self, conversation_id: str | None = None, input_params: Mapping[str, Any] | None = None, *,
                     owner: str | None = None, draft: bool = False, version: int | None = None) -> TurnResult:
        """The awaitable form of :meth:`start`."""
        pick = pick_of(draft, version)
        request = event_request("welcome", conversation_id, input_params, self.settings)
        return await self._portal.acall(self._runtime.process(request, _owner(owner), pick))

    def resume_from_handoff(self, conversation_id: str, *, draft: bool = False,
                            version: int | None = None) -> TurnResult:
        """Hand a conversation back to the bot: its flow continues at the handoff node's next edge (on the
        conversation's pinned version; ``draft=True`` / ``version=N`` as for :meth:`process`)."""
        return self._portal.call(self.aresume_from_handoff(conversation_id, draft=draft, version=version))

    async def aresume_from_handoff(self, conversation_id: str, *, draft: bool = False,
                                   version: int | None = None) -> TurnResult:
        """The awaitable form of :meth:`resume_from_handoff`."""
        pick = pick_of(draft, version)
        request = event_request("handoff_resume", _cid(conversation_id), None, self.settings)
        return await self._portal.acall(self._runtime.process(request, None, pick))

    # --- undo, redo, steps, lifecycle -----------------------------------------------------

    def undo(self, conversation_id: str, owner: str | None = None) -> UndoResult:
        """Take back the conversation's last turn (several calls go back several turns, up to
        ``conversation_memory.undo_depth``). Restores the checkpoint, the ``ce_conversation`` row, the
        prompt history window and pending actions; history rows of the turn are marked undone and the
        audit gets an ``UNDO`` event. ``result.side_effects`` lists what the turn did outside the engine
        (tasks, tools), which undo cannot take back. Raises UndoError (NOTHING_TO_UNDO, UNDO_FORBIDDEN)."""
        return self._portal.call(self._runtime.move(_cid(conversation_id), stages.UNDO, _owner(owner)))

    async def aundo(self, conversation_id: str, owner: str | None = None) -> UndoResult:
        """The awaitable form of :meth:`undo`."""
        return await self._portal.acall(self._runtime.move(_cid(conversation_id), stages.UNDO, _owner(owner)))

    def redo(self, conversation_id: str, owner: str | None = None) -> UndoResult:
        """Re-apply the turn the last undo took back (its tasks and tools do not run again). A new
        message after an undo drops the redo. Raises UndoError (NOTHING_TO_REDO)."""
        return self._portal.call(self._runtime.move(_cid(conversation_id), stages.REDO, _owner(owner)))

    async def aredo(self, conversation_id: str, owner: str | None = None) -> UndoResult:
        """The awaitable form of :meth:`redo`."""
        return await self._portal.acall(self._runtime.move(_cid(conversation_id), stages.REDO, _owner(owner)))

    # A user belongs to the caller that names it: ``owner``'s user "ana" (the conversations ``owner``
    # created for "ana") is not another owner's "ana", nor host code's (``owner=None``).

    def properties(self, user_id: str, owner: str | None = None) -> dict[str, Any]:
        """The user's long-term properties (``conversation_memory.long_term``), by name."""
        return self._portal.call(self._runtime.properties(_user(user_id), _owner(owner)))

    async def aproperties(self, user_id: str, owner: str | None = None) -> dict[str, Any]:
        """The awaitable form of :meth:`properties`."""
        return await self._portal.acall(self._runtime.properties(_user(user_id), _owner(owner)))

    def forget_user(self, user_id: str, *, conversations: bool = False, owner: str | None = None) -> dict[str, int]:
        """Erase the user's long-term memory; with ``conversations=True`` also every conversation of
        theirs (rows, history, audit, steps, LLM call log and checkpoints). Returns what was erased.
        Only ``owner``'s user of that id is touched (None: host code's)."""
        return self._portal.call(self._runtime.forget_user(_user(user_id), conversations, _owner(owner)))

    async def aforget_user(self, user_id: str, *, conversations: bool = False,
                           owner: str | None = None) -> dict[str, int]:
        """The awaitable form of :meth:`forget_user`."""
        return await self._portal.acall(self._runtime.forget_user(_user(user_id), conversations, _owner(owner)))

    def steps(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]:
        """One entry per completed turn: input, actions, data, output, side effects, undone."""
        return self._portal.call(self._runtime.steps(_cid(conversation_id), _owner(owner)))

    async def asteps(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]:
        """The awaitable form of :meth:`steps`."""
        return await self._portal.acall(self._runtime.steps(_cid(conversation_id), _owner(owner)))

    def lifecycle(self, conversation_id: str, owner: str | None = None) -> str:
        """READY (seeded, no turn yet), IN_PROGRESS, ENDED or INTERRUPTED (its last turn failed)."""
        return self._portal.call(self._runtime.lifecycle(_cid(conversation_id), _owner(owner)))

    async def alifecycle(self, conversation_id: str, owner: str | None = None) -> str:
        """The awaitable form of :meth:`lifecycle`."""
        return await self._portal.acall(self._runtime.lifecycle(_cid(conversation_id), _owner(owner)))

    def seed(self, conversation_id: str, *, context: Mapping[str, Any] | None = None,
             input_params: Mapping[str, Any] | None = None) -> str:
        """Start a conversation with a given context and params, before its first message."""
        return self._portal.call(self.aseed(conversation_id, context=context, input_params=input_params))

    async def aseed(self, conversation_id: str, *, context: Mapping[str, Any] | None = None,
                    input_params: Mapping[str, Any] | None = None) -> str:
        """The awaitable form of :meth:`seed`."""
        cid = _cid(conversation_id)
        depth = self.settings.api.max_input_depth
        values = {keys.CONTEXT: check_params(context, depth, name="context"),
                  keys.INPUT_PARAMS: check_params(input_params, depth)}
        return await self._portal.acall(self._runtime.seed(cid, values))

    # --- reading ----------------------------------------------------------------------

    # Every read takes an optional ``owner``: with one, a conversation of another owner (or of host
    # code) raises ConversationNotFoundError, exactly as one that does not exist.

    def check_access(self, conversation_id: str, owner: str | None = None) -> bool:
        """Whether the conversation exists; ConversationNotFoundError if it belongs to someone else."""
        return self._portal.call(self._runtime.check_access(_cid(conversation_id), _owner(owner)))

    async def acheck_access(self, conversation_id: str, owner: str | None = None) -> bool:
        """The awaitable form of :meth:`check_access`."""
        return await self._portal.acall(self._runtime.check_access(_cid(conversation_id), _owner(owner)))

    def audit(self, conversation_id: str, owner: str | None = None) -> list[AuditEvent]:
        """Every stored audit event of a conversation, in order."""
        return self._portal.call(self._runtime.audit(_cid(conversation_id), _owner(owner)))

    async def aaudit(self, conversation_id: str, owner: str | None = None) -> list[AuditEvent]:
        """The awaitable form of :meth:`audit`."""
        return await self._portal.acall(self._runtime.audit(_cid(conversation_id), _owner(owner)))

    def trace(self, conversation_id: str, owner: str | None = None) -> dict[str, Any]:
        """The step tree of the audit trail (ConvEngine's trace shape)."""
        cid = _cid(conversation_id)
        return build_trace(cid, self.audit(cid, owner))

    async def atrace(self, conversation_id: str, owner: str | None = None) -> dict[str, Any]:
        """The awaitable form of :meth:`trace`."""
        cid = _cid(conversation_id)
        return build_trace(cid, await self.aaudit(cid, owner))

    def history(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]:
        """One row per completed turn: user_input, assistant_output, created_at."""
        return self._portal.call(self._runtime.history(_cid(conversation_id), _owner(owner)))

    async def ahistory(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]:
        """The awaitable form of :meth:`history`."""
        return await self._portal.acall(self._runtime.history(_cid(conversation_id), _owner(owner)))

    def state(self, conversation_id: str, owner: str | None = None) -> EngineState:
        """The conversation's checkpointed state after its last completed turn."""
        return self._portal.call(self._runtime.checkpointed_state(_cid(conversation_id), _owner(owner)))

    async def astate(self, conversation_id: str, owner: str | None = None) -> EngineState:
        """The awaitable form of :meth:`state`."""
        return await self._portal.acall(self._runtime.checkpointed_state(_cid(conversation_id), _owner(owner)))

    @property
    def knowledge(self) -> Knowledge:
        """The knowledge bases in the engine's database, with the engine's embeddings model:
        ``engine.knowledge.ingest("faq", ["docs/"])``, ``.search(...)``, ``.list()``, ``.delete(...)``."""

        services = self._runtime.services
        return Knowledge(self._runtime.sync_engine, embeddings=self.options.embeddings, retriever=services.retriever,
                         limits=self.settings.knowledge.ingest)

    def feedback(self, conversation_id: str, feedback_type: str, *, message_id: str | None = None,
                 assistant_response: str | None = None, metadata: Mapping[str, Any] | None = None,
                 owner: str | None = None) -> Feedback:
        """Store a thumbs-up/down (``THUMBS_UP`` / ``THUMBS_DOWN``) on the conversation's latest turn.

        The row (``ce_mcp_user_feedback``) keeps that turn's intent, state, user text and answer
        (``assistant_response`` when given, else the stored answer); the audit gets ``MCP_USER_FEEDBACK``.

        Raises:
            InvalidInputError: a bad type, or a field over its limit.
            ConversationNotFoundError: no such conversation (or, with ``owner``, not the owner's).
        """
        return self._portal.call(self.afeedback(conversation_id, feedback_type, message_id=message_id,
                                                assistant_response=assistant_response, metadata=metadata,
                                                owner=owner))

    async def afeedback(self, conversation_id: str, feedback_type: str, *, message_id: str | None = None,
                        assistant_response: str | None = None, metadata: Mapping[str, Any] | None = None,
                        owner: str | None = None) -> Feedback:
        """The awaitable form of :meth:`feedback`."""
        request = check_feedback(_cid(conversation_id), feedback_type, message_id, assistant_response, metadata,
                                 max_depth=self.settings.api.max_input_depth)
        return await self._portal.acall(self._runtime.feedback(request, _owner(owner)))

    def feedbacks(self, conversation_id: str, owner: str | None = None) -> list[Feedback]:
        """Every feedback stored on a conversation, oldest first."""
        return self._portal.call(self._runtime.feedbacks(_cid(conversation_id), _owner(owner)))

    async def afeedbacks(self, conversation_id: str, owner: str | None = None) -> list[Feedback]:
        """The awaitable form of :meth:`feedbacks`."""
        return await self._portal.acall(self._runtime.feedbacks(_cid(conversation_id), _owner(owner)))

    def stats(self, *, since: datetime | None = None, until: datetime | None = None,
              by: str | Sequence[str] = (), intent: str | None = None, version: int | None = None,
              owner: str | None = None, idle_after_s: float = DEFAULT_IDLE_AFTER_S) -> Stats:
        """How the assistant is doing: conversations, turns, drop-off, fallback and UNKNOWN rates,
        handoffs, containment, feedback, model calls, tokens and estimated cost over ``[since, until)``
        (times with a zone), in total and per group of ``by`` (``"intent"``, ``"state"``, ``"day"`` or
        several, e.g. ``"intent,day"``); ``intent`` and ``version`` narrow it, ``owner`` keeps one
        caller's conversations. See docs/console.md#analytics for what each number counts.

        Raises:
            InvalidInputError: a time without a zone, an unknown ``by``, a bad filter.
        """
        return self._portal.call(self.astats(since=since, until=until, by=by, intent=intent, version=version,
                                             owner=owner, idle_after_s=idle_after_s))

    async def astats(self, *, since: datetime | None = None, until: datetime | None = None,
                     by: str | Sequence[str] = (), intent: str | None = None, version: int | None = None,
                     owner: str | None = None, idle_after_s: float = DEFAULT_IDLE_AFTER_S) -> Stats:
        """The awaitable form of :meth:`stats`."""
        query = stats_query(since=since, until=until, by=by, intent=intent, version=version,
                            owner=_owner(owner), idle_after_s=idle_after_s)
        return await self._portal.acall(asyncio.to_thread(analytics.stats, self._runtime.sync_engine, query))

    def reload(self) -> ConfigSnapshot:
        """Re-read the control tables; on failure keep the current snapshot and raise why."""
        return self._portal.call(self._runtime.reload())

    async def areload(self) -> ConfigSnapshot:
        """The awaitable form of :meth:`reload`."""
        return await self._portal.acall(self._runtime.reload())

    def cache_report(self, warmup: bool = True) -> dict[str, Any]:
        """What the engine keeps in memory (ConvEngine's ``/cache/analyze`` shape); ``warmup`` also
        reads every control table from the database and times it against the snapshot."""
        return self._portal.call(self.acache_report(warmup))

    async def acache_report(self, warmup: bool = True) -> dict[str, Any]:

        """The awaitable form of :meth:`cache_report`."""
        return await self._portal.acall(cache_report(self._runtime, warmup))

    def subscribe(self, conversation_id: str | None = None) -> Subscription:
        """Live audit events (call from the consuming event loop)."""
        return self.bus.subscribe(conversation_id)

    # --- replay -----------------------------------------------------------------------

    def replay(self, *, draft: bool | int | None = True, version: int | None = None, live_llm: bool = False,
               owner: str | None = None, tasks: Mapping[str, Any] | None = None, **selection: object) -> ReplayReport:
        """Replay recorded conversations against the draft (``draft=N``: that draft) or ``version``,
        each on an isolated engine with the recorded LLM replies and tool results; report, turn by turn,
        where it differs. ``selection``: :class:`ReplaySelection` fields (``last``, ``intent``,
        ``feedback``, ``since``, ``until``, ``ran_on``); ``owner``: only that caller's conversations;
        ``live_llm``: the live model answers the calls the recording cannot; ``tasks``: the host tasks
        the replay may run (none by default)."""
        return self._portal.call(self.areplay(draft=draft, version=version, live_llm=live_llm, owner=owner,
                                              tasks=tasks, **selection))

    async def areplay(self, *, draft: bool | int | None = True, version: int | None = None, live_llm: bool = False,
                      owner: str | None = None, tasks: Mapping[str, Any] | None = None,
                      **selection: object) -> ReplayReport:
        """The awaitable form of :meth:`replay`."""
        try:
            chosen = ReplaySelection.model_validate(selection)
        except ValidationError as exc:
            raise InvalidInputError(f"replay selection: {exc}") from None
        return await self._portal.acall(replay_on(self, Engine.aopen, draft=draft, version=version, selection=chosen,
                                                  owner=_owner(owner), live_llm=live_llm, tasks=tasks))

    def replay_verdict(self, number: int) -> ReplayVerdict | None:
        """The publish gate's replay of the last conversations against version ``number`` (None: off)."""
        gate = self.settings.versions.replay_gate
        if gate.max_changed is None:
            return None
        if self._portal.on_loop():
            raise ConfigError("versions.replay_gate replays conversations on this engine's event loop, so publish "
                              "from another thread here: await asyncio.to_thread(engine.versions.publish, ...)")
        report = self.replay(version=number, last=gate.last)
        return ReplayVerdict(gate.max_changed, len(report.replayed) + len(report.not_replayable),
                             tuple(c.conversation_id for c in report.changed))

    @property
    def versions(self) -> Versions:
        """Versioned configuration: list, diff, draft, edit, publish, rollback, channels."""
        versions = self._runtime.versions_api
        assert versions is not None  # set when the runtime starts
        return versions

    @property
    def snapshot(self) -> ConfigSnapshot:
        """The configuration the next turn runs on (reloaded when another process changes it)."""
        return self._runtime.holder.current

    @property
    def settings(self) -> EngineSettings:
        """The effective settings: keyword arguments > environment > the pack's ``settings:`` > defaults."""
        return self.snapshot.settings

    @property
    def portal(self) -> Portal:
        """The engine's event loop, reachable from any thread (what its synchronous methods call through)."""
        return self._portal

    @property
    def runtime(self) -> EngineRuntime:
        """The engine's resources on its event loop (LangGraph Studio builds its turn contexts from them)."""
        return self._runtime

    @property
    def warnings(self) -> list[str]:
        """What the configuration does that will not work as written: validation warnings, the
        tasks its pending actions and SET_TASK rules call and the tools it grants that this engine
        was not given handlers for (logged when the engine opens)."""

        snapshot = self.snapshot
        registries = self._runtime.services.registries
        tools = unregistered_tools(snapshot, registries.tool_handlers, registries.tool_adapters,
                                   snapshot.settings.mcp.servers, RAW_SQL_TOOLS)
        empty = [] if snapshot.tables() else [no_configuration(self.database_label)]
        return [*empty, *snapshot.warnings, *unregistered_tasks(snapshot, registries.tasks), *tools]

    @property
    def database_label(self) -> str:
        """The database URL with the password hidden."""
        return self._runtime.url.redacted()

    @property
    def is_postgres(self) -> bool:
        """Whether the database is PostgreSQL (else SQLite)."""
        return bool(self._runtime.url.is_postgres)

    @property
    def libpq_url(self) -> str | None:
        """The PostgreSQL URL in libpq form (for psycopg); None on SQLite."""
        return self._runtime.url.libpq

    @property
    def graph(self) -> TurnGraph:
        """The compiled LangGraph graph (with the engine's checkpointer)."""
        return self._runtime.graph


def _cid(conversation_id: str) -> str:
    return normalise_conversation_id(conversation_id)


MAX_OWNER_CHARS = 200


def stats_query(**given: object) -> StatsQuery:
    """A :class:`StatsQuery`, or InvalidInputError naming what was wrong."""
    try:
        return StatsQuery.model_validate(given)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'query'}: {e['msg']}" for e in exc.errors())
        raise InvalidInputError(f"bad stats query: {problems}") from None


def _user(user_id: object) -> str:
    checked = check_user_id(user_id)
    if checked is None:
        raise InvalidInputError("user_id is required")
    return checked


def _owner(owner: object) -> str | None:
    """A caller identity: None or a non-empty string of at most MAX_OWNER_CHARS characters."""
    if owner is None:
        return None
    if not isinstance(owner, str) or not owner or len(owner) > MAX_OWNER_CHARS:
        raise InvalidInputError(f"owner must be a non-empty string of at most {MAX_OWNER_CHARS} characters, "
                                f"got {type(owner).__name__} {str(owner)[:40]!r}")
    return owner


def _with_gate(options: EngineOptions) -> EngineOptions:
    """``engine.versions.publish()`` runs the conversation tests on engines opened like this one."""
    if options.test_gate is not None:
        return options
    return replace(options, test_gate=conversation_test_gate(Engine.open))
