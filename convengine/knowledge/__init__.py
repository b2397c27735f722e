"""Knowledge bases: documents split into passages, searched lexically and by embeddings.

>>> kb = Knowledge.open("sqlite:///faq.db", embeddings=HashingEmbeddings())
>>> kb.ingest("faq", ["docs/faq"])                 # text, Markdown, HTML, PDF; again = only changes
>>> kb.ingest("faq", ["docs/faq"], reembed=True)   # after changing the embeddings model
>>> kb.search("faq", "how do I return an item")    # [SearchHit(score=..., source=..., text=...)]
>>> kb.search("faq", "refunds", filters={"lang": "en"}, fusion="rrf", mmr=0.5)
>>> kb.vector_index                                 # IndexInfo(kind='sqlite-vec', reason=...)
>>> kb.evaluate("faq", "questions.yaml", k=5)       # EvalReport: recall@k, MRR
>>> KnowledgeRetriever(knowledge=kb, knowledge_bases=["faq"])   # a LangChain BaseRetriever

The engine answers from them when no intent matches (``knowledge.fallback``) and the
``SEMANTIC`` intent classifier matches by embedding similarity (see docs/knowledge.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

import sqlalchemy as sa
from langchain_core.embeddings import Embeddings

from convengine.catalog.errors import ConfigError, ConvEngineError, ErrorCode
from convengine.db import create_sync_engine, parse_database_url, upgrade
from convengine.knowledge import store
from convengine.knowledge.adapters import KnowledgeRetriever
from convengine.knowledge.chunking import (
    Document,
    Found,
    Passage,
    Skipped,
    discover_files,
    read_document,
    split,
)
from convengine.knowledge.embeddings import HashingEmbeddings, model_name, pack
from convengine.knowledge.evaluation import EvalReport, LabelledQuestion, evaluate, load_questions
from convengine.knowledge.index import IndexInfo
from convengine.knowledge.search import Fusion, Retriever, SearchHit, SearchOptions, SearchSettings
from convengine.knowledge.store import Filters
from convengine.settings import KnowledgeIngestSettings

__all__ = ["Document", "EvalReport", "Filters", "HashingEmbeddings", "IndexInfo", "IngestReport", "Knowledge", "KnowledgeRetriever",
           "LabelledQuestion", "Retriever", "SearchHit", "SearchOptions", "SearchSettings", "Skipped"]

EMBED_BATCH = 64
NO_MODEL = "no embeddings model"
SPLITTER_VERSION = 2
"""Part of every stored document's fingerprint: a change in how text is cut re-cuts on the next ingest."""


def _embedded_text(passage: Passage, document: Document) -> str:
    title = passage.title or document.title
    return f"{title}\n{passage.text}" if title else passage.text


