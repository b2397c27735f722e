"""What breaks at run time is caught when a pack loads, and what is only doubtful is a warning:
templates compile at validation, strict rendering names the row, Thymeleaf text blocks render,
rule intents must exist, an unselectable prompt template does not block the rest, and tasks the
host has not registered are reported when the engine opens."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from convengine.catalog.errors import ConfigValidationError, ErrorCode, PromptRenderError
from convengine.config_loader import validate_pack
from tests.config_loader.test_validation import BASE
from tests.helpers import engine_on

pytestmark = pytest.mark.asyncio


def with_rows(**tables: list[dict[str, Any]]) -> dict[str, Any]:
    pack = copy.deepcopy(BASE)
    for table, rows in tables.items():
        pack.setdefault(table, []).extend(rows)
    return pack


def violations_of(pack: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigValidationError) as info:
        validate_pack(pack)
    return [str(v) for v in info.value.violations]


def response(response_id: int, text: str, state: str = "COLLECT") -> dict[str, Any]:
    return {"response_id": response_id, "intent_code": "LOAN", "state_code": state, "response_type": "EXACT",
            "exact_text": text, "priority": 1}


@pytest.mark.parametrize(("table", "row", "expected"), [
    ("ce_response", response(30, "Which size? {{size pizza"),
     "ce_response[30].exact_text: template does not parse"),
    ("ce_response", response(31, '[# th:if="${size != null}"]A size was chosen'),
     "ce_response[31].exact_text: template does not parse: a Thymeleaf [# th:...] block is never closed"),
    ("ce_response", response(32, "[# th:block]x[/]"),
     "ce_response[32].exact_text: template does not parse: unsupported Thymeleaf text block"),
    ("ce_prompt_template", {"template_id": 33, "intent_code": "LOAN", "state_code": "COLLECT",
                            "output_format": "TEXT", "system_prompt": "ok", "user_prompt": "{% for x in %}"},
     "ce_prompt_template[33].user_prompt: template does not parse"),
    ("ce_rule", {"rule_id": 34, "intent_code": "LAON", "state_code": "COLLECT", "rule_type": "EXACT",
                 "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": "x"},
     "ce_rule[34].intent_code: unknown intent 'LAON'"),
    ("ce_rule", {"rule_id": 35, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "EXACT",
                 "match_pattern": "ANY", "action": "SET_INTENT", "action_value": "REFUND"},
     "ce_rule[35].action_value: unknown intent 'REFUND'"),
    ("ce_rule", {"rule_id": 36, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "EXACT",
                 "match_pattern": "ANY", "action": "CLEAR_INPUT_PARAM", "action_value": ""},
     "ce_rule[36].action_value: CLEAR_INPUT_PARAM needs an action_value"),
])
async def test_what_would_break_at_run_time_is_an_error_naming_table_row_and_column(
        table: str, row: dict[str, Any], expected: str) -> None:
    found = violations_of(with_rows(**{table: [row]}))
    assert any(v.startswith(expected) for v in found), found


async def test_unknown_template_variables_are_warnings_naming_the_row() -> None:
    rules = [{"rule_id": 40, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "EXACT",
              "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": '{"size": "L"}'}]
    snapshot = validate_pack(with_rows(ce_rule=rules, ce_response=[
        response(41, "{{size}} for {{user_input}} in {{state}}, {{context.anything}}"),
        response(43, "{{userInfo.userId}} {{conversationInfo.turn}} {{properties.language}} {{conversationLog}}",
                 state="CONFIRM"),  # the memory namespaces every template sees
        response(42, "{{sise}} pizza", state="CONFIRM")]))
    warnings = [w for w in snapshot.warnings if "not provided" in w]
    assert len(warnings) == 1 and warnings[0].startswith("ce_response[42].exact_text: 'sise' is not provided")


async def test_a_prompt_template_no_call_site_selects_is_a_warning_and_the_rest_loads() -> None:
    row = {"template_id": 50, "intent_code": "LOAN", "state_code": "COLLECT", "output_format": "DERIVED",
           "system_prompt": "s", "user_prompt": "u"}
    snapshot = validate_pack(with_rows(ce_prompt_template=[row]))
    assert any(w.startswith("ce_prompt_template[50]: output_format 'DERIVED'") for w in snapshot.warnings)
    assert len(snapshot.responses) == 2  # the rest loaded


THYMELEAF = ('[# th:if="${context != null and context.mcp != null and context.mcp.finalAnswer != null '
             'and !#strings.isEmpty(context.mcp.finalAnswer)}"][[${context.mcp.finalAnswer}]][/]'
             '[# th:unless="${context != null and context.mcp != null and context.mcp.finalAnswer != null '
             'and !#strings.isEmpty(context.mcp.finalAnswer)}"]Query completed.[/]'
             '[# th:each="item : ${items}"] <[[${item}]]>[/]')


async def test_thymeleaf_text_blocks_render_instead_of_reaching_the_user(db_url: str) -> None:
    from tests.helpers import pack

    data = pack(ce_response=[{"intent_code": "LOAN", "state_code": "START", "exact_text": THYMELEAF,
                              "priority": 1}])
    async with engine_on(db_url, data) as engine:
        first = await engine.aprocess("a loan", input_params={"items": ["a", "b"]})
        assert first.text == "Query completed. <a> <b>"
        cid = str(uuid.uuid4())
        await engine.aseed(cid, context={"mcp": {"finalAnswer": "42 rows"}})
        answered = await engine.aprocess("a loan", cid, input_params={"items": []})
        assert answered.text == "42 rows"


async def test_strict_rendering_names_the_row_and_the_pack_can_relax_it(db_url: str) -> None:
    from tests.helpers import pack

    rows = [{"intent_code": "LOAN", "state_code": "START", "exact_text": "Your {{size}} loan", "priority": 1}]
    strict = pack(ce_response=rows, settings={"template_strict": True})
    async with engine_on(db_url, strict) as engine:
        with pytest.raises(PromptRenderError) as info:
            await engine.aprocess("a loan")
        assert info.value.code == ErrorCode.UNRESOLVED_PROMPT_VARIABLE
        assert "exact_text refers to 'size'" in info.value.message and "ce_response[" in info.value.message
        with pytest.raises(PromptRenderError, match="missing or null"):  # null is no better than missing
            await engine.aprocess("a loan", input_params={"size": None})
        assert (await engine.aprocess("a loan", input_params={"size": "small"})).text == "Your small loan"
    relaxed = pack(ce_response=rows, settings={"template_strict": False})
    async with engine_on(db_url, relaxed) as engine:
        assert (await engine.aprocess("a loan")).text == "Your  loan"


async def test_tasks_the_host_did_not_register_are_reported_when_the_engine_opens(
        db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    from tests.helpers import pack

    data = pack(ce_pending_action=[{"pending_action_id": 60, "intent_code": "LOAN", "state_code": "START",
                                    "action_key": "SUBMIT", "bean_name": "loanTasks", "method_names": "submit"}],
                ce_rule=[{"rule_id": 61, "intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT",
                          "match_pattern": "crm", "action": "SET_TASK", "action_value": "crm:tag"}])
    with caplog.at_level("WARNING", logger="convengine.engine"):
        async with engine_on(db_url, data) as engine:
            missing = [w for w in engine.warnings if "has not registered" in w]
            assert [w.split(":")[0] for w in missing] == ["ce_pending_action[60] (action_key SUBMIT)",
                                                         "ce_rule[61] (SET_TASK)"]
            assert (await engine.aprocess("a loan")).state == "START"  # the rest works
    assert "loanTasks:submit" in caplog.text

    class LoanTasks:
        def submit(self, task: Any) -> None: ...

    async with engine_on(db_url, data, tasks={"loanTasks": LoanTasks(), "crm": {"tag": lambda t: None}}) as engine:
        assert not [w for w in engine.warnings if "has not registered" in w]
