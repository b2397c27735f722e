"""A pack in ConvEngine's usual layout runs unchanged: collect two slots, patch one at confirmation,
confirm, and run a four-tool planner chain to its answer (tests/packs/loan_confirm_pack.yaml)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from convengine.llm import ScriptedLLM
from convengine.llm.scripted import LlmCall
from tests.helpers import assert_in_order, engine_on, payload_of, split_turns, stages

pytestmark = pytest.mark.asyncio

PACK = Path(__file__).resolve().parents[1] / "packs" / "loan_confirm_pack.yaml"
TOOL_ORDER = ["loan.customer.profile", "loan.credit.score", "loan.offer.price", "loan.application.submit"]


class LoanTasks:
    def __init__(self) -> None:
        self.opened = 0

    def opened_(self, task: Any) -> None:
        self.opened += 1


def dialogue_act(call: LlmCall) -> dict[str, Any]:
    text = call.user.rsplit("Message:", 1)[-1].strip().lower()
    if text.startswith("change"):
        return {"dialogueAct": "EDIT", "confidence": 0.93}
    if re.fullmatch(r"[\d,.]+", text):
        return {"dialogueAct": "ANSWER", "confidence": 0.9}
    return {"dialogueAct": "NEW_REQUEST", "confidence": 0.9}


def extraction(call: LlmCall) -> dict[str, Any]:
    text = call.user.rsplit("User:", 1)[-1]
    if "C-100" in text:
        return {"customerId": "C-100"}
    amount = re.search(r"\d[\d,]*", text)
    return {"requestedAmount": int(amount.group().replace(",", ""))} if amount else {}


def planner() -> Any:
    """Calls the four tools in order with what the application holds, then answers."""
    step = {"n": 0}

    def plan(call: LlmCall) -> dict[str, Any]:
        app = json.loads(call.user.split("Application: ", 1)[1].split(" Observations:", 1)[0])
        n = step["n"] = step["n"] + 1
        args = [{"customerId": app["customerId"]}, {"customerId": app["customerId"]},
                {"amount": app["requestedAmount"], "score": 720},
                {"customerId": app["customerId"], "amount": app["requestedAmount"], "rate": 6.5}]
        if n <= 4:
            return {"action": "CALL_TOOL", "tool_code": TOOL_ORDER[n - 1], "args": args[n - 1], "answer": None,
                    "operation_tag": None}
        return {"action": "ANSWER", "tool_code": None, "args": None, "operation_tag": None,
                "answer": f"Application APP-7 submitted: {app['requestedAmount']} at 6.5%."}

    return plan


def tools(calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    def tool(code: str, result: dict[str, Any]) -> Any:
        def run(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
            calls.append((code, dict(args)))
            return result
        return run

    return {"loan.customer.profile": tool("loan.customer.profile", {"name": "Ada", "employed": True}),
            "loan.credit.score": tool("loan.credit.score", {"score": 720}),
            "loan.offer.price": tool("loan.offer.price", {"rate": 6.5}),
            "loan.application.submit": tool("loan.application.submit", {"applicationId": "APP-7"})}


def scripted() -> ScriptedLLM:
    return ScriptedLLM({"DIALOGUE_ACT": dialogue_act, "SCHEMA_EXTRACTION": extraction, "MCP_PLANNER": planner()})


def llm_sites(turn_events: list[Any]) -> list[str]:
    return [e.payload["callSite"] for e in turn_events if e.stage == "LLM_CALL"]


async def test_collect_edit_in_place_confirm_and_run_the_planner_chain(db_url: str) -> None:
    llm, tasks, calls = scripted(), LoanTasks(), []
    async with engine_on(db_url, PACK, llm=llm, tasks={"loanTasks": {"opened": tasks.opened_}},
                         tools=tools(calls)) as engine:
        first = await engine.aprocess("I need a loan for customer C-100")
        cid = first.conversation_id
        assert (first.intent, first.state, first.payload.value) == ("LOAN_APPLICATION", "COLLECT",
                                                                     'Please tell me: ["requestedAmount"]')
        second = await engine.aprocess("250000", cid)
        assert (second.state, second.payload.value) == ("CONFIRM", "Confirm a loan of 250000 for C-100?")
        assert (await engine.astate(cid))["schema_scope"] == {"schema_id": 21, "intent": "LOAN_APPLICATION",
                                                               "state": "COLLECT"}
        edited = await engine.aprocess("change the amount to 350000", cid)
        assert (edited.state, edited.payload.value) == ("CONFIRM", "Confirm a loan of 350000 for C-100?")
        assert edited.context["requestedAmount"] == 350000
        done = await engine.aprocess("yes", cid)
        assert (done.state, done.payload.value) == ("COMPLETED", "Application APP-7 submitted: 350000 at 6.5%.")
        assert [c[0] for c in calls] == TOOL_ORDER
        assert calls[2][1] == {"amount": 350000, "score": 720}  # the patched amount reached the planner
        assert tasks.opened == 1  # the classifier path ran POST_CLASSIFIER_INTENT only, not POST_AGENT_INTENT

        turns = split_turns(await engine.aaudit(cid))
        assert [llm_sites(t) for t in turns] == [["DIALOGUE_ACT", "SCHEMA_EXTRACTION"],
                                                 ["DIALOGUE_ACT", "SCHEMA_EXTRACTION"],
                                                 ["DIALOGUE_ACT"], ["MCP_PLANNER"] * 5]
        assert llm.count("INTENT_AGENT") == 0
        edit = stages(turns[2])
        assert_in_order(edit, ["DIALOGUE_ACT_CLASSIFIED", "CORRECTION_STEP_CORRECTION_PATCH_APPLIED",
                               "INTENT_RESOLVE_SKIPPED_POLICY", "SCHEMA_EXTRACTION_SKIPPED", "SCHEMA_STATUS",
                               "MCP_SKIPPED_DIALOGUE_ACT", "ASSISTANT_OUTPUT"])
        patch = payload_of(turns[2], "CORRECTION_STEP_CORRECTION_PATCH_APPLIED")
        assert (patch["field"], patch["value"], patch["state"]) == ("requestedAmount", 350000, "CONFIRM")
        confirm = stages(turns[3])
        assert_in_order(confirm, ["CORRECTION_STEP_CONFIRM_ACCEPT", "INTENT_RESOLVE_SKIPPED_POLICY",
                                  "RULE_APPLIED (McpToolStep PreMcp)", *["MCP_TOOL_CALL", "MCP_TOOL_RESULT"] * 4,
                                  "MCP_FINAL_ANSWER", "RULE_APPLIED (McpToolStep PostMcp)", "ASSISTANT_OUTPUT"])
        assert [e.payload["tool_code"] for e in turns[3] if e.stage == "MCP_TOOL_CALL"] == TOOL_ORDER


async def test_the_kept_schema_is_dropped_when_the_intent_changes(db_url: str) -> None:
    async with engine_on(db_url, PACK, llm=scripted(), tasks={"loanTasks": {"opened": LoanTasks().opened_}},
                         tools=tools([])) as engine:
        cid = (await engine.aprocess("I need a loan for customer C-100")).conversation_id
        assert (await engine.aprocess("250000", cid)).state == "CONFIRM"
        moved = await engine.aprocess("where is my order", cid)
        assert (moved.intent, moved.state, moved.payload.value) == ("ORDER_STATUS", "ORDER_LOOKUP", "Which order?")
        assert (await engine.astate(cid)).get("schema_scope") is None
        cleared = payload_of(split_turns(await engine.aaudit(cid))[-1], "SCHEMA_SCOPE_CLEARED")
        assert (cleared["schemaId"], cleared["schemaIntent"], cleared["intent"]) == (21, "LOAN_APPLICATION",
                                                                                    "ORDER_STATUS")


async def test_a_convengine_conversation_adopted_at_confirmation_keeps_its_schema(db_url: str) -> None:
    from tests.scenarios.test_adoption import convengine_row

    llm = scripted()
    async with engine_on(db_url, PACK, llm=llm, tasks={"loanTasks": {"opened": LoanTasks().opened_}},
                         tools=tools([])) as engine:
        cid, other = str(uuid.uuid4()), str(uuid.uuid4())
        convengine_row(db_url, cid, intent="LOAN_APPLICATION", state="CONFIRM",
                       context='{"customerId": "C-100", "requestedAmount": 250000}', params='{"schema_id": 21}',
                       history=[("250000", '{"type": "TEXT", "value": "Confirm a loan of 250000 for C-100?"}')])
        edited = await engine.aprocess("change the amount to 350000", cid)
        assert (edited.state, edited.payload.value) == ("CONFIRM", "Confirm a loan of 350000 for C-100?")
        assert llm.sites() == ["DIALOGUE_ACT"]
        convengine_row(db_url, other, intent="ORDER_STATUS", state="ORDER_LOOKUP", context="{}",
                       params='{"schema_id": "21"}', history=[])
        await engine.aprocess("my order please", other)
        assert (await engine.astate(other)).get("schema_scope") is None  # another intent's schema is not kept
