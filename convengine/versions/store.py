"""Reading and writing versions, channels and their history (``ce_config_version``, ``ce_config_channel``,
``ce_config_publication``), in the caller's transaction.

Versions are only ever inserted, never updated: a version number always names the same rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from convengine.catalog.errors import ConfigError, ErrorCode, InvalidInputError
from convengine.config_loader import stamp
from convengine.config_loader.loader import IMPORT_LOCK_KEY
from convengine.db.models import CeConfigChannel, CeConfigPublication, CeConfigVersion
from convengine.versions.content import DRAFT_CHANNEL, LIVE_CHANNEL, MIGRATIONS, canonical, digest

VERSION = CeConfigVersion.__table__
CHANNEL = CeConfigChannel.__table__
PUBLICATION = CeConfigPublication.__table__
CHANNEL_PATTERN = "^[a-z][a-z0-9_-]{0,39}$"
"""A channel name (as the OpenAPI schema states it)."""
TARGET_CHANNEL_PATTERN = "^(?!draft$)[a-z][a-z0-9_-]{0,39}$"
"""A channel that can be published to or pointed: any name but the draft's."""
CHANNEL_NAME = re.compile(CHANNEL_PATTERN)
MAX_TEXT = 2_000
"""Authors and messages are cut to this many characters."""
GATE_ACTIONS = ("PUBLISH", "IMPORT")
"""Moves of a gated channel that mean the version passed the gate (a POINT, ROLLBACK or OVERRIDE does not)."""
MAX_CHAIN = 10_000
"""How far back a draft's edits are followed."""


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """One version: its number, content hash, who made it, why, when, and the draft it was edited from."""

    number: int
    hash: str
    author: str
    message: str | None
    created_at: datetime
    parent: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.number, "hash": self.hash, "author": self.author, "message": self.message,
                "createdAt": self.created_at.isoformat(), "parent": self.parent}


@dataclass(frozen=True, slots=True)
class Channel:
    """A channel, the version it serves, its migration policy, whether it is gated (serves only versions
    that passed the publish gate: ``production`` always) and who moved it last."""

    name: str
    version: int
    migration: str = "pin"
    updated_by: str | None = None
    gated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"channel": self.name, "version": self.version, "migration": self.migration,
                "updatedBy": self.updated_by, "gated": self.gated}


class VersionNotFoundError(ConfigError):
    default_code = ErrorCode.VERSION_NOT_FOUND


