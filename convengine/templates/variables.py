"""The variables a template sees (reference §6.3), with ConvEngine's aliases.

Session facts, input params, context and the schema-restricted context are also flattened to
the top level (first writer wins); explicit variables and the caller's extras win over those.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from convengine.rules.facts import session_fields

if TYPE_CHECKING:
    from convengine.nodes.turn import Turn

USER_INPUT = ("user_input", "userInput", "user_text", "userText", "input_text", "inputText", "input",
              "user_message", "userMessage")
RESOLVED_INPUT = ("resolved_user_input", "resolvedUserInput", "resolved_input", "resolvedInput", "effective_input",
                  "effectiveInput", "effective_user_input", "effectiveUserInput", "final_user_input", "finalUserInput")
STANDALONE = ("standalone_query", "standaloneQuery", "rewritten_query", "rewrittenQuery", "query_rewrite",
              "queryRewrite")
HISTORY = ("conversation_history", "conversationHistory", "history")
CONTEXT_TEXT = ("contextJson", "context_json")
CONTAINER = ("container_data", "containerData")
CLARIFICATION = ("pending_clarification", "pendingClarification")


def conversation_history(turn: Turn) -> list[dict[str, Any]]:
    """The window of recent turns as ``{user, assistant}``, newest first."""
    return [{"user": t.get("user"), "assistant": t.get("assistant")} for t in reversed(turn.get("recent_turns") or [])]


def _time_vars() -> dict[str, Any]:
    now = datetime.now().astimezone()
    zone = str(now.tzinfo)
    values = {"current_date": now.date().isoformat(), "current_datetime": now.isoformat(timespec="seconds"),
              "current_year": now.year, "current_timezone": zone}
    return {**values, "currentDate": values["current_date"], "currentDateTime": values["current_datetime"],
            "currentYear": now.year, "currentTimezone": zone, "current_system_datetime": values["current_datetime"],
            "current_system_timezone": zone}


def _aliases(names: tuple[str, ...], value: Any) -> dict[str, Any]:
    return dict.fromkeys(names, value)


def template_variables(turn: Turn, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    facts = turn.facts_input()
    session = {**session_fields(facts), "context": dict(facts.context), "schemaJson": dict(facts.schema_json)}
    params = dict(facts.params)
    context = dict(facts.context)
    variables: dict[str, Any] = {}
    for source in (session, params, context, facts.schema_json):
        for key, value in source.items():
            variables.setdefault(key, value)
    clarification = (context.get("pending_clarification") or {}).get("question") \
        if isinstance(context.get("pending_clarification"), Mapping) else None
    variables.update({
        "session": session, "inputParams": params, "safeInputParams": params, "rawInputParams": params,
        "context": context, "schema_json": dict(facts.schema_json), "schemaJson": dict(facts.schema_json),
        "intent": turn.intent, "state": turn.state, "conversationId": turn.conversation_id,
        **_aliases(USER_INPUT, turn.user_text), **_aliases(RESOLVED_INPUT, turn.resolved_input),
        **_aliases(STANDALONE, turn.standalone_query or ""), **_aliases(HISTORY, conversation_history(turn)),
        **_aliases(CONTEXT_TEXT, json.dumps(context, default=str)),
        **_aliases(CONTAINER, context.get("container_data") or {}), **_aliases(CLARIFICATION, clarification or ""),
        **_time_vars(),
    })
    variables.update(extra or {})
    return variables
