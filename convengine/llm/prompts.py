"""Prompt rendering for call sites, and the built-in default prompts (overridable in ce_config)."""

from __future__ import annotations

import json
from typing import Any

from convengine.catalog.ce_config import ConfigKey
from convengine.llm.session import PromptSession
from convengine.templates.render import referenced_names, render_prompt
from convengine.templates.variables import template_variables


def render_for(turn: PromptSession, source: str | None, *, template: str, extra: dict[str, Any] | None = None) -> str:
    """Strict rendering of ``source`` with the variables it refers to (UNRESOLVED_PROMPT_VARIABLE otherwise)."""
    if not source:
        return ""
    names = referenced_names(source)
    variables = template_variables(turn, extra, names=names) if names else {}  # plain text needs none
    return render_prompt(source, variables, template=template, limits=turn.settings)


def config_prompt(turn: PromptSession, key: ConfigKey, default: str) -> tuple[str, str]:
    """(text, template name) from the ce_config prompt ``key``, else the call site's built-in ``default``."""
    value = turn.snapshot.config_value(key)
    if value:
        return value, f"ce_config {key.component}.{key.key}"
    return default, f"built-in {key.component}.{key.key}"


def as_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


DIALOGUE_ACT_SYSTEM = (
    "Classify the user's message into one dialogue act: AFFIRM (yes, agreement), NEGATE (no, refusal), "
    "ANSWER (answers a question the assistant asked), EDIT (wants to change something already given), "
    "RESET (wants to start over), QUESTION (asks something), NEW_REQUEST (a new task) or GREETING.")
DIALOGUE_ACT_USER = "Message: {{user_input}}"
QUERY_REWRITE_SYSTEM = (
    DIALOGUE_ACT_SYSTEM + " Also rewrite the message as a standalone query that makes sense without the "
    "conversation (resolve pronouns and references).")
QUERY_REWRITE_USER = "Conversation so far (newest first): {{conversation_history}}\nMessage: {{user_input}}"

INTENT_AGENT_SYSTEM = (
    "You classify the user's intent. Use only the allowed intents. Score every plausible intent between 0 and 1 "
    "in intentScores. When two intents are close, set needsClarification and ask one short clarificationQuestion. "
    "Return JSON with intent, state, confidence, needsClarification, clarificationResolved, clarificationQuestion, "
    "intentScores and followups.")
INTENT_AGENT_USER = (
    "Allowed intents: {{allowed_intents}}\nPending clarification: {{pending_clarification}}\n"
    "Collision candidates: {{intent_collision_candidates}}\nContext: {{context}}\nUser: {{user_input}}")

COLLISION_SYSTEM = ("The user's request matches several intents. Ask one concise question to tell them apart; "
                    "prefer the suggested follow-ups.")
COLLISION_USER = "User: {{user_input}}\nCandidates: {{intent_top3}}\nFollow-ups: {{followups}}"
COLLISION_HINT = "Ask the user to choose."

PLANNER_SYSTEM = (
    "You plan tool calls to answer the user. Use only the listed tools. Reply with JSON: action (CALL_TOOL or ANSWER), "
    "tool_code, args, answer, operation_tag. Call one tool at a time; answer when the observations are enough.")
PLANNER_USER = "User: {{user_input}}\nContext: {{context}}\nTools: {{mcp_tools}}\nObservations: {{mcp_observations}}"
