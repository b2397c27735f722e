"""service, python and knowledge nodes, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on, payload_of, turn_events, turn_stages
from tests.http_stub import http_server

pytestmark = pytest.mark.asyncio


def one_flow(code: str, nodes: list[dict[str, Any]], edges: list[dict[str, Any]], **settings: Any) -> dict[str, Any]:
    """The flows pack with ``code`` entered by the GREETING intent ("hello")."""
    return flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": code, "intent_code": "GREETING",
                                                        "priority": 1}], **settings)


async def test_service_node_calls_the_server_maps_outputs_and_keeps_secrets_out(db_url: str,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUOTE_API_TOKEN", "s3cr3t-token-value")
    calls = {"n": 0}

    def reply(path: str, body: Any) -> tuple[int, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            return 503, {"error": "busy"}  # retried
        return 200, {"quote": {"rate": 4.5, "term": body["term"]}, "id": path}

    with http_server(reply) as stub:
        nodes = [
            node("SVC", "start", "start"),
            node("SVC", "ask", "entity", variable="term", prompt="For how many months?", type="number"),
            node("SVC", "quote", "service", service_id="quote", method="POST",
                 url=stub.url + "/quotes/{{ session.term }}", headers={"Authorization": "Bearer ${env:QUOTE_API_TOKEN}"},
                 body={"term": "{{ session.term }}"}, retries=1, timeout_ms=2000,
                 outputs={"rate": "$.quote.rate"}),
            node("SVC", "say", "message", text="Rate {{ session.rate }} for {{ session.quote.quote.term }} months."),
            node("SVC", "oops", "message", text="The quote service failed."),
            node("SVC", "end", "end"),
        ]
        edges = [*chain("SVC", "start", "ask", "quote", "say", "end"), edge("SVC", "quote", "oops", outcome="error"),
                 edge("SVC", "oops", "end")]
        data = one_flow("SVC", nodes, edges)
        data["settings"]["mcp"] = {"http-api": {"allowed-hosts": ["127.0.0.1"],
                                                "defaults": {"initial-backoff-ms": 1}}}
        # the operator lets packs read QUOTE_API_TOKEN (tests/security/test_pack_env_attacks.py)
        async with engine_on(db_url, data, settings={"security": {"pack_env_names": ["QUOTE_API_TOKEN"]}}) as engine:
            cid = (await engine.aprocess("hello")).conversation_id
            result = await engine.aprocess("24", cid)
            assert result.text == "Rate 4.5 for 24 months."
            assert stub.requests[-1]["path"] == "/quotes/24"
            assert stub.requests[-1]["headers"]["Authorization"] == "Bearer s3cr3t-token-value"
            assert stub.requests[-1]["body"] == {"term": "24"}
            called = payload_of(await turn_events(engine, cid), "FLOW_SERVICE_CALLED")
            assert called["attempt"] == 2 and called["response"]["quote"]["rate"] == 4.5
            state = await engine.astate(cid)
            assert state["flow"]["vars"]["quote"]["id"] == "/quotes/24"  # kept at session.<service_id>
            stored = repr(state) + repr([e.payload for e in await engine.aaudit(cid)])
            assert "s3cr3t-token-value" not in stored
            assert "${env:QUOTE_API_TOKEN}" in repr(engine.snapshot.flow_nodes)  # the reference, not the value

            calls["n"] = 100
            stub.reply = lambda path, body: (500, {"error": "down"})
            cid2 = (await engine.aprocess("hello")).conversation_id
            failed = await engine.aprocess("12", cid2)
            assert failed.text == "The quote service failed."
            assert "FLOW_SERVICE_FAILED" in await turn_stages(engine, cid2)


async def test_python_node_reads_and_writes_session_and_prints_into_the_trace(db_url: str) -> None:
    code = "session['total'] = session['amount'] * 2\nflow['seen'] = True\nprint('doubled', session['total'])"
    nodes = [node("PY", "start", "start"),
             node("PY", "ask", "entity", variable="amount", prompt="Amount?", type="number"),
             node("PY", "calc", "python", code=code),
             node("PY", "say", "message", text="Total {{ session.total }}, seen={{ flow.seen }}"),
             node("PY", "broken", "message", text="Script failed."),
             node("PY", "end", "end")]
    edges = [*chain("PY", "start", "ask", "calc", "say", "end"), edge("PY", "calc", "broken", outcome="error"),
             edge("PY", "broken", "end")]
    async with engine_on(db_url, one_flow("PY", nodes, edges)) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        result = await engine.aprocess("21", cid)
        assert result.text == "Total 42, seen=true"
        ran = payload_of(await turn_events(engine, cid), "FLOW_SCRIPT_RAN")
        assert ran["stdout"] == "doubled 42\n"


@pytest.mark.parametrize(("code", "error"), [
    ("while True:\n    pass", "TimeoutError"),
    ("blob = 'x' * (1024 ** 3)", "MemoryError"),
])
async def test_python_node_limits_take_the_error_edge(db_url: str, code: str, error: str) -> None:
    nodes = [node("PY", "start", "start"), node("PY", "calc", "python", code=code),
             node("PY", "ok", "message", text="ok"), node("PY", "broken", "message", text="Script failed."),
             node("PY", "end", "end")]
    edges = [*chain("PY", "start", "calc", "ok", "end"), edge("PY", "calc", "broken", outcome="error"),
             edge("PY", "broken", "end")]
    data = one_flow("PY", nodes, edges, **{"python-timeout-s": 1.0, "python-memory-mb": 256})
    async with engine_on(db_url, data) as engine:
        started = asyncio.get_running_loop().time()
        result = await engine.aprocess("hello")
        assert asyncio.get_running_loop().time() - started < 10
        assert result.text == "Script failed."
        failed = payload_of(await turn_events(engine, result.conversation_id), "FLOW_SCRIPT_FAILED")
        assert failed["error"].startswith(error)


async def test_knowledge_node_found_and_not_found(db_url: str) -> None:
    nodes = [node("KB", "start", "start"),
             node("KB", "ask", "entity", variable="q", prompt="What is your question?"),
             node("KB", "search", "knowledge", query="{{ session.q }}", knowledge_bases=["faq"], min_score=0.5),
             node("KB", "none", "message", text="I could not find that."),
             node("KB", "end", "end")]
    edges = [*chain("KB", "start", "ask", "search", "end"), edge("KB", "search", "none", outcome="not_found"),
             edge("KB", "none", "end")]
    async with engine_on(db_url, one_flow("KB", nodes, edges)) as engine:
        await asyncio.to_thread(engine.knowledge.add_text, "faq", "hours.md",
                                "Opening hours: the branch opens at nine and closes at five.")
        cid = (await engine.aprocess("hello")).conversation_id
        found = await engine.aprocess("when does the branch open", cid)
        assert "opens at nine" in found.text
        [source] = found.payload.sources  # the node's reply names its passage, as the fallback's does
        assert (source["kb"], source["source"], source["position"]) == ("faq", "hours.md", 0)
        assert source["score"] >= 0.5
        assert payload_of(await turn_events(engine, cid), "FLOW_KNOWLEDGE")["found"] is True
        cid2 = (await engine.aprocess("hello")).conversation_id
        missing = await engine.aprocess("quantum chromodynamics", cid2)
        assert missing.text == "I could not find that." and missing.payload.sources is None


async def test_agent_node_uses_its_tools_and_remembers(db_url: str) -> None:
    from convengine.llm import ScriptedLLM

    def plan(**step: Any) -> dict[str, Any]:
        return {"action": "CALL_TOOL", "tool_code": None, "args": None, "answer": None, "operation_tag": None, **step}

    llm = ScriptedLLM({"MCP_PLANNER": [
        plan(tool_code="rates.lookup", args={"product": "loan"}),
        plan(tool_code="secret.admin", args={}),  # not on the node's list: refused
        plan(action="ANSWER", answer="Loans are at 5.5% today."),
        plan(action="ANSWER", answer="You asked about loans before."),
    ], "INTENT_AGENT": {"intent": None, "confidence": 0}})
    nodes = [node("AG", "start", "start"),
             node("AG", "helper", "agent", instructions="Answer rate questions.", tools=["rates.lookup"],
                  greeting="Ask me about rates.", max_steps=4, stay=True),
             node("AG", "end", "end")]
    data = one_flow("AG", nodes, chain("AG", "start", "helper", "end"))
    data["ce_mcp_tool"] = [
        {"tool_code": "rates.lookup", "tool_group": "CALCULATOR_TRANSFORM", "description": "Today's rates"},
        {"tool_code": "secret.admin", "tool_group": "CALCULATOR_TRANSFORM", "description": "Not for agents"}]
    seen: list[dict[str, Any]] = []

    def rates(args: dict[str, Any]) -> dict[str, Any]:
        seen.append(args)
        return {"loan": 5.5}

    async with engine_on(db_url, data, llm=llm, tools={"rates.lookup": rates, "secret.admin": lambda a: "boom"}) as engine:
        greeting = await engine.aprocess("hello")
        cid = greeting.conversation_id
        assert greeting.text == "Ask me about rates."
        answer = await engine.aprocess("what is the rate today?", cid)
        assert answer.text == "Loans are at 5.5% today."
        assert seen == [{"product": "loan"}]
        tools = [(e.payload["tool"], e.payload["status"]) for e in await turn_events(engine, cid)
                 if e.stage == "FLOW_AGENT_TOOL"]
        assert tools == [("rates.lookup", "OK"), ("secret.admin", "REFUSED")]
        again = await engine.aprocess("what did I ask?", cid)
        assert again.text == "You asked about loans before."
        last_prompt = llm.calls_to("MCP_PLANNER")[-1].system
        assert "Loans are at 5.5% today." in last_prompt  # its own memory
        memory = (await engine.astate(cid))["flow"]["vars"]["_agent_memory_helper"]
        assert [m["user"] for m in memory] == ["what is the rate today?", "what did I ask?"]


async def test_knowledge_node_synthesises_from_the_passages_when_asked(db_url: str) -> None:
    from convengine.llm import ScriptedLLM

    nodes = [node("KB", "start", "start"),
             node("KB", "ask", "entity", variable="q", prompt="What is your question?"),
             node("KB", "search", "knowledge", query="{{ session.q }}", knowledge_bases=["faq"], min_score=0.5,
                  synthesis=True),
             node("KB", "none", "message", text="I could not find that."),
             node("KB", "end", "end")]
    edges = [*chain("KB", "start", "ask", "search", "end"), edge("KB", "search", "none", outcome="not_found"),
             edge("KB", "none", "end")]
    llm = ScriptedLLM({"KNOWLEDGE_SYNTHESIS": ["The branch opens at 9 [1]."]}, default={"intent": None,
                                                                                       "confidence": 0})
    async with engine_on(db_url, one_flow("KB", nodes, edges), llm=llm) as engine:
        await asyncio.to_thread(engine.knowledge.add_text, "faq", "hours.md",
                                "Opening hours: the branch opens at nine and closes at five.")
        cid = (await engine.aprocess("hello")).conversation_id
        found = await engine.aprocess("when does the branch open", cid)
        assert found.text == "The branch opens at 9 [1]."
        [call] = llm.calls_to("KNOWLEDGE_SYNTHESIS")
        assert "opens at nine" in call.user_text and "when does the branch open" in call.user_text
