"""The lifecycle of a version: recorded (import, edit, direct table edit), drafted, published (gated by
validation and conversation tests), rolled back; channels pointed at versions.

Every function takes a synchronous SQLAlchemy engine and does its writes in one transaction under
the import lock, so a version, its channel move and (for the live channel) the control tables it
mirrors into change together or not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypedDict, Unpack

import sqlalchemy as sa

from convengine.catalog.errors import (
    ConfigError,
    ConfigValidationError,
    ErrorCode,
    InvalidInputError,
    PackError,
)
from convengine.config_loader import ConfigSnapshot, Extensions, validate_pack
from convengine.config_loader.loader import _replace_rows
from convengine.config_loader.packs import pack_tables
from convengine.config_loader.rows import coerce_rows
from convengine.versions import store
from convengine.versions.content import (
    DRAFT_CHANNEL,
    LIVE_CHANNEL,
    canonical,
    digest,
    live_content,
    normalise,
)
from convengine.versions.edits import apply_edits


class GateOutcome(Protocol):
    """What a test gate reports of one conversation test (``convengine.testing.TestOutcome``)."""

    file: Path
    name: str

    @property
    def passed(self) -> bool: ...

    def report(self) -> str: ...


TestGate = Callable[[Mapping[str, Any], Sequence[str | Path]], Sequence[GateOutcome]]
"""Runs conversation tests against a version's content (injected: the tests open engines)."""

logger = logging.getLogger(__name__)

IMPORT_AUTHOR = "pack import"
DATABASE_AUTHOR = "database"


class BuildOptions(TypedDict, total=False):
    """How a draft's pack is built into a configuration (the keywords of :func:`create_draft`)."""

    settings_overrides: Mapping[str, Any] | None
    extensions: Extensions | None


class PublishRefusedError(ConfigError):
    """The draft failed validation or a conversation test; ``details['failed']`` names the tests."""

    default_code = ErrorCode.PUBLISH_REFUSED


class GateRequiredError(ConfigError):
    """A gated channel (``production``, or one pointed with ``gated=True``) was to serve a version that
    did not pass the publish gate, without an override; ``details`` name the channel and the version."""

    default_code = ErrorCode.GATE_REQUIRED


class DraftNotNamedError(ConfigError):
    """A publish named a draft that is not the draft any more, or published, without naming it, a draft
    holding another author's edits; ``details`` name the draft and its authors."""

    default_code = ErrorCode.DRAFT_NOT_NAMED


class ReplayChangedError(ConfigError):
    """Replaying the last recorded conversations against the version changed more of them than the
    replay gate allows; ``details`` name the changed conversations."""

    default_code = ErrorCode.REPLAY_CHANGED


@dataclass(frozen=True, slots=True)
class ReplayVerdict:
    """What the replay gate found: the conversations (of the last ``replayed``) the version changes, and
    how many it may change (``versions.replay_gate.max_changed``)."""

    limit: int
    replayed: int
    changed: tuple[str, ...]


ReplayGate = Callable[[int], ReplayVerdict | None]
"""Replays recorded conversations against a version (None: the gate is off); injected by the engine."""

OVERRIDE_ACTION = "OVERRIDE"
"""A gated channel moved to a version that did not pass the gate, with the reason in its message."""


@dataclass(frozen=True, slots=True)
class Publication:
    """What a publish or rollback did: the channel, the version it now serves, the tests that passed."""

    channel: str
    version: store.VersionInfo
    action: str
    tests_passed: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"channel": self.channel, "version": self.version.to_dict(), "action": self.action,
                "testsPassed": list(self.tests_passed)}


def _locked(engine: sa.Engine, work: Callable[[sa.Connection], Any], *, commit: bool = True) -> Any:
    try:
        with engine.connect() as conn:
            store.lock(conn)
            result = work(conn)
            if commit:
                conn.commit()
            else:
                conn.rollback()
            return result
    except sa.exc.SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise PackError(f"the configuration versions could not be written, nothing changed: {reason}") from exc


# --- recording ----------------------------------------------------------------------------------


def record_live(conn: sa.Connection, *, author: str, message: str) -> store.VersionInfo:
    """The live tables as the live channel's version: a new version (and the draft moved to it) when
    they differ from what the live channel serves; nothing new when they hold exactly that."""
    content = live_content(conn)
    current = store.channel(conn, LIVE_CHANNEL)
    if current is not None and store.info(conn, current.version).hash == digest(canonical(content)):
        return store.info(conn, current.version)
    info = store.record(conn, content, author=author, message=message,
                        parent=current.version if current else None)
    store.point(conn, LIVE_CHANNEL, info.number, author=author, action="IMPORT", message=message)
    draft = store.channel(conn, DRAFT_CHANNEL)
    if draft is None or current is None or draft.version == current.version:
        store.point(conn, DRAFT_CHANNEL, info.number, author=author, action="IMPORT", message=message)
    return info


