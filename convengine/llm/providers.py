"""Provider-qualified model names: ``<provider>:<model>`` picks a LangChain chat model for one call site.

``openai:gpt-4o-mini`` is ``ChatOpenAI`` configured like the engine's own model from the environment
(``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` or ``llm.base-url``); ``anthropic:claude-sonnet-4-5`` and the
other providers LangChain's ``init_chat_model`` knows (``google_genai``, ``mistralai``, ``ollama``...)
are built by it, reading their own credentials from the environment; ``langchain_<pkg>.<module>.<Class>:<model>``
names any chat model class of an installed ``langchain_*`` package by import path (nothing outside
those packages is ever imported, and the class must be a ``BaseChatModel``). A missing provider
package is a clear ``LLM_NOT_CONFIGURED`` error naming the extra to install.

Any other name (``gpt-4o-mini``, ``llama3:8b``) is a plain model name: the engine's chat model is
asked for it (see :func:`convengine.llm.langchain.model_for`).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel

from convengine._internal.model_names import (
    EXTRAS,
    IMPORT_PATH,
    PACKAGES,
    PROVIDERS,
    QualifiedModel,
    parse_model,
)
from convengine.catalog.errors import LlmNotConfiguredError
from convengine.settings import LlmSettings

__all__ = ["PROVIDERS", "QualifiedModel", "chat_model_for", "chat_model_from_env", "parse_model"]

def chat_model_from_env(settings: LlmSettings, *, model: str | None = None) -> BaseChatModel:
    """``ChatOpenAI`` from OPENAI_API_KEY / OPENAI_BASE_URL / CONVENGINE_LLM_MODEL (or settings.llm);
    ``model`` names another model on the same server."""
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:
        raise LlmNotConfiguredError("OpenAI models need the 'openai' extra: pip install 'convengine[openai]'") from None

    base_url = os.environ.get("OPENAI_BASE_URL") or settings.base_url
    api_key = os.environ.get("OPENAI_API_KEY")
    if not api_key and not base_url:
        raise LlmNotConfiguredError("no LLM configured: set OPENAI_API_KEY (and optionally OPENAI_BASE_URL for an "
                                    "OpenAI-compatible server), or pass llm= to Engine.open")
    return ChatOpenAI(model=model or os.environ.get("CONVENGINE_LLM_MODEL") or settings.model, base_url=base_url,
                      api_key=api_key or "not-needed", temperature=settings.temperature, timeout=settings.timeout_s,
                      max_retries=0, use_responses_api=False)


def chat_model_for(qualified: QualifiedModel, settings: LlmSettings) -> BaseChatModel:
    """A new chat model for a qualified name (LLM_NOT_CONFIGURED naming what to install, or what is missing)."""
    try:
        return _build(qualified, settings)
    except ImportError as exc:
        raise LlmNotConfiguredError(f"the model {qualified.name!r} needs {_install_hint(qualified)} "
                                    f"({type(exc).__name__}: {exc})", details={"model": qualified.name}) from None
    except LlmNotConfiguredError:
        raise
    except Exception as exc:  # noqa: BLE001 - provider classes raise their own (a missing API key: ValidationError)
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise LlmNotConfiguredError(f"the model {qualified.name!r} could not be set up: {type(exc).__name__}: {first}",
                                    details={"model": qualified.name}) from None


def _build(qualified: QualifiedModel, settings: LlmSettings) -> BaseChatModel:
    if qualified.provider == "openai":
        return chat_model_from_env(settings, model=qualified.model)
    if qualified.provider in PROVIDERS:
        importlib.import_module(PACKAGES[qualified.provider].replace("-", "_"))  # ImportError: name what to install

        options: dict[str, Any] = {"max_retries": 0, "timeout": settings.timeout_s} \
            if qualified.provider == "anthropic" else {}
        model = init_chat_model(qualified.model, model_provider=qualified.provider, **options)
        if not isinstance(model, BaseChatModel):
            raise LlmNotConfiguredError(f"the model {qualified.name!r} is not a LangChain chat model")
        return model
    return _imported(qualified)


def _imported(qualified: QualifiedModel) -> BaseChatModel:
    if not IMPORT_PATH.fullmatch(qualified.provider):  # checked at load; never import anything else
        raise LlmNotConfiguredError(f"the model {qualified.name!r} does not name a langchain_* chat model class",
                                    details={"model": qualified.name})
    module_name, _, class_name = qualified.provider.rpartition(".")
    found = getattr(importlib.import_module(module_name), class_name, None)
    if not (isinstance(found, type) and issubclass(found, BaseChatModel)):
        raise LlmNotConfiguredError(f"the model {qualified.name!r}: {qualified.provider} is not a LangChain chat "
                                    "model class", details={"model": qualified.name})
    return found(model=qualified.model)


def _install_hint(qualified: QualifiedModel) -> str:
    if qualified.provider in EXTRAS:
        return f"the {EXTRAS[qualified.provider]!r} extra: pip install 'convengine[{EXTRAS[qualified.provider]}]'"
    package = PACKAGES.get(qualified.provider) or qualified.provider.split(".")[0].replace("_", "-")
    return f"its provider package: pip install {package}"
