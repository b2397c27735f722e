"""LLM spend: calls priced per model (or the default price), summed per calendar month (UTC)
against the monthly cap, and accounting that never breaks a turn."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from convengine.db import create_sync_engine, parse_database_url
from convengine.llm import spend
from convengine.settings import LlmSpendSettings
from tests.helpers import engine_on, pack, payload_of, turn_events, turn_stages
from tests.llm.fakes import FakeStore, FakeTurn

PRICES = {"big-model": {"input_per_million": 1000, "output_per_million": 2000},
          "default": {"input_per_million": 1, "output_per_million": 1}}


def test_a_call_is_priced_by_its_model_else_the_default_else_free() -> None:
    priced = LlmSpendSettings(prices=PRICES)
    usage = {"input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500}
    assert spend.price(priced, "big-model", usage) == 2.0
    assert spend.price(priced, "other-model", usage) == 0.0015
    assert spend.price(priced, None, usage) == 0.0015
    assert spend.price(LlmSpendSettings(), "big-model", usage) == 0.0
    assert spend.price(priced, "big-model", {}) == 0.0


async def test_usage_is_recorded_only_with_a_store_and_tokens_and_a_failed_write_is_audited() -> None:
    turn, store = FakeTurn(), FakeStore()
    await spend.record(None, turn, "POLICY", "m", {"input_tokens": 1})
    await spend.record(store, turn, "POLICY", "m", {})  # a scripted model reports no usage
    assert store.writes == [] and turn.events == []
    await spend.record(store, turn, "POLICY", "m", {"input_tokens": 3, "output_tokens": 4})
    assert len(store.writes) == 1
    await spend.record(FakeStore(fail=True), turn, "POLICY", "m", {"input_tokens": 3})
    assert turn.payloads("LLM_USAGE_WRITE_FAILED") == [{"callSite": "POLICY"}]


def agent_reply(tokens_in: int, tokens_out: int) -> AIMessage:
    return AIMessage(content=json.dumps({"intent": "LOAN", "confidence": 0.9}),
                     usage_metadata={"input_tokens": tokens_in, "output_tokens": tokens_out,
                                     "total_tokens": tokens_in + tokens_out})


def add_last_months_usage(db_url: str, cost: float) -> None:
    created = spend.month_start() - timedelta(days=1)
    engine = create_sync_engine(parse_database_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.insert(spend.USAGE), [{"call_site": "INTENT_AGENT", "model": "x", "input_tokens": 1,
                                               "output_tokens": 1, "cost": cost, "created_at": created}])
    engine.dispose()


def usage_rows(db_url: str) -> list[Any]:
    engine = create_sync_engine(parse_database_url(db_url))
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT call_site, model, input_tokens, output_tokens, cost FROM ce_llm_usage "
                                    "WHERE model <> 'x'")).all()
    engine.dispose()
    return [tuple(r) for r in rows]


async def test_last_months_spend_does_not_count_and_this_months_reaches_the_cap(db_url: str) -> None:
    model = GenericFakeChatModel(messages=iter([agent_reply(1000, 500)]))
    prices = {"GenericFakeChatModel": PRICES["big-model"], "default": PRICES["default"]}
    data = pack(settings={"llm": {"spend": {"monthly_cap": 1.0, "prices": prices}}})
    add_last_months_usage(db_url, 50.0)
    async with engine_on(db_url, data, llm=model) as engine:
        first = await engine.aprocess("I would like some money")  # no classifier matches: the agent is asked
        assert first.intent == "LOAN"
        assert "LLM_SPEND_CAP_REACHED" not in await turn_stages(engine, first.conversation_id)
        assert [(r[0], r[1], r[2], r[3], round(float(r[4]), 6)) for r in usage_rows(db_url)] == [
            ("INTENT_AGENT", "GenericFakeChatModel", 1000, 500, 2.0)]

        second = await engine.aprocess("something else entirely", first.conversation_id)
        events = await turn_events(engine, first.conversation_id)
        capped = payload_of(events, "LLM_SPEND_CAP_REACHED")
        assert (capped["callSite"], capped["spent"], capped["cap"], capped["skipped"]) == ("INTENT_AGENT", 2.0, 1.0,
                                                                                          True)
        assert capped["month"] == spend.month_start().strftime("%Y-%m")
        assert payload_of(events, "INTENT_AGENT_SKIPPED")["reason"] == "SPEND_CAP_REACHED"
        assert "LLM_CALL" not in [e.stage for e in events] and second.intent == "LOAN"  # kept from turn 1
