"""DIALOGUE_ACT call site: LLM classification, query rewrite, the RESET guard, regex fallback."""

from __future__ import annotations

from typing import Any

from convengine._internal.textmatch import RegexTimeoutError, cached_regex
from convengine.catalog import ce_config, stages
from convengine.catalog import state as keys
from convengine.catalog.errors import LlmError
from convengine.catalog.vocab import DIALOGUE_ACTS
from convengine.llm.prompts import (
    DIALOGUE_ACT_SYSTEM,
    DIALOGUE_ACT_USER,
    QUERY_REWRITE_SYSTEM,
    QUERY_REWRITE_USER,
    config_prompt,
    render_for,
)
from convengine.nodes.turn import Turn

COMPONENT = "DialogueActStep"


def act_schema(rewrite: bool) -> dict[str, Any]:
    props: dict[str, Any] = {"dialogueAct": {"type": "string", "enum": list(DIALOGUE_ACTS)},
                             "confidence": {"type": "number", "minimum": 0, "maximum": 1}}
    if rewrite:
        props["standaloneQuery"] = {"type": ["string", "null"]}
    return {"type": "object", "properties": props, "required": ["dialogueAct", "confidence"]}


def _prompts(turn: Turn, rewrite: bool) -> tuple[str, str, str, str]:
    if rewrite:
        system, sname = config_prompt(turn, ce_config.DIALOGUE_REWRITE_SYSTEM_PROMPT, QUERY_REWRITE_SYSTEM)
        user, uname = config_prompt(turn, ce_config.DIALOGUE_REWRITE_USER_PROMPT, QUERY_REWRITE_USER)
    else:
        system, sname = config_prompt(turn, ce_config.DIALOGUE_SYSTEM_PROMPT, DIALOGUE_ACT_SYSTEM)
        user, uname = config_prompt(turn, ce_config.DIALOGUE_USER_PROMPT, DIALOGUE_ACT_USER)
    return render_for(turn, system, template=sname), render_for(turn, user, template=uname), sname, uname


async def classify_with_llm(turn: Turn, regex_act: str, regex_confidence: float) -> dict[str, Any]:
    """The LLM's act (guarded), or the regex result with source REGEX_FALLBACK when the call fails."""
    assert turn.ctx.services.llm is not None
    rewrite = turn.settings.flow.query_rewrite.enabled and bool(turn.get(keys.RECENT_TURNS))
    system, user, _, _ = _prompts(turn, rewrite)
    turn.audit(stages.DIALOGUE_ACT_LLM_INPUT, {"system_prompt": system, "user_prompt": user, "queryRewrite": rewrite})
    try:
        reply = await turn.ctx.services.llm.json(turn, "DIALOGUE_ACT", system=system, user=user,
                                                 schema=act_schema(rewrite))
    except LlmError as exc:
        turn.audit(stages.DIALOGUE_ACT_LLM_ERROR, {"errorCode": exc.code.value, "error": exc.message})
        return {"act": regex_act, "confidence": regex_confidence, "source": "REGEX_FALLBACK"}
    turn.audit(stages.DIALOGUE_ACT_LLM_OUTPUT, {"output": reply})
    return _outcome(turn, reply, regex_act, regex_confidence)


def _outcome(turn: Turn, reply: dict[str, Any], regex_act: str, regex_confidence: float) -> dict[str, Any]:
    act = str(reply.get("dialogueAct", "")).upper()
    confidence = float(reply.get("confidence") or 0.0)
    query = reply.get("standaloneQuery")
    params = turn.params
    params.update(dialogue_act_llm_candidate=act, dialogue_act_llm_confidence=confidence,
                  dialogue_act_llm_standalone_query=query)
    if isinstance(query, str) and query.strip():
        turn.set(keys.STANDALONE_QUERY, query.strip())
        params.update(standalone_query=query.strip(), resolved_user_input=query.strip())
    if act == "RESET" and not _says_reset(turn):
        params.update(dialogue_act_guard_applied=True, dialogue_act_guard_reason="REGEX_GUARD_RESET")
        return {"act": regex_act, "confidence": regex_confidence, "source": "REGEX_GUARD"}
    return {"act": act, "confidence": confidence, "source": "LLM"}


def _says_reset(turn: Turn) -> bool:
    pattern = turn.snapshot.config_value(ce_config.DIALOGUE_ACT_REGEX["RESET"]) or ""
    try:
        return bool(cached_regex(pattern, turn.settings.regex_timeout_ms / 1000).fullmatch(turn.user_text.strip()))
    except RegexTimeoutError:
        return False
