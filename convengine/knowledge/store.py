"""SQL over the knowledge tables: bases, documents and chunks, lexical candidates, vectors.

Every function takes a SQLAlchemy :class:`~sqlalchemy.Connection` (async callers use
``run_sync``); lexical search is PostgreSQL full-text search or SQLite FTS5.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from convengine.catalog.errors import ErrorCode, InvalidInputError
from convengine.catalog.vocab import KNOWLEDGE_FILTER_KEY
from convengine.db.models import CeKnowledgeBase, CeKnowledgeChunk, CeKnowledgeDocument, utcnow
from convengine.knowledge.chunking import Document, Passage

BASE = CeKnowledgeBase.__table__
DOCUMENT = CeKnowledgeDocument.__table__
CHUNK = CeKnowledgeChunk.__table__
KB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
FILTER_KEY = re.compile(KNOWLEDGE_FILTER_KEY)

FTS = sa.table("ce_knowledge_fts", sa.column("rowid"))
TSV: sa.ColumnClause[Any] = sa.literal_column("ce_knowledge_chunk.tsv")
FTS_LANGUAGE = "english"
FilterValue = str | int | float | bool
Filters = Mapping[str, FilterValue | Sequence[FilterValue]]
"""Document metadata a passage must have: ``{"lang": "en", "year": [2024, 2025]}`` (a list: any of)."""


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


def stamps(conn: sa.Connection, kbs: Sequence[str] | None) -> dict[str, str]:
    """Each base's revision and creation time: changes whenever its passages may have (even when the
    base was deleted and made again), so an index or cache built at a stamp is current while it holds."""
    query = sa.select(BASE.c.kb_name, BASE.c.revision, BASE.c.created_at)
    if kbs is not None:
        query = query.where(BASE.c.kb_name.in_(list(kbs)))
    return {row.kb_name: f"{row.revision}@{row.created_at}" for row in conn.execute(query)}


def _matches(key: str, value: FilterValue) -> sa.ColumnElement[bool]:
    field = DOCUMENT.c.metadata_json[key]
    if isinstance(value, bool):
        return field.as_boolean() == value
    if isinstance(value, int):
        return field.as_integer() == value
    if isinstance(value, float):
        return field.as_float() == value
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInputError(f"metadata filter {key!r}: a text value cannot hold a NUL character",
                                    code=ErrorCode.INVALID_INPUT)
        return field.as_string() == value
    raise InvalidInputError(f"metadata filter {key!r}: {type(value).__name__} values cannot be matched "
                            "(use text, numbers, booleans or a list of them)", code=ErrorCode.INVALID_INPUT)


def filter_problem(filters: object) -> str | None:
    """Why ``filters`` (as a pack writes them) cannot be a metadata filter, or None when they can: an object
    of keys (1-64 letters, digits, ``_``, ``.``, ``-``) to text, numbers, booleans or a non-empty list of them."""
    if not isinstance(filters, Mapping):
        return f"must be an object of metadata keys to values (got {type(filters).__name__})"
    for key, wanted in filters.items():
        if not isinstance(key, str) or not FILTER_KEY.match(key):
            return f"key {str(key)[:40]!r} must be 1-64 letters, digits, '_', '.' or '-'"
        values = wanted if isinstance(wanted, list) else [wanted]
        if not values:
            return f"{key!r} needs at least one value"
        for value in values:
            if not isinstance(value, (str, int, float)):
                return (f"{key!r}: {type(value).__name__} values cannot be matched "
                        "(use text, numbers, booleans or a list of them)")
            if isinstance(value, str) and "\x00" in value:
                return f"{key!r}: a text value cannot hold a NUL character"
    return None


def filtered_documents(filters: Filters) -> sa.Select[tuple[int]]:
    """The ids of documents whose metadata has every ``filters`` value (any of a list's)."""
    conditions = []
    for key, wanted in filters.items():
        values: list[FilterValue] = (list(wanted) if isinstance(wanted, (list, tuple, set, frozenset))
                                     else [wanted])  # type: ignore[list-item]
        if not isinstance(key, str) or not FILTER_KEY.match(key) or not values:
            raise InvalidInputError(f"metadata filter {key!r}: a key is 1-64 letters, digits, '_', '.' or '-' "
                                    "and needs at least one value", code=ErrorCode.INVALID_INPUT)
        conditions.append(sa.or_(*(_matches(key, v) for v in values)))
    return sa.select(DOCUMENT.c.document_id).where(*conditions)


def lexical(conn: sa.Connection, kbs: Sequence[str], tokens: Sequence[str], limit: int,
            filters: Filters | None = None) -> list[tuple[int, float]]:
    """Chunk ids and the backend's own rank (higher is better) for any of ``tokens``."""
    if not tokens or not kbs:
        return []
    if conn.dialect.name == "postgresql":
        tsquery = sa.func.websearch_to_tsquery(FTS_LANGUAGE, " or ".join(tokens))
        rank: sa.ColumnElement[float] = sa.func.ts_rank_cd(TSV, tsquery)
        query = sa.select(CHUNK.c.chunk_id, rank.label("rank")).where(TSV.op("@@")(tsquery))
    else:
        match = " OR ".join(f'"{t}"' for t in tokens)
        rank = -sa.func.bm25(sa.literal_column("ce_knowledge_fts"))
        query = (sa.select(CHUNK.c.chunk_id, rank.label("rank"))
                 .select_from(FTS.join(CHUNK, CHUNK.c.chunk_id == FTS.c.rowid))
                 .where(sa.text("ce_knowledge_fts MATCH :match").bindparams(match=match)))
    query = query.where(CHUNK.c.kb_name.in_(list(kbs)))
    if filters:
        query = query.where(CHUNK.c.document_id.in_(filtered_documents(filters)))
    rows = conn.execute(query.order_by(sa.desc("rank"), CHUNK.c.chunk_id).limit(limit))
    return [(int(r.chunk_id), float(r.rank)) for r in rows]


def vectors(conn: sa.Connection, kbs: Sequence[str], filters: Filters | None = None,
            ids: Sequence[int] | None = None) -> list[tuple[int, str | None, bytes]]:
    """(chunk id, model, vector bytes) of the embedded passages of ``kbs`` (only ``ids`` / matching ``filters``)."""
    query = (sa.select(CHUNK.c.chunk_id, CHUNK.c.embedding_model, CHUNK.c.embedding)
             .where(CHUNK.c.kb_name.in_(list(kbs)), CHUNK.c.embedding.is_not(None)).order_by(CHUNK.c.chunk_id))
    if filters:
        query = query.where(CHUNK.c.document_id.in_(filtered_documents(filters)))
    if ids is not None:
        query = query.where(CHUNK.c.chunk_id.in_(list(ids)))
    return [(int(r.chunk_id), r.embedding_model, bytes(r.embedding)) for r in conn.execute(query)]


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
