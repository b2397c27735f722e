"""Secret properties on both backends: usable during the turn, absent from every sink afterwards."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import sqlalchemy as sa

from convengine.config_loader.loader import export_pack
from tests.helpers import engine_on, pack
from tests.security.world import packed_audit_text

pytestmark = pytest.mark.asyncio

PIN = "73519"
RULES = [{"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "START", "rule_type": "REGEX",
          "match_pattern": "(?i)pin", "action": "SET_TASK", "action_value": "vault:verify", "priority": 1}]


def secret_pack() -> dict[str, Any]:
    return pack(ce_rule=RULES, settings={"conversation_memory": {"secret": ["pin"]}})


def every_stored_text(url: str) -> str:
    """Every row of every table (ce_*, checkpoints, the store), as text and decoded bytes."""
    engine = sa.create_engine(url)
    parts: list[str] = []
    with engine.connect() as conn:
        for table in sa.inspect(conn).get_table_names():
            for row in conn.execute(sa.text(f'SELECT * FROM "{table}"')):
                for value in row:
                    if isinstance(value, (bytes, bytearray, memoryview)):
                        parts.append(bytes(value).decode("utf-8", "replace"))
                    else:
                        parts.append(str(value))
        parts.extend(packed_audit_text(conn))  # the audit rows are compressed: read them unpacked too
    engine.dispose()
    return "\n".join(parts)


async def test_a_secret_is_usable_during_the_turn_and_stored_nowhere(db_url: str, caplog: Any) -> None:
    seen: list[Any] = []

    def verify(task: Any) -> None:
        seen.append(task.context.get("pin") or task.params.get("pin"))
        task.context["pin_checked"] = True

    caplog.set_level(logging.DEBUG)
    async with engine_on(db_url, secret_pack(), tasks={"vault": {"verify": verify}}) as engine:
        events: list[Any] = []
        subscription = engine.subscribe()
        result = await engine.aprocess(f"a loan, my pin is {PIN}", input_params={"pin": PIN}, user_id="ana")
        cid = result.conversation_id
        await engine.aprocess("and a loan again", cid)
        while not subscription.queue.empty():
            events.append(subscription.queue.get_nowait())
        assert seen == [PIN]  # the task had it
        assert result.context["pin_checked"] is True and "pin" not in result.context
        state = await engine.astate(cid)
        assert PIN not in repr(state) and "pin" not in state["input_params"]
        assert PIN not in repr(await engine.ahistory(cid))
        assert "***" in (await engine.ahistory(cid))[0]["user_input"]
        assert PIN not in repr([e.payload for e in await engine.aaudit(cid)])
        assert events and PIN not in repr([e.payload for e in events])  # the live stream too
        assert PIN not in repr(await engine.asteps(cid))
        stored = every_stored_text(engine._runtime.url.sync_url)  # type: ignore[attr-defined]
        assert "a loan, my pin is ***" in stored and PIN not in stored
        exported = export_pack(engine._runtime.sync_engine)
        assert PIN not in repr(exported)
        assert exported["settings"]["conversation_memory"]["secret"] == ["pin"]
    assert PIN not in caplog.text


async def test_a_secret_in_a_prompt_is_masked_in_the_llm_call_log(db_url: str) -> None:
    from convengine import ScriptedLLM

    llm = ScriptedLLM(default={"dialogueAct": "QUESTION", "confidence": 0.9, "intent": None, "confidence_": 0})
    data = pack(ce_rule=RULES, settings={"conversation_memory": {"secret": ["pin"]}, "llm": {"log_calls": True},
                                         "flow": {"dialogue_act": {"resolute": "REGEX_THEN_LLM"}}})
    async with engine_on(db_url, data, llm=llm, tasks={"vault": {"verify": lambda task: None}}) as engine:
        await engine.aprocess(f"a loan, my pin is {PIN}", input_params={"pin": PIN}, user_id="ana")
    assert any(PIN in call.user_text for call in [c.call for c in llm.calls])  # the model saw it
    engine_ = sa.create_engine(db_url)
    with engine_.connect() as conn:
        logged = [" ".join(str(v) for v in row) for row in conn.execute(sa.text("SELECT * FROM ce_llm_call_log"))]
    engine_.dispose()
    assert logged and not any(PIN in row for row in logged)
    assert any("***" in row for row in logged)


async def test_a_turn_that_fails_early_keeps_the_secret_out_of_its_audit(db_url: str) -> None:
    from convengine import ConvEngineError
    from convengine.nodes.common import Step

    def boom(turn: Any) -> None:
        raise RuntimeError("the vault is down")

    async with engine_on(db_url, secret_pack(), steps=[Step("vault_check", boom, after="rules")]) as engine:
        with pytest.raises(ConvEngineError):
            await engine.aprocess(f"a loan, my pin is {PIN}", input_params={"pin": PIN})
    stored = every_stored_text(db_url)
    assert "vault is down" in stored  # the failure was audited
    assert PIN not in stored


async def test_a_secret_a_failing_step_just_produced_is_masked_in_its_audit(db_url: str) -> None:
    from convengine import ConvEngineError
    from convengine.nodes.common import Step

    def extract_then_fail(turn: Any) -> None:
        turn.context["pin"] = "86420"  # produced during the turn, never sent by the caller
        turn.audit("PIN_EXTRACTED", {"pin": "86420", "fields": {"pin": "86420"}})
        raise RuntimeError("the vault is down")

    async with engine_on(db_url, secret_pack(), steps=[Step("vault_check", extract_then_fail, after="rules")]) as engine:
        with pytest.raises(ConvEngineError):
            await engine.aprocess("a loan please")
    stored = every_stored_text(db_url)
    assert "PIN_EXTRACTED" in stored and "86420" not in stored