def record_import(conn: sa.Connection, rows: Mapping[str, list[dict[str, Any]]]) -> None:
    """Hook of :func:`convengine.config_loader.import_pack`: the imported rows become a version, published
    on the live channel (an import writes the live tables, so it is what users get)."""
    del rows  # the same rows are read back with the columns the database filled in
    info = record_live(conn, author=IMPORT_AUTHOR, message="pack imported into the control tables")
    logger.info("configuration version %s recorded by a pack import", info.number)


def sync_live(engine: sa.Engine) -> store.VersionInfo:
    """Record the control tables as a version if they were edited directly (SQL) since the live
    channel's version was recorded; the first call on a database records its first version."""
    return _locked(engine, lambda conn: record_live(
        conn, author=DATABASE_AUTHOR, message="the control tables were edited directly"))


# --- drafts -------------------------------------------------------------------------------------


def create_draft(engine: sa.Engine, source: str | Path | Mapping[str, Any], *, author: str,
                 message: str | None, settings_overrides: Mapping[str, Any] | None = None,
                 extensions: Extensions | None = None) -> store.VersionInfo:
    """A new version holding the pack ``source``, made the draft (nothing users get changes).

    Raises:
        PackError: the pack cannot be read or its rows break the tables' constraints.
        ConfigValidationError: the pack is invalid (every violation listed); nothing is stored.
    """
    validate_pack(source, settings_overrides=settings_overrides, extensions=extensions)  # the rows as written
    content = _locked(engine, lambda conn: normalise(conn, source), commit=False)
    build(content, settings_overrides=settings_overrides, extensions=extensions)  # and as stored

    def write(conn: sa.Connection) -> store.VersionInfo:
        draft = store.channel(conn, DRAFT_CHANNEL)
        info = store.record(conn, content, author=author, message=message, parent=draft.version if draft else None)
        store.point(conn, DRAFT_CHANNEL, info.number, author=author, action="DRAFT", message=message)
        return info

    return _locked(engine, write)


def edit_draft(engine: sa.Engine, *, upsert: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
               delete: Mapping[str, Sequence[Any]] | None = None, author: str,
               message: str | None, **build_options: Unpack[BuildOptions]) -> store.VersionInfo:
    """A new draft: the current draft with rows added or changed (``upsert``: rows matched by primary key;
    given columns replace the stored ones) and rows removed (``delete``: primary keys), per table."""
    with engine.connect() as conn:
        base = store.content(conn, store.require_channel(conn, DRAFT_CHANNEL).version)
    return create_draft(engine, apply_edits(base, upsert or {}, delete or {}), author=author, message=message,
                        **build_options)


# --- publishing ---------------------------------------------------------------------------------


def build(content: Mapping[str, Any], *, settings_overrides: Mapping[str, Any] | None = None,
          extensions: Extensions | None = None) -> ConfigSnapshot:
    """The validated snapshot of a version's content."""
    return validate_pack(dict(content), settings_overrides=settings_overrides, extensions=extensions)


def publish(engine: sa.Engine, *, channel: str = LIVE_CHANNEL, version: int | None = None,
            draft: int | None = None, tests: Sequence[str | Path] = (), author: str, message: str | None = None,
            settings_overrides: Mapping[str, Any] | None = None,
            extensions: Extensions | None = None, gate: TestGate | None = None,
            replay_gate: ReplayGate | None = None, accept_changes: bool = False) -> Publication:
    """Make ``channel`` serve the draft (or ``version``) when it validates and every conversation test in
    ``tests`` (files or directories of ``*.conv.yaml``) passes against it. ``gate`` runs them (see
    :func:`convengine.engine.publish_gate.conversation_test_gate`); tests without a gate are refused, never skipped.

    ``draft`` names the draft to publish (its version number): it must still be the draft. Without
    ``draft`` or ``version``, the draft is published only when ``author`` made every edit it holds since
    the version ``channel`` last served.

    ``replay_gate`` replays the last recorded conversations against the version: more changed ones than
    its limit refuse the publish unless ``accept_changes`` (the accepted changes are kept in the
    channel's history).

    Raises:
        PublishRefusedError: the version is invalid (violations listed) or tests failed (named).
        ReplayChangedError: the replay changed more conversations than allowed (named), not accepted.
        DraftNotNamedError: ``draft`` is not the draft, or the draft holds another author's edits.
        VersionNotFoundError: no such version, or no draft yet.
    """
    store.check_channel(channel)
    if draft is not None and version is not None:
        raise InvalidInputError("name the draft (draft=N) or a version (version=N), not both")
    with engine.connect() as conn:
        number = version if version is not None else _named_draft(conn, channel, draft, author)
        content = store.content(conn, number)
    _validated(content, number, settings_overrides, extensions)
    passed = _tested(content, number, tests, gate)
    accepted = _replayed(number, replay_gate, accept_changes)
    if accepted:
        logger.warning("replay gate: version %s published by %s with changes accepted: %s", number, author, accepted)
    return _apply(engine, channel, number, content, author=author, action="PUBLISH",
                  message=f"{accepted} ({message})" if accepted and message else accepted or message,
                  tests_passed=passed)


