"""SQL over the knowledge tables: bases, documents and chunks, lexical candidates, vectors.

Every function takes a SQLAlchemy :class:`~sqlalchemy.Connection` (async callers use
``run_sync``); lexical search is PostgreSQL full-text search or SQLite FTS5.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from convengine.catalog.errors import ErrorCode, InvalidInputError
from convengine.db.models import CeKnowledgeBase, CeKnowledgeChunk, CeKnowledgeDocument, utcnow
from convengine.knowledge.chunking import Document, Passage

BASE = CeKnowledgeBase.__table__
DOCUMENT = CeKnowledgeDocument.__table__
CHUNK = CeKnowledgeChunk.__table__
KB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_PG_LEXICAL = sa.text(
    "SELECT chunk_id, ts_rank_cd(tsv, q) AS rank FROM ce_knowledge_chunk, websearch_to_tsquery('english', :q) q "
    "WHERE kb_name IN :kbs AND tsv @@ q ORDER BY rank DESC, chunk_id LIMIT :n"
).bindparams(sa.bindparam("kbs", expanding=True))
_SQLITE_LEXICAL = sa.text(
    "SELECT c.chunk_id, -bm25(ce_knowledge_fts) AS rank FROM ce_knowledge_fts "
    "JOIN ce_knowledge_chunk c ON c.chunk_id = ce_knowledge_fts.rowid "
    "WHERE ce_knowledge_fts MATCH :q AND c.kb_name IN :kbs ORDER BY rank DESC, c.chunk_id LIMIT :n"
).bindparams(sa.bindparam("kbs", expanding=True))


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk as search returns it, with its document's source and title."""

    chunk_id: int
    kb_name: str
    source: str
    document_title: str | None
    position: int
    title: str | None
    text: str
    metadata: dict[str, Any]


def check_name(kb: str) -> str:
    if not isinstance(kb, str) or not KB_NAME.match(kb):
        raise InvalidInputError(f"knowledge base name {kb!r} must be 1-64 letters, digits, '_', '.' or '-'",
                                code=ErrorCode.INVALID_INPUT)
    return kb


def ensure_base(conn: sa.Connection, kb: str, description: str | None = None) -> None:
    exists = conn.execute(sa.select(BASE.c.kb_name).where(BASE.c.kb_name == check_name(kb))).first()
    if exists is None:
        conn.execute(BASE.insert().values(kb_name=kb, description=description, revision=0))
    elif description is not None:
        conn.execute(BASE.update().where(BASE.c.kb_name == kb).values(description=description))


def bump(conn: sa.Connection, kb: str) -> None:
    conn.execute(BASE.update().where(BASE.c.kb_name == kb).values(revision=BASE.c.revision + 1, updated_at=utcnow()))


def stored_hash(conn: sa.Connection, kb: str, source: str) -> str | None:
    row = conn.execute(sa.select(DOCUMENT.c.content_hash).where(DOCUMENT.c.kb_name == kb,
                                                                 DOCUMENT.c.source == source)).first()
    return None if row is None else str(row.content_hash)


def replace_document(conn: sa.Connection, kb: str, document: Document, passages: Sequence[Passage],
                     vectors: Sequence[bytes | None], model: str | None, content_hash: str | None = None) -> None:
    """Store ``document`` with ``passages`` (and their vectors), replacing what ``source`` held;
    ``content_hash`` (default the document's) is what a later ingest compares to skip it."""
    conn.execute(DOCUMENT.delete().where(DOCUMENT.c.kb_name == kb, DOCUMENT.c.source == document.source))
    document_id = conn.execute(DOCUMENT.insert().values(
        kb_name=kb, source=document.source, title=document.title, content_hash=content_hash or document.content_hash,
        chunk_count=len(passages), metadata_json=document.metadata or None,
    ).returning(DOCUMENT.c.document_id)).scalar_one()
    if passages:
        conn.execute(CHUNK.insert(), [
            {"document_id": document_id, "kb_name": kb, "position": p.position, "title": p.title or document.title,
             "text": p.text, "metadata_json": None, "embedding": vector, "embedding_model": model if vector else None}
            for p, vector in zip(passages, vectors, strict=True)])


def delete_sources(conn: sa.Connection, kb: str, sources: Sequence[str]) -> int:
    if not sources:
        return 0
    result = conn.execute(DOCUMENT.delete().where(DOCUMENT.c.kb_name == kb, DOCUMENT.c.source.in_(list(sources))))
    return int(result.rowcount or 0)


def delete_base(conn: sa.Connection, kb: str) -> bool:
    return bool(conn.execute(BASE.delete().where(BASE.c.kb_name == kb)).rowcount)


def sources(conn: sa.Connection, kb: str) -> list[str]:
    return list(conn.execute(sa.select(DOCUMENT.c.source).where(DOCUMENT.c.kb_name == kb)).scalars())


