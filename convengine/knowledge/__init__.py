"""Knowledge bases: documents split into passages, searched lexically and by embeddings.

>>> kb = Knowledge.open("sqlite:///faq.db", embeddings=HashingEmbeddings())
>>> kb.ingest("faq", ["docs/faq"])                 # text, Markdown, HTML, PDF; again = only changes
>>> kb.search("faq", "how do I return an item")    # [SearchHit(score=..., source=..., text=...)]

The engine answers from them when no intent matches (``knowledge.fallback``) and the
``SEMANTIC`` intent classifier matches by embedding similarity (see docs/knowledge.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from langchain_core.embeddings import Embeddings

from convengine.db import create_sync_engine, parse_database_url, upgrade
from convengine.knowledge import store
from convengine.knowledge.chunking import Document, discover, read_document, split
from convengine.knowledge.embeddings import HashingEmbeddings, model_name, pack
from convengine.knowledge.search import Retriever, SearchHit, SearchSettings

__all__ = ["Document", "HashingEmbeddings", "IngestReport", "Knowledge", "Retriever", "SearchHit", "SearchSettings"]

EMBED_BATCH = 64


@dataclass(slots=True)
class IngestReport:
    """What an ingest did, document by document."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    chunks: int = 0

    def __str__(self) -> str:
        return (f"{len(self.added)} added, {len(self.updated)} updated, {len(self.unchanged)} unchanged, "
                f"{len(self.removed)} removed ({self.chunks} passages written)")


class Knowledge:
    """Knowledge bases in one database (the engine's own, or any other)."""

    def __init__(self, engine: sa.Engine, *, embeddings: Embeddings | None = None,
                 settings: SearchSettings | None = None, retriever: Retriever | None = None,
                 max_chars: int = 800, owns_engine: bool = False) -> None:
        self.engine = engine
        self.embeddings = embeddings
        self.retriever = retriever or Retriever(embeddings, settings)
        self.max_chars = max_chars
        self._owns_engine = owns_engine

    @classmethod
    def open(cls, url: str, *, embeddings: Embeddings | None = None, migrate: bool = True,
             **kwargs: Any) -> Knowledge:
        engine = create_sync_engine(parse_database_url(url))
        if migrate:
            upgrade(engine)
        return cls(engine, embeddings=embeddings, owns_engine=True, **kwargs)

    def close(self) -> None:
        """Release the database connections (only those :meth:`open` created)."""
        if self._owns_engine:
            self.engine.dispose()

    def ingest(self, kb: str, paths: Iterable[str | Path], *, description: str | None = None, prune: bool = False,
               progress: Callable[[str, str], None] | None = None) -> IngestReport:
        """Read every document under ``paths`` into ``kb``; unchanged documents are skipped, changed
        ones replaced. With ``prune``, documents of ``kb`` no longer found under ``paths`` are removed.
        ``progress(source, outcome)`` is called once per document."""
        files = discover([Path(p) for p in paths])
        return self.add_documents(kb, (read_document(f, f.as_posix()) for f in files), description=description,
                                  prune=prune, progress=progress)

    def add_text(self, kb: str, source: str, text: str, *, title: str | None = None,
                 metadata: dict[str, Any] | None = None) -> IngestReport:
        """Add (or replace) one document given as text."""
        return self.add_documents(kb, [Document(source, text, title, dict(metadata or {}))])

    def add_documents(self, kb: str, documents: Iterable[Document], *, description: str | None = None,
                      prune: bool = False, progress: Callable[[str, str], None] | None = None) -> IngestReport:
        report = IngestReport()
        with self.engine.begin() as conn:
            store.ensure_base(conn, kb, description)
        seen: list[str] = []
        for document in documents:
            seen.append(document.source)
            outcome = self._one(kb, document, report)
            if progress is not None:
                progress(document.source, outcome)
        if prune:
            with self.engine.begin() as conn:
                gone = sorted(set(store.sources(conn, kb)) - set(seen))
                store.delete_sources(conn, kb, gone)
                report.removed.extend(gone)
                if gone:
                    store.bump(conn, kb)
        return report

    def _one(self, kb: str, document: Document, report: IngestReport) -> str:
        with self.engine.connect() as conn:
            previous = store.stored_hash(conn, kb, document.source)
        if previous == document.content_hash:
            report.unchanged.append(document.source)
            return "unchanged"
        passages = split(document.text, max_chars=self.max_chars)
        vectors = self._vectors([p.text if not p.title else f"{p.title}\n{p.text}" for p in passages])
        with self.engine.begin() as conn:
            store.replace_document(conn, kb, document, passages, vectors,
                                   model_name(self.embeddings) if self.embeddings is not None else None)
            store.bump(conn, kb)
        (report.added if previous is None else report.updated).append(document.source)
        report.chunks += len(passages)
        return "added" if previous is None else "updated"

    def _vectors(self, texts: Sequence[str]) -> list[bytes | None]:
        if self.embeddings is None:
            return [None] * len(texts)
        out: list[bytes | None] = []
        for start in range(0, len(texts), EMBED_BATCH):
            out.extend(pack(v) for v in self.embeddings.embed_documents(list(texts[start:start + EMBED_BATCH])))
        return out

    def search(self, kb: str | Sequence[str] | None, query: str, k: int = 5) -> list[SearchHit]:
        """The ``k`` best passages for ``query`` in ``kb`` (a name, several, or None for all)."""
        kbs = [kb] if isinstance(kb, str) else (list(kb) if kb is not None else None)
        vector = self.retriever.embed(query)
        with self.engine.connect() as conn:
            return self.retriever.search(conn, kbs, query, k, vector)

    def list(self) -> list[dict[str, Any]]:
        """Every base with its description, revision, document and passage counts."""
        with self.engine.connect() as conn:
            return store.list_bases(conn)

    def delete(self, kb: str, sources: Sequence[str] | None = None) -> int:
        """Delete documents of ``kb`` (or the whole base when ``sources`` is None); how many went."""
        with self.engine.begin() as conn:
            if sources is None:
                count = len(store.sources(conn, kb))
                store.delete_base(conn, kb)
                return count
            count = store.delete_sources(conn, kb, sources)
            store.bump(conn, kb)
            return count
