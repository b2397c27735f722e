"""An agent node's own ``model`` and ``temperature``: applied to its planner calls only, checked at load.

On SQLite and PostgreSQL, with ScriptedLLM and with the real ChatOpenAI client against a local
OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from convengine.db import create_sync_engine, parse_database_url
from convengine.llm import ScriptedLLM
from tests.flows.packs import chain, node
from tests.flows.test_nodes import one_flow
from tests.flows.test_validation import violations
from tests.helpers import engine_on, turn_events
from tests.openai_stub import stub_server

ANSWER = {"action": "ANSWER", "tool_code": None, "args": None, "answer": "Loans are at 5.5% today.",
          "operation_tag": None}


def agent_pack(**options: Any) -> dict[str, Any]:
    nodes = [node("AG", "start", "start"),
             node("AG", "helper", "agent", instructions="Answer rate questions.", greeting="Ask me about rates.",
                  stay=True, **options),
             node("AG", "end", "end")]
    data = one_flow("AG", nodes, chain("AG", "start", "helper", "end"))
    data["settings"]["llm"] = {"log-calls": True}
    return data


def call_log(db_url: str) -> list[tuple[str, str, float]]:
    db = create_sync_engine(parse_database_url(db_url))
    with db.connect() as conn:
        rows = conn.execute(sa.text("SELECT user_context, model, temperature FROM ce_llm_call_log "
                                    "ORDER BY llm_call_id")).all()
    db.dispose()
    return [(r[0], r[1], float(r[2])) for r in rows]


async def test_the_agents_model_and_temperature_reach_its_calls_only(db_url: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": [ANSWER], "INTENT_AGENT": {"intent": None, "confidence": 0}},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, agent_pack(model="gpt-agent-mini", temperature=0.7), llm=llm) as engine:
        first = await engine.aprocess("hello")
        answer = await engine.aprocess("what is the rate today?", first.conversation_id)
        assert answer.text == "Loans are at 5.5% today."
        planner = llm.calls_to("MCP_PLANNER")
        assert [(c.model, c.temperature) for c in planner] == [("gpt-agent-mini", 0.7)]
        others = [c.call for c in llm.calls if c.call.call_site != "MCP_PLANNER"]
        assert others and all((c.model, c.temperature) == (None, None) for c in others)
        calls = [e.payload for e in await turn_events(engine, first.conversation_id) if e.stage == "LLM_CALL"]
        agent_call = next(c for c in calls if c["callSite"] == "MCP_PLANNER")
        assert (agent_call["model"], agent_call["temperature"]) == ("gpt-agent-mini", 0.7)
        assert all(c["model"] == "scripted" and "temperature" not in c for c in calls if c is not agent_call)
    log = call_log(db_url)
    assert ("MCP_PLANNER", "gpt-agent-mini", 0.7) in log
    assert all(model != "gpt-agent-mini" and temperature == 0.0 for site, model, temperature in log
               if site != "MCP_PLANNER")


async def test_an_agent_without_options_uses_the_configured_model(db_url: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": [ANSWER], "INTENT_AGENT": {"intent": None, "confidence": 0}},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, agent_pack(), llm=llm) as engine:
        first = await engine.aprocess("hello")
        await engine.aprocess("what is the rate today?", first.conversation_id)
        assert [(c.model, c.temperature) for c in llm.calls_to("MCP_PLANNER")] == [(None, None)]


def planner_or_other(body: dict[str, Any]) -> str:
    """The planner's plan for the agent's calls; a dialogue act / no intent for the engine's own calls."""
    name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
    if name == "mcp_planner":
        return json.dumps(ANSWER)
    if name == "intent_agent":
        return json.dumps({"intent": None, "confidence": 0})
    return json.dumps({"dialogueAct": "NEW_REQUEST", "confidence": 0.8})


