"""Embeddings: packing vectors for storage, and an offline model that needs no download.

Any LangChain :class:`~langchain_core.embeddings.Embeddings` works for knowledge bases and
semantic classifiers. :class:`HashingEmbeddings` is a deterministic one built from word and
character n-gram hashes: texts sharing words and word pieces are close, nothing is learned. It
is what tests, examples and offline runs use, as :class:`~convengine.ScriptedLLM` is for LLMs.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
from langchain_core.embeddings import Embeddings

_WORD = re.compile(r"\w+", re.UNICODE)


def pack(vector: list[float] | np.ndarray) -> bytes:
    """A vector as little-endian float32 bytes (how ce_knowledge_chunk.embedding stores it)."""
    return np.asarray(vector, dtype="<f4").tobytes()


def unpack(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<f4")


def normalised(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), so a dot product is a cosine."""
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def model_name(embeddings: Embeddings) -> str:
    """How an embeddings model is named in the store (its class and model, when it has one)."""
    model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
    name = type(embeddings).__name__
    return f"{name}:{model}" if model else name


class HashingEmbeddings(Embeddings):
    """Deterministic bag of hashed words and character trigrams, L2-normalised.

    Args:
        dimensions: vector length (more means fewer hash collisions).
    """

    def __init__(self, dimensions: int = 384) -> None:
        self.dimensions = dimensions
        self.model = f"hashing-{dimensions}"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)

    def _embed(self, text: str) -> list[float]:
        vector = np.zeros(self.dimensions, dtype=np.float32)
        for feature, weight in _features(text):
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "little") % self.dimensions
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[index] += sign * weight
        norm = float(np.linalg.norm(vector))
        return (vector / norm if norm else vector).tolist()


def _features(text: str) -> list[tuple[str, float]]:
    words = [w.lower() for w in _WORD.findall(text)]
    features = [(f"w:{w}", 1.0) for w in words]
    for word in words:
        padded = f" {word} "
        features.extend((f"c:{padded[i:i + 3]}", 0.5) for i in range(len(padded) - 2))
    return features
