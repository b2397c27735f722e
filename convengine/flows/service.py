"""service nodes (HTTP through the tool executor and its SSRF guard) and knowledge nodes."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from convengine.catalog import flows as vocab
from convengine.catalog import stages
from convengine.catalog.errors import ConvEngineError
from convengine.config.flows import Flow
from convengine.config.records import FlowNodeRecord
from convengine.flows.walk_state import NEXT, FlowError, Result, Walk
from convengine.knowledge.search import SearchOptions
from convengine.nodes.knowledge import MAX_QUERY_CHARS, search, source_of, synthesise, with_earlier_turns
from convengine.rules.jsonpath import compile_jsonpath
from convengine.security.env_refs import pack_may_read, refused_reason
from convengine.security.redact import ENV_REF, redact_text, remember_secret
from convengine.settings import HTTP_MAX_ATTEMPTS, HTTP_MAX_TIMEOUT_MS
from convengine.tools.http import HttpRequest, HttpRunner


def resolve_secrets(value: object, where: str, allowed: Sequence[str]) -> Any:
    """``${env:NAME}`` in the configured (not yet rendered) value, read now and never stored; only the
    variables the operator lets packs read (``security.pack_env_names``, checked at load too)."""
    if isinstance(value, str):
        return ENV_REF.sub(lambda m: _secret(m.group(1), where, allowed), value) if "${env:" in value else value
    if isinstance(value, dict):
        return {k: resolve_secrets(v, where, allowed) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_secrets(v, where, allowed) for v in value]
    return value


def _secret(name: str, where: str, allowed: Sequence[str]) -> str:
    if not pack_may_read(name, allowed):
        raise FlowError(f"{where}: {refused_reason(name)}")
    if name not in os.environ:
        raise FlowError(f"{where}: the environment variable {name} (referenced as ${{env:{name}}}) is not set")
    value = os.environ[name]
    remember_secret(value, dynamic=True)
    return value


def _fixed_origin(template: str) -> str | None:
    """The scheme and host of a URL template when they hold no ``{{ }}`` (user data cannot change them)."""
    head = template.split("/", 3)
    origin = "/".join(head[:3])
    return None if "{{" in origin or "{%" in origin else origin.lower()


async def call_service(walk: Walk, flow: Flow, node: FlowNodeRecord, config: dict[str, Any]) -> Result:
    """Call the service; any failure (a missing secret, a refused URL, the call itself) is audited and
    takes the node's ``error`` edge."""
    where = f"ce_flow_node[{flow.code}/{node.node_id}]"
    service_id = str(config["service_id"])
    try:
        spec = _request(walk, config, where)
    except ConvEngineError as exc:
        walk.turn.audit(stages.FLOW_SERVICE_FAILED, {"flow": flow.code, "node": node.node_id, "serviceId": service_id,
                                                    "errorCode": exc.code.value, "message": redact_text(exc.message)})
        return Result("next", vocab.ERROR)
    return await _call(walk, flow, node, config, spec)


def _request(walk: Walk, config: dict[str, Any], where: str) -> HttpRequest:
    allowed = walk.turn.settings.security.pack_env_names
    url_template = resolve_secrets(str(config["url"]), where, allowed)
    url = walk.render(url_template, where)
    origin = _fixed_origin(url_template)
    if origin and "/".join(url.split("/", 3)[:3]).lower() != origin:
        raise FlowError(f"{where}: the rendered URL changed the configured scheme or host")
    settings = walk.turn.settings.mcp.http_api
    # retries and timeout_ms are checked at load (flows.validate); bounded here too, whatever reached the node
    timeout_ms = min(int(config.get("timeout_ms", settings.defaults.read_timeout_ms)), HTTP_MAX_TIMEOUT_MS)
    policy = settings.defaults.model_copy(update={
        "max_attempts": min(int(config.get("retries", 0)) + 1, HTTP_MAX_ATTEMPTS),
        "read_timeout_ms": timeout_ms,
        "connect_timeout_ms": min(timeout_ms, settings.defaults.connect_timeout_ms)})
    return HttpRequest(url=url, method=str(config.get("method", "GET")).upper(),
                       headers={str(k): str(v) for k, v in walk.render(resolve_secrets(config.get("headers") or {},
                                                                                       where, allowed), where).items()},
                       body=walk.render(resolve_secrets(config.get("body"), where, allowed), where), policy=policy)


async def _call(walk: Walk, flow: Flow, node: FlowNodeRecord, config: dict[str, Any], spec: HttpRequest) -> Result:
    service_id = str(config["service_id"])
    settings = walk.turn.settings.mcp.http_api
    url = spec.url
    audit = {"flow": flow.code, "node": node.node_id, "serviceId": service_id, "method": spec.method,
             "url": redact_text(f"{urlsplit(url).scheme}://{urlsplit(url).netloc}{urlsplit(url).path}")}
    try:
        result = await _runner(walk).execute(f"flow:{flow.code}:{service_id}", spec, settings)
    except ConvEngineError as exc:
        walk.turn.audit(stages.FLOW_SERVICE_FAILED, {**audit, "errorCode": exc.code.value,
                                                    "message": redact_text(exc.message)})
        return Result("next", vocab.ERROR)
    body = result["mapped"]
    walk.last_service = body
    walk.variables[service_id] = body
    for name, path in (config.get("outputs") or {}).items():
        found = compile_jsonpath(str(path)).find(body)
        walk.variables[str(name)] = found[0] if len(found) == 1 else (list(found) or None)
    walk.turn.audit(stages.FLOW_SERVICE_CALLED, {**audit, "status": result["status"], "attempt": result["attempt"],
                                                "latencyMs": result["latencyMs"], "response": body,
                                                "outputs": sorted(config.get("outputs") or {})})
    return NEXT


