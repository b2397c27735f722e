"""Hybrid retrieval: lexical candidates and vector candidates, fused into one ranked list.

Scores are absolute, so a threshold means the same on every query and both backends:

- ``lexical``: the share of the query's content words (stop words and question frames dropped, Snowball stems) that
  the passage contains, 0..1. The backend's full-text rank only picks and orders candidates.
- ``vector``: the cosine similarity of the query and passage embeddings, clipped to 0..1.
- ``score``: ``(lexical_weight * lexical + vector_weight * vector) / (sum of weights)`` when the
  base has embeddings from the same model as the query, else ``lexical`` alone.

Passages are ranked by ``score`` (``fusion: weighted``) or by reciprocal-rank fusion of the two
legs' ranks (``fusion: rrf``, then ``fused`` holds the RRF value); ``score`` stays the absolute one
either way. Then optionally de-duplicated (same text) and re-ranked for diversity (MMR). The vector
leg runs on the database's vector index (:mod:`convengine.knowledge.index`).
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any, Literal

import numpy as np
import snowballstemmer
import sqlalchemy as sa
from langchain_core.embeddings import Embeddings

from convengine.catalog.errors import ErrorCode, InvalidInputError
from convengine.knowledge import store
from convengine.knowledge.embeddings import model_name, normalised
from convengine.knowledge.external import ExternalBase, Found, external_bases, search_external
from convengine.knowledge.index import IndexChoice, IndexInfo, VectorIndex, choose, stack, top

MAX_QUERY_TOKENS = 32
MAX_TOKEN_CHARS = 64
_WORD = re.compile(r"\w+", re.UNICODE)
Fusion = Literal["weighted", "rrf"]
STOP_WORDS = frozenset(
    [
        "a", "about", "am", "an", "and", "any", "anything", "are", "as", "at", "be", "been", "but", "by", "can",
        "could", "did", "do", "does", "for", "from", "had", "has", "have", "how", "i", "if", "in", "into", "is",
        "it", "its", "me", "my", "no", "not", "of", "on", "or", "our", "please", "should", "so", "some",
        "something", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to",
        "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "would", "you",
        "your",
        # the frame of a question, not its topic: "how long does it take", "I want to know", "tell me"
        "get", "go", "know", "need", "take", "tell", "want",
    ]
)
_QUESTION_FRAME = re.compile(r"\bhow\s+(?:long|much|many|often|soon|far)\b", re.IGNORECASE)
"""``how long``/``how much``...: the kind of answer asked for (a duration, a price), never the topic."""
_STEMMER = snowballstemmer.stemmer("english")
_STEMMER_LOCK = threading.Lock()  # a Snowball stemmer object keeps state while it stems
logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One retrieved passage with every score that ranked it."""

    kb_name: str
    source: str
    title: str | None
    position: int
    text: str
    score: float
    lexical: float
    vector: float | None
    lexical_rank: int | None
    vector_rank: int | None
    chunk_id: int
    metadata: dict[str, Any]
    fused: float | None = None
    """The reciprocal-rank-fusion value that ordered this hit (``fusion: rrf`` only)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """How candidates are gathered and scored (``knowledge.*`` settings)."""

    lexical_weight: float = 0.5
    vector_weight: float = 0.5
    candidates: int = 50
    fusion: Fusion = "weighted"
    rrf_k: int = 60
    vector_index: IndexChoice = "auto"


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """What one search asks for beyond the query (every field optional).

    ``filters``: document metadata the passages must have (``{"lang": "en"}``, a list for any of).
    ``fusion``: ``weighted`` or ``rrf`` (default: the ``knowledge.fusion`` setting).
    ``mmr``: maximal marginal relevance, 0..1: 1 ranks by relevance alone, lower values trade
    relevance for passages unlike those already picked (None: off).
    ``dedupe``: drop a passage whose text (case and spacing aside) an earlier one already has."""

    filters: store.Filters | None = None
    fusion: Fusion | None = None
    mmr: float | None = None
    dedupe: bool = True

    def __post_init__(self) -> None:
        if self.mmr is not None and not 0.0 <= self.mmr <= 1.0:
            raise InvalidInputError(f"mmr must be between 0 and 1, not {self.mmr}", code=ErrorCode.INVALID_INPUT)
        if self.fusion not in (None, "weighted", "rrf"):
            raise InvalidInputError(f"fusion must be weighted or rrf, not {self.fusion!r}",
                                    code=ErrorCode.INVALID_INPUT)


@dataclass(frozen=True, slots=True)
class ModelMismatch:
    """A base searched with a model other than the one that embedded it: its passages are searched by
    full text only (their vectors are never compared with the query's)."""

    kb_name: str
    base_model: str | None
    """The model that embedded the base's passages (None: none of them has a vector)."""
    query_model: str

    @property
    def message(self) -> str:
        held = f"was embedded with {self.base_model}" if self.base_model else "holds no vectors"
        return (f"knowledge base {self.kb_name!r} {held}, not {self.query_model}: it is searched by full text "
                f"only; ingest it again with reembed=True (CLI: --reembed) to search it with {self.query_model}")

    def to_dict(self) -> dict[str, Any]:
        return {"kb": self.kb_name, "baseModel": self.base_model, "queryModel": self.query_model,
                "message": self.message}


def query_tokens(text: str) -> list[str]:
    """The query's distinct words, lower-cased, at most 32 of at most 64 characters (without the
    modifier of ``how long``, ``how much``...)."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(_QUESTION_FRAME.sub("how", text.lower())):
        if len(word) <= MAX_TOKEN_CHARS:
            seen.setdefault(word, None)
        if len(seen) >= MAX_QUERY_TOKENS:
            break
    return list(seen)


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """The English Snowball (Porter 2) stem of a lower-case word: ``takes``/``take``, ``refunds``/``refund``."""
    with _STEMMER_LOCK:
        return str(_STEMMER.stemWord(word))


def coverage(query: Sequence[str], text: str) -> float:
    """The share of the query's content words found in ``text`` (0..1)."""
    content = [t for t in query if t not in STOP_WORDS] or list(query)
    if not content:
        return 0.0
    words = {stem(w) for w in set(_WORD.findall(text.lower()))}
    return sum(1 for t in content if stem(t) in words) / len(content)


def words(text: str) -> set[str]:
    return {stem(w) for w in _WORD.findall(text.lower())}


def dedupe(hits: Sequence[SearchHit]) -> list[SearchHit]:
    """``hits`` without a passage whose text an earlier one has (case and spacing aside)."""
    seen: set[str] = set()
    kept = []
    for hit in hits:
        key = " ".join(_WORD.findall(hit.text.lower()))
        if key not in seen:
            seen.add(key)
            kept.append(hit)
    return kept


def mmr(hits: Sequence[SearchHit], k: int, weight: float, vectors: dict[int, np.ndarray]) -> list[SearchHit]:
    """``k`` of ``hits`` (best first) picked by maximal marginal relevance: ``weight * relevance -
    (1 - weight) * similarity to the closest passage already picked``. Similarity is the cosine of
    the passages' vectors when both have one, else the overlap of their words (Jaccard)."""
    if not hits:
        return []
    best = max(_relevance(h) for h in hits) or 1.0
    bags = {h.chunk_id: words(h.text) for h in hits}

    def similarity(a: SearchHit, b: SearchHit) -> float:
        va, vb = vectors.get(a.chunk_id), vectors.get(b.chunk_id)
        if va is not None and vb is not None and va.shape == vb.shape:
            return float(va @ vb)
        union = bags[a.chunk_id] | bags[b.chunk_id]
        return len(bags[a.chunk_id] & bags[b.chunk_id]) / len(union) if union else 1.0

    left, picked = list(hits), list[SearchHit]()
    while left and len(picked) < k:
        chosen = max(left, key=lambda h: weight * _relevance(h) / best
                     - (1 - weight) * max((similarity(h, p) for p in picked), default=0.0))
        picked.append(chosen)
        left.remove(chosen)
    return picked


def _relevance(hit: SearchHit) -> float:
    return hit.fused if hit.fused is not None else hit.score


class Retriever:
    """Searches knowledge bases; one per engine (it keeps one vector index per database)."""

    def __init__(self, embeddings: Embeddings | None, settings: SearchSettings | None = None,
                 knowledge_bases: Mapping[str, Any] | None = None) -> None:
        self.embeddings = embeddings
        self.settings = settings or SearchSettings()
        self.external: dict[str, ExternalBase] = external_bases(knowledge_bases)
        """LangChain retrievers and vector stores searched as bases of these names (they shadow stored
        bases of the same name)."""
        self._model = model_name(embeddings) if embeddings is not None else None
        self._indexes: dict[str, VectorIndex] = {}
        self._lock = threading.Lock()
        self._base_models: dict[tuple[str, str], tuple[str, frozenset[str | None]]] = {}
        """(database, base) -> (the base's stamp, the models its passages were embedded with)."""
        self._warned: set[tuple[str, str, str | None]] = set()

    def embed(self, text: str) -> np.ndarray | None:
        if self.embeddings is None:
            return None
        return np.asarray(self.embeddings.embed_query(text), dtype=np.float32)

    async def aembed(self, text: str) -> np.ndarray | None:
        if self.embeddings is None:
            return None
        return np.asarray(await self.embeddings.aembed_query(text), dtype=np.float32)

    def index(self, conn: sa.Connection) -> VectorIndex:
        """The vector index of ``conn``'s database (chosen on first use, see :attr:`SearchSettings.vector_index`)."""
        key = conn.engine.url.render_as_string(hide_password=True)
        with self._lock:
            index = self._indexes.get(key)
            if index is None:
                index = self._indexes[key] = choose(conn, self.settings.vector_index)
            return index

    def index_info(self, conn: sa.Connection) -> IndexInfo:
        """Which vector index searches of ``conn``'s database use, and why."""
        return self.index(conn).info

    def close(self) -> None:
        with self._lock:
            indexes, self._indexes = list(self._indexes.values()), {}
        for index in indexes:
            index.close()

    def mismatches(self, conn: sa.Connection, stamps: Mapping[str, str]) -> list[ModelMismatch]:
        """The bases of ``stamps`` whose passages this retriever's model did not embed (each logged once
        per process). Their model is read again only after the base changed."""
        if self._model is None:
            return []
        database = conn.engine.url.render_as_string(hide_password=True)
        found = []
        for kb, stamp in sorted(stamps.items()):
            cached = self._base_models.get((database, kb))
            if cached is None or cached[0] != stamp:
                cached = (stamp, frozenset(store.embedding_models(conn, kb)))
                self._base_models[(database, kb)] = cached
            models = cached[1]
            if not models or self._model in models:
                continue  # an empty base, or one this model embedded
            embedded = sorted(m for m in models if m)
            mismatch = ModelMismatch(kb, ", ".join(embedded) or None, self._model)
            found.append(mismatch)
            if (key := (database, kb, mismatch.base_model)) not in self._warned:
                self._warned.add(key)
                logger.warning("%s", mismatch.message)
        return found

    def search(self, conn: sa.Connection, kbs: Sequence[str] | None, query: str, k: int,
               query_vector: np.ndarray | None, options: SearchOptions | None = None,
               mismatches: list[ModelMismatch] | None = None) -> list[SearchHit]:
        """The ``k`` best passages of ``kbs`` (all bases when None) for ``query``. A base embedded by
        another model than this retriever's is searched by full text only and added to ``mismatches``."""
        options = options or SearchOptions()
        stamps = {kb: stamp for kb, stamp in store.stamps(conn, kbs).items() if kb not in self.external}
        mismatched = self.mismatches(conn, stamps)
        if mismatches is not None:
            mismatches.extend(mismatched)
        names = sorted(stamps)
        tokens = query_tokens(query)
        external = [base for name, base in sorted(self.external.items()) if kbs is None or name in kbs]
        lexical = store.lexical(conn, names, tokens, self.settings.candidates, options.filters)
        vector = self._vector_candidates(conn, stamps, query_vector, options.filters)
        ids = list(dict.fromkeys([cid for cid, _ in lexical] + [cid for cid, _ in vector]))
        stored = store.chunks(conn, ids)
        lexical_rank = {cid: i + 1 for i, (cid, _) in enumerate(lexical)}
        vector_rank = {cid: i + 1 for i, (cid, _) in enumerate(vector)}
        cosines = dict(vector)
        hits = [self._hit(stored[cid], tokens, cosines.get(cid) if vector else None, lexical_rank.get(cid),
                          vector_rank.get(cid)) for cid in ids if cid in stored]
        hits += self._external_hits(search_external(external, query, self.settings.candidates, options.filters),
                                    tokens, query_vector)
        if (options.fusion or self.settings.fusion) == "rrf":
            hits = [replace(h, fused=round(self._rrf(h), 6)) for h in hits]
        hits.sort(key=lambda h: (-_relevance(h), h.lexical_rank or 10**9, h.chunk_id))
        if options.dedupe:
            hits = dedupe(hits)
        if options.mmr is not None:
            return mmr(hits, k, options.mmr, self._passage_vectors(conn, names, hits, query_vector))
        return hits[:k]

    def _rrf(self, hit: SearchHit) -> float:
        return sum(1.0 / (self.settings.rrf_k + rank) for rank in (hit.lexical_rank, hit.vector_rank) if rank)

    def _hit(self, chunk: store.StoredChunk, tokens: list[str], cosine: float | None, lexical_rank: int | None,
             vector_rank: int | None) -> SearchHit:
        lexical = coverage(tokens, f"{chunk.title or ''} {chunk.text}")
        if cosine is None:
            score = lexical
        else:
            w_l, w_v = self.settings.lexical_weight, self.settings.vector_weight
            score = (w_l * lexical + w_v * cosine) / ((w_l + w_v) or 1.0)
        return SearchHit(chunk.kb_name, chunk.source, chunk.title or chunk.document_title, chunk.position,
                         chunk.text, round(score, 6), round(lexical, 6), None if cosine is None else round(cosine, 6),
                         lexical_rank, vector_rank, chunk.chunk_id, chunk.metadata)

    def _external_hits(self, found: Sequence[Found], tokens: list[str],
                       query_vector: np.ndarray | None) -> list[SearchHit]:
        """Hits for what registered bases returned: ranked in their own order (their ``vector_rank``);
        their ``chunk_id`` is negative, unique in this search. A document its base gave no relevance for
        gets the cosine of its text with the query (with this retriever's embeddings model, if any)."""
        ids = itertools.count(-1, -1)
        hits = []
        unscored = [i for i, item in enumerate(found) if item.relevance is None]
        cosines: dict[int, float] = {}
        if unscored and query_vector is not None and self.embeddings is not None:
            matrix = normalised(np.asarray(self.embeddings.embed_documents(
                [found[i].document.page_content for i in unscored]), dtype=np.float32))
            if matrix.shape[1:] == query_vector.shape:
                cosines = dict(zip(unscored, np.clip(np.nan_to_num(matrix @ normalised(query_vector)), 0.0, 1.0)
                                   .tolist(), strict=True))
        for position, item in enumerate(found):
            doc = item.document
            source = str(doc.metadata.get("source") or doc.id or f"{item.kb_name}#{item.rank}")
            title = doc.metadata.get("title")
            chunk = store.StoredChunk(next(ids), item.kb_name, source, None, item.rank - 1,
                                      title if isinstance(title, str) else None, doc.page_content, dict(doc.metadata))
            relevance = item.relevance if item.relevance is not None else cosines.get(position)
            hits.append(self._hit(chunk, tokens, relevance, None, item.rank))
        return hits

    def _vector_candidates(self, conn: sa.Connection, stamps: dict[str, str], query_vector: np.ndarray | None,
                           filters: store.Filters | None) -> list[tuple[int, float]]:
        if query_vector is None or not stamps or self._model is None or not np.any(query_vector):
            return []  # a zero query (no words) is like no other vector
        query = normalised(query_vector)
        if filters:  # the filter narrows first; the passages left are scored exactly
            ids, matrix = stack([(cid, data) for cid, model, data in store.vectors(conn, sorted(stamps), filters)
                                 if model == self._model])
            return top(ids, matrix @ query, self.settings.candidates) if matrix.shape[1:] == query.shape else []
        return self.index(conn).nearest(conn, stamps, self._model, query, self.settings.candidates)

    def _passage_vectors(self, conn: sa.Connection, kbs: Sequence[str], hits: Sequence[SearchHit],
                         query_vector: np.ndarray | None) -> dict[int, np.ndarray]:
        if query_vector is None or self._model is None or not hits:
            return {}
        rows = store.vectors(conn, kbs, ids=[h.chunk_id for h in hits])
        ids, matrix = stack([(cid, data) for cid, model, data in rows if model == self._model])
        return {int(cid): row for cid, row in zip(ids, matrix, strict=True)}
