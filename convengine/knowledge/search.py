"""Hybrid retrieval: lexical candidates and vector candidates, fused into one scored list.

Scores are absolute, so a threshold means the same on every query and both backends:

- ``lexical``: the share of the query's content words (stop words and question frames dropped, Snowball stems) that
  the passage contains, 0..1. The backend's full-text rank only picks and orders candidates.
- ``vector``: the cosine similarity of the query and passage embeddings, clipped to 0..1.
- ``score``: ``(lexical_weight * lexical + vector_weight * vector) / (sum of weights)`` when the
  base has embeddings from the same model as the query, else ``lexical`` alone.

Vectors of a base are loaded once into a matrix and kept until the base's revision changes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import snowballstemmer
import sqlalchemy as sa
from langchain_core.embeddings import Embeddings

from convengine.knowledge import store
from convengine.knowledge.embeddings import model_name, normalised, unpack

MAX_QUERY_TOKENS = 32
MAX_TOKEN_CHARS = 64
_WORD = re.compile(r"\w+", re.UNICODE)
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """How candidates are gathered and scored (``knowledge.*`` settings)."""

    lexical_weight: float = 0.5
    vector_weight: float = 0.5
    candidates: int = 50


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


class Retriever:
    """Searches knowledge bases; one per engine (it caches vector matrices per base)."""

    def __init__(self, embeddings: Embeddings | None, settings: SearchSettings | None = None) -> None:
        self.embeddings = embeddings
        self.settings = settings or SearchSettings()
        self._model = model_name(embeddings) if embeddings is not None else None
        self._cache: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    def embed(self, text: str) -> np.ndarray | None:
        if self.embeddings is None:
            return None
        return np.asarray(self.embeddings.embed_query(text), dtype=np.float32)

    async def aembed(self, text: str) -> np.ndarray | None:
        if self.embeddings is None:
            return None
        return np.asarray(await self.embeddings.aembed_query(text), dtype=np.float32)

    def search(self, conn: sa.Connection, kbs: Sequence[str] | None, query: str, k: int,
               query_vector: np.ndarray | None) -> list[SearchHit]:
        """The ``k`` best passages of ``kbs`` (all bases when None) for ``query``."""
        revisions = store.revisions(conn, kbs)
        names = sorted(revisions)
        tokens = query_tokens(query)
        lexical = store.lexical(conn, names, tokens, self.settings.candidates)
        vector = self._vector_candidates(conn, revisions, query_vector)
        ids = list(dict.fromkeys([cid for cid, _ in lexical] + [cid for cid, _ in vector]))
        stored = store.chunks(conn, ids)
        lexical_rank = {cid: i + 1 for i, (cid, _) in enumerate(lexical)}
        vector_rank = {cid: i + 1 for i, (cid, _) in enumerate(vector)}
        cosines = dict(vector)
        hits = [self._hit(stored[cid], tokens, cosines.get(cid) if vector else None, lexical_rank.get(cid),
                          vector_rank.get(cid)) for cid in ids if cid in stored]
        hits.sort(key=lambda h: (-h.score, h.lexical_rank or 10**9, h.chunk_id))
        return hits[:k]

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

    def _vector_candidates(self, conn: sa.Connection, revisions: dict[str, int],
                           query_vector: np.ndarray | None) -> list[tuple[int, float]]:
        if query_vector is None or not revisions:
            return []
        parts = [self._matrix(conn, kb, revision) for kb, revision in sorted(revisions.items())]
        parts = [(ids, m) for ids, m in parts if len(ids) and m.shape[1] == query_vector.shape[0]]
        if not parts:
            return []
        query = normalised(query_vector)
        ids = np.concatenate([p[0] for p in parts])
        cosines = np.concatenate([m @ query for _, m in parts])  # no copy of the matrices
        n = min(self.settings.candidates, len(cosines))
        best = np.argpartition(-cosines, n - 1)[:n]
        top = best[np.argsort(-cosines[best], kind="stable")]
        return [(int(ids[i]), float(max(0.0, min(1.0, cosines[i])))) for i in top]

    def _matrix(self, conn: sa.Connection, kb: str, revision: int) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            cached = self._cache.get(kb)
        if cached is not None and cached[0] == revision:
            return cached[1], cached[2]
        rows = [(cid, data) for cid, model, data in store.vectors(conn, [kb]) if model == self._model]
        width = max((len(d) for _, d in rows), default=0) // 4
        rows = [(cid, d) for cid, d in rows if len(d) // 4 == width]
        ids = np.asarray([cid for cid, _ in rows], dtype=np.int64)
        matrix = normalised(np.stack([unpack(d) for _, d in rows])) if rows else np.zeros((0, 0), np.float32)
        with self._lock:
            self._cache[kb] = (revision, ids, matrix)
        return ids, matrix
