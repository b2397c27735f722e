"""The LLM call log through Engine on both backends: every attempt is a row (failed ones with their
error), the rows of a turn that then fails are kept with its failure audit, and nothing is
logged unless the pack asks for it."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from convengine.catalog.errors import LlmError
from convengine.db import create_sync_engine, parse_database_url
from convengine.llm import ScriptedLLM
from tests.helpers import engine_on, pack


def log_rows(db_url: str) -> list[tuple[Any, ...]]:
    engine = create_sync_engine(parse_database_url(db_url))
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT conversation_id, user_context, success, error_message, response_text, "
                                    "provider, intent_code, state_code FROM ce_llm_call_log "
                                    "ORDER BY llm_call_id")).all()
    engine.dispose()
    return [(str(r[0]), r[1], bool(r[2]), r[3], r[4], r[5], r[6], r[7]) for r in rows]


async def test_every_attempt_is_logged_and_a_failed_turn_keeps_its_rows(db_url: str) -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [ConnectionResetError("reset"), {"intent": "LOAN", "confidence": 0.9},
                                        ValueError("the model refused")]})
    data = pack(settings={"llm": {"log_calls": True, "max_retries": 1}})
    async with engine_on(db_url, data, llm=llm) as engine:
        first = await engine.aprocess("I would like some money")
        cid = first.conversation_id
        with pytest.raises(LlmError):
            await engine.aprocess("something else", cid)
        assert (await engine.astate(cid))["turn"] == 1
    rows = log_rows(db_url)
    assert rows == [
        (cid, "INTENT_AGENT", False, "LLM call INTENT_AGENT failed: ConnectionResetError: reset", None, "scripted",
         "UNKNOWN", "UNKNOWN"),
        (cid, "INTENT_AGENT", True, None, '{"intent": "LOAN", "confidence": 0.9}', "scripted", "UNKNOWN", "UNKNOWN"),
        (cid, "INTENT_AGENT", False, "LLM call INTENT_AGENT failed: ValueError: the model refused", None,
         "scripted", first.intent, first.state),  # where the failed turn started: turn 1's outcome
    ]
    assert first.intent == "LOAN"


async def test_nothing_is_logged_by_default(db_url: str) -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [{"intent": "LOAN", "confidence": 0.9}]})
    async with engine_on(db_url, pack(), llm=llm) as engine:
        assert (await engine.aprocess("I would like some money")).intent == "LOAN"
    assert llm.count() == 1 and log_rows(db_url) == []
