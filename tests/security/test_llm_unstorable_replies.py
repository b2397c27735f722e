"""A model's reply is untrusted text: a NUL character or a lone surrogate in it (a prompt-injected or
broken model) must not fail the turn on PostgreSQL (whose text and jsonb cannot hold a NUL) while SQLite
stores it. Both backends answer the same turn, with the characters replaced, and record it once."""

from __future__ import annotations

import pytest

from convengine.llm import ScriptedLLM
from tests.helpers import engine_on, pack, turn_events

pytestmark = pytest.mark.asyncio

DERIVED_TEXT = [{"intent_code": "LOAN", "state_code": "START", "response_type": "DERIVED", "output_format": "TEXT"}]
PROMPT = [{"template_id": 9, "intent_code": "LOAN", "state_code": "START", "output_format": "TEXT",
           "system_prompt": "Be brief", "user_prompt": "{{ user_input }}"}]


def loan_pack() -> dict[str, object]:
    data = pack(ce_prompt_template=PROMPT)
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    data["ce_response"][:0] = DERIVED_TEXT
    return data


@pytest.mark.parametrize("reply", ["Your loan\x00 is started", "Your loan \ud800 is started",
                                   "\x00\x00", "nul \\u0000 as text"])
async def test_a_reply_with_unstorable_characters_is_answered_and_recorded(db_url: str, reply: str) -> None:
    llm = ScriptedLLM({"RESPONSE_TEXT": [reply]})
    async with engine_on(db_url, loan_pack(), llm=llm) as engine:
        result = await engine.aprocess("I need a loan")
        expected = reply.replace("\x00", "\ufffd").replace("\ud800", "\ufffd")
        assert (result.status, result.payload.value) == ("RUNNING", expected)
        events = await turn_events(engine, result.conversation_id)
        assert not [e for e in events if e.stage.startswith("ENGINE_") and "FAILURE" in e.stage]
        returned = [e.payload for e in events if e.stage == "ENGINE_RETURN"]
        assert len(returned) == 1 and returned[0]["payload"]["value"] == expected