async def test_chat_openai_requests_carry_the_agents_options_and_the_defaults_elsewhere(db_url: str) -> None:
    with stub_server(planner_or_other) as server:
        model = ChatOpenAI(base_url=server.base_url, api_key=SecretStr("test-key"), model="stub-model", temperature=0.0,
                           max_retries=0, timeout=10, use_responses_api=False)
        async with engine_on(db_url, agent_pack(model="agent-model", temperature=1.3), llm=model) as engine:
            first = await engine.aprocess("hello")
            answer = await engine.aprocess("what is the rate today?", first.conversation_id)
            assert answer.text == "Loans are at 5.5% today."
            calls = [e.payload for e in await turn_events(engine, first.conversation_id) if e.stage == "LLM_CALL"]
        assert model.model_name == "stub-model" and model.temperature == 0.0  # the shared model is unchanged
    sent = [(((r.get("response_format") or {}).get("json_schema") or {}).get("name"), r["model"], r.get("temperature"))
            for r in server.requests]
    assert ("mcp_planner", "agent-model", 1.3) in sent
    others = [s for s in sent if s[0] != "mcp_planner"]
    assert others and all((m, t) == ("stub-model", 0.0) for _, m, t in others)
    assert ("MCP_PLANNER", "agent-model") in [(c["callSite"], c["model"]) for c in calls]
    assert all(c["model"] == "stub-model" for c in calls if c["callSite"] != "MCP_PLANNER")
    assert ("MCP_PLANNER", "agent-model", 1.3) in call_log(db_url)


async def test_a_chat_model_without_a_model_field_fails_the_agent_clearly(db_url: str) -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    fake = FakeListChatModel(responses=[json.dumps({"dialogueAct": "NEW_REQUEST", "confidence": 0.8})] * 10)
    nodes = [node("AG", "start", "start"),
             node("AG", "helper", "agent", instructions="Answer.", model="agent-model"),
             node("AG", "sorry", "message", text="The assistant is unavailable."), node("AG", "end", "end")]
    edges = [*chain("AG", "start", "helper", "end"), *chain("AG", "sorry", "end")]
    edges.append({"flow_code": "AG", "from_node": "helper", "to_node": "sorry", "outcome": "error", "priority": 1})
    async with engine_on(db_url, one_flow("AG", nodes, edges), llm=fake) as engine:
        result = await engine.aprocess("hello")
        assert result.text == "The assistant is unavailable."
        events = await turn_events(engine, result.conversation_id)
        error = next(e.payload for e in events if e.stage == "LLM_CALL_ERROR" and e.payload["callSite"] == "MCP_PLANNER")
        assert "has no model field" in error["error"] and "agent-model" in error["error"]


@pytest.mark.parametrize(("options", "message"), [
    ({"temperature": 2.5}, "temperature must be a number from 0 to 2 (got '2.5')"),
    ({"temperature": -0.1}, "temperature must be a number from 0 to 2"),
    ({"temperature": "hot"}, "temperature must be a number from 0 to 2 (got 'hot')"),
    ({"temperature": True}, "temperature must be a number from 0 to 2"),
    ({"model": ""}, "model must be a non-empty model name of at most 200 characters"),
    ({"model": "   "}, "model must be a non-empty model name"),
    ({"model": 42}, "model must be a non-empty model name"),
    ({"model": "m" * 201}, "model must be a non-empty model name of at most 200 characters"),
])
def test_bad_agent_options_are_refused_at_load_naming_flow_and_node(options: dict[str, Any], message: str) -> None:
    found = violations([node("BAD", "start", "start"),
                        node("BAD", "helper", "agent", instructions="Help.", stay=True, **options),
                        node("BAD", "end", "end")], chain("BAD", "start", "helper", "end"))
    assert [v for v in found if "flow BAD node helper" in v and message in v], found


def test_good_agent_options_load() -> None:
    assert not [v for v in _agent_violations(model="m" * 200, temperature=2) if "helper" in v]
    assert not [v for v in _agent_violations(model="gpt-4o-mini", temperature=0) if "helper" in v]


def _agent_violations(**options: Any) -> list[str]:
    """The violations of a flow whose only fault is an unreachable node (so the load is refused)."""
    return violations([node("BAD", "start", "start"),
                       node("BAD", "helper", "agent", instructions="Help.", stay=True, **options),
                       node("BAD", "end", "end"), node("BAD", "lost", "end")], chain("BAD", "start", "helper", "end"))
