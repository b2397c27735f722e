"""The facts document JSON_PATH rules are evaluated against (ConvEngine's shape).

Top-level context fields first, then the session fields over them, so ``@.customerId``,
``@.state``, ``@.context.mcp.finalAnswer`` and ``@.inputParams.routing_decision`` all work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from convengine.catalog import params as pk


@dataclass(slots=True)
class FactsInput:
    conversation_id: str
    intent: str
    state: str
    context: Mapping[str, Any]
    params: Mapping[str, Any]
    user_text: str = ""
    standalone_query: str | None = None
    schema_facts: Mapping[str, Any] = field(default_factory=dict)
    schema_json: Mapping[str, Any] = field(default_factory=dict)
    payload: Mapping[str, Any] | None = None
    last_llm: Mapping[str, Any] = field(default_factory=dict)


def session_fields(f: FactsInput) -> dict[str, Any]:
    """ConvEngine's session dict (also a template variable)."""
    ctx = f.context
    clarification = ctx.get("pending_clarification") or {}
    lock = ctx.get("intent_lock") or {}
    container = ctx.get("container_data") or {}
    facts = f.schema_facts
    return {
        "conversationId": f.conversation_id,
        "intent": f.intent,
        "state": f.state,
        "schemaComplete": bool(facts.get("complete", False)),
        "hasContainerData": bool(container),
        "containerData": container,
        "hasAnySchemaValue": bool(facts.get("has_any", False)),
        "intentLocked": bool(lock.get("locked", False)),
        "intentLockReason": lock.get("reason"),
        "missingRequiredFields": list(facts.get("missing", [])),
        "missingFieldOptions": dict(facts.get("options", {})),
        "userText": f.user_text,
        "standaloneQuery": f.standalone_query,
        "resolvedUserInput": f.standalone_query or f.user_text,
        "pendingClarificationQuestion": clarification.get("question") if isinstance(clarification, Mapping) else None,
        "lastLlmStage": f.last_llm.get("stage"),
        "postIntentRule": f.params.get(pk.POST_INTENT_RULE),
        "ruleExecutionSource": f.params.get(pk.RULE_EXECUTION_SOURCE),
        "ruleExecutionOrigin": f.params.get(pk.RULE_EXECUTION_ORIGIN),
        "lastLlmOutput": f.last_llm.get("output"),
    }


def build_facts(f: FactsInput) -> dict[str, Any]:
    doc: dict[str, Any] = dict(f.context)
    doc.update(session_fields(f))
    doc["context"] = dict(f.context)
    doc["schemaJson"] = dict(f.schema_json)
    doc["inputParams"] = dict(f.params)
    if f.payload is not None:
        doc["payload"] = _payload_fact(f.payload)
    return doc


def _payload_fact(payload: Mapping[str, Any]) -> Any:
    value = payload.get("value")
    if payload.get("type") == "JSON" and isinstance(value, (dict, list)):
        return value
    return {"text": value}