def _runner(walk: Walk) -> HttpRunner:
    tools = walk.turn.ctx.services.tools
    if tools is None:
        raise FlowError("service nodes need the engine's tool runner (open the engine with Engine.open)")
    return tools.http


def _query_sources(config: dict[str, Any]) -> list[str]:
    value = config.get("query_from") or vocab.QUERY_TEMPLATE
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def session_summary(walk: Walk) -> str:
    """The conversation's rolling summary the memory step keeps (``memory.session_summary``; empty before one)."""
    kept = walk.turn.read_context().get("memory")
    return str(kept.get("session_summary") or "") if isinstance(kept, dict) else ""


def knowledge_query(walk: Walk, config: dict[str, Any], where: str) -> str:
    """The query from the node's ``query_from`` parts in order: ``template`` (its ``query``, default the
    message), ``message`` (the user's message), ``summary`` (the conversation summary); each part gets an
    equal share of :data:`vocab.KNOWLEDGE_QUERY_MAX_CHARS` (a summary keeps its newest end). Without any
    text (no summary yet), the message."""
    sources = _query_sources(config)
    share = vocab.KNOWLEDGE_QUERY_MAX_CHARS // len(sources)
    parts = []
    for source in sources:
        if source == vocab.QUERY_SUMMARY:
            parts.append(session_summary(walk)[-share:])
        elif source == vocab.QUERY_MESSAGE:
            parts.append((walk.turn.user_text or "")[:share])
        else:
            parts.append(str(walk.render(config.get("query") or "{{ input }}", where))[:share])
    query = "\n".join(p for p in (p.strip() for p in parts) if p)
    return query or (walk.turn.user_text or "")[:vocab.KNOWLEDGE_QUERY_MAX_CHARS]


async def answer_from_knowledge(walk: Walk, flow: Flow, node: FlowNodeRecord, config: dict[str, Any]) -> Result:
    """Search the knowledge bases for the query (:func:`knowledge_query`: the node's ``query_from`` parts;
    by default its ``query`` template, the user's message, or the standalone query the dialogue-act
    rewrite wrote) with the node's options (``where``, ``fusion``, ``mmr``, ``dedupe``, ``query_turns``);
    the best passage at or above ``min_score`` is said (``found``), else ``not_found``."""
    where = f"ce_flow_node[{flow.code}/{node.node_id}]"
    own = config.get("query") or config.get("query_from")
    standalone = None if own else walk.turn.standalone_query  # the rewrite call's, as the fallback
    query = str(standalone or knowledge_query(walk, config, where))[:MAX_QUERY_CHARS]
    kbs = config.get("knowledge_bases") or None
    min_score = float(config.get("min_score", walk.turn.settings.knowledge.fallback.min_score))
    if walk.turn.ctx.services.retriever is None or walk.turn.ctx.services.store is None:
        raise FlowError(f"{where}: knowledge nodes need the engine's knowledge store (open the engine with Engine.open)")
    top_k = min(int(config.get("top_k", 3)), vocab.KNOWLEDGE_MAX_TOP_K)
    filters = _filters(walk, config.get("where"), where)
    options = SearchOptions(filters=filters or None, fusion=config.get("fusion"), mmr=config.get("mmr"),
                            dedupe=bool(config.get("dedupe", True)))
    warned = set[str]()
    hits = await search(walk.turn, query, kbs, top_k, options, warned) if query.strip() and filters is not None else []
    alone = query
    contextual = None if standalone else with_earlier_turns(walk.turn, query, int(config.get("query_turns", 0)))
    if contextual and filters is not None and (not hits or hits[0].score < min_score):
        more = await search(walk.turn, contextual, kbs, top_k, options, warned)
        if more and (not hits or more[0].score > hits[0].score):
            query, hits = contextual, more
    best = hits[0] if hits and hits[0].score >= min_score else None
    audit: dict[str, Any] = {"flow": flow.code, "node": node.node_id, "query": query,
                             "queryFrom": _query_sources(config), "found": best is not None,
                             "candidates": [{"source": h.source, "score": h.score} for h in hits]}
    if filters:
        audit["filters"] = filters
    if query != alone:
        audit["message"] = alone
    walk.turn.audit(stages.FLOW_KNOWLEDGE, audit)
    if best is None:
        return Result("next", vocab.NOT_FOUND)
    answer = None
    if config.get("synthesis"):
        answer = await synthesise(walk.turn, query, [h for h in hits if h.score >= min_score])
    sources = [source_of(h) for h in hits if h.score >= min_score]
    walk.variables[str(config.get("variable", "knowledge_answer"))] = answer or best.text
    walk.variables[str(config.get("sources_variable", "knowledge_sources"))] = sources
    if config.get("say", True):
        walk.say(answer or best.text, sources=sources)
    return Result("next", vocab.FOUND)


def _filters(walk: Walk, spec: object, where: str) -> dict[str, Any] | None:
    """The node's ``where`` with its text values rendered as templates (``{{ session.product }}``); None when
    a rendered value cannot match any document (it holds a NUL character), so the node finds nothing."""
    filters: dict[str, Any] = {}
    for key, wanted in (spec.items() if isinstance(spec, dict) else ()):
        values = [walk.render(v, where) if isinstance(v, str) and "{{" in v else v
                  for v in (wanted if isinstance(wanted, list) else [wanted])]
        if any(isinstance(v, str) and "\x00" in v for v in values):
            return None
        filters[key] = values if isinstance(wanted, list) else values[0]
    return filters