def list_bases(conn: sa.Connection) -> list[dict[str, Any]]:
    documents = (sa.select(DOCUMENT.c.kb_name, sa.func.count().label("documents"),
                           sa.func.coalesce(sa.func.sum(DOCUMENT.c.chunk_count), 0).label("chunks"))
                 .group_by(DOCUMENT.c.kb_name).subquery())
    rows = conn.execute(sa.select(BASE.c.kb_name, BASE.c.description, BASE.c.revision, BASE.c.updated_at,
                                  sa.func.coalesce(documents.c.documents, 0).label("documents"),
                                  sa.func.coalesce(documents.c.chunks, 0).label("chunks"))
                        .select_from(BASE.outerjoin(documents, documents.c.kb_name == BASE.c.kb_name))
                        .order_by(BASE.c.kb_name))
    return [dict(row._mapping) for row in rows]


def revisions(conn: sa.Connection, kbs: Sequence[str] | None) -> dict[str, int]:
    query = sa.select(BASE.c.kb_name, BASE.c.revision)
    if kbs is not None:
        query = query.where(BASE.c.kb_name.in_(list(kbs)))
    return {row.kb_name: int(row.revision) for row in conn.execute(query)}


def lexical(conn: sa.Connection, kbs: Sequence[str], tokens: Sequence[str], limit: int) -> list[tuple[int, float]]:
    """Chunk ids and the backend's own rank (higher is better) for any of ``tokens``."""
    if not tokens or not kbs:
        return []
    if conn.dialect.name == "postgresql":
        statement, query = _PG_LEXICAL, " or ".join(tokens)
    else:
        statement, query = _SQLITE_LEXICAL, " OR ".join(f'"{t}"' for t in tokens)
    rows = conn.execute(statement, {"q": query, "kbs": list(kbs), "n": limit})
    return [(int(r.chunk_id), float(r.rank)) for r in rows]


def vectors(conn: sa.Connection, kbs: Sequence[str]) -> list[tuple[int, str | None, bytes]]:
    rows = conn.execute(sa.select(CHUNK.c.chunk_id, CHUNK.c.embedding_model, CHUNK.c.embedding)
                        .where(CHUNK.c.kb_name.in_(list(kbs)), CHUNK.c.embedding.is_not(None))
                        .order_by(CHUNK.c.chunk_id))
    return [(int(r.chunk_id), r.embedding_model, bytes(r.embedding)) for r in rows]


def chunks(conn: sa.Connection, ids: Sequence[int]) -> dict[int, StoredChunk]:
    if not ids:
        return {}
    rows = conn.execute(sa.select(CHUNK.c.chunk_id, CHUNK.c.kb_name, DOCUMENT.c.source,
                                  DOCUMENT.c.title.label("document_title"), CHUNK.c.position, CHUNK.c.title,
                                  CHUNK.c.text, DOCUMENT.c.metadata_json)
                        .select_from(CHUNK.join(DOCUMENT, DOCUMENT.c.document_id == CHUNK.c.document_id))
                        .where(CHUNK.c.chunk_id.in_(list(ids))))
    return {int(r.chunk_id): StoredChunk(int(r.chunk_id), r.kb_name, r.source, r.document_title, int(r.position),
                                         r.title, r.text, dict(r.metadata_json or {})) for r in rows}


def embedding_models(conn: sa.Connection, kb: str) -> dict[str | None, int]:
    """How many passages of ``kb`` each embeddings model embedded (None: passages without a vector)."""
    rows = conn.execute(sa.select(CHUNK.c.embedding_model, sa.func.count()).where(CHUNK.c.kb_name == kb)
                        .group_by(CHUNK.c.embedding_model))
    return {model: int(count) for model, count in rows}


def stored_documents(conn: sa.Connection, kb: str) -> list[tuple[Document, str, list[Passage]]]:
    """Every document of ``kb`` as stored (text rebuilt from its passages), its hash, and its passages."""
    documents = conn.execute(sa.select(DOCUMENT.c.document_id, DOCUMENT.c.source, DOCUMENT.c.title,
                                       DOCUMENT.c.content_hash, DOCUMENT.c.metadata_json)
                             .where(DOCUMENT.c.kb_name == kb).order_by(DOCUMENT.c.document_id)).all()
    passages: dict[int, list[Passage]] = {}
    for row in conn.execute(sa.select(CHUNK.c.document_id, CHUNK.c.position, CHUNK.c.title, CHUNK.c.text)
                            .where(CHUNK.c.kb_name == kb).order_by(CHUNK.c.document_id, CHUNK.c.position)):
        passages.setdefault(int(row.document_id), []).append(Passage(int(row.position), row.title, row.text))
    out = []
    for d in documents:
        own = passages.get(int(d.document_id), [])
        out.append((Document(d.source, "\n\n".join(p.text for p in own), d.title, dict(d.metadata_json or {})),
                    str(d.content_hash), own))
    return out
