"""The monthly LLM spend cap: usage recorded per call site and priced; at the cap the LLM intent
matcher is skipped (audited) and deterministic paths go on. SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from convengine.db import create_sync_engine, parse_database_url
from tests.flows.packs import chain, flows_pack, node
from tests.helpers import engine_on, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio


def reply(content: dict[str, object], tokens_in: int, tokens_out: int) -> AIMessage:
    return AIMessage(content=json.dumps(content), usage_metadata={
        "input_tokens": tokens_in, "output_tokens": tokens_out, "total_tokens": tokens_in + tokens_out})


async def test_usage_is_priced_and_the_cap_skips_the_llm_matcher(db_url: str) -> None:
    answer = {"action": "ANSWER", "tool_code": None, "args": None, "answer": "Rates are 5% today.",
              "operation_tag": None}
    model = GenericFakeChatModel(messages=iter([reply(answer, 1000, 500)]))
    nodes = [node("AG", "start", "start"), node("AG", "helper", "agent", instructions="Answer about rates."),
             node("AG", "end", "end")]
    data = flows_pack(nodes=nodes, edges=chain("AG", "start", "helper", "end"),
                      flows=[{"flow_code": "AG", "intent_code": "GREETING", "priority": 1}])
    data["settings"]["llm"] = {"spend": {"monthly-cap": 1.5, "prices": {
        "default": {"input-per-million": 1000, "output-per-million": 2000}}}}
    async with engine_on(db_url, data, llm=model) as engine:
        first = await engine.aprocess("hello")
        assert first.text == "Rates are 5% today."
        call = payload_of(await turn_events(engine, first.conversation_id), "LLM_CALL")
        assert call["callSite"] == "MCP_PLANNER" and call["usage"]["input_tokens"] == 1000

        sync = create_sync_engine(parse_database_url(db_url))
        with sync.connect() as conn:
            rows = conn.execute(sa.text("SELECT call_site, input_tokens, output_tokens, cost FROM ce_llm_usage")).all()
        sync.dispose()
        assert [(r[0], r[1], r[2], round(float(r[3]), 6)) for r in rows] == [("MCP_PLANNER", 1000, 500, 2.0)]

        unmatched = await engine.aprocess("something nobody scripted", first.conversation_id)
        stages = await turn_stages(engine, first.conversation_id)
        assert "LLM_SPEND_CAP_REACHED" in stages and "LLM_CALL" not in stages
        skipped = payload_of(await turn_events(engine, first.conversation_id), "INTENT_AGENT_SKIPPED")
        assert skipped["reason"] == "SPEND_CAP_REACHED"
        cap = payload_of(await turn_events(engine, first.conversation_id), "LLM_SPEND_CAP_REACHED")
        assert cap["spent"] == 2.0 and cap["cap"] == 1.5
        assert unmatched.intent == "UNKNOWN"

        loan = await engine.aprocess("I want a loan", first.conversation_id)  # deterministic paths go on
        assert loan.text == "How much would you like to borrow?"
