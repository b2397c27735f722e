"""Vector indexes: where the vector leg of a search finds its nearest passages.

- ``sqlite-vec``: a ``vec0`` table in the SQLite database file itself, reached through ``apsw`` (a SQLite
  binding that can load extensions; Python's own ``sqlite3`` here cannot). The vectors stay on disk and
  are shared by every process; nothing is held per process. A base's rows are rebuilt (one
  ``INSERT ... SELECT`` inside SQLite) the first time it is searched after it changed.
- ``brute-force``: every vector of a base loaded once into a NumPy matrix per process, scored by one
  matrix product; kept until the base changes. Always available; chosen when the other is not.

:func:`choose` picks one per database and says why (``convengine knowledge list`` prints it). PostgreSQL's
``pgvector`` is detected and reported, not used: see docs/knowledge.md.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import sqlalchemy as sa

from convengine.catalog.errors import ConfigError, ErrorCode
from convengine.knowledge import store
from convengine.knowledge.embeddings import normalised, unpack

IndexChoice = Literal["auto", "sqlite-vec", "brute-force"]
BUSY_TIMEOUT_MS = 30_000
Candidates = list[tuple[int, float]]


@dataclass(frozen=True, slots=True)
class IndexInfo:
    """Which vector index a database's searches use, and why."""

    kind: str
    reason: str

    def __str__(self) -> str:
        return f"{self.kind} ({self.reason})"


class VectorIndex(Protocol):
    info: IndexInfo

    def nearest(self, conn: sa.Connection, stamps: Mapping[str, str], model: str, query: np.ndarray,
                n: int) -> Candidates:
        """The ``n`` passages of the bases in ``stamps`` closest to ``query`` (unit length): (chunk id, cosine)."""
        ...

    def close(self) -> None: ...


def top(ids: np.ndarray, cosines: np.ndarray, n: int) -> Candidates:
    """The ``n`` best (id, cosine) pairs, best first, cosines clipped to 0..1 (NaN, from a corrupt
    stored vector, counts as 0: it must never pass for a perfect match)."""
    cosines = np.clip(np.nan_to_num(cosines, nan=0.0, posinf=0.0, neginf=0.0), 0.0, 1.0)
    n = min(n, len(cosines))
    if n <= 0:
        return []
    best = np.argpartition(-cosines, n - 1)[:n]
    order = best[np.argsort(-cosines[best], kind="stable")]
    return [(int(ids[i]), float(cosines[i])) for i in order]


