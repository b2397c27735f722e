"""convengine knowledge as a LangChain ``BaseRetriever`` (the other way round, a LangChain retriever or
vector store searched as a knowledge base, is :mod:`convengine.knowledge.external`).

>>> chain = KnowledgeRetriever(knowledge=kb, knowledge_bases=["faq"], k=3) | format_docs | prompt | llm
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document as LangChainDocument
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from convengine.knowledge.search import Fusion, SearchHit
from convengine.knowledge.store import Filters


class Searchable(Protocol):
    """What the retriever needs of :class:`~convengine.knowledge.Knowledge`."""

    def search(self, kb: str | Sequence[str] | None, query: str, k: int = 5, *, filters: Filters | None = None,
               fusion: Fusion | None = None, mmr: float | None = None, dedupe: bool = True) -> list[SearchHit]: ...


def as_document(hit: SearchHit) -> LangChainDocument:
    """A search hit as a LangChain document (the text, and every score and source field as metadata)."""
    metadata = {**hit.metadata, "kb_name": hit.kb_name, "source": hit.source, "title": hit.title,
                "position": hit.position, "score": hit.score, "lexical": hit.lexical, "vector": hit.vector,
                "chunk_id": hit.chunk_id}
    return LangChainDocument(page_content=hit.text, metadata=metadata)


class KnowledgeRetriever(BaseRetriever):
    """convengine knowledge bases as a LangChain retriever (usable in any chain or agent).

    Documents come best first with ``score``, ``lexical``, ``vector``, ``source``, ``kb_name`` in their
    metadata; passages under ``min_score`` are left out."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    knowledge: Any
    """The :class:`~convengine.knowledge.Knowledge` to search (``Knowledge.open(...)`` or ``engine.knowledge``)."""
    knowledge_bases: list[str] | None = None
    """Bases to search (None: every one)."""
    k: int = Field(4, ge=1, le=100)
    min_score: float = Field(0.0, ge=0.0, le=1.0)
    filters: dict[str, Any] | None = None
    fusion: str | None = None
    mmr: float | None = None
    dedupe: bool = True

    def _search(self, query: str) -> list[LangChainDocument]:
        knowledge: Searchable = self.knowledge
        fusion: Fusion | None = self.fusion  # type: ignore[assignment]  # checked by SearchOptions
        hits = knowledge.search(self.knowledge_bases, query, self.k, filters=self.filters, fusion=fusion,
                                mmr=self.mmr, dedupe=self.dedupe)
        return [as_document(h) for h in hits if h.score >= self.min_score]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                ) -> list[LangChainDocument]:
        return self._search(query)

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
                                       ) -> list[LangChainDocument]:
        return await asyncio.to_thread(self._search, query)
