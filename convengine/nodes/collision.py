"""INTENT_COLLISION call site: the answer given while the intent is ambiguous."""

from __future__ import annotations

from convengine.catalog import ce_config, stages
from convengine.catalog import params as pk
from convengine.catalog.errors import LlmError
from convengine.llm.prompts import COLLISION_HINT, COLLISION_SYSTEM, COLLISION_USER, config_prompt, render_for
from convengine.nodes.common import dig
from convengine.nodes.turn import Turn

COMPONENT = "AgentIntentCollisionResolver"


async def collision_text(turn: Turn) -> tuple[str, str]:
    """Ask the model for one disambiguation question; the pending question is the fallback.

    Returns the text and its source (``LLM`` / ``PENDING_QUESTION``); response_resolution
    transforms and publishes it."""
    question = dig(turn.read_context(), "pending_clarification", "question") or ""
    turn.audit(stages.INTENT_COLLISION_DETECTED, {"intent": turn.intent, "question": question,
                                             "candidates": turn.read_params().get(pk.INTENT_TOP3)})
    text, source = question, "PENDING_QUESTION"
    if turn.ctx.services.llm is not None:
        try:
            text, source = await _ask(turn), "LLM"
        except LlmError as exc:
            turn.audit(stages.INTENT_COLLISION_LLM_ERROR, {"errorCode": exc.code.value, "error": exc.message})
    return text or question, source


async def _ask(turn: Turn) -> str:
    assert turn.ctx.services.llm is not None
    system, sname = config_prompt(turn, ce_config.COLLISION_SYSTEM_PROMPT, COLLISION_SYSTEM)
    user, uname = config_prompt(turn, ce_config.COLLISION_USER_PROMPT, COLLISION_USER)
    hint, hname = config_prompt(turn, ce_config.COLLISION_DERIVATION_HINT, COLLISION_HINT)
    user_text = render_for(turn, user, template=uname) + "\n\n" + render_for(turn, hint, template=hname)
    system_text = render_for(turn, system, template=sname)
    turn.audit(stages.RESOLVE_RESPONSE_LLM_INPUT, {"system_prompt": system_text, "user_prompt": user_text})
    answer = (await turn.ctx.services.llm.text(turn, "INTENT_COLLISION", system=system_text, user=user_text)).strip()
    turn.audit(stages.RESOLVE_RESPONSE_LLM_OUTPUT, {"output": answer})
    return answer
