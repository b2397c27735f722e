"""The configuration a turn reads: one immutable snapshot of the pack's rows, with the lookups the
steps use (ce_config values, rules by phase, tools, intents, statistics for /cache/analyze)."""

from __future__ import annotations

import dataclasses

import pytest

from convengine.catalog import ce_config
from convengine.catalog.vocab import POST_INTENT
from convengine.config.records import ConfigRow, IntentRecord, RuleRecord, ToolRecord
from convengine.config.snapshot import ConfigSnapshot, scope_matches
from convengine.settings import EngineSettings


def _snapshot(**tables: object) -> ConfigSnapshot:
    return ConfigSnapshot(settings=EngineSettings(), version="v1", **tables)  # type: ignore[arg-type]


def test_the_first_enabled_ce_config_row_wins_case_insensitively() -> None:
    snap = _snapshot(config=(
        ConfigRow(config_id=1, config_type="DialogueActStep", config_key="llm_threshold", config_value="0.4"),
        ConfigRow(config_id=2, config_type="dialogueactstep", config_key="LLM_THRESHOLD", config_value="0.7"),
        ConfigRow(config_id=3, config_type="DialogueActStep", config_key="llm_threshold", config_value="0.9",
                  enabled=False),
        ConfigRow(config_id=4, config_type="X", config_key="blank", config_value=""),
    ))
    # two enabled rows for one key: the one with the lowest config_id is read
    assert snap.component("DIALOGUEACTSTEP", "Llm_Threshold") == "0.4"
    assert snap.component_float("DialogueActStep", "llm_threshold", 0.1) == 0.4
    assert snap.component("X", "blank", "fallback") == "fallback"  # a blank value counts as unset
    assert snap.component_int("X", "missing", 5) == 5


def test_typed_ce_config_values_are_parsed_or_fall_back_to_the_tables_default() -> None:
    number = next(k for k in ce_config.CONFIG_KEYS if k.kind == "number" and k.default is not None)
    assert _snapshot().config_value(number) == number.default
    row = ConfigRow(config_id=1, config_type=number.component.lower(), config_key=number.key, config_value=" 0.25 ")
    assert _snapshot(config=(row,)).config_value(number) == 0.25


def test_booleans_and_integers_are_read_from_their_spellings() -> None:
    snap = _snapshot(config=(ConfigRow(config_id=1, config_type="A", config_key="flag", config_value="yes"),
                             ConfigRow(config_id=2, config_type="A", config_key="count", config_value="3.0")))
    assert snap.component_bool("A", "flag", False) is True
    assert snap.component_bool("A", "other", True) is True
    assert snap.component_int("A", "count", 0) == 3


def test_rules_are_grouped_by_phase_in_table_order_and_disabled_ones_left_out() -> None:
    rules = (RuleRecord(rule_id=3, phase=POST_INTENT, rule_type="EXACT", match_pattern="a", action="SET_STATE"),
             RuleRecord(rule_id=1, phase=POST_INTENT, rule_type="EXACT", match_pattern="b", action="SET_STATE"),
             RuleRecord(rule_id=2, phase=POST_INTENT, rule_type="EXACT", match_pattern="c", action="SET_STATE",
                        enabled=False))
    snap = _snapshot(rules=rules)
    assert [r.rule_id for r in snap.rules_for(POST_INTENT)] == [3, 1]
    assert snap.rules_for("PRE_RESPONSE_RESOLUTION") == ()
    assert snap.statistics()["rulesByPhase"] == {POST_INTENT: 2}


def test_tools_are_found_by_code_in_any_case_and_intents_by_code() -> None:
    snap = _snapshot(tools=(ToolRecord(tool_id=1, tool_code="Order.Lookup"),),
                     intents=(IntentRecord(intent_code="ORDER", description="orders"),))
    assert snap.tool("order.lookup") is snap.tool("ORDER.LOOKUP") is not None
    assert snap.tool("other") is None
    assert snap.intent("ORDER") is not None and snap.intent("order") is None


def test_the_intent_agent_may_answer_enabled_intents_but_unknown_by_priority() -> None:
    snap = _snapshot(intents=(IntentRecord(intent_code="UNKNOWN", description="?", priority=1),
                              IntentRecord(intent_code="B", description="b", priority=5),
                              IntentRecord(intent_code="A", description="a", priority=5),
                              IntentRecord(intent_code="C", description="c", priority=1),
                              IntentRecord(intent_code="OFF", description="off", enabled=False)))
    assert [i.intent_code for i in snap.allowed_intents()] == ["C", "A", "B"]
    assert snap.enabled_intent_codes == {"UNKNOWN", "A", "B", "C"}


def test_statistics_count_rows_and_enabled_rows_per_table() -> None:
    snap = _snapshot(intents=(IntentRecord(intent_code="A", description="a"),
                              IntentRecord(intent_code="B", description="b", enabled=False)),
                     known_states=frozenset({"IDLE", "COLLECT"}), warnings=("w1",))
    stats = snap.statistics()
    assert stats["version"] == "v1"
    assert stats["tables"] == {"ce_intent": {"rows": 2, "enabled": 1}}
    assert stats["knownStates"] == ["COLLECT", "IDLE"] and stats["warnings"] == ["w1"]
    assert snap.is_known_state("IDLE") and not snap.is_known_state("idle")


def test_a_snapshot_cannot_change_under_a_turn() -> None:
    snap = _snapshot()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.version = "v2"  # type: ignore[misc]
    with pytest.raises(TypeError):
        snap._component["X", "Y"] = "z"  # type: ignore[index]


@pytest.mark.parametrize(("row", "actual", "matches"), [
    (None, "ORDER", True), ("ANY", "ORDER", True), ("ORDER", "ORDER", True), ("ORDER", "BILLING", False),
    ("order", "ORDER", False),
])
def test_a_rows_scope_is_its_value_or_any(row: str | None, actual: str, matches: bool) -> None:
    assert scope_matches(row, actual) is matches
