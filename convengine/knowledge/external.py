"""Any LangChain retriever or vector store searched as a convengine knowledge base, registered by the
host in Python (trusted code) under a name, as tools and tasks are:

>>> Engine.open(url, pack=..., knowledge_bases={"wiki": my_vector_store})   # or a BaseRetriever
>>> Knowledge.open(url, knowledge_bases={"wiki": my_retriever}).search("wiki", "...")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document as LangChainDocument
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore

from convengine.catalog.errors import ErrorCode, InvalidInputError
from convengine.knowledge import store

SCORE_KEYS = ("relevance_score", "score")
"""Metadata keys a retriever's documents may carry their own 0..1 relevance in."""


@dataclass(frozen=True, slots=True)
class Found:
    """One document a registered base returned: its rank there and its 0..1 relevance when given."""

    kb_name: str
    document: LangChainDocument
    rank: int
    relevance: float | None


class ExternalBase:
    """A LangChain retriever or vector store searched under a knowledge-base name.

    Its documents are scored like stored passages: ``lexical`` is computed on their text; ``vector`` is
    the store's own relevance (``similarity_search_with_relevance_scores``) or a 0..1 ``relevance_score``
    / ``score`` the retriever put in their metadata, else the cosine of the query and the document's text
    with the searching engine's embeddings model, else None (then ``score`` is ``lexical``)."""

    def __init__(self, name: str, source: BaseRetriever | VectorStore) -> None:
        if not isinstance(source, (BaseRetriever, VectorStore)):
            raise InvalidInputError(f"knowledge base {name!r}: {type(source).__name__} is neither a LangChain "
                                    "BaseRetriever nor a VectorStore", code=ErrorCode.INVALID_INPUT)
        self.name = store.check_name(name)
        self.source = source

    def documents(self, query: str, k: int) -> list[tuple[LangChainDocument, float | None]]:
        """The source's documents for ``query``, best first, with a 0..1 relevance when it gives one."""
        if isinstance(self.source, VectorStore):
            try:
                pairs = self.source.similarity_search_with_relevance_scores(query, k=k)
                return [(doc, _unit(score)) for doc, score in pairs]
            except NotImplementedError:
                return [(doc, None) for doc in self.source.similarity_search(query, k=k)]
        docs = self.source.invoke(query)[:k]
        return [(doc, next((_unit(doc.metadata[key]) for key in SCORE_KEYS
                            if isinstance(doc.metadata.get(key), (int, float))), None)) for doc in docs]


def _unit(value: float) -> float:
    return float(max(0.0, min(1.0, value)))


def external_bases(sources: Mapping[str, BaseRetriever | VectorStore] | None) -> dict[str, ExternalBase]:
    return {name: ExternalBase(name, source) for name, source in (sources or {}).items()}


def matches(metadata: Mapping[str, Any], filters: store.Filters | None) -> bool:
    """Whether a document's metadata has every filter value (any of a list's)."""
    for key, wanted in (filters or {}).items():
        values = list(wanted) if isinstance(wanted, (list, tuple, set, frozenset)) else [wanted]
        if metadata.get(key) not in values:
            return False
    return True


def search_external(bases: Sequence[ExternalBase], query: str, n: int, filters: store.Filters | None) -> list[Found]:
    """What each of ``bases`` returns for ``query`` (at most ``n`` each) whose metadata passes ``filters``."""
    found: list[Found] = []
    for base in bases:
        kept = [(doc, rel) for doc, rel in base.documents(query, n) if matches(doc.metadata, filters)]
        found.extend(Found(base.name, doc, rank, rel) for rank, (doc, rel) in enumerate(kept, start=1))
    return found
