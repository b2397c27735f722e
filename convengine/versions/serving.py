"""Serving several versions side by side: which version a turn runs on, and its compiled snapshot.

A conversation is pinned to the version it started on (``ce_conversation_version``) and keeps it
until it resets (an ended conversation can only continue by resetting), unless its channel's
migration policy is ``latest``. New conversations get the version the engine's channel serves.
Compiled versions (the snapshot, the SEMANTIC classifiers' example embeddings and the audit filter of
that version's settings) are kept in a small LRU keyed by version number (versions are immutable, so
an entry never goes stale); the channel's version is re-read only when the configuration stamp changes.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cache, partial
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncEngine

from convengine.audit.filters import AuditFilter
from convengine.catalog import stages
from convengine.catalog.errors import InvalidInputError
from convengine.checkpointing.persistence import Write
from convengine.config_loader import ConfigSnapshot, Extensions
from convengine.config_loader.identity import short_id
from convengine.db.models import CeConversationVersion
from convengine.knowledge.semantic import SemanticIndex
from convengine.versions import store
from convengine.versions.content import DRAFT_CHANNEL
from convengine.versions.lifecycle import build

PIN = CeConversationVersion.__table__
VERSION_STAGE = stages.CONFIG_VERSION
"""The audit stage each turn records in its first step: the version it ran on and why that one."""
CACHE_SIZE = 8
MAX_RUNNING_TURNS = 4096


class AuditedTurn(Protocol):
    """What the version audit reads of a turn (the steps' Turn): its run context and audit."""

    ctx: Any
    """The run context: its ``turn_id`` names the turn whose version was chosen."""

    def audit(self, stage: str, payload: Mapping[str, Any] | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class Pick:
    """A caller's explicit choice (host code, admin HTTP): the draft, or a version number."""

    draft: bool = False
    version: int | None = None


def pick_of(draft: bool, version: int | None) -> Pick | None:
    """The choice ``Engine.process(draft=..., version=...)`` asks for (None: the pinned version)."""
    if draft and version is not None:
        raise InvalidInputError("pass draft=True or version=N, not both")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise InvalidInputError(f"version must be a positive integer, got {str(version)[:40]!r}")
    if not isinstance(draft, bool):
        raise InvalidInputError("draft must be true or false")
    return Pick(draft, version) if draft or version is not None else None


@dataclass(frozen=True, slots=True)
class Compiled:
    """One version ready to serve: its hash, compiled snapshot, SEMANTIC example embeddings (None
    without an embeddings model) and the audit filter of its settings."""

    hash: str
    snapshot: ConfigSnapshot
    semantic: SemanticIndex | None
    audit_filter: AuditFilter


SemanticBuilder = Callable[[ConfigSnapshot, Sequence[SemanticIndex]], SemanticIndex | None]
"""Builds a version's SEMANTIC index, reusing the vectors of the given indexes (run off the loop)."""


@dataclass(frozen=True, slots=True)
class Choice:
    """The version a turn runs on and why: ``pinned``, ``channel`` (new or reset conversation, or the
    ``latest`` policy), ``draft`` or ``version`` (asked for)."""

    number: int
    hash: str
    reason: str
    compiled: Compiled
    repin: bool = False
    """The conversation's pin moves to this version when the turn commits."""

    @property
    def snapshot(self) -> ConfigSnapshot:
        return self.compiled.snapshot

    def pin_write(self, conversation_id: str) -> Write | None:
        """The pin row to write in the turn's transaction (None: the pin stays): a turn that fails or
        is refused leaves the conversation pinned where it was."""
        return partial(write_pin, conversation_id=conversation_id, number=self.number) if self.repin else None

    def audit_payload(self, channel: str) -> dict[str, Any]:
        return {"version": self.number, "hash": self.hash, "reason": self.reason, "channel": channel}


class VersionServing:
    """Per engine: the channel it serves, the conversations' pins and the compiled snapshots."""

    def __init__(self, sync_engine: sa.Engine, async_engine: AsyncEngine, channel: str,
                 settings_overrides: Mapping[str, Any], extensions: Extensions, cache_size: int = CACHE_SIZE, *,
                 semantic: SemanticBuilder | None = None, audit_filter: AuditFilter | None = None) -> None:
        self.sync_engine = sync_engine
        self.async_engine = async_engine
        self.channel = store.check_channel(channel)
        self.settings_overrides = dict(settings_overrides)
        self.extensions = extensions
        self.cache_size = cache_size
        self._semantic = semantic
        self._audit_filter = audit_filter
        """The engine's filter: each version's filter shares its rate-limit buckets."""
        self._cache: OrderedDict[int, Compiled] = OrderedDict()
        self._served: store.Channel | None = None
        self._build_lock = asyncio.Lock()
        self._turns: OrderedDict[str, Choice] = OrderedDict()
        """Each running turn's choice, until its first step audits it (bounded: a turn refused before
        its first step leaves its entry to be dropped)."""

    def start(self) -> None:
        """Read the channel (synchronously, while the engine opens); a channel never pointed is an error."""
        with self.sync_engine.connect() as conn:
            self._served = store.require_channel(conn, self.channel)

    def changed(self) -> None:
        """The configuration stamp changed: re-read the channel before the next turn."""
        self._served = None

    async def served(self) -> store.Channel:
        served = self._served
        if served is None:
            served = await asyncio.to_thread(self._read_channel, self.channel)
            self._served = served
        return served

    def _read_channel(self, name: str) -> store.Channel:
        with self.sync_engine.connect() as conn:
            return store.require_channel(conn, name)

    # --- choosing --------------------------------------------------------------------------

    async def choose(self, conversation_id: str, reset: bool, pick: Pick | None) -> Choice:
        """The version of this turn (``repin`` when the turn moves the conversation's pin)."""
        return await self.choose_pinned(await self._pin(conversation_id), reset, pick)

    async def choose_pinned(self, pinned: int | None, reset: bool, pick: Pick | None) -> Choice:
        """:meth:`choose` on a pin already read (a turn reads it with :func:`pin_of` under its lock,
        in its own transaction)."""
        number: int | None
        if pick is not None:
            number = pick.version if pick.version is not None else \
                (await asyncio.to_thread(self._read_channel, DRAFT_CHANNEL)).version
            reason = "draft" if pick.draft else "version"
        else:
            served = await self.served()
            keep = pinned is not None and not reset and served.migration == "pin"
            number, reason = (pinned, "pinned") if keep else (served.version, "channel")
        assert number is not None
        compiled = await self.compiled(number)
        return Choice(number, compiled.hash, reason, compiled, repin=number != pinned)

    async def snapshot(self, number: int) -> tuple[str, ConfigSnapshot]:
        """The hash and compiled snapshot of a version."""
        compiled = await self.compiled(number)
        return compiled.hash, compiled.snapshot

    async def compiled(self, number: int) -> Compiled:
        """A version ready to serve (built once when first served, then kept in the LRU)."""
        cached = self._cache.get(number)
        if cached is not None:
            self._cache.move_to_end(number)
            return cached
        async with self._build_lock:
            cached = self._cache.get(number)  # another task may have built it while this one waited
            if cached is None:
                known = [c.semantic for c in self._cache.values() if c.semantic is not None]
                cached = await asyncio.to_thread(self._build, number, known)
        self._cache[number] = cached
        self._cache.move_to_end(number)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return cached

    def _build(self, number: int, known: Sequence[SemanticIndex]) -> Compiled:
        with self.sync_engine.connect() as conn:
            info = store.info(conn, number)
            content = store.content(conn, number)
        snapshot = build(content, settings_overrides=self.settings_overrides, extensions=self.extensions)
        snapshot = replace(snapshot, version=short_id(info.hash))  # the id `pack versions` lists it by
        semantic = self._semantic(snapshot, known) if self._semantic is not None else None
        audit = snapshot.settings.audit
        audit_filter = self._audit_filter.sharing_buckets(audit) if self._audit_filter else AuditFilter(audit)
        return Compiled(info.hash, snapshot, semantic, audit_filter)

    @property
    def cached_versions(self) -> tuple[int, ...]:
        return tuple(self._cache)

    # --- audit ---------------------------------------------------------------------------

    def remember(self, turn_id: str, choice: Choice) -> None:
        self._turns[turn_id] = choice
        while len(self._turns) > MAX_RUNNING_TURNS:
            self._turns.popitem(last=False)

    def audit_turn(self, step: str, turn: AuditedTurn) -> None:
        """Step hook of the turn's first step: the ``CONFIG_VERSION`` audit event."""
        del step
        choice = self._turns.pop(turn.ctx.turn_id, None)
        if choice is not None:
            turn.audit(VERSION_STAGE, choice.audit_payload(self.channel))

    # --- pins ------------------------------------------------------------------------------

    async def _pin(self, conversation_id: str) -> int | None:
        async with self.async_engine.connect() as conn:
            found = await conn.execute(sa.select(PIN.c.version_no).where(PIN.c.conversation_id == conversation_id))
            return found.scalar_one_or_none()

    async def pinned(self, conversation_id: str) -> int | None:
        """The version a conversation is pinned to (None: it has not run a turn yet)."""
        return await self._pin(conversation_id)


def pin_of(conversation_id: str | sa.BindParameter[Any]) -> sa.ScalarSelect[int]:
    """The version a conversation is pinned to, as a column of another query (NULL: not pinned)."""
    return sa.select(PIN.c.version_no).where(PIN.c.conversation_id == conversation_id).scalar_subquery()


def write_pin(conn: sa.Connection, *, conversation_id: str, number: int) -> None:
    """Pin a conversation to a version (in the transaction of the turn that runs on it)."""
    conn.execute(_pin_upsert(conn.dialect.name), {"cid": conversation_id, "n": number, "now": datetime.now(UTC)})


@cache
def _pin_upsert(dialect: str) -> sa.Insert:
    """The pin's upsert, built once per dialect (building it per turn cost ~70 us more than running it)."""
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    statement = insert(PIN).values(conversation_id=sa.bindparam("cid"), version_no=sa.bindparam("n"),
                                   updated_at=sa.bindparam("now"))
    return statement.on_conflict_do_update(index_elements=[PIN.c.conversation_id],
                                           set_={"version_no": statement.excluded.version_no,
                                                 "updated_at": statement.excluded.updated_at})