class BruteForceIndex:
    """Each base's vectors in a per-process matrix, refreshed when the base's stamp changes."""

    def __init__(self, reason: str) -> None:
        self.info = IndexInfo("brute-force", reason)
        self._cache: dict[tuple[str, str], tuple[str, np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    def nearest(self, conn: sa.Connection, stamps: Mapping[str, str], model: str, query: np.ndarray,
                n: int) -> Candidates:
        parts = [self.matrix(conn, kb, stamp, model) for kb, stamp in sorted(stamps.items())]
        parts = [(ids, m) for ids, m in parts if len(ids) and m.shape[1] == query.shape[0]]
        if not parts:
            return []
        ids = np.concatenate([p[0] for p in parts])
        return top(ids, np.concatenate([m @ query for _, m in parts]), n)

    def matrix(self, conn: sa.Connection, kb: str, stamp: str, model: str) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            cached = self._cache.get((kb, model))
        if cached is not None and cached[0] == stamp:
            return cached[1], cached[2]
        ids, matrix = stack([(cid, data) for cid, m, data in store.vectors(conn, [kb]) if m == model])
        with self._lock:
            self._cache[(kb, model)] = (stamp, ids, matrix)
        return ids, matrix

    def close(self) -> None:
        with self._lock:
            self._cache.clear()


def stack(rows: Sequence[tuple[int, bytes]]) -> tuple[np.ndarray, np.ndarray]:
    """Ids and unit-length rows of the vectors of the most common width (others are another model's)."""
    width = max((len(d) for _, d in rows), default=0) // 4
    rows = [(cid, d) for cid, d in rows if len(d) // 4 == width]
    ids = np.asarray([cid for cid, _ in rows], dtype=np.int64)
    matrix = normalised(np.stack([unpack(d) for _, d in rows])) if rows else np.zeros((0, 0), np.float32)
    return ids, matrix


class SqliteVecIndex:
    """A ``vec0`` table per vector width in the database file, one partition per (base, model)."""

    def __init__(self, path: str) -> None:
        import apsw
        import sqlite_vec  # type: ignore[import-untyped]

        self.info = IndexInfo("sqlite-vec", f"vec0 tables in {path} through apsw")
        self._db = apsw.Connection(path)
        self._db.setbusytimeout(BUSY_TIMEOUT_MS)
        self._db.enable_load_extension(True)
        self._db.load_extension(sqlite_vec.loadable_path())
        self._db.enable_load_extension(False)
        self._db.execute("CREATE TABLE IF NOT EXISTS ce_knowledge_vec_state "
                         "(part TEXT NOT NULL, width INTEGER NOT NULL, stamp TEXT NOT NULL, PRIMARY KEY (part, width))")
        self._lock = threading.Lock()

    def nearest(self, conn: sa.Connection, stamps: Mapping[str, str], model: str, query: np.ndarray,
                n: int) -> Candidates:
        width = int(query.shape[0])
        table = f"ce_knowledge_vec_{width}"
        found: list[tuple[int, float]] = []
        blob = np.asarray(query, dtype="<f4").tobytes()
        with self._lock:
            for kb, stamp in sorted(stamps.items()):
                part = f"{kb}\x1f{model}"
                self._sync(table, width, part, kb, model, stamp)
                rows = self._db.execute(f"SELECT rowid, distance FROM {table} WHERE embedding MATCH ? AND k = ? "
                                        "AND part = ?", (blob, n, part)).fetchall()
                # distance is NULL where a cosine is undefined (a zero vector): no similarity
                found.extend((int(r[0]), 0.0 if r[1] is None else 1.0 - float(r[1]))  # type: ignore[arg-type]
                             for r in rows)
        if not found:
            return []
        return top(np.asarray([i for i, _ in found], dtype=np.int64), np.asarray([c for _, c in found]), n)

    def _sync(self, table: str, width: int, part: str, kb: str, model: str, stamp: str) -> None:
        """Rebuild ``part`` from ce_knowledge_chunk when its base changed since the last build."""
        db = self._db
        if self._stamp(part, width) == stamp:
            return
        with db:  # one write transaction: another process waits, then finds the stamp current
            db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0(part TEXT PARTITION KEY, "
                       f"embedding float[{width}] distance_metric=cosine)")
            if self._stamp(part, width) == stamp:
                return
            db.execute(f"DELETE FROM {table} WHERE part = ?", (part,))
            db.execute(f"INSERT INTO {table}(rowid, part, embedding) SELECT chunk_id, ?, embedding "
                       "FROM ce_knowledge_chunk WHERE kb_name = ? AND embedding_model = ? AND length(embedding) = ?",
                       (part, kb, model, width * 4))
            db.execute("INSERT OR REPLACE INTO ce_knowledge_vec_state(part, width, stamp) VALUES (?, ?, ?)",
                       (part, width, stamp))

    def _stamp(self, part: str, width: int) -> str | None:
        row = self._db.execute("SELECT stamp FROM ce_knowledge_vec_state WHERE part = ? AND width = ?",
                               (part, width)).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


def sqlite_vec_missing() -> str | None:
    """Why sqlite-vec cannot be used in this Python (None: it can)."""
    missing = [name for name, module in (("apsw", "apsw"), ("sqlite-vec", "sqlite_vec"))
               if importlib.util.find_spec(module) is None]
    return f"{' and '.join(missing)} not installed (pip install 'convengine[vector]')" if missing else None


def sqlite_file(url: sa.URL) -> str | None:
    database = url.database or ""
    return None if database in ("", ":memory:") or database.startswith("file:") else database


def pgvector_state(conn: sa.Connection) -> str:
    available = conn.execute(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
    if available is None:
        return "this PostgreSQL server has no pgvector extension; vectors are scored in each process"
    return "pgvector is installed on this server but not used yet; vectors are scored in each process"


def choose(conn: sa.Connection, wanted: IndexChoice) -> VectorIndex:
    """The index for ``conn``'s database: what ``wanted`` asks for, or the best one available (auto)."""
    if wanted == "brute-force":
        return BruteForceIndex("chosen by knowledge.vector_index")
    if conn.dialect.name == "postgresql":
        reason = pgvector_state(conn)
    elif (path := sqlite_file(conn.engine.url)) is None:
        reason = "an in-memory SQLite database cannot be shared with apsw"
    elif (missing := sqlite_vec_missing()) is not None:
        reason = missing
    else:
        try:
            return SqliteVecIndex(path)
        except Exception as exc:  # noqa: BLE001 - any failure to load the extension falls back, with its reason
            reason = f"sqlite-vec could not be loaded: {type(exc).__name__}: {exc}"
    if wanted == "sqlite-vec":
        raise ConfigError(f"knowledge.vector_index is sqlite-vec but {reason}", code=ErrorCode.CONFIG_INVALID)
    return BruteForceIndex(reason)

