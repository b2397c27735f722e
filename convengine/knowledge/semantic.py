"""SEMANTIC intent classifiers: example phrases compared with the user's text by embedding.

Each served configuration version has its own index: the examples of its SEMANTIC rows are embedded
when the version is first served (vectors another version's index already holds are reused, not
embedded again), and a turn embeds only the user's text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import numpy as np
from langchain_core.embeddings import Embeddings

from convengine._internal.textmatch import TextMatcher
from convengine.knowledge.embeddings import normalised

BATCH = 64


class SemanticIndex:
    """Cached example embeddings for one embeddings model."""

    def __init__(self, embeddings: Embeddings) -> None:
        self.embeddings = embeddings
        self._vectors: dict[str, np.ndarray] = {}
        self._lock = asyncio.Lock()

    def missing(self, matchers: Iterable[TextMatcher]) -> list[str]:
        return sorted({e for m in matchers for e in m.examples} - self._vectors.keys())

    def prepare(self, matchers: Iterable[TextMatcher], reuse: Iterable[SemanticIndex] = ()) -> int:
        """Embed every example not cached yet (synchronously), taking the vectors ``reuse`` (indexes of
        the same model) already has; how many were embedded."""
        matchers = list(matchers)
        for other in reuse:
            for text in self.missing(matchers):
                vector = other._vectors.get(text)
                if vector is not None:
                    self._vectors[text] = vector
        texts = self.missing(matchers)
        for start in range(0, len(texts), BATCH):
            batch = texts[start:start + BATCH]
            self._store(batch, self.embeddings.embed_documents(batch))
        return len(texts)

    async def aprepare(self, matchers: Iterable[TextMatcher]) -> int:
        matchers = list(matchers)
        if not self.missing(matchers):
            return 0
        async with self._lock:
            texts = self.missing(matchers)
            for start in range(0, len(texts), BATCH):
                batch = texts[start:start + BATCH]
                self._store(batch, await self.embeddings.aembed_documents(batch))
            return len(texts)

    def _store(self, texts: list[str], vectors: list[list[float]]) -> None:
        matrix = normalised(np.asarray(vectors, dtype=np.float32))
        self._vectors.update(zip(texts, matrix, strict=True))

    def similarity(self, matcher: TextMatcher, query: np.ndarray) -> float | None:
        """The best cosine between ``query`` and the matcher's examples (None if none is cached)."""
        rows = [self._vectors[e] for e in matcher.examples if e in self._vectors]
        rows = [r for r in rows if r.shape == query.shape]
        if not rows:
            return None
        return float(np.max(np.stack(rows) @ normalised(query)))
