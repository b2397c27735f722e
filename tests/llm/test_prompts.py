"""Call-site prompts through Engine (both backends): the built-in prompt unless ce_config overrides
it, rendered with the turn's variables, and a variable the turn lacks failing the turn with an
error naming the ce_config row, before the model is asked."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog.errors import ErrorCode, PromptRenderError
from convengine.llm import ScriptedLLM
from convengine.llm.prompts import DIALOGUE_ACT_SYSTEM
from tests.helpers import engine_on, pack, payload_of, turn_events

ACT = {"dialogueAct": "NEW_REQUEST", "confidence": 0.9}


def llm_pack(**tables: Any) -> dict[str, Any]:
    data = pack(**tables)
    data["settings"]["flow"]["dialogue-act"]["resolute"] = "LLM_ONLY"
    return data


def prompt_row(key: str, value: str) -> dict[str, str]:
    return {"config_type": "DialogueActStep", "config_key": key, "config_value": value}


async def test_the_built_in_prompt_is_used_without_an_override(db_url: str) -> None:
    llm = ScriptedLLM({"DIALOGUE_ACT": [ACT]})
    async with engine_on(db_url, llm_pack(), llm=llm) as engine:
        result = await engine.aprocess("a loan please")
        call = llm.calls_to("DIALOGUE_ACT")[0]
        assert (call.system, call.user) == (DIALOGUE_ACT_SYSTEM, "Message: a loan please")
        assert call.schema is not None and call.schema["required"] == ["dialogueAct", "confidence"]
        audited = payload_of(await turn_events(engine, result.conversation_id), "DIALOGUE_ACT_LLM_INPUT")
        assert (audited["system_prompt"], audited["user_prompt"]) == (call.system, call.user)


async def test_a_ce_config_prompt_replaces_the_built_in_one_and_renders_the_turn(db_url: str) -> None:
    config = [prompt_row("SYSTEM_PROMPT", "Acts ({{ state }}): AFFIRM or NEW_REQUEST."),
              prompt_row("USER_PROMPT", "{{ customer.name }} wrote: {{ user_input | upper }}")]
    llm = ScriptedLLM({"DIALOGUE_ACT": [ACT]})
    async with engine_on(db_url, llm_pack(ce_config=config), llm=llm) as engine:
        await engine.aprocess("a loan please", input_params={"customer": {"name": "Jo"}})
        call = llm.calls_to("DIALOGUE_ACT")[0]
        assert (call.system, call.user) == ("Acts (UNKNOWN): AFFIRM or NEW_REQUEST.", "Jo wrote: A LOAN PLEASE")


async def test_a_prompt_variable_the_turn_lacks_fails_the_turn_naming_the_config_row(db_url: str) -> None:
    config = [prompt_row("USER_PROMPT", "{{ customer.name }} wrote: {{ user_input }}")]
    llm = ScriptedLLM({"DIALOGUE_ACT": [ACT]})
    async with engine_on(db_url, llm_pack(ce_config=config), llm=llm) as engine:
        first = await engine.aprocess("hello", input_params={"customer": {"name": "Jo"}})
        with pytest.raises(PromptRenderError) as info:
            await engine.aprocess("a loan please", input_params={"customer": {}})
        assert info.value.code is ErrorCode.UNRESOLVED_PROMPT_VARIABLE
        assert info.value.message == ("ce_config DialogueActStep.USER_PROMPT refers to 'customer.name', which has "
                                      "no value in this turn")
        assert llm.count() == 1  # the failing turn never reached the model
        assert first.turn == 1


async def test_prompts_see_the_memory_namespaces(db_url: str) -> None:
    namespaces = ("user={{ userInfo.userId }} turn={{ conversationInfo.turn }} "
                  "before={% if memory.last %}{{ memory.last.input }}{% endif %} now={{ user_input }}")
    # the first turn has no history: the act prompt; later turns rewrite the query: the rewrite prompt
    config = [prompt_row("USER_PROMPT", "act: " + namespaces),
              prompt_row("QUERY_REWRITE_USER_PROMPT", "rewrite: " + namespaces)]
    llm = ScriptedLLM({"DIALOGUE_ACT": [ACT, ACT]})
    async with engine_on(db_url, llm_pack(ce_config=config), llm=llm) as engine:
        first = await engine.aprocess("hello", user_id="ana")
        await engine.aprocess("a loan please", first.conversation_id)
    assert [c.user for c in llm.calls_to("DIALOGUE_ACT")] == [
        "act: user=ana turn=1 before= now=hello", "rewrite: user=ana turn=2 before=hello now=a loan please"]
