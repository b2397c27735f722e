"""``Versions``: the Python face of versioned configuration (``engine.versions`` or ``Versions.open(url)``)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypedDict, Unpack

import sqlalchemy as sa

from convengine.config_loader import Extensions
from convengine.db import create_sync_engine, parse_database_url, upgrade
from convengine.versions import lifecycle, store
from convengine.versions.content import DRAFT_CHANNEL, LIVE_CHANNEL
from convengine.versions.diff import TableDiff, diff


class VersionsOptions(TypedDict, total=False):
    """The keywords of :class:`Versions` besides its engine (what :meth:`Versions.open` passes on)."""

    tests: Sequence[str | Path]
    settings_overrides: Mapping[str, Any] | None
    extensions: Extensions | None
    on_change: Callable[[], None] | None
    gate: lifecycle.TestGate | None


class _BuildOptions(TypedDict):
    """How a version's pack is built into a configuration (passed on to every lifecycle call)."""

    settings_overrides: dict[str, Any]
    extensions: Extensions | None


class Versions:
    """List, diff, draft, edit, publish, roll back and point channels.

    ``tests`` are the conversation tests (``*.conv.yaml`` files or directories) every publish runs
    against the version it publishes; a publish may name others. ``on_change`` is called after a
    change of what a channel serves (an open engine uses it to look at once instead of at its next check).
    ``gate`` runs the tests (``engine.versions`` has one; elsewhere pass
    ``convengine.engine.publish_gate.conversation_test_gate(Engine.open)``).
    """

    def __init__(self, engine: sa.Engine, *, tests: Sequence[str | Path] = (),
                 settings_overrides: Mapping[str, Any] | None = None, extensions: Extensions | None = None,
                 on_change: Callable[[], None] | None = None, gate: lifecycle.TestGate | None = None) -> None:
        self.engine = engine
        self.gate = gate
        self.tests = tuple(tests)
        self._build: _BuildOptions = {"settings_overrides": dict(settings_overrides or {}), "extensions": extensions}
        self._on_change = on_change or (lambda: None)
        self._owned = False
        self.replay_gate: lifecycle.ReplayGate | None = None
        """Replays recorded conversations against what is published (set by the engine)."""

    @classmethod
    def open(cls, url: str, **kwargs: Unpack[VersionsOptions]) -> Versions:
        """On a database URL (upgraded to the current schema; its tables recorded as a version if none is)."""
        engine = create_sync_engine(parse_database_url(url))
        try:
            upgrade(engine)
            lifecycle.sync_live(engine)
        except BaseException:
            engine.dispose()
            raise
        versions = cls(engine, **kwargs)
        versions._owned = True
        return versions

    def close(self) -> None:
        if self._owned:
            self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading ---------------------------------------------------------------------------

    def list(self) -> list[store.VersionInfo]:
        with self.engine.connect() as conn:
            return store.versions(conn)

    def info(self, number: int) -> store.VersionInfo:
        with self.engine.connect() as conn:
            return store.info(conn, number)

    def content(self, number: int) -> dict[str, Any]:
        """The version's pack (every control row)."""
        with self.engine.connect() as conn:
            return store.content(conn, number)

    def diff(self, a: int, b: int) -> builtins.list[TableDiff]:  # `list` is a method of this class
        """What changed from version ``a`` to version ``b``, table by table, row by row."""
        return diff(self.content(a), self.content(b))

    def channels(self) -> builtins.list[store.Channel]:
        with self.engine.connect() as conn:
            return store.channels(conn)

    def channel(self, name: str = LIVE_CHANNEL) -> store.Channel:
        with self.engine.connect() as conn:
            return store.require_channel(conn, store.check_channel(name, draft_ok=True))

    @property
    def draft_version(self) -> int:
        return self.channel(DRAFT_CHANNEL).version

    @property
    def published_version(self) -> int:
        return self.channel(LIVE_CHANNEL).version

    def history(self, channel: str | None = None) -> builtins.list[dict[str, Any]]:
        """Every move of a channel (all channels when None), oldest first."""
        if channel is not None:
            store.check_channel(channel, draft_ok=True)
        with self.engine.connect() as conn:
            return store.publications(conn, channel)

    # --- changing --------------------------------------------------------------------------

    def draft(self, source: str | Path | Mapping[str, Any], *, author: str = "python",
              message: str | None = None) -> store.VersionInfo:
        """A new draft holding a whole pack (path, YAML text or mapping), validated (ConfigValidationError
        lists every violation and nothing is stored); users get nothing new until it is published."""
        return lifecycle.create_draft(self.engine, source, author=author, message=message, **self._build)

    def edit(self, *, upsert: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
             delete: Mapping[str, Sequence[Any]] | None = None, author: str = "python",
             message: str | None = None) -> store.VersionInfo:
        """A new draft: the draft's rows with ``upsert`` rows (by primary key) and without ``delete`` keys."""
        return lifecycle.edit_draft(self.engine, upsert=upsert, delete=delete, author=author, message=message,
                                    **self._build)

    @property
    def current_draft(self) -> store.VersionInfo:
        """The draft: its id (version number), author, message and the version it was edited from."""
        return self.info(self.draft_version)

    def publish(self, *, channel: str = LIVE_CHANNEL, version: int | None = None, draft: int | None = None,
                tests: Sequence[str | Path] | None = None, author: str = "python",
                message: str | None = None, accept_changes: bool = False) -> lifecycle.Publication:
        """Publish the draft (or ``version``) on ``channel`` if it validates and the tests pass
        (``tests``, else the ones this object was given); raises PublishRefusedError naming why not.

        ``draft`` names the draft published (its version number; DraftNotNamedError when it is not the
        draft any more). Unnamed, the draft is published only if ``author`` made all its edits since
        what ``channel`` served: another author's edits are published only by naming the draft.

        With ``versions.replay_gate.max_changed`` set, the last recorded conversations are replayed against
        it first: ReplayChangedError names them when more changed, unless ``accept_changes``."""
        done = lifecycle.publish(self.engine, channel=channel, version=version, draft=draft,
                                 tests=self.tests if tests is None else tuple(tests), author=author,
                                 message=message, gate=self.gate, replay_gate=self.replay_gate,
                                 accept_changes=accept_changes, **self._build)
        self._on_change()
        return done

    def rollback(self, version: int, *, channel: str = LIVE_CHANNEL, author: str = "python",
                 message: str | None = None) -> lifecycle.Publication:
        """Re-publish a version ``channel`` served before (new conversations get it; pinned ones keep theirs)."""
        done = lifecycle.rollback(self.engine, version, channel=channel, author=author, message=message,
                                  **self._build)
        self._on_change()
        return done

    def point(self, channel: str, version: int, *, migration: str | None = None, author: str = "python",
              message: str | None = None, override: str | None = None,
              gated: bool | None = None) -> lifecycle.Publication:
        """Point an environment channel (``staging``...) at a version, or set its migration policy
        (``pin`` or ``latest``); ``gated`` makes it serve only versions that passed the publish gate.

        A gated channel (``production`` always) moves only to a version a gated channel published,
        unless ``override`` says why (kept in its history as ``OVERRIDE``); else GateRequiredError."""
        done = lifecycle.point(self.engine, channel, version, author=author, migration=migration,
                               message=message, override=override, gated=gated, **self._build)
        self._on_change()
        return done
