"""What an attack must not change: every ce_* table, other conversations' checkpoints, files on disk.

``World.capture(url)`` reads the database directly (not through the engine under attack):
row counts of every ``ce_*`` table (rows of the attacker's own conversation counted apart,
since a refused request may still leave its own audit of the refusal), and a digest of every
checkpoint row per conversation. ``assert_unchanged`` compares two captures and names each
difference. ``files_under`` lists a folder's files with size and mtime, for attacks that aim at
the disk.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from convengine.audit.packing import MAX_UNPACKED_BYTES, ZDICT
from convengine.db import create_sync_engine, parse_database_url

# Tables whose rows belong to one conversation (column conversation_id).
CONVERSATION_TABLES = ("ce_conversation", "ce_conversation_history", "ce_audit", "ce_audit_turn", "ce_llm_call_log",
                       "ce_mcp_user_feedback", "ce_conversation_step", "ce_conversation_version")
CHECKPOINT_TABLES = {"sqlite": ("checkpoints", "writes"),
                     "postgresql": ("checkpoints", "checkpoint_blobs", "checkpoint_writes")}


@dataclass(frozen=True)
class World:
    counts: dict[str, int]
    """Rows of every ce_* table, outside the attacker's conversations."""
    checkpoints: dict[str, str]
    """thread_id -> digest of all its checkpoint rows (every conversation but the attacker's)."""
    own: dict[str, int] = field(default_factory=dict)
    """Rows of the attacker's conversations per table (informational)."""

    @classmethod
    def capture(cls, url: str, *, attacker: Iterable[str] = ()) -> World:
        excluded = {str(c) for c in attacker}
        engine = create_sync_engine(parse_database_url(url))
        try:
            with engine.connect() as conn:
                counts, own = _counts(conn, excluded)
                return cls(counts, _checkpoints(conn, excluded), own)
        finally:
            engine.dispose()

    def diff(self, after: World) -> list[str]:
        problems = [f"{table}: {self.counts.get(table)} -> {after.counts.get(table)} rows"
                    for table in sorted(set(self.counts) | set(after.counts))
                    if self.counts.get(table) != after.counts.get(table)]
        for thread in sorted(set(self.checkpoints) | set(after.checkpoints)):
            if self.checkpoints.get(thread) != after.checkpoints.get(thread):
                problems.append(f"checkpoint of conversation {thread} changed")
        return problems


def _counts(conn: sa.Connection, excluded: set[str]) -> tuple[dict[str, int], dict[str, int]]:
    names = sorted(t for t in sa.inspect(conn).get_table_names() if t.startswith("ce_"))
    counts: dict[str, int] = {}
    own: dict[str, int] = {}
    for table in names:
        counts[table] = _count(conn, table, excluded, mine=False)
        if table in CONVERSATION_TABLES and excluded:
            own[table] = _count(conn, table, excluded, mine=True)
    return counts, own


def _count(conn: sa.Connection, table: str, excluded: set[str], *, mine: bool) -> int:
    sql = f"SELECT COUNT(*) FROM {table}"
    params: dict[str, Any] = {}
    if table in CONVERSATION_TABLES and excluded:
        marks = ", ".join(f":c{i}" for i in range(len(excluded)))
        sql += f" WHERE CAST(conversation_id AS TEXT) {'IN' if mine else 'NOT IN'} ({marks})"
        params = {f"c{i}": c for i, c in enumerate(sorted(excluded))}
    return int(conn.execute(sa.text(sql), params).scalar_one())


def _checkpoints(conn: sa.Connection, excluded: set[str]) -> dict[str, str]:
    existing = set(sa.inspect(conn).get_table_names())
    digests: dict[str, Any] = {}
    for table in CHECKPOINT_TABLES.get(conn.dialect.name, ()):
        if table not in existing:
            continue
        columns = [c["name"] for c in sa.inspect(conn).get_columns(table)]
        rows = conn.execute(sa.text(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {', '.join(columns[:4])}"))
        for row in rows:
            thread = str(row._mapping["thread_id"])
            if thread in excluded:
                continue
            digests.setdefault(thread, hashlib.sha256()).update(repr((table, tuple(row))).encode())
    return {thread: h.hexdigest() for thread, h in digests.items()}


def assert_unchanged(before: World, after: World) -> None:
    problems = before.diff(after)
    assert not problems, "the attack changed: " + "; ".join(problems)


def files_under(folder: Path, *, ignore: Iterable[str] = ()) -> dict[str, tuple[int, float]]:
    """Relative path -> (size, mtime) of every file below ``folder`` (names in ``ignore`` skipped)."""
    skip = tuple(ignore)
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime)
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith(skip)}


def packed_audit_text(conn: sa.Connection, conversation_id: str | None = None) -> list[str]:
    """The JSON text of every ``ce_audit_turn`` row (of one conversation), unpacked: what the database keeps
    of the audit, readable (the rows are compressed, so a secret would not show in their raw bytes)."""
    sql = "SELECT events FROM ce_audit_turn"
    if conversation_id is not None:
        sql += " WHERE CAST(conversation_id AS TEXT) = :c"
    rows = conn.execute(sa.text(sql), {"c": conversation_id}).scalars()
    return [zlib.decompressobj(zdict=ZDICT).decompress(bytes(r), MAX_UNPACKED_BYTES).decode() for r in rows]
