"""What opening an engine builds once: its tables and pack, its services, its SEMANTIC indexes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from langchain_core.embeddings import Embeddings

from convengine.catalog.errors import ConfigError
from convengine.checkpointing.persistence import ConversationStore
from convengine.config_loader import ConfigSnapshot, Extensions, SnapshotHolder, import_pack
from convengine.db import upgrade
from convengine.engine.results import EngineOptions
from convengine.knowledge.search import Retriever, SearchSettings
from convengine.knowledge.semantic import SemanticIndex
from convengine.llm.gateway import as_gateway
from convengine.memory import scopes as memory_scopes
from convengine.nodes.context import Services
from convengine.registry import Registries, TaskRegistry
from convengine.rules.engine import RuleRegistry
from convengine.settings import EngineSettings
from convengine.tools.db import DbRunner
from convengine.tools.http import HttpRunner
from convengine.tools.mcp_servers import McpServers
from convengine.tools.runner import ToolRunner
from convengine.versions.lifecycle import record_import
from convengine.versions.serving import SemanticBuilder


def check_tables(settings: EngineSettings) -> None:
    if settings.tables:
        raise ConfigError("convengine.tables.* (table renaming) is not supported: the ce_* tables keep "
                          "ConvEngine's default names")


def prepare(sync_engine: sa.Engine, settings: EngineSettings, pack: str | Path | Mapping[str, Any] | None,
            extensions: Extensions, holder: SnapshotHolder, *, replace: bool = False) -> None:
    """Migrate, import the pack given (a different stored configuration only when ``replace``),
    load the configuration."""
    if settings.auto_migrate:
        upgrade(sync_engine)
    if pack is not None:
        import_pack(sync_engine, pack, extensions=extensions, on_change=record_import, replace=replace,
                    settings_overrides=holder.settings_overrides)
    holder.reload()


def services(options: EngineOptions, snapshot: ConfigSnapshot, store: ConversationStore) -> Services:
    registries = Registries(
        tasks=TaskRegistry(dict(options.tasks or {})),
        response_transformers=dict(options.response_transformers or {}),
        container_providers=dict(options.container_providers or {}),
        tool_handlers=dict(options.tools or {}),
        tool_adapters=dict(options.tool_adapters or {}),
    )
    llm = None
    if options.llm is not None:
        llm = as_gateway(options.llm, snapshot.settings.llm, store=store)
    return Services(registries=registries,
                    rule_registry=RuleRegistry.with_custom(options.rule_types, options.rule_actions),
                    store=store, llm=llm, hooks=(*memory_scopes.HOOKS, *(options.hooks or ())), clock=options.clock,
                    retriever=_retriever(options, snapshot.settings),
                    semantic=_semantic_index(options.embeddings, snapshot))


def _semantic_index(embeddings: Embeddings | None, snapshot: ConfigSnapshot) -> SemanticIndex | None:
    """The SEMANTIC classifiers' example embeddings, computed now (at load), not per turn."""
    semantic = [c.classifier_id for c in snapshot.classifiers if c.enabled and c.rule_type == "SEMANTIC"]
    if embeddings is None:
        if semantic:
            raise ConfigError(f"ce_intent_classifier rows {semantic} are SEMANTIC and need an embeddings model: "
                              "Engine.open(..., embeddings=<a LangChain Embeddings>)")
        return None
    return _build_semantic(embeddings, None, snapshot, ())


def version_semantic(embeddings: Embeddings | None, live: SemanticIndex | None) -> SemanticBuilder | None:
    """How each served version gets its own SEMANTIC index (None without an embeddings model)."""
    return None if embeddings is None else partial(_build_semantic, embeddings, live)


def _build_semantic(embeddings: Embeddings, live: SemanticIndex | None, snapshot: ConfigSnapshot,
                    known: Sequence[SemanticIndex]) -> SemanticIndex:
    """An index of ``snapshot``'s SEMANTIC examples, reusing the vectors ``known`` and ``live`` hold."""
    index = SemanticIndex(embeddings)
    index.prepare((c.matcher for c in snapshot.classifiers if c.rule_type == "SEMANTIC" and c.matcher is not None),
                  reuse=[*known, *([live] if live is not None else [])])
    return index


def _retriever(options: EngineOptions, settings: EngineSettings) -> Retriever:
    knowledge = settings.knowledge
    return Retriever(options.embeddings, SearchSettings(knowledge.lexical_weight, knowledge.vector_weight,
                                                knowledge.candidates, knowledge.fusion, knowledge.rrf_k,
                                                knowledge.vector_index), options.knowledge_bases)


def tool_runner(registries: Registries, sync_engine: sa.Engine, settings: EngineSettings) -> ToolRunner:
    return ToolRunner(registries, DbRunner(sync_engine), HttpRunner(), McpServers(dict(settings.mcp.servers)))
