"""One database URL for everything: parse it once, derive the drivers' forms.

``sqlite:///path.db`` (embedded default) and ``postgresql://user@host/db`` are accepted,
with or without a ``+driver`` suffix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from convengine.catalog.errors import ConfigError
from convengine.security.redact import redact_text


@dataclass(frozen=True, slots=True)
class DatabaseUrl:
    """A parsed engine URL.

    Attributes:
        raw: the URL as given.
        backend: ``"sqlite"`` or ``"postgresql"``.
        sync_url: SQLAlchemy URL for synchronous use (CLI, migrations, packs).
        async_url: SQLAlchemy URL for the async runtime.
        sqlite_path: the database file (SQLite only).
        libpq: a plain ``postgresql://`` URI for psycopg and the checkpointer (PostgreSQL only).
    """

    raw: str
    backend: str
    sync_url: sa.URL
    async_url: sa.URL
    sqlite_path: Path | None = None
    libpq: str | None = None

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    def redacted(self) -> str:
        """The URL for messages: the password hidden, the driver suffix dropped."""
        return redact_text(self.sync_url.set(drivername=self.backend).render_as_string(hide_password=True))


def parse_database_url(raw: str) -> DatabaseUrl:
    """Parse ``raw`` into a :class:`DatabaseUrl`.

    Raises:
        ConfigError: the URL is malformed, names an unsupported backend or an in-memory SQLite.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError("database URL must be a non-empty string, e.g. sqlite:///convengine.db")
    try:
        url = make_url(raw.strip())
    except ArgumentError as exc:
        raise ConfigError(f"malformed database URL {redact_text(raw)!r}: {redact_text(str(exc))}") from None
    backend = url.get_backend_name()
    if backend == "postgres":
        backend = "postgresql"
    if backend == "sqlite":
        return _sqlite(raw, url)
    if backend == "postgresql":
        return _postgres(raw, url)
    raise ConfigError(f"unsupported database URL {redact_text(raw)!r}: use sqlite:///FILE or "
                      "postgresql://USER@HOST/DB")


def _sqlite(raw: str, url: sa.URL) -> DatabaseUrl:
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        raise ConfigError(
            f"database URL {redact_text(raw)!r} is an in-memory SQLite database; the engine needs a file "
            "shared by the checkpointer and the ce_* tables, e.g. sqlite:///convengine.db"
        )
    path = Path(database).expanduser()
    sync_url = sa.URL.create("sqlite", database=str(path))
    async_url = sa.URL.create("sqlite+aiosqlite", database=str(path))
    return DatabaseUrl(raw, "sqlite", sync_url, async_url, sqlite_path=path)


def _postgres(raw: str, url: sa.URL) -> DatabaseUrl:
    base = url.set(drivername="postgresql+psycopg")
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    return DatabaseUrl(raw, "postgresql", base, base, libpq=libpq)
