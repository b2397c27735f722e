"""A declared long-term property is saved whichever way the turn set it: a rule's SET_INPUT_PARAM, a
task's param or context, an extraction, and the caller's inputParams only where the pack allows it.
The user's next conversation sees it in its context and in ``{{ properties.x }}``; loading such a
pack warns about none of the documented template namespaces."""

from __future__ import annotations

from typing import Any

import pytest

from convengine import ScriptedLLM
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio

SHOW = {"intent_code": "GREETING", "state_code": "IDLE", "priority": 1,
        "exact_text": "Hi {{ userInfo.userId }}, you like {{ properties.favoriteColor }}"}


def color_pack(*rules: dict[str, Any], **memory: Any) -> dict[str, Any]:
    return pack(ce_rule=list(rules), ce_response=[SHOW],
                settings={"conversation_memory": {"long_term": ["favoriteColor"], **memory}})


def rule(action: str, value: str) -> dict[str, Any]:
    return {"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "START", "rule_type": "REGEX",
            "match_pattern": "(?i)teal", "action": action, "action_value": value, "priority": 1}


async def next_conversation_sees(engine: Any, user: str, color: str) -> None:
    assert await engine.aproperties(user) == {"favoriteColor": color}
    nxt = await engine.aprocess("hello", user_id=user)
    assert nxt.context["favoriteColor"] == color
    assert nxt.payload.value == f"Hi {user}, you like {color}"


async def test_a_rule_set_input_param_is_saved_and_seen_by_the_next_conversation(db_url: str) -> None:
    async with engine_on(db_url, color_pack(rule("SET_INPUT_PARAM", "favoriteColor:teal"))) as engine:
        first = await engine.aprocess("a loan in teal", user_id="alice")
        saved = [e.payload for e in await engine.aaudit(first.conversation_id)
                 if e.stage == "LONG_TERM_PROPERTIES_SAVED"]
        assert saved == [{"properties": ["favoriteColor"]}]
        await next_conversation_sees(engine, "alice", "teal")
        assert await engine.aproperties("bob") == {}


async def test_a_later_change_by_a_rule_replaces_the_loaded_value(db_url: str) -> None:
    data = color_pack(rule("SET_INPUT_PARAM", "favoriteColor:teal"),
                      {**rule("SET_INPUT_PARAM", "favoriteColor:red"), "match_pattern": "(?i)red"})
    async with engine_on(db_url, data) as engine:
        await engine.aprocess("a loan in teal", user_id="alice")
        second = await engine.aprocess("hello", user_id="alice")
        await engine.aprocess("a loan in red", second.conversation_id)
        await next_conversation_sees(engine, "alice", "red")


async def test_a_task_param_is_saved(db_url: str) -> None:
    def paint(task: Any) -> None:
        task.params["favoriteColor"] = "navy"

    async with engine_on(db_url, color_pack(rule("SET_TASK", "prefs:paint")),
                         tasks={"prefs": {"paint": paint}}) as engine:
        await engine.aprocess("a loan in teal", user_id="alice")
        await next_conversation_sees(engine, "alice", "navy")


async def test_an_extracted_value_is_saved(db_url: str) -> None:
    schema = {"type": "object", "properties": {"favoriteColor": {"type": "string"}}, "required": ["favoriteColor"]}
    data = color_pack()
    data["ce_output_schema"] = [{"schema_id": 5, "intent_code": "LOAN", "state_code": "ANY", "priority": 1,
                                 "json_schema": schema}]
    data["ce_prompt_template"] = [{"template_id": 31, "intent_code": "LOAN", "state_code": "START",
                                   "output_format": "SCHEMA_JSON", "system_prompt": "Extract.",
                                   "user_prompt": "{{schema}}: {{user_input}}"}]
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [{"favoriteColor": "olive"}]})
    async with engine_on(db_url, data, llm=llm) as engine:
        await engine.aprocess("a loan, I like olive", user_id="alice")
        await next_conversation_sees(engine, "alice", "olive")


async def test_a_callers_param_is_saved_only_where_the_pack_allows_it(db_url: str) -> None:
    async with engine_on(db_url, color_pack()) as engine:
        sent = await engine.aprocess("a loan", input_params={"favoriteColor": "pink"}, user_id="alice")
        assert (await engine.astate(sent.conversation_id))["input_params"]["favoriteColor"] == "pink"
        assert await engine.aproperties("alice") == {}  # the caller may not write the user's memory
    async with engine_on(db_url, color_pack(long_term_from_caller=["favoriteColor"])) as engine:
        await engine.aprocess("a loan", input_params={"favoriteColor": "pink"}, user_id="carol")
        await next_conversation_sees(engine, "carol", "pink")


async def test_a_param_a_caller_sent_earlier_is_not_saved_by_a_later_turn(db_url: str) -> None:
    async with engine_on(db_url, color_pack()) as engine:
        cid = (await engine.aprocess("a loan", input_params={"favoriteColor": "pink"}, user_id="alice")).conversation_id
        await engine.aprocess("a loan again", cid)
        assert await engine.aproperties("alice") == {}


async def test_a_caller_setting_must_name_declared_properties() -> None:
    from convengine.settings import EngineSettings

    with pytest.raises(ValueError, match="favoriteColour"):
        EngineSettings.model_validate({"conversation_memory": {"long_term": ["favoriteColor"],
                                                               "long_term_from_caller": ["favoriteColour"]}})


@pytest.mark.parametrize("name", ["properties", "memory", "userInfo", "conversationInfo", "conversationLog",
                                  "context"])
async def test_documented_namespaces_raise_no_warning(db_url: str, name: str) -> None:
    data = color_pack()
    data["ce_response"] = [{**SHOW, "exact_text": f"{{{{ {name} }}}}"}]
    async with engine_on(db_url, data) as engine:
        assert not [w for w in engine.warnings if repr(name) in w]
        await engine.aprocess("hello", user_id="alice")  # and it renders


async def test_an_unknown_name_is_still_warned_about(db_url: str) -> None:
    data = color_pack()
    data["ce_response"] = [{**SHOW, "exact_text": "{{ propertys.favoriteColor }}"}]
    async with engine_on(db_url, data) as engine:
        assert [w for w in engine.warnings if "'propertys'" in w]


async def test_every_namespace_a_template_is_given_is_known_to_the_load_time_checks() -> None:
    from convengine.config_loader.template_checks import engine_names
    from convengine.templates.namespaces import NAMESPACES, PRODUCERS

    assert tuple(PRODUCERS) == NAMESPACES  # each produced from the turn only when a template asks
    assert set(NAMESPACES) <= engine_names()
