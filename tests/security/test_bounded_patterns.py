"""Every pattern a pack brings runs in linear time, or the pack is refused at load.

Attack: a rule ``$[?(@.userText =~ "^(a+)+$")]`` and the 28-character message ``aaaa…a!`` took
24 s, and ``/health`` took 22.8 s meanwhile: JSONPath's ``=~`` used Python's backtracking ``re``
on the event loop. The same held for ``sub()`` in a path and for ``pattern`` in a pack's JSON
Schema checking an LLM reply (untrusted text).
"""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from convengine.catalog.errors import ConfigValidationError, ConvEngineError
from tests.conftest import EXAMPLES
from tests.helpers import engine_on, pack
from tests.security.world import assert_unchanged

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

EVIL = "a" * 28 + "!"
REDOS_RULES = [
    {"rule_id": 1, "phase": "POST_DIALOGUE_ACT", "intent_code": "ANY", "state_code": "ANY", "rule_type": "JSON_PATH",
     "match_pattern": '$[?(@.userText =~ "^(a+)+$")]', "action": "SET_STATE", "action_value": "HIJACKED"},
    {"rule_id": 2, "phase": "POST_DIALOGUE_ACT", "intent_code": "ANY", "state_code": "ANY", "rule_type": "JSON_PATH",
     "match_pattern": "$.userText.`sub(/^(a+)+$/, x)`", "action": "SET_STATE", "action_value": "HIJACKED"},
]


def hostile_pack(rules: list[dict[str, Any]] = REDOS_RULES) -> dict[str, Any]:
    return pack(ce_rule=rules, ce_response=[{"intent_code": "ANY", "state_code": "HIJACKED", "exact_text": "matched"}])


async def test_a_catastrophic_jsonpath_regex_does_not_stall_the_server(db_url: str, serve: Any, world: Any,
                                                                        tmp_path: Path) -> None:
    path = tmp_path / "redos.yaml"
    path.write_text(yaml.safe_dump(hostile_pack()))
    server = serve(pack=path)
    async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
        cid = (await client.post("/api/v1/conversation/message", json={"message": "hello"})).json()["conversationId"]
        before = world(attacker=cid)
        health_times: list[float] = []

        async def poll_health() -> None:
            for _ in range(10):
                started = time.monotonic()
                assert (await client.get("/health")).status_code == 200
                health_times.append(time.monotonic() - started)
                await asyncio.sleep(0.05)

        turn, _ = await asyncio.gather(
            client.post("/api/v1/conversation/message", json={"message": EVIL, "conversationId": cid}), poll_health())
        assert turn.json()["success"] and turn.json()["state"] != "HIJACKED"
        assert max(health_times) < 5  # the old code kept /health waiting for ~23 s
        assert_unchanged(before, world(attacker=cid))


async def test_jsonpath_regexes_match_as_before_on_ordinary_input(db_url: str) -> None:
    async with engine_on(db_url, hostile_pack()) as engine:
        assert (await engine.aprocess(EVIL)).state != "HIJACKED"
        assert (await engine.aprocess("aaaa")).state == "HIJACKED"  # the rule still works where it should


@pytest.mark.parametrize("pattern", ['$[?(@.userText =~ "^(?=a)")]', "$.userText.`sub(/(?<=a)b/, x)`"])
async def test_a_regex_that_needs_backtracking_is_refused_at_load(db_url: str, pattern: str) -> None:
    rule = {**REDOS_RULES[0], "rule_id": 7, "match_pattern": pattern}
    with pytest.raises(ConfigValidationError) as raised:
        async with engine_on(db_url, hostile_pack([rule])):
            pass
    assert "ce_rule" in raised.value.message and "linear-time" in raised.value.message


def _loan_pack(pattern: str) -> dict[str, Any]:
    data = copy.deepcopy(yaml.safe_load((EXAMPLES / "loan_application.yaml").read_text()))
    data["ce_output_schema"][0]["json_schema"]["properties"]["customerName"]["pattern"] = pattern
    return data


async def test_a_catastrophic_schema_pattern_against_an_llm_reply_finishes(db_url: str) -> None:
    from convengine import ScriptedLLM

    llm = ScriptedLLM({"SCHEMA_EXTRACTION": lambda call: {"customerName": "a" * 40 + "!", "amount": None,
                                                          "termMonths": None}},
                      default={"dialogueAct": "ANSWER", "confidence": 0.9})
    async with engine_on(db_url, _loan_pack("^(a+)+$"), llm=llm) as engine:
        first = await engine.aprocess("I want a loan")
        started = time.monotonic()
        try:
            await engine.aprocess("my name is aaaa", first.conversation_id)
        except ConvEngineError as exc:  # the reply breaks the schema: a clear LLM error, not a hang
            assert exc.code.value == "LLM_SCHEMA_VIOLATION"
        assert time.monotonic() - started < 10  # 2**40 steps with a backtracking engine


async def test_a_schema_pattern_that_needs_backtracking_is_refused_at_load(db_url: str) -> None:
    with pytest.raises(ConfigValidationError) as raised:
        async with engine_on(db_url, _loan_pack("^(?!x)a")):
            pass
    assert "ce_output_schema" in raised.value.message and "linear-time" in raised.value.message
