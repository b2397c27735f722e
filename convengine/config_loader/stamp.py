"""The configuration stamp: how every process learns that the configuration changed elsewhere.

A pack import that changed rows and a cache refresh write a new random stamp into
``convengine_config_stamp`` (one row). Each engine remembers the stamp of the configuration it
loaded and, before a turn, compares it with the stored one (at most every
:data:`CHECK_INTERVAL_S`, one primary-key read); a different stamp means reload.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from convengine.db.models import ConfigStamp

CHECK_INTERVAL_S = 0.25
STAMP = ConfigStamp.__table__
_ROW = STAMP.c.stamp_id == 1


def new_stamp() -> str:
    return uuid.uuid4().hex


def publish(conn: sa.Connection, stamp: str) -> None:
    """Store ``stamp`` as the configuration's latest change (in the caller's transaction)."""
    now = datetime.now(UTC)
    if conn.execute(sa.update(STAMP).where(_ROW).values(stamp=stamp, updated_at=now)).rowcount == 0:
        conn.execute(sa.insert(STAMP).values(stamp_id=1, stamp=stamp, updated_at=now))


def read(engine: sa.Engine) -> str | None:
    """The stored stamp; None when there is none (or no stamp table: a database not migrated yet)."""
    try:
        with engine.connect() as conn:
            return conn.execute(sa.select(STAMP.c.stamp).where(_ROW)).scalar_one_or_none()
    except sa.exc.SQLAlchemyError:
        return None


async def aread(engine: AsyncEngine) -> str | None:
    """The stored stamp (errors propagate: the caller decides what an unreadable stamp means)."""
    async with engine.begin() as conn:
        return (await conn.execute(sa.select(STAMP.c.stamp).where(_ROW))).scalar_one_or_none()
