"""Provider-qualified model names (``<provider>:<model>``): how a name is read and checked at load.

Building the chat model a name picks is :mod:`convengine.llm.providers`; this module imports nothing of
LangChain, so the load-time checks can use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

EXTRAS = {"openai": "openai", "anthropic": "anthropic"}
"""Providers with a convengine extra (``pip install 'convengine[anthropic]'``)."""
PACKAGES = {
    "anthropic": "langchain-anthropic", "azure_openai": "langchain-openai", "bedrock": "langchain-aws",
    "bedrock_converse": "langchain-aws", "cohere": "langchain-cohere", "deepseek": "langchain-deepseek",
    "fireworks": "langchain-fireworks", "google_genai": "langchain-google-genai",
    "google_vertexai": "langchain-google-vertexai", "groq": "langchain-groq", "huggingface": "langchain-huggingface",
    "ibm": "langchain-ibm", "mistralai": "langchain-mistralai", "nvidia": "langchain-nvidia-ai-endpoints",
    "ollama": "langchain-ollama", "openai": "langchain-openai", "perplexity": "langchain-perplexity",
    "together": "langchain-together", "xai": "langchain-xai",
}
"""The providers a qualified name may name, with the package each needs (LangChain's ``init_chat_model``
providers; ``openai`` is built here)."""
PROVIDERS = frozenset(PACKAGES)
IMPORT_PATH = re.compile(r"langchain_[a-z0-9_]+(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
"""``langchain_<package>.<module...>.<ChatClass>``: the only modules an import-path name may import."""


@dataclass(frozen=True, slots=True)
class QualifiedModel:
    """``provider`` (a name of :data:`PROVIDERS` or an import path) and the ``model`` asked of it."""

    provider: str
    model: str

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"


def parse_model(name: str) -> QualifiedModel | None:
    """The provider and model of a qualified name; None for a plain model name."""
    prefix, colon, model = name.partition(":")
    if not colon or not (prefix in PROVIDERS or "." in prefix):
        return None
    return QualifiedModel(prefix, model.strip())


def model_problem(name: str) -> str | None:
    """What is wrong with a model name a pack configures (None: nothing), checked at load."""
    qualified = parse_model(name)
    if qualified is None:
        return None
    if not qualified.model:
        return f"{name!r} names no model after the provider"
    if qualified.provider not in PROVIDERS and not IMPORT_PATH.fullmatch(qualified.provider):
        return (f"{name!r}: a model named by import path must be a chat model class of a langchain_* package "
                "(langchain_<package>.<module>.<Class>:<model>)")
    return None
