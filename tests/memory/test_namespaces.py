"""The memory namespaces in templates (both backends): properties, memory.current/last/past, userInfo,
conversationInfo and conversationLog, next to the engine's own variables."""

from __future__ import annotations

import pytest

from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio

TEMPLATE = ("user={{userInfo.userId}} lang={{properties.language}} turn={{conversationInfo.turn}} "
            "last={{memory.last.input}} now={{memory.current.input}} past={{memory.past | length}} "
            "summary={{memory.session_summary is defined}}|{{conversationLog}}")


async def test_templates_see_the_memory_namespaces(db_url: str) -> None:
    data = pack(ce_response=[{"intent_code": "GREETING", "state_code": "IDLE", "exact_text": TEMPLATE,
                              "priority": 1}],
                settings={"conversation_memory": {"long_term": ["language"]}})
    async with engine_on(db_url, data) as engine:
        first = await engine.aprocess("a loan", input_params={"language": "de"}, user_id="ana")
        second = await engine.aprocess("hello", first.conversation_id)
        assert second.payload.value == ("user=ana lang=de turn=2 last=a loan now=hello past=1 summary=true|"
                                        "user: a loan\nassistant: Loan started")
        anonymous = await engine.aprocess("hello")
        assert anonymous.payload.value == "user= lang= turn=1 last= now=hello past=0 summary=false|"


async def test_rules_match_on_the_memory_namespaces(db_url: str) -> None:
    rule = {"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "GREETING", "state_code": "IDLE",
            "rule_type": "JSON_PATH", "priority": 1, "action": "SET_INPUT_PARAM",
            "match_pattern": "$[?(@.userInfo.userId == 'ana' && @.properties.language == 'de' && "
                             "@.conversationInfo.turn == 2 && @.memory.last.input == 'a loan')]",
            "action_value": '{"greeted_by_name": true}'}
    data = pack(ce_rule=[rule], settings={"conversation_memory": {"long_term": ["language"]}})
    async with engine_on(db_url, data) as engine:
        first = await engine.aprocess("a loan", input_params={"language": "de"}, user_id="ana")
        second = await engine.aprocess("hello", first.conversation_id)
        assert (await engine.astate(second.conversation_id))["input_params"].get("greeted_by_name") is True
        other = await engine.aprocess("a loan", input_params={"language": "de"}, user_id="bob")
        again = await engine.aprocess("hello", other.conversation_id)
        assert "greeted_by_name" not in (await engine.astate(again.conversation_id))["input_params"]