def lock(conn: sa.Connection) -> None:
    """Serialise with pack imports and other version changes (the import lock; SQLite's write lock)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text(f"SELECT pg_advisory_xact_lock({IMPORT_LOCK_KEY})"))
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def check_channel(name: object, *, draft_ok: bool = False) -> str:
    if not isinstance(name, str) or not CHANNEL_NAME.fullmatch(name):
        raise InvalidInputError(f"a channel name is 1-40 lowercase letters, digits, '-' or '_' starting with a "
                                f"letter, got {str(name)[:60]!r}")
    if name == DRAFT_CHANNEL and not draft_ok:
        raise InvalidInputError(f"'{DRAFT_CHANNEL}' is reserved for the draft: publish it to another channel")
    return name


def _text(value: object, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be text, got {type(value).__name__}")
    return value[:MAX_TEXT]


def record(conn: sa.Connection, content: Mapping[str, Any], *, author: str, message: str | None,
           parent: int | None = None) -> VersionInfo:
    """Store ``content`` as the next version (call under :func:`lock`)."""
    text = canonical(content)
    number = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(VERSION.c.version_no), 0))).scalar_one()) + 1
    info = VersionInfo(number, digest(text), _text(author, "author") or "unknown", _text(message, "message"),
                       datetime.now(UTC), parent)
    conn.execute(sa.insert(VERSION).values(version_no=number, content_hash=info.hash, content=text,
                                           author=info.author, message=info.message, parent_no=parent,
                                           created_at=info.created_at))
    return info


def _info(row: sa.Row[*tuple[Any, ...]]) -> VersionInfo:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return VersionInfo(row.version_no, row.content_hash, row.author, row.message, created, row.parent_no)


_INFO_COLUMNS = (VERSION.c.version_no, VERSION.c.content_hash, VERSION.c.author, VERSION.c.message,
                 VERSION.c.created_at, VERSION.c.parent_no)


MAX_VERSION = 2**31 - 1
"""The highest version number (an INTEGER column on both databases)."""


def _number(number: object) -> int:
    """``number`` when it can name a version; anything else names none (never a database error)."""
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= MAX_VERSION:
        raise VersionNotFoundError(f"no configuration version {number!r} (versions are numbered 1 to {MAX_VERSION})")
    return number


def info(conn: sa.Connection, number: int) -> VersionInfo:
    row = conn.execute(sa.select(*_INFO_COLUMNS).where(VERSION.c.version_no == _number(number))).first()
    if row is None:
        raise VersionNotFoundError(f"no configuration version {number}")
    return _info(row)


def content(conn: sa.Connection, number: int) -> dict[str, Any]:
    text = conn.execute(sa.select(VERSION.c.content).where(VERSION.c.version_no == _number(number))).scalar_one_or_none()
    if text is None:
        raise VersionNotFoundError(f"no configuration version {number}")
    return json.loads(text)


def versions(conn: sa.Connection) -> list[VersionInfo]:
    return [_info(r) for r in conn.execute(sa.select(*_INFO_COLUMNS).order_by(VERSION.c.version_no))]


def _channel(row: sa.Row[*tuple[Any, ...]]) -> Channel:
    gated = bool(row.gated) or row.channel_name == LIVE_CHANNEL
    return Channel(row.channel_name, row.version_no, row.migration, row.updated_by, gated)


def channel(conn: sa.Connection, name: str) -> Channel | None:
    row = conn.execute(sa.select(CHANNEL).where(CHANNEL.c.channel_name == name)).first()
    return None if row is None else _channel(row)


def require_channel(conn: sa.Connection, name: str) -> Channel:
    found = channel(conn, name)
    if found is None:
        raise VersionNotFoundError(f"no channel {name!r}: point it at a version first")
    return found


def channels(conn: sa.Connection) -> list[Channel]:
    rows = conn.execute(sa.select(CHANNEL).order_by(CHANNEL.c.channel_name))
    return [_channel(r) for r in rows]


def passed_gate(conn: sa.Connection, number: int) -> bool:
    """Whether a gated channel took version ``number`` through the gate: published there (validated and
    tested) or imported into the control tables (``production``); an override is not a pass."""
    gated = sa.select(CHANNEL.c.channel_name).where(CHANNEL.c.gated.is_(True))
    found = conn.execute(sa.select(PUBLICATION.c.publication_id).where(
        PUBLICATION.c.version_no == number, PUBLICATION.c.action.in_(GATE_ACTIONS),
        sa.or_(PUBLICATION.c.channel_name == LIVE_CHANNEL, PUBLICATION.c.channel_name.in_(gated))).limit(1)).first()
    return found is not None


def draft_authors(conn: sa.Connection, number: int, served: set[int]) -> list[tuple[int, str]]:
    """The versions (number, author) a draft was edited through since the last of ``served`` on its
    chain of parents, newest first (``served``: what the target channel served)."""
    chain: list[tuple[int, str]] = []
    current: int | None = number
    while current is not None and current not in served and len(chain) < MAX_CHAIN:
        row = conn.execute(sa.select(VERSION.c.author, VERSION.c.parent_no)
                           .where(VERSION.c.version_no == current)).first()
        if row is None:
            break
        chain.append((current, row.author))
        current = row.parent_no
    return chain


def point(conn: sa.Connection, name: str, number: int, *, author: str, action: str, message: str | None = None,
          tests_run: int = 0, migration: str | None = None, gated: bool | None = None) -> Channel:
    """Make channel ``name`` serve version ``number`` and log the move; a new stamp tells every
    process (call under :func:`lock`)."""
    info(conn, number)  # exists
    if migration is not None and migration not in MIGRATIONS:
        raise InvalidInputError(f"migration must be one of {', '.join(MIGRATIONS)}, got {str(migration)[:40]!r}")
    current = channel(conn, name)
    values = {"version_no": number, "updated_by": _text(author, "author"), "updated_at": datetime.now(UTC)}
    if migration is not None:
        values["migration"] = migration
    if gated is not None:
        values["gated"] = gated
    if current is None:
        conn.execute(sa.insert(CHANNEL).values(channel_name=name, migration=migration or "pin", **{
            k: v for k, v in values.items() if k != "migration"}))
    else:
        conn.execute(sa.update(CHANNEL).where(CHANNEL.c.channel_name == name).values(**values))
    conn.execute(sa.insert(PUBLICATION).values(channel_name=name, version_no=number, action=action,
                                               author=_text(author, "author") or "unknown",
                                               message=_text(message, "message"), tests_run=tests_run,
                                               created_at=datetime.now(UTC)))
    if name != DRAFT_CHANNEL:
        stamp.publish(conn, stamp.new_stamp())
    return require_channel(conn, name)


def publications(conn: sa.Connection, name: str | None = None) -> list[dict[str, Any]]:
    query = sa.select(PUBLICATION).order_by(PUBLICATION.c.publication_id)
    if name is not None:
        query = query.where(PUBLICATION.c.channel_name == name)
    return [{"channel": r.channel_name, "version": r.version_no, "action": r.action, "author": r.author,
             "message": r.message, "testsRun": r.tests_run,
             "at": (r.created_at if r.created_at.tzinfo else r.created_at.replace(tzinfo=UTC)).isoformat()}
            for r in conn.execute(query)]
