"""INTENT_COLLISION call site: the answer given while the intent is ambiguous."""

from __future__ import annotations

from typing import TYPE_CHECKING

from convengine.errors import LlmError
from convengine.llm.prompts import COLLISION_HINT, COLLISION_SYSTEM, COLLISION_USER, config_prompt, render_for
from convengine.nodes.common import dig

if TYPE_CHECKING:
    from convengine.nodes.turn import Turn

COMPONENT = "AgentIntentCollisionResolver"


async def collision_response(turn: Turn) -> None:
    """Ask the model for one disambiguation question; the pending question is the fallback."""
    from convengine.nodes.response import transform

    question = dig(turn.read_context(), "pending_clarification", "question") or ""
    turn.audit("INTENT_COLLISION_DETECTED", {"intent": turn.intent, "question": question,
                                             "candidates": turn.read_params().get("intent_top3")})
    text, source = question, "PENDING_QUESTION"
    if turn.ctx.services.llm is not None:
        try:
            text, source = await _ask(turn), "LLM"
        except LlmError as exc:
            turn.audit("INTENT_COLLISION_LLM_ERROR", {"errorCode": exc.code.value, "error": exc.message})
    payload = await transform(turn, {"type": "TEXT", "value": text or question}, "LLM")
    turn.set("payload", payload)
    turn.audit("INTENT_COLLISION_RESOLVED", {"output": payload["value"], "source": source})
    turn.audit("ASSISTANT_OUTPUT", {"output": payload["value"], "outputFormat": "TEXT", "responseType": "DERIVED",
                                    "responseId": None, "intent": turn.intent, "state": turn.state})


async def _ask(turn: Turn) -> str:
    assert turn.ctx.services.llm is not None
    system, sname = config_prompt(turn, COMPONENT, "SYSTEM_PROMPT", COLLISION_SYSTEM)
    user, uname = config_prompt(turn, COMPONENT, "USER_PROMPT", COLLISION_USER)
    hint, hname = config_prompt(turn, COMPONENT, "DERIVATION_HINT", COLLISION_HINT)
    user_text = render_for(turn, user, template=uname) + "\n\n" + render_for(turn, hint, template=hname)
    system_text = render_for(turn, system, template=sname)
    turn.audit("RESOLVE_RESPONSE_LLM_INPUT", {"system_prompt": system_text, "user_prompt": user_text})
    answer = (await turn.ctx.services.llm.text(turn, "INTENT_COLLISION", system=system_text, user=user_text)).strip()
    turn.audit("RESOLVE_RESPONSE_LLM_OUTPUT", {"output": answer})
    return answer
