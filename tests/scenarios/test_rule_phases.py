"""Every rule phase runs at its point: the resolving path's intent phase only, and
POST_RESPONSE_RESOLUTION after the response (what it changes is returned and persisted)."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.llm import ScriptedLLM
from tests.helpers import assert_in_order, engine_on, pack, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio


def task_rule(phase: str, method: str, state: str = "START") -> dict[str, Any]:
    return {"phase": phase, "intent_code": "LOAN", "state_code": state, "rule_type": "EXACT", "match_pattern": "ANY",
            "action": "SET_TASK", "action_value": f"seen:{method}"}


INTENT_RULES = [task_rule("POST_CLASSIFIER_INTENT", "classifier"), task_rule("CLASSIFIER_POST_INTENT", "alias"),
                task_rule("POST_AGENT_INTENT", "agent"), task_rule("AGENT_POST_INTENT", "agent_alias"),
                task_rule("POST_INTENT", "either")]


def recorder(calls: list[str]) -> dict[str, Any]:
    def method(name: str) -> Any:
        def record(task: Any) -> None:
            calls.append(name)
        return record

    return {"seen": {m: method(m) for m in ("classifier", "alias", "agent", "agent_alias", "either")}}


def phases_run(events: list[Any]) -> list[str]:
    return [e.payload["phase"] for e in events if e.stage.startswith("RULE_PHASE_RUN")]


async def test_a_classifier_match_runs_only_the_classifier_phase_then_post_intent(db_url: str) -> None:
    calls: list[str] = []
    async with engine_on(db_url, pack(ce_rule=INTENT_RULES), tasks=recorder(calls)) as engine:
        result = await engine.aprocess("loan")
        assert calls == ["classifier", "alias", "either"]  # each task once; the agent's rows stay quiet
        events = await turn_events(engine, result.conversation_id)
        phases = phases_run(events)
        assert "POST_AGENT_INTENT" not in phases
        assert phases.index("POST_CLASSIFIER_INTENT") + 1 == phases.index("POST_INTENT")
        run = next(e for e in events if e.stage == "RULE_PHASE_RUN (IntentResolutionStep Classifier)")
        assert run.payload["phase"] == "POST_CLASSIFIER_INTENT" and len(run.payload["matched"]) == 2


async def test_an_agent_resolution_runs_only_the_agent_phase_then_post_intent(db_url: str) -> None:
    calls: list[str] = []
    llm = ScriptedLLM({"INTENT_AGENT": [{"intent": "LOAN", "state": "START", "confidence": 0.9}]})
    async with engine_on(db_url, pack(ce_rule=INTENT_RULES), tasks=recorder(calls), llm=llm) as engine:
        result = await engine.aprocess("I would like to borrow some money")
        assert (result.intent, result.payload.value) == ("LOAN", "Loan started")
        assert calls == ["agent", "agent_alias", "either"]
        phases = phases_run(await turn_events(engine, result.conversation_id))
        assert "POST_CLASSIFIER_INTENT" not in phases
        assert phases.index("POST_AGENT_INTENT") + 1 == phases.index("POST_INTENT")


POST_RESPONSE = [
    {"phase": "POST_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "START", "rule_type": "JSON_PATH",
     "match_pattern": "$[?(@.payload.text == 'Loan started')]", "action": "SET_STATE", "action_value": "REVIEW"},
    {"phase": "POST_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "REVIEW", "rule_type": "EXACT",
     "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": '{"answered_at_start": true}'},
]
REVIEW = [{"intent_code": "LOAN", "state_code": "REVIEW", "exact_text": "in REVIEW"}]


async def test_post_response_rules_run_after_the_response_and_keep_the_payload(db_url: str) -> None:
    async with engine_on(db_url, pack(ce_rule=POST_RESPONSE, ce_response=REVIEW)) as engine:
        result = await engine.aprocess("loan")
        # the payload was resolved for START; the rule moved the conversation on afterwards
        assert (result.state, result.payload.value) == ("REVIEW", "Loan started")
        cid = result.conversation_id
        state = await engine.astate(cid)
        assert state["state"] == "REVIEW" and state["input_params"]["answered_at_start"] is True
        stages = await turn_stages(engine, cid)
        assert_in_order(stages, ["RULE_PHASE_RUN (RulesStep)", "ASSISTANT_OUTPUT",
                                 "RULE_MATCH (PostResponseRulesStep)", "SET_STATE", "SET_INPUT_PARAM",
                                 "RULE_PHASE_RUN (PostResponseRulesStep)", "MEMORY_UPDATED", "ENGINE_RETURN"])
        events = await turn_events(engine, cid)
        assert payload_of(events, "RULE_PHASE_RUN (PostResponseRulesStep)")["phase"] == "POST_RESPONSE_RESOLUTION"
        assert payload_of(events, "ENGINE_RETURN")["state"] == "REVIEW"
        assert (await engine.aprocess("and now?", cid)).payload.value == "in REVIEW"


async def test_post_response_rules_are_skipped_without_rows_and_checked_by_the_state_graph(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        result = await engine.aprocess("loan")
        skipped = [e.payload for e in await turn_events(engine, result.conversation_id) if e.stage == "STEP_SKIPPED"]
        assert {"step": "post_response_rules", "reason": "NO_POST_RESPONSE_RULES"} in skipped
    edges = [{"intent_code": "LOAN", "from_state": "UNKNOWN", "to_state": "START"}]
    graph = pack(ce_rule=POST_RESPONSE, ce_response=REVIEW, ce_state_graph=edges,
                 settings={"flow": {"state-graph": {"mode": "HARD_BLOCK"}}})
    async with engine_on(db_url, graph) as engine:
        result = await engine.aprocess("loan")
        assert (result.state, result.payload.value) == ("START", "Loan started")  # START -> REVIEW has no edge
        violation = payload_of(await turn_events(engine, result.conversation_id), "STATE_GRAPH_VIOLATION")
        assert (violation["fromState"], violation["toState"], violation["mode"]) == ("START", "REVIEW", "HARD_BLOCK")


async def test_post_semantic_interpret_rules_run_after_the_interpreter_tool(db_url: str) -> None:
    tools = [{"tool_id": 1, "tool_code": "db.semantic.interpret", "tool_group": "CALCULATOR_TRANSFORM",
              "intent_code": "LOAN", "state_code": "START", "description": "Interpret the question"}]
    rules = [{"phase": "POST_SEMANTIC_INTERPRET", "intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT",
              "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": '{"interpreted": true}'}]
    llm = ScriptedLLM({"MCP_PLANNER": [
        {"action": "CALL_TOOL", "tool_code": "db.semantic.interpret", "args": {"q": "loans"}, "answer": None,
         "operation_tag": None},
        {"action": "ANSWER", "tool_code": None, "args": None, "answer": "Two loans.", "operation_tag": None}]})
    handler = {"db.semantic.interpret": lambda args, ctx: {"canonicalIntent": "LIST_LOANS"}}
    async with engine_on(db_url, pack(ce_mcp_tool=tools, ce_rule=rules), llm=llm, tools=handler) as engine:
        result = await engine.aprocess("how many loans do I have")
        events = await turn_events(engine, result.conversation_id)
        stages = [e.stage for e in events]
        assert_in_order(stages, ["MCP_TOOL_RESULT", "RULE_APPLIED (McpToolStep PostSemanticInterpret)",
                                 "MCP_FINAL_ANSWER"])
        run = payload_of(events, "RULE_PHASE_RUN (McpToolStep PostSemanticInterpret)")
        assert run["phase"] == "POST_SEMANTIC_INTERPRET" and len(run["matched"]) == 1
        assert (await engine.astate(result.conversation_id))["input_params"]["interpreted"] is True