def _replayed(number: int, replay_gate: ReplayGate | None, accept: bool) -> str | None:
    """What the replay gate has to say of the version: None, the accepted changes, or a refusal."""
    verdict = replay_gate(number) if replay_gate is not None else None
    if verdict is None or len(verdict.changed) <= verdict.limit:
        return None
    names = ", ".join(verdict.changed)
    if accept:
        return f"accepted replay changes: {len(verdict.changed)} of {verdict.replayed} conversations changed ({names})"
    raise ReplayChangedError(
        f"version {number} was not published: replaying the last {verdict.replayed} conversations changed "
        f"{len(verdict.changed)} of them, more than the {verdict.limit} versions.replay_gate.max_changed allows: "
        f"{names}; look at them (convengine pack replay --version {number}) and accept the changes to publish "
        "(accept_changes=True, --accept-changes, \"acceptChanges\": true)",
        details={"changed": list(verdict.changed), "limit": verdict.limit, "replayed": verdict.replayed})


def _named_draft(conn: sa.Connection, channel: str, named: int | None, author: str) -> int:
    """The draft a publish publishes: the one named, if it still is the draft; else the draft, if
    ``author`` made each of its edits since what ``channel`` served."""
    current = store.info(conn, store.require_channel(conn, DRAFT_CHANNEL).version)
    if named is not None:
        if named != current.number:
            raise DraftNotNamedError(
                f"version {named} is not the draft any more: the draft is version {current.number} (by "
                f"{current.author}); name that one to publish it, or publish version {named} by its number",
                details={"named": named, "draft": current.number, "draftAuthor": current.author})
        return named
    served = {p["version"] for p in store.publications(conn, channel)}
    edits = store.draft_authors(conn, current.number, served)
    others = sorted({who for _, who in edits if who != author})
    if others:
        raise DraftNotNamedError(
            f"the draft (version {current.number}) holds edits by {', '.join(others)} since what {channel!r} "
            f"served: check them (diff {channel} {current.number}), then name the draft to publish them "
            f"(draft {current.number}: draft= in Python and HTTP, --draft on the command line)",
            details={"draft": current.number, "authors": sorted({who for _, who in edits}),
                     "versions": [n for n, _ in edits]})
    return current.number


def rollback(engine: sa.Engine, version: int, *, channel: str = LIVE_CHANNEL, author: str,
             message: str | None = None, settings_overrides: Mapping[str, Any] | None = None,
             extensions: Extensions | None = None) -> Publication:
    """Re-publish an earlier version of ``channel`` (one it served before), after validating it again.

    Raises:
        VersionNotFoundError: the version does not exist or ``channel`` never served it.
    """
    store.check_channel(channel)
    with engine.connect() as conn:
        served = {p["version"] for p in store.publications(conn, channel)}
        content = store.content(conn, version)
    if version not in served:
        raise store.VersionNotFoundError(f"channel {channel!r} never served version {version}; rollback "
                                         "re-publishes a version the channel served before (use publish for "
                                         "another version)")
    _validated(content, version, settings_overrides, extensions)
    return _apply(engine, channel, version, content, author=author, action="ROLLBACK", message=message)


