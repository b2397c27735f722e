"""The disambiguation question: ce_config's template, or the DISAMBIGUATION call site when enabled."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convengine.catalog import ce_config, stages
from convengine.catalog.errors import LlmError
from convengine.config.records import PendingActionRecord
from convengine.nodes.turn import Turn
from convengine.templates.render import render_prompt, render_text

DEFAULT_TEMPLATE = "I found multiple actions. Which one should I execute: {{options}}?"
DEFAULT_SYSTEM = "You help a user choose one of several actions. Ask one short question listing the options."
DEFAULT_USER = "Options: {{options}}\nUser said: {{user_input}}\nAsk which one to execute."


async def disambiguation_question(turn: Turn, options: Sequence[PendingActionRecord], labels: list[str],
                                  count: int) -> tuple[str, str]:
    """(question, source) where source is TEMPLATE or LLM; an LLM failure falls back to the template."""
    snapshot = turn.snapshot
    variables: dict[str, Any] = {"options": ", ".join(labels), "candidate_count": count, "intent": turn.intent,
                                 "state": turn.state, "action_keys": [a.action_key for a in options],
                                 "user_input": turn.user_text}
    template = snapshot.config_value(ce_config.DISAMBIGUATION_QUESTION_TEMPLATE) or DEFAULT_TEMPLATE
    fallback = render_text(template, variables)
    llm = turn.ctx.services.llm
    if llm is None or not snapshot.config_value(ce_config.DISAMBIGUATION_ENABLE_LLM):
        return fallback, "TEMPLATE"
    system = snapshot.config_value(ce_config.DISAMBIGUATION_SYSTEM_PROMPT) or DEFAULT_SYSTEM
    user = snapshot.config_value(ce_config.DISAMBIGUATION_USER_PROMPT) or DEFAULT_USER
    try:
        question = await llm.text(
            turn, "DISAMBIGUATION",
            system=render_prompt(system, variables, template="DisambiguationStep.LLM_SYSTEM_PROMPT"),
            user=render_prompt(user, variables, template="DisambiguationStep.LLM_USER_PROMPT"))
    except LlmError as exc:
        turn.audit(stages.DISAMBIGUATION_LLM_ERROR, {"error": exc.message, "fallback": "TEMPLATE"})
        return fallback, "TEMPLATE"
    return (question.strip() or fallback), "LLM"
