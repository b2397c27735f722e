"""Direct tool calls and the MCP planner loop, with DB tools on the test database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url
from convengine.llm import ScriptedLLM
from convengine.tools.http import HttpRequest
from tests.helpers import assert_in_order, engine_on, pack, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio

TOOLS = [
    {"tool_id": 1, "tool_code": "crm.lookup", "tool_group": "HTTP_API", "intent_code": "LOAN", "state_code": "START",
     "description": "Look up the customer"},
    {"tool_id": 2, "tool_code": "orders.by_customer", "tool_group": "DB", "intent_code": "LOAN", "state_code": "ANY",
     "description": "Orders of a customer"},
    {"tool_id": 3, "tool_code": "risk.score", "tool_group": "CALCULATOR_TRANSFORM", "intent_code": "LOAN",
     "state_code": "START", "description": "Risk score"},
    {"tool_id": 4, "tool_code": "notify.officer", "tool_group": "NOTIFY", "intent_code": "LOAN", "state_code": "START",
     "description": "Notify the loan officer"},
    {"tool_id": 5, "tool_code": "greet.only", "tool_group": "WORKFLOW", "intent_code": "GREETING", "state_code": "IDLE",
     "description": "Greeting workflow"},
    {"tool_id": 6, "tool_code": "postgres.query", "tool_group": "DB", "intent_code": "LOAN", "state_code": "START",
     "description": "Run a read-only SQL query"},
]
DB_TOOLS = [{"tool_id": 2, "sql_template": "SELECT order_id, status FROM ${table} WHERE customer_id = :customer "
             "ORDER BY order_id LIMIT :limit", "param_schema": {}, "max_rows": 2,
             "allowed_identifiers": {"table": ["orders", "orders_archive"]}}]
# Raw-SQL tools are off by default and never run on the engine's own database unless told to.
RAW_SQL_ON_ENGINE_DB = {"raw-sql-enabled": True, "raw-sql-on-engine-database": True}


@pytest.fixture
def orders_db(db_url: str) -> Iterator[str]:
    engine = create_sync_engine(parse_database_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id TEXT, status TEXT)"))
        conn.execute(sa.text("CREATE TABLE orders_archive (order_id INTEGER PRIMARY KEY, customer_id TEXT, status TEXT)"))
        conn.execute(sa.text("INSERT INTO orders VALUES (1, 'c1', 'open'), (2, 'c1', 'shipped'), (3, 'c1', 'late'), "
                             "(4, 'c2', 'open')"))
    engine.dispose()
    yield db_url


def count_orders(db_url: str) -> int:
    engine = create_sync_engine(parse_database_url(db_url))
    with engine.connect() as conn:
        total = int(conn.execute(sa.text("SELECT COUNT(*) FROM orders")).scalar_one())
    engine.dispose()
    return total


def tool_pack(**extra: Any) -> dict[str, Any]:
    return pack(ce_mcp_tool=TOOLS, ce_mcp_db_tool=DB_TOOLS, **extra)


def crm(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"customerId": args["customerId"], "name": "Robert King", "intent": ctx.intent}


# --- direct tools -------------------------------------------------------------------------


async def test_a_direct_tool_call_succeeds_with_convengine_shapes(orders_db: str) -> None:
    rules = [{"phase": "POST_TOOL_EXECUTION", "intent_code": "LOAN", "state_code": "START", "rule_type": "JSON_PATH",
              "match_pattern": "$[?(@.inputParams.tool_status == 'SUCCESS')]", "action": "SET_INPUT_PARAM",
              "action_value": '{"crm_checked": true}'},
             {"phase": "POST_TOOL_EXECUTION", "intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT",
              "match_pattern": "ANY", "action": "SET_JSON", "action_value": "seen_tool_id:$.inputParams.tool_result._meta.tool_id"}]
    async with engine_on(orders_db, tool_pack(ce_rule=rules), tools={"crm.lookup": crm}) as engine:
        first = await engine.aprocess("loan")
        request = {"tool_code": "crm.lookup", "args": {"customerId": "C123"}}
        result = await engine.aprocess("check me", first.conversation_id, input_params={"tool_request": request})
        events = await turn_events(engine, first.conversation_id)
        shaped = payload_of(events, "TOOL_ORCHESTRATION_RESULT")
        assert shaped["status"] == "SUCCESS" and shaped["tool_group"] == "HTTP_API"
        assert shaped["result"] == {"customerId": "C123", "name": "Robert King", "intent": "LOAN"}
        assert shaped["toolMeta"]["tool_id"] == 1 and shaped["toolMeta"]["intent_code"] == "LOAN"
        execution = result.context["mcp"]["toolExecution"]
        assert (execution["phase"], execution["outcome"], execution["toolExecuted"]) == ("POST_TOOL_EXECUTION",
                                                                                        "SUCCESS", True)
        assert "RULE_APPLIED (ToolOrchestrationStep PostTool)" in [e.stage for e in events]
        state = await engine.astate(first.conversation_id)
        assert state["input_params"]["crm_checked"] is True and "tool_request" not in state["input_params"]
        assert state["input_params"]["seen_tool_id"] == 1  # tool_result carries seed 001's _meta
        await engine.aprocess("again", first.conversation_id)  # tool_request is turn-scoped: not re-run
        assert "TOOL_ORCHESTRATION_REQUEST" not in await turn_stages(engine, first.conversation_id)


async def test_a_tool_out_of_scope_is_skipped(orders_db: str) -> None:
    async with engine_on(orders_db, tool_pack()) as engine:
        first = await engine.aprocess("loan")
        await engine.aprocess("x", first.conversation_id, input_params={"tool_request": {"tool_code": "greet.only",
                                                                                         "args": {}}})
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_RESULT")
        assert shaped["status"] == "SKIPPED_SCOPE_MISMATCH" and (shaped["intent"], shaped["state"]) == ("LOAN", "START")


@pytest.mark.parametrize(("request_", "error"), [
    ({"tool_code": "crm.lookup", "args": {}}, ("No HttpApiToolHandler or HttpApiExecutorAdapter configured for "
                                               "tool_code=CRM.LOOKUP")),
    ({"tool_code": "risk.score", "args": {}}, "No CalculatorTransformExecutorAdapter configured for tool_code=RISK.SCORE"),
    ({"tool_code": "nope.nothing", "args": {}}, "no enabled tool 'nope.nothing'"),
    ({"tool_code": "nope.nothing", "tool_group": "DB", "args": {}}, "no enabled tool 'nope.nothing'"),
    ({"tool_code": "crm.lookup", "tool_group": "DB", "args": {}}, "tool 'crm.lookup' is in group HTTP_API, not DB"),
    ({"tool_code": "crm.lookup", "args": "x"}, "tool_request.args must be an object"),
    ("{not json", "tool_request is not valid JSON"),
])
async def test_direct_tool_errors_have_the_error_shape(orders_db: str, request_: Any, error: str) -> None:
    async with engine_on(orders_db, tool_pack()) as engine:
        first = await engine.aprocess("loan")
        await engine.aprocess("x", first.conversation_id, input_params={"tool_request": request_})
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_ERROR")
        assert shaped["status"] == "ERROR" and error in shaped["error"]


async def test_adapters_by_group_and_group_only_requests(orders_db: str) -> None:
    def calculator(args: dict[str, Any], ctx: Any) -> str:
        return json.dumps({"score": args["a"] * 2, "tool": ctx.tool.tool_code})

    async with engine_on(orders_db, tool_pack(), tool_adapters={"CALCULATOR_TRANSFORM": calculator}) as engine:
        first = await engine.aprocess("loan")
        await engine.aprocess("x", first.conversation_id, input_params={"tool_request": {"tool_code": "risk.score",
                                                                                         "args": {"a": 21}}})
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_RESULT")
        assert shaped["result"] == {"score": 42, "tool": "risk.score"}
        # a group without a code resolves among the granted rows: here the one calculator tool in scope
        await engine.aprocess("y", first.conversation_id,
                              input_params={"tool_request": {"tool_group": "calc", "args": {"a": 1}}})
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_RESULT")
        assert shaped["result"] == {"score": 2, "tool": "risk.score"}


async def test_db_template_tool_binds_values_and_checks_identifiers(orders_db: str) -> None:
    async with engine_on(orders_db, tool_pack()) as engine:
        first = await engine.aprocess("loan")

        async def call(args: dict[str, Any]) -> dict[str, Any]:
            await engine.aprocess("x", first.conversation_id,
                                  input_params={"tool_request": {"tool_code": "orders.by_customer", "args": args}})
            events = await turn_events(engine, first.conversation_id)
            return next(e.payload for e in events if e.stage in ("TOOL_ORCHESTRATION_RESULT",
                                                                  "TOOL_ORCHESTRATION_ERROR"))

        ok = await call({"table": "orders", "customer": "c1"})
        assert ok["result"] == [{"order_id": 1, "status": "open"}, {"order_id": 2, "status": "shipped"}]  # max_rows 2
        events = await turn_events(engine, first.conversation_id)
        sql = payload_of(events, "MCP_DB_SQL_EXECUTION")
        assert sql["params"] == {"customer": "c1", "limit": 2} and sql["row_count"] == 2
        for args, message in [
            ({"table": "users", "customer": "c1"}, "Identifier not allowed for ${table}: 'users'"),
            ({"table": "orders; DROP TABLE orders", "customer": "c1"}, "Unsafe identifier for ${table}"),
            ({"table": "orders--", "customer": "c1"}, "Unsafe identifier for ${table}"),
            ({"table": "orders", "customer": {"$ne": 1}}, ":customer must be text"),
            ({"table": "orders"}, "the query needs a value for :customer"),
        ]:
            error = await call(args)
            assert error["status"] == "ERROR" and message in error["error"], (args, error)
        for value in ("c1' OR '1'='1", "c1'; DELETE FROM orders; --", "x' UNION SELECT 1, 'leak' --", "c1' /*"):
            literal = await call({"table": "orders", "customer": value})
            assert literal["status"] == "SUCCESS" and literal["result"] == []  # bound: a value, never SQL
    assert count_orders(orders_db) == 4


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT * FROM orders; DELETE FROM orders", "only one statement is allowed"),
    ("DELETE FROM orders", "only SELECT or WITH queries are allowed, got DELETE"),
    ("SELECT * FROM orders WHERE 1=1 -- ; DROP TABLE orders\n; UPDATE orders SET status = 'x'", "only one statement"),
    ("SELECT * FROM orders /* sneaky */ UNION SELECT 1, 'x', 'y' FROM orders FOR UPDATE", "locking clauses"),
    ("WITH gone AS (DELETE FROM orders RETURNING *) SELECT * FROM gone", "keyword DELETE is not allowed"),
    ("SELECT * INTO copy_of_orders FROM orders", "SELECT ... INTO is not allowed"),
    ("SELECT pg_sleep(10)", "function pg_sleep() is not allowed"),
    ("SELECT $$ x $$", "dollar-quoted strings are not allowed"),
    ("SELECT 'unterminated", "unterminated quoted string"),
    ("", "SQL must be a non-empty string"),
])
async def test_raw_sql_from_the_planner_is_guarded(orders_db: str, sql: str, message: str) -> None:
    async with engine_on(orders_db, tool_pack(settings={"mcp": {"db": RAW_SQL_ON_ENGINE_DB}})) as engine:
        first = await engine.aprocess("loan")
        await engine.aprocess("x", first.conversation_id,
                              input_params={"tool_request": {"tool_code": "postgres.query", "args": {"sql": sql}}})
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_ERROR")
        assert message in shaped["error"]
    assert count_orders(orders_db) == 4


async def test_raw_sql_that_passes_the_guard_reads_with_bound_params(orders_db: str) -> None:
    async with engine_on(orders_db, tool_pack(settings={"mcp": {"db": RAW_SQL_ON_ENGINE_DB}})) as engine:
        first = await engine.aprocess("loan")
        sql = "SELECT status FROM orders WHERE customer_id = :c AND status IN :statuses ORDER BY order_id"
        await engine.aprocess("x", first.conversation_id, input_params={"tool_request": {
            "tool_code": "postgres.query", "args": {"sql": sql, "params": {"c": "c1", "statuses": ["open", "late"]}}}})
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_RESULT")
        assert shaped["result"] == [{"status": "open"}, {"status": "late"}]


# --- the planner loop ----------------------------------------------------------------------


def plan(*steps: dict[str, Any]) -> list[dict[str, Any]]:
    full = []
    for step in steps:
        full.append({"action": step.get("action", "CALL_TOOL"), "tool_code": step.get("tool_code"),
                     "args": step.get("args", {}), "answer": step.get("answer"),
                     "operation_tag": step.get("operation_tag")})
    return full


PLANNER_ROWS = [
    {"planner_id": 10, "intent_code": "ANY", "state_code": "ANY", "system_prompt": "generic planner",
     "user_prompt": "{{user_input}} {{mcp_observations}}"},
    {"planner_id": 11, "intent_code": "LOAN", "state_code": "START", "system_prompt": "loan planner",
     "user_prompt": "Q: {{user_input}} Tools: {{mcp_tools}} Obs: {{mcp_observations}}"},
]
POST_MCP = [{"phase": "POST_AGENT_MCP", "intent_code": "LOAN", "state_code": "START", "rule_type": "JSON_PATH",
             "match_pattern": "$[?(@.context.mcp.finalAnswer)]", "action": "SET_STATE", "action_value": "ANSWERED"}]
ANSWERED = [{"intent_code": "LOAN", "state_code": "ANSWERED", "exact_text": "{{context.mcp.finalAnswer}}"}]


def planner_pack(settings: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    tables: dict[str, Any] = {"ce_mcp_planner": PLANNER_ROWS, "ce_rule": POST_MCP, "ce_response": ANSWERED}
    for key, rows in extra.items():
        tables[key] = [*tables.get(key, []), *rows]
    return tool_pack(settings=settings or {}, **tables)


def handlers() -> dict[str, Any]:
    async def notify(args: dict[str, Any], ctx: Any) -> str:
        return "queued"

    return {"crm.lookup": crm, "risk.score": lambda args: {"score": 710, "summary": "good"}, "notify.officer": notify}


async def test_a_four_tool_chain_with_a_scripted_planner(orders_db: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": plan(
        {"tool_code": "crm.lookup", "args": {"customerId": "c1"}},
        {"tool_code": "orders.by_customer", "args": {"table": "orders", "customer": "c1"}},
        {"tool_code": "risk.score", "args": {"customerId": "c1"}},
        {"tool_code": "notify.officer", "args": {"id": "c1"}},
        {"action": "ANSWER", "answer": "Robert King scores 710 with 2 orders."})},
        default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(orders_db, planner_pack(), llm=llm, tools=handlers()) as engine:
        first = await engine.aprocess("hello")
        llm.reset_log()
        result = await engine.aprocess("can c1 borrow a loan?", first.conversation_id)
        assert (result.state, result.payload.value) == ("ANSWERED", "Robert King scores 710 with 2 orders.")
        assert llm.sites() == ["MCP_PLANNER"] * 5
        mcp = result.context["mcp"]
        assert [o["toolCode"] for o in mcp["observations"]] == ["crm.lookup", "orders.by_customer", "risk.score",
                                                                "notify.officer"]
        assert mcp["observations"][3]["json"] == {"text": "queued"}
        assert mcp["lifecycle"]["status"] == "ANSWER" and mcp["finalAnswerDetermined"] is True
        events = await turn_events(engine, first.conversation_id)
        entered = [e.payload["step"] for e in events if e.stage == "STEP_ENTER"]
        assert entered.count("mcp_planner") == 5 and entered.count("mcp_tool_call") == 4
        assert_in_order([e.stage for e in events], [
            "RULE_NO_MATCH (McpToolStep PreMcp)", "MCP_CONTEXT_CLEARED", "MCP_PLAN_LLM_INPUT", "MCP_TOOL_CALL",
            "MCP_TOOL_RESULT", "MCP_PLAN_LLM_INPUT", "MCP_DB_SQL_EXECUTION", "MCP_TOOL_RESULT", "MCP_FINAL_ANSWER",
            "RULE_APPLIED (McpToolStep PostMcp)"])
        prompt = llm.calls_to("MCP_PLANNER")[1]
        assert prompt.system == "loan planner"  # ce_mcp_planner by specificity
        assert '"toolCode": "crm.lookup"' in prompt.user and "Robert King" in prompt.user


async def test_the_planner_can_answer_straight_away(orders_db: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": plan({"action": "ANSWER", "answer": "No tools needed."})},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(orders_db, planner_pack(), llm=llm, tools=handlers()) as engine:
        first = await engine.aprocess("hello")
        result = await engine.aprocess("what is a loan?", first.conversation_id)
        assert result.payload.value == "No tools needed."
        assert "MCP_TOOL_CALL" not in await turn_stages(engine, first.conversation_id)


async def test_a_tool_error_ends_the_loop_with_a_safe_answer(orders_db: str) -> None:
    def broken(args: dict[str, Any]) -> Any:
        raise ConnectionError("crm unreachable")

    llm = ScriptedLLM({"MCP_PLANNER": plan({"tool_code": "crm.lookup", "args": {}})},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(orders_db, planner_pack(), llm=llm, tools={"crm.lookup": broken}) as engine:
        first = await engine.aprocess("hello")
        result = await engine.aprocess("check my loan", first.conversation_id)
        assert result.payload.value == "Tool execution failed"
        mcp = result.context["mcp"]
        assert mcp["lifecycle"]["status"] == "TOOL_ERROR" and mcp["lifecycle"]["error"] is True
        events = await turn_events(engine, first.conversation_id)
        assert "crm unreachable" in payload_of(events, "MCP_TOOL_ERROR")["error"]
        assert payload_of(events, "MCP_TOOL_ROOT_CAUSE")["rootType"] == "ConnectionError"
        assert llm.count("MCP_PLANNER") == 1


async def test_the_loop_stops_at_its_limit(orders_db: str) -> None:
    steps = plan(*({"tool_code": "risk.score", "args": {"n": i}} for i in range(10)))
    data = planner_pack(ce_config=[{"config_type": "McpToolStep", "config_key": "MCP_TOOL_MAX_LOOPS",
                                    "config_value": "3"}])
    llm = ScriptedLLM({"MCP_PLANNER": steps}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(orders_db, data, llm=llm, tools=handlers()) as engine:
        first = await engine.aprocess("hello")
        result = await engine.aprocess("loan loop", first.conversation_id)
        assert llm.count("MCP_PLANNER") == 3
        mcp = result.context["mcp"]
        assert (mcp["toolExecutionAbrupted"], mcp["toolExecutionAbruptionLimit"]) == (True, 3)
        assert result.state == "START"  # no final answer: the POST_AGENT_MCP rule did not fire


async def test_a_duplicate_call_is_suppressed(orders_db: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": plan({"tool_code": "risk.score", "args": {"id": 1}},
                                           {"tool_code": "risk.score", "args": {"id": 1}})},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(orders_db, planner_pack(), llm=llm, tools=handlers()) as engine:
        first = await engine.aprocess("hello")
        result = await engine.aprocess("loan score", first.conversation_id)
        assert result.payload.value == "good"  # the last observation's summary
        assert "MCP_DUPLICATE_TOOL_CALL_SUPPRESSED" in await turn_stages(engine, first.conversation_id)
        assert len(result.context["mcp"]["observations"]) == 1


async def test_policy_tag_and_sequence_guardrail_stop_the_loop(orders_db: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": plan({"tool_code": "risk.score", "operation_tag": "POLICY_RESTRICTED_OPERATION"},
                                           {"tool_code": "notify.officer"})},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    data = planner_pack(settings={"mcp": {"guardrail": {"enabled": True, "allowed-next-by-current-tool": {
        "__START__": ["crm.lookup", "risk.score"]}}}})
    async with engine_on(orders_db, data, llm=llm, tools=handlers()) as engine:
        first = await engine.aprocess("hello")
        restricted = await engine.aprocess("loan: delete things", first.conversation_id)
        assert restricted.payload.value.startswith("This request is restricted by policy")
        blocked = await engine.aprocess("notify", first.conversation_id)
        assert blocked.payload.value.startswith("Tool sequence guardrail blocked this action")
        assert blocked.context["mcp"]["lifecycle"]["status"] == "GUARDRAIL_BLOCKED_NEXT_TOOL"


@pytest.mark.parametrize(("raw", "answer"), [
    ("not json", "I couldn't plan tool usage safely. Can you rephrase your question?"),
    ({"action": "DANCE"}, "I couldn't plan tool usage safely. Can you rephrase your question?"),
    ({"action": "CALL_TOOL"}, "I couldn't decide the next tool step safely."),
])
async def test_malformed_plans_become_safe_answers(orders_db: str, raw: Any, answer: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": [raw]}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(orders_db, planner_pack(), llm=llm, tools=handlers()) as engine:
        first = await engine.aprocess("hello")
        assert (await engine.aprocess("loan help", first.conversation_id)).payload.value == answer


# A rule (the pack's own guardrail) may set skip_tool_execution; a caller may not (tests/security).
SKIP_RULE = [{"rule_id": 90, "phase": "PRE_AGENT_MCP", "intent_code": "ANY", "state_code": "ANY",
              "rule_type": "EXACT", "match_pattern": "x", "action": "SET_INPUT_PARAM",
              "action_value": "skip_tool_execution:true"}]


@pytest.mark.parametrize(("text", "status"), [
    ("hello there", "SKIPPED_GREETING"),
    ("no", "SKIPPED_DIALOGUE_ACT"),
    ("x", "SKIPPED_BY_GUARDRAIL"),
])
async def test_skip_checks_run_in_order_without_a_planner_call(orders_db: str, text: str, status: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": plan({"action": "ANSWER", "answer": "first"})},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(orders_db, planner_pack(ce_rule=SKIP_RULE), llm=llm, tools=handlers()) as engine:
        first = await engine.aprocess("loan")
        assert llm.count("MCP_PLANNER") == 1
        result = await engine.aprocess(text, first.conversation_id)
        assert llm.count("MCP_PLANNER") == 1
        assert result.context["mcp"]["lifecycle"]["status"] == status


async def test_an_incomplete_schema_skips_the_planner(orders_db: str) -> None:
    schema = [{"intent_code": "LOAN", "state_code": "START", "priority": 1,
               "json_schema": {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}}]
    llm = ScriptedLLM(default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(orders_db, planner_pack(ce_output_schema=schema), llm=llm, tools=handlers()) as engine:
        result = await engine.aprocess("loan", input_params={"amount": None})
        assert result.context["mcp"]["lifecycle"]["status"] == "SKIPPED_SCHEMA_INCOMPLETE"
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "MCP_SKIPPED_SCHEMA_INCOMPLETE")["missing_fields"] == ["amount"]


async def test_backticked_tool_codes_narrow_the_tool_list(orders_db: str) -> None:
    rows = [{"planner_id": 12, "intent_code": "LOAN", "state_code": "START", "system_prompt": "Use `risk.score` only.",
             "user_prompt": "{{mcp_tools}}"}]
    data = planner_pack()
    data["ce_mcp_planner"] = rows
    llm = ScriptedLLM({"MCP_PLANNER": plan({"action": "ANSWER", "answer": "ok"})},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(orders_db, data, llm=llm, tools=handlers()) as engine:
        first = await engine.aprocess("hello")
        await engine.aprocess("loan score", first.conversation_id)
        tools = json.loads(llm.calls_to("MCP_PLANNER")[0].user)
        assert [t["tool_code"] for t in tools] == ["risk.score"]


async def test_http_request_specs_from_handlers_are_executed(orders_db: str) -> None:
    from tests.http_stub import http_server

    with http_server(lambda path, body: (200, {"data": {"orderId": "A1", "status": "late"}})) as server:
        def lookup(args: dict[str, Any]) -> HttpRequest:
            from convengine.tools.http import HttpMapping

            return HttpRequest(url=f"{server.url}/orders", query={"id": args["id"]},
                               mapping=HttpMapping(mode="FIELD_TEMPLATE", fields={"id": "$.data.orderId",
                                                                                  "status": "$.data.status"}))

        data = tool_pack(settings={"mcp": {"http-api": {"allowed-hosts": ["127.0.0.1"]}}})
        async with engine_on(orders_db, data, tools={"crm.lookup": lookup}) as engine:
            first = await engine.aprocess("loan")
            await engine.aprocess("x", first.conversation_id, input_params={"tool_request": {
                "tool_code": "crm.lookup", "args": {"id": "A1"}}})
            shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_RESULT")
            assert shaped["result"]["mapped"] == {"id": "A1", "status": "late"}
            assert shaped["result"]["status"] == 200 and shaped["result"]["attempt"] == 1
        assert server.requests[0]["path"] == "/orders?id=A1"


async def test_db_handlers_by_tool_code_win_over_templates(orders_db: str) -> None:
    async def custom(args: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
        return [{"from": "handler", "customer": args["customer"], "tool": ctx.tool.tool_code}]

    async with engine_on(orders_db, tool_pack(), tools={"ORDERS.BY_CUSTOMER": custom}) as engine:
        first = await engine.aprocess("loan")
        await engine.aprocess("x", first.conversation_id, input_params={"tool_request": {
            "tool_code": "orders.by_customer", "args": {"customer": "c9"}}})
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_RESULT")
        assert shaped["result"] == [{"from": "handler", "customer": "c9", "tool": "orders.by_customer"}]


async def test_long_queries_are_stopped_by_the_statement_timeout(orders_db: str) -> None:
    slow = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500000000) "
            "SELECT count(*) AS n FROM c")
    data = tool_pack(settings={"mcp": {"db": {"statement-timeout-ms": 300, **RAW_SQL_ON_ENGINE_DB}}})
    async with engine_on(orders_db, data) as engine:
        first = await engine.aprocess("loan")
        await engine.aprocess("x", first.conversation_id, input_params={"tool_request": {
            "tool_code": "postgres.query", "args": {"sql": slow}}})
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_ERROR")
        assert "ran longer than 300 ms" in shaped["error"]


async def test_db_tools_can_run_on_a_named_database(orders_db: str, tmp_path: Any) -> None:
    other = f"sqlite:///{tmp_path / 'reporting.db'}"
    engine_ = create_sync_engine(parse_database_url(other))
    with engine_.begin() as conn:
        conn.execute(sa.text("CREATE TABLE orders (order_id INTEGER, customer_id TEXT, status TEXT)"))
        conn.execute(sa.text("INSERT INTO orders VALUES (77, 'c1', 'archived')"))
    engine_.dispose()
    data = tool_pack(settings={"mcp": {"db": {"databases": {"reporting": other},
                                              "tool-databases": {"orders.by_customer": "reporting"}}}})
    async with engine_on(orders_db, data) as engine:
        first = await engine.aprocess("loan")
        await engine.aprocess("x", first.conversation_id, input_params={"tool_request": {
            "tool_code": "orders.by_customer", "args": {"table": "orders", "customer": "c1"}}})
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_RESULT")
        assert shaped["result"] == [{"order_id": 77, "status": "archived"}]


async def test_custom_blocked_keywords_and_function_allow_lists(orders_db: str) -> None:
    data = tool_pack(settings={"mcp": {"db": {"blocked-keywords": ["union"], "allowed-functions": ["my_fn"],
                                              **RAW_SQL_ON_ENGINE_DB}}})
    async with engine_on(orders_db, data) as engine:
        first = await engine.aprocess("loan")
        for sql, message in [("SELECT 1 UNION SELECT 2", "keyword UNION is not allowed"),
                             ("SELECT random() AS r", "function random() is not in the allowed function list")]:
            await engine.aprocess("x", first.conversation_id, input_params={"tool_request": {
                "tool_code": "postgres.query", "args": {"sql": sql}}})
            shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_ERROR")
            assert message in shaped["error"]