def point(engine: sa.Engine, channel: str, version: int, *, author: str, migration: str | None = None,
          message: str | None = None, override: str | None = None, gated: bool | None = None,
          settings_overrides: Mapping[str, Any] | None = None, extensions: Extensions | None = None) -> Publication:
    """Point a channel at a version (validated, not tested: for environments such as ``staging``), or
    change its migration policy; ``gated`` makes the channel gated (True) or not (False).

    A gated channel (``production`` always) moves only to a version that passed the publish gate on a
    gated channel, unless ``override`` gives the reason (kept in the channel's history as an
    ``OVERRIDE``); ungating a channel needs one too. Keeping the version it serves needs none.

    Raises:
        GateRequiredError: the version did not pass the gate and no override was given.
    """
    store.check_channel(channel)
    reason = _override_reason(override)
    if gated is False and channel == LIVE_CHANNEL:
        raise InvalidInputError(f"{LIVE_CHANNEL!r} is always gated")
    with engine.connect() as conn:
        content = store.content(conn, version)
    _validated(content, version, settings_overrides, extensions)

    def decide(conn: sa.Connection) -> tuple[str, str | None]:
        why = _gate_refusal(conn, channel, version, gated)
        if why is None:
            return "POINT", message
        if reason is None:
            raise GateRequiredError(
                f"channel {channel!r} was not pointed at version {version}: {why}; publish it (the gate "
                "validates and runs the conversation tests), or give an override with the reason",
                details={"channel": channel, "version": version, "reason": why})
        logger.warning("gate override: channel %s -> version %s by %s: %s", channel, version, author, reason)
        return OVERRIDE_ACTION, f"override: {reason}" + (f" ({message})" if message else "")

    return _apply(engine, channel, version, content, author=author, action="POINT", message=message,
                  migration=migration, gated=gated, decide=decide)


def _override_reason(override: object) -> str | None:
    if override is None:
        return None
    if not isinstance(override, str) or not override.strip():
        raise InvalidInputError("an override needs its reason: non-empty text saying why the gate is skipped")
    return override.strip()


def _gate_refusal(conn: sa.Connection, channel: str, version: int, gated: bool | None) -> str | None:
    """Why pointing ``channel`` at ``version`` needs an override (None: it does not)."""
    current = store.channel(conn, channel)
    was_gated = channel == LIVE_CHANNEL or (current is not None and current.gated)
    if gated is False and was_gated:
        return "it is a gated channel, and ungating it skips the gate from then on"
    moves = current is None or current.version != version
    if (was_gated or gated) and moves and not store.passed_gate(conn, version):
        return (f"it is gated and version {version} never passed the publish gate (it was never published "
                "on a gated channel)")
    return None


def _validated(content: Mapping[str, Any], number: int, settings_overrides: Mapping[str, Any] | None,
               extensions: Extensions | None) -> ConfigSnapshot:
    try:
        return build(content, settings_overrides=settings_overrides, extensions=extensions)
    except ConfigValidationError as exc:
        raise PublishRefusedError(f"version {number} was not published: it is invalid\n{exc.message}",
                                  details={"violations": [str(v) for v in exc.violations], "failed": []}) from exc


def _tested(content: Mapping[str, Any], number: int, tests: Sequence[str | Path],
            gate: TestGate | None) -> tuple[str, ...]:
    if not tests:
        return ()
    if gate is None:
        raise ConfigError("conversation tests were given but nothing can run them here: publish through "
                          "engine.versions, the CLI or the HTTP API, or pass gate=convengine.engine.publish_gate.conversation_test_gate(Engine.open)")
    outcomes = gate(content, tests)
    failed = [o for o in outcomes if not o.passed]
    if failed:
        names = [f"{o.file.name}: {o.name}" for o in failed]
        reports = "\n".join(o.report() for o in failed)
        raise PublishRefusedError(f"version {number} was not published: {len(failed)} conversation test"
                                  f"{'s' if len(failed) > 1 else ''} failed ({'; '.join(names)})\n{reports}",
                                  details={"failed": names, "violations": []})
    return tuple(f"{o.file.name}: {o.name}" for o in outcomes)


Decision = Callable[[sa.Connection], tuple[str, str | None]]
"""Decides, under the lock, the action and message of a move (or refuses it by raising)."""


def _apply(engine: sa.Engine, channel: str, number: int, content: Mapping[str, Any], *, author: str,
           action: str, message: str | None, tests_passed: tuple[str, ...] = (),
           migration: str | None = None, gated: bool | None = None, decide: Decision | None = None) -> Publication:
    def write(conn: sa.Connection) -> Publication:
        done, why = decide(conn) if decide is not None else (action, message)
        if channel == LIVE_CHANNEL:
            _mirror(conn, content)
        store.point(conn, channel, number, author=author, action=done, message=why,
                    tests_run=len(tests_passed), migration=migration, gated=gated)
        return Publication(channel, store.info(conn, number), done, tests_passed)

    publication: Publication = _locked(engine, write)
    logger.info("configuration version %s %s on channel %s by %s", number, publication.action.lower(), channel,
                author)
    return publication


def _mirror(conn: sa.Connection, content: Mapping[str, Any]) -> None:
    """The control tables become the version's rows (ConvEngine's readers see the live channel)."""
    _replace_rows(conn, coerce_rows(pack_tables(dict(content)), origin="pack").rows)


__all__ = ["DraftNotNamedError", "GateRequiredError", "Publication", "PublishRefusedError", "ReplayChangedError", "create_draft", "edit_draft", "point", "publish",
           "record_import", "rollback", "sync_live"]