@dataclass(slots=True)
class IngestReport:
    """What an ingest did, document by document."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    reembedded: list[str] = field(default_factory=list)
    """Unchanged documents embedded again with this model (``reembed``), from their stored passages."""
    chunks: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    """What was found but not read: links leaving the folder, FIFOs, devices... with the reason."""
    failed: list[Skipped] = field(default_factory=list)
    """Documents that could not be read (too large, a bomb, not parseable), with the reason; what
    was stored for them before is kept."""

    def __str__(self) -> str:
        problems = "".join(f", {len(items)} {name}" for name, items in (("skipped", self.skipped),
                                                                        ("failed", self.failed)) if items)
        again = f", {len(self.reembedded)} re-embedded" if self.reembedded else ""
        return (f"{len(self.added)} added, {len(self.updated)} updated, {len(self.unchanged)} unchanged, "
                f"{len(self.removed)} removed{again}{problems} ({self.chunks} passages written)")

    @property
    def ok(self) -> bool:
        """Every document found was read (none in ``failed``)."""
        return not self.failed


class _Failed:
    """A document that could not be read (stands in for it in the stream ingest consumes)."""

    def __init__(self, problem: Skipped) -> None:
        self.problem = problem


class SearchKeywords(TypedDict, total=False):
    """The options :meth:`Knowledge.search` takes besides the query (see :class:`SearchOptions`)."""

    filters: Filters | None
    fusion: Fusion | None
    mmr: float | None
    dedupe: bool


class KnowledgeOptions(TypedDict, total=False):
    """The keywords :meth:`Knowledge.open` passes on to :class:`Knowledge`."""

    settings: SearchSettings | None
    retriever: Retriever | None
    max_chars: int | None
    limits: KnowledgeIngestSettings | None
    knowledge_bases: Mapping[str, Any] | None


class Knowledge:
    """Knowledge bases in one database (the engine's own, or any other)."""

    def __init__(self, engine: sa.Engine, *, embeddings: Embeddings | None = None,
                 settings: SearchSettings | None = None, retriever: Retriever | None = None,
                 max_chars: int | None = None, owns_engine: bool = False,
                 limits: KnowledgeIngestSettings | None = None,
                 knowledge_bases: Mapping[str, Any] | None = None) -> None:
        self.engine = engine
        self.limits = limits or KnowledgeIngestSettings()
        self.embeddings = embeddings
        self._owns_retriever = retriever is None
        self.retriever = retriever or Retriever(embeddings, settings, knowledge_bases)
        self.max_chars = max_chars or self.limits.chunk_size
        """Longest passage (``knowledge.ingest.chunk_size`` unless given)."""
        self.model = model_name(embeddings) if embeddings is not None else None
        self._owns_engine = owns_engine

    @classmethod
    def open(cls, url: str, *, embeddings: Embeddings | None = None, migrate: bool = True,
             **kwargs: Unpack[KnowledgeOptions]) -> Knowledge:
        engine = create_sync_engine(parse_database_url(url))
        if migrate:
            upgrade(engine)
        return cls(engine, embeddings=embeddings, owns_engine=True, **kwargs)

    def close(self) -> None:
        """Release the database connections (only those :meth:`open` created) and the vector index."""
        if self._owns_retriever:
            self.retriever.close()
        if self._owns_engine:
            self.engine.dispose()

    def ingest(self, kb: str, paths: Iterable[str | Path], *, description: str | None = None, prune: bool = False,
               progress: Callable[[str, str], None] | None = None, root: str | Path | None = None,
               reembed: bool = False) -> IngestReport:
        """Read every document under ``paths`` into ``kb``; unchanged documents are skipped, changed
        ones replaced. With ``prune``, documents of ``kb`` no longer found under ``paths`` are removed.
        ``progress(source, outcome)`` is called once per document.

        A document is named by its path relative to ``root`` when given, else to the folder given (a
        file given alone: by its name): the same folder ingested again by another path is the same
        documents. A document that cannot be read within :attr:`limits` is reported in ``failed`` (the
        others are still ingested); links leaving a folder and anything not a regular file are in
        ``skipped``. See :meth:`add_documents` for ``reembed``.

        Raises:
            ConfigError: a path does not exist (or lies outside ``root``), or ``kb`` holds vectors of
                another embeddings model and ``reembed`` is false.
        """
        files, skipped = discover_files([Path(p) for p in paths], Path(root) if root is not None else None)
        report = IngestReport(skipped=list(skipped))
        self._add(kb, (self._read(f) for f in files), report, description=description, prune=prune,
                  progress=progress, reembed=reembed)
        return report

    def _read(self, item: Found) -> Document | _Failed:
        try:
            return read_document(item, limits=self.limits)
        except (ConvEngineError, OSError, UnicodeError) as exc:
            message = exc.message if isinstance(exc, ConvEngineError) else str(exc)
            return _Failed(Skipped(item.source, message.removeprefix(f"{item.source}: ")))

    def add_text(self, kb: str, source: str, text: str, *, title: str | None = None,
                 metadata: dict[str, Any] | None = None) -> IngestReport:
        """Add (or replace) one document given as text."""
        return self.add_documents(kb, [Document(source, text, title, dict(metadata or {}))])

    def add_documents(self, kb: str, documents: Iterable[Document], *, description: str | None = None,
                      prune: bool = False, progress: Callable[[str, str], None] | None = None,
                      reembed: bool = False) -> IngestReport:
        """Add (or replace) documents, each identified by its ``source`` (your own stable id, as
        LangChain's indexing API takes one): the same id again replaces that document, or skips it
        when its text is unchanged.

        A base remembers the embeddings model of its passages. Adding with another model (or with
        none to a base that has vectors) is refused, naming both, unless ``reembed``: then every
        passage of the base is embedded again with this model first (from the stored text, so
        documents not given here are covered too) and listed in ``reembedded``.

        Raises:
            ConfigError: the base holds vectors of another model and ``reembed`` is false.
        """
        report = IngestReport()
        self._add(kb, documents, report, description=description, prune=prune, progress=progress, reembed=reembed)
        return report

    def _add(self, kb: str, documents: Iterable[Document | _Failed], report: IngestReport, *,
             description: str | None, prune: bool, progress: Callable[[str, str], None] | None,
             reembed: bool = False) -> None:
        with self.engine.begin() as conn:
            store.ensure_base(conn, kb, description)
            models = store.embedding_models(conn, kb)
        self._check_model(kb, models, reembed)
        if reembed and set(models) != {self.model}:
            self._reembed(kb, report)
        seen: list[str] = []
        for document in documents:
            if isinstance(document, _Failed):  # kept as it was: prune must not drop it
                seen.append(document.problem.source)
                report.failed.append(document.problem)
                outcome = "failed"
            else:
                seen.append(document.source)
                outcome = self._one(kb, document, report)
            if progress is not None:
                progress(seen[-1], outcome)
        if prune:
            with self.engine.begin() as conn:
                gone = sorted(set(store.sources(conn, kb)) - set(seen))
                store.delete_sources(conn, kb, gone)
                report.removed.extend(gone)
                if gone:
                    store.bump(conn, kb)

    def _check_model(self, kb: str, models: dict[str | None, int], reembed: bool) -> None:
        others = sorted(m or NO_MODEL for m in models if m != self.model)
        if not others or reembed:
            return
        now = self.model or NO_MODEL
        hint = "add reembed=True (CLI: --reembed) to embed every passage again with it" if self.model else \
            f"open it with {others[0]} to keep its vectors, or add reembed=True (CLI: --reembed) to drop them"
        raise ConfigError(f"knowledge base {kb!r} was embedded with {', '.join(others)}, not {now}: {hint}",
                          code=ErrorCode.CONFIG_INVALID)

    def _reembed(self, kb: str, report: IngestReport) -> None:
        """Every stored passage of ``kb`` embedded again with this model (lexical only without one)."""
        with self.engine.connect() as conn:
            stored = store.stored_documents(conn, kb)
        for document, content_hash, passages in stored:
            vectors = self._vectors([_embedded_text(p, document) for p in passages])
            with self.engine.begin() as conn:
                store.replace_document(conn, kb, document, passages, vectors, self.model, content_hash)
            report.reembedded.append(document.source)
        if stored:
            with self.engine.begin() as conn:
                store.bump(conn, kb)

    def _fingerprint(self, document: Document) -> str:
        """What an unchanged document has in common with its stored self: its text, and how it is cut."""
        limits = self.limits
        return hashlib.sha256(f"{document.content_hash}|{SPLITTER_VERSION}|{self.max_chars}|{limits.chunk_overlap}"
                              .encode()).hexdigest()

    def _one(self, kb: str, document: Document, report: IngestReport) -> str:
        fingerprint = self._fingerprint(document)
        with self.engine.connect() as conn:
            previous = store.stored_hash(conn, kb, document.source)
        if previous == fingerprint:
            report.unchanged.append(document.source)
            return "unchanged"
        passages = split(document.text, max_chars=self.max_chars, overlap=self.limits.chunk_overlap)
        vectors = self._vectors([_embedded_text(p, document) for p in passages])
        with self.engine.begin() as conn:
            store.replace_document(conn, kb, document, passages, vectors, self.model, fingerprint)
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

    def search(self, kb: str | Sequence[str] | None, query: str, k: int = 5, *, filters: Filters | None = None,
               fusion: Fusion | None = None, mmr: float | None = None, dedupe: bool = True) -> list[SearchHit]:
        """The ``k`` best passages for ``query`` in ``kb`` (a name, several, or None for all).

        ``filters``: document metadata the passages must have; ``fusion``: ``weighted`` or ``rrf``;
        ``mmr``: 0..1 to diversify (1 = relevance alone); ``dedupe``: drop repeated texts
        (see :class:`SearchOptions`)."""
        options = SearchOptions(filters=filters, fusion=fusion, mmr=mmr, dedupe=dedupe)
        kbs = [kb] if isinstance(kb, str) else (list(kb) if kb is not None else None)
        vector = self.retriever.embed(query)
        with self.engine.connect() as conn:
            return self.retriever.search(conn, kbs, query, k, vector, options)

    def evaluate(self, kb: str | Sequence[str] | None, questions: str | Path | Sequence[LabelledQuestion],
                 k: int = 5, **options: Unpack[SearchKeywords]) -> EvalReport:
        """recall@k and MRR of searches of ``kb`` on labelled questions (a YAML/JSONL file or a list);
        ``options`` are :meth:`search`'s (filters, fusion, mmr, dedupe)."""
        labelled = load_questions(questions) if isinstance(questions, (str, Path)) else list(questions)
        return evaluate(lambda question, n: self.search(kb, question, n, **options), labelled, k)

    @property
    def vector_index(self) -> IndexInfo:
        """Which vector index searches use here (``sqlite-vec`` or ``brute-force``) and why."""
        with self.engine.connect() as conn:
            return self.retriever.index_info(conn)

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
