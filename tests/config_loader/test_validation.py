"""Validation at load: each rule rejects a bad row, naming table, row id, column and reason."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from convengine.catalog.errors import ConfigValidationError, PackError
from convengine.config_loader import validate_pack

BASE: dict[str, Any] = {
    "ce_intent": [{"intent_code": "LOAN", "description": "loans"}],
    "ce_intent_classifier": [
        {"classifier_id": 1, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "REGEX",
         "pattern": r"\bloan\b", "priority": 1}
    ],
    "ce_rule": [
        {"rule_id": 10, "phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "COLLECT",
         "rule_type": "JSON_PATH", "match_pattern": "$[?(@.schemaComplete == true)]", "action": "SET_STATE",
         "action_value": "CONFIRM"}
    ],
    "ce_response": [
        {"response_id": 20, "intent_code": "LOAN", "state_code": "COLLECT", "response_type": "EXACT",
         "exact_text": "Tell me more"},
        {"response_id": 21, "intent_code": "LOAN", "state_code": "CONFIRM", "response_type": "EXACT",
         "exact_text": "Confirm?"},
    ],
}


def pack_with(table: str, row: dict[str, Any]) -> dict[str, Any]:
    pack = copy.deepcopy(BASE)
    pack.setdefault(table, []).append(row)
    return pack


def violations_of(pack: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigValidationError) as info:
        validate_pack(pack)
    return [str(v) for v in info.value.violations]


def test_the_base_pack_is_valid() -> None:
    snapshot = validate_pack(BASE)
    assert {"COLLECT", "CONFIRM"} <= snapshot.known_states


BAD_ROWS = [
    ("ce_policy", {"policy_id": 7, "rule_type": "REGEX", "pattern": "(unclosed", "response_text": "no"},
     "ce_policy[7].pattern: does not compile"),
    ("ce_policy", {"policy_id": 5, "rule_type": "llm", "pattern": "investment advice", "response_text": "no"}, None),
    ("ce_policy", {"policy_id": 6, "rule_type": "LLM", "pattern": " ", "response_text": "no"},
     "ce_policy[6].pattern: an LLM policy needs a pattern"),
    ("ce_policy", {"policy_id": 4, "rule_type": "SEMANTIC", "pattern": "x", "response_text": "no"},
     "ce_policy[4].rule_type: must be one of REGEX, CONTAINS, STARTS_WITH, EXACT, LLM"),
    ("ce_intent_classifier", {"classifier_id": 8, "intent_code": "LOAN", "rule_type": "REGEX", "pattern": "[a-",
                              "priority": 2}, "ce_intent_classifier[8].pattern: does not compile"),
    ("ce_rule", {"rule_id": 9, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "REGEX",
                 "match_pattern": "*oops", "action": "SET_INPUT_PARAM", "action_value": "x"},
     "ce_rule[9].match_pattern: does not compile"),
    ("ce_config", {"config_id": 11, "config_type": "DialogueActStep", "config_key": "REGEX_AFFIRM",
                   "config_value": "(yes"}, "ce_config[11].config_value: regex does not compile"),
    ("ce_output_schema", {"schema_id": 12, "intent_code": "LOAN", "state_code": "COLLECT", "priority": 1,
                          "json_schema": {"type": "objekt"}}, "ce_output_schema[12].json_schema: is not a valid JSON schema"),
    ("ce_response", {"response_id": 13, "intent_code": "LOAN", "state_code": "COLLECT", "response_type": "DERIVED",
                     "output_format": "JSON", "json_schema": {"properties": 5}},
     "ce_response[13].json_schema: is not a valid JSON schema"),
    ("ce_rule", {"rule_id": 14, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "JSON_PATH",
                 "match_pattern": "$[?(@.a ==", "action": "SET_INPUT_PARAM", "action_value": "x"},
     "ce_rule[14].match_pattern: does not compile"),
    ("ce_rule", {"rule_id": 15, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "EXACT",
                 "match_pattern": "ANY", "action": "SET_COLOUR", "action_value": "red"},
     "ce_rule[15].action: unknown action 'SET_COLOUR'"),
    ("ce_rule", {"rule_id": 16, "phase": "AFTER_LUNCH", "intent_code": "LOAN", "state_code": "COLLECT",
                 "rule_type": "EXACT", "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": "x"},
     "ce_rule[16].phase: unknown phase 'AFTER_LUNCH'"),
    ("ce_rule", {"rule_id": 17, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "FUZZY",
                 "match_pattern": "x", "action": "SET_INPUT_PARAM", "action_value": "x"},
     "ce_rule[17].rule_type: unknown rule type 'FUZZY'"),
    ("ce_rule", {"rule_id": 18, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "EXACT",
                 "match_pattern": "go", "action": "SET_STATE", "action_value": "CONFRIM"},
     "ce_rule[18].action_value: unknown state 'CONFRIM'"),
    ("ce_state_graph", {"state_graph_id": 19, "intent_code": "LOAN", "from_state": "COLLECT", "to_state": "DONE"},
     "ce_state_graph[19].to_state: unknown state 'DONE'"),
    ("ce_mcp_tool", {"tool_id": 30, "tool_code": "x.lookup", "tool_group": "TELEPATHY", "intent_code": "LOAN",
                     "state_code": "COLLECT"}, "ce_mcp_tool[30].tool_group: unknown tool group 'TELEPATHY'"),
    ("ce_mcp_db_tool", {"tool_id": 31, "sql_template": "SELECT 1", "param_schema": {}},
     "ce_mcp_db_tool[31].tool_id: no ce_mcp_tool with tool_id 31"),
    ("ce_prompt_template", {"template_id": 32, "intent_code": "LOAN", "state_code": "COLLECT",
                            "output_format": "TEXT", "interaction_contract": "{allows: [affirm]"},
     "ce_prompt_template[32].interaction_contract: is not valid JSON"),
    ("ce_response", {"response_id": 33, "intent_code": "", "state_code": "COLLECT", "response_type": "EXACT",
                     "exact_text": "hi"}, None),  # blank intent = global fallback: allowed
    ("ce_pending_action", {"pending_action_id": 34, "intent_code": "", "state_code": "COLLECT", "action_key": "K",
                           "bean_name": "b", "method_names": "m"},
     "ce_pending_action[34].intent_code: must not be blank"),
    ("ce_response", {"response_id": 35, "intent_code": "LOAN", "state_code": "NOWHERE", "response_type": "EXACT",
                     "exact_text": "?"}, "ce_response[35].state_code: unknown state 'NOWHERE'"),
    ("ce_verbose", {"verbose_id": 36, "step_match": "GLOB", "step_value": "x", "determinant": "STEP_ENTER"},
     "ce_verbose[36].step_match: must be EXACT, REGEX or JSON_PATH"),
    ("ce_config", {"config_id": 37, "config_type": "AgentIntentResolver", "config_key": "MIN_CONFIDENCE",
                   "config_value": "high"}, "ce_config[37].config_value: AgentIntentResolver.MIN_CONFIDENCE must be"),
    ("ce_rule", {"rule_id": 38, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "EXACT",
                 "match_pattern": "x", "action": "SET_INPUT_PARAM", "action_value": "x", "priority": "high"},
     "ce_rule[38].priority: expected an integer, got 'high'"),
    ("ce_rule", {"rule_id": 39, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "EXACT",
                 "match_pattern": "x", "action": "SET_INPUT_PARAM", "action_value": "x", "colour": "red"},
     "ce_rule[39].colour: unknown column"),
    ("ce_intent", {"description": "no code"}, "ce_intent[#2 (row 2, no intent_code)].intent_code: is required"),
]


@pytest.mark.parametrize(("table", "row", "expected"), BAD_ROWS, ids=[e or "allowed" for _, _, e in BAD_ROWS])
def test_a_bad_row_is_named_with_its_table_id_column_and_reason(table: str, row: dict[str, Any],
                                                                 expected: str | None) -> None:
    pack = pack_with(table, row)
    if expected is None:
        validate_pack(pack)
        return
    found = violations_of(pack)
    assert any(v.startswith(expected) for v in found), found


def test_phase_aliases_are_accepted_and_canonicalised() -> None:
    rows = [{"rule_id": 40 + i, "phase": phase, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "EXACT",
             "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": "x"}
            for i, phase in enumerate(("POST_AGENT_INTENT", "agent_post_intent", "CLASSIFIER_POST_INTENT",
                                       "pipeline_rules"))]
    data = pack_with("ce_rule", rows[0])
    data["ce_rule"].extend(rows[1:])
    snapshot = validate_pack(data)
    assert [r.rule_id for r in snapshot.rules_for("POST_AGENT_INTENT")] == [40, 41]  # each path keeps its phase
    assert [r.rule_id for r in snapshot.rules_for("POST_CLASSIFIER_INTENT")] == [42]
    assert 43 in [r.rule_id for r in snapshot.rules_for("PRE_RESPONSE_RESOLUTION")]
    assert snapshot.rules_for("POST_INTENT") == ()


def test_tool_group_aliases_are_accepted() -> None:
    pack = pack_with("ce_mcp_tool", {"tool_id": 41, "tool_code": "crm.lookup", "tool_group": "api",
                                     "intent_code": "LOAN", "state_code": "COLLECT"})
    assert validate_pack(pack).tool("CRM.LOOKUP").group == "HTTP_API"  # type: ignore[union-attr]


def test_every_violation_is_reported_at_once() -> None:
    pack = copy.deepcopy(BASE)
    pack["ce_policy"] = [{"policy_id": 1, "rule_type": "REGEX", "pattern": "(", "response_text": "x"}]
    pack["ce_output_schema"] = [{"schema_id": 2, "intent_code": "LOAN", "state_code": "COLLECT", "priority": 1,
                                 "json_schema": {"type": 12}}]
    pack["ce_rule"].append({"rule_id": 3, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "EXACT",
                            "match_pattern": "x", "action": "SET_STATE", "action_value": "NOPE"})
    with pytest.raises(ConfigValidationError) as info:
        validate_pack(pack)
    found = [str(v) for v in info.value.violations]
    assert len(found) == 3, found
    message = str(info.value)
    for where in ("ce_policy[1].pattern", "ce_output_schema[2].json_schema", "ce_rule[3].action_value"):
        assert where in message


def test_unknown_tables_and_non_mappings_are_pack_errors() -> None:
    with pytest.raises(PackError, match="unknown top-level key"):
        validate_pack({"ce_rules": []})
    with pytest.raises(PackError, match="pack must be a mapping"):
        validate_pack(["not", "a", "pack"])  # type: ignore[arg-type]


def test_pack_file_errors_name_the_file(tmp_path: Any) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("ce_intent: [\n  {intent_code: X", encoding="utf-8")
    with pytest.raises(PackError, match="bad.yaml is not valid YAML"):
        validate_pack(bad)
    with pytest.raises(PackError, match="pack file not found"):
        validate_pack(tmp_path / "missing.yaml")
