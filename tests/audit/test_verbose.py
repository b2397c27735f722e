"""Which ce_verbose row speaks for an audit stage, and what it says (:class:`VerbosePublisher`), on rows
validated from a pack as an engine loads them. ConvEngine's scores decide between rows: the same rows
must pick the same message as ConvEngine's admin UI shows for them."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog import stages
from convengine.config_loader import validate_pack
from convengine.templates.verbose import VerbosePublisher, determinants
from tests.helpers import pack

CID = "c-1"


def row(verbose_id: int, determinant: str, message: str, **columns: Any) -> dict[str, Any]:
    return {"verbose_id": verbose_id, "intent_code": "ANY", "state_code": "ANY", "step_match": "EXACT",
            "step_value": "ANY", "determinant": determinant, "message": message, "priority": 100, **columns}


def publisher(*rows: dict[str, Any]) -> VerbosePublisher:
    snapshot = validate_pack(pack(ce_verbose=list(rows)))
    return VerbosePublisher(snapshot.verbose, snapshot.settings)


def say(pub: VerbosePublisher, stage: str, payload: dict[str, Any] | None = None, *, intent: str | None = "LOAN",
        state: str | None = "START", steps: tuple[str, ...] = ("RulesStep", "rules")) -> dict[str, Any] | None:
    return pub.resolve(stage, payload or {}, conversation_id=CID, intent=intent, state=state, step_names=steps)


def text(pub: VerbosePublisher, stage: str, payload: dict[str, Any] | None = None, **kw: Any) -> str | None:
    found = say(pub, stage, payload, **kw)
    return None if found is None else found["text"]


def test_a_stage_suffixed_with_its_source_and_convengines_old_names_are_the_same_determinant() -> None:
    assert determinants(stages.by_source(stages.RULE_MATCH, "RulesStep")) == (stages.RULE_MATCH,)
    assert determinants(stages.INTENT_CLASSIFICATION_MATCHED) == (stages.INTENT_CLASSIFICATION_MATCHED,
                                                                  "INTENT_RESOLVED")
    pub = publisher(row(1, "INTENT_RESOLVED", "Intent found."), row(2, "RULE_MATCH", "Matching."))
    assert text(pub, stages.INTENT_CLASSIFICATION_MATCHED) == "Intent found."
    assert text(pub, stages.by_source(stages.RULE_MATCH, "RulesStep")) == "Matching."
    assert say(pub, stages.USER_INPUT) is None  # no row for it, and not an error: silence


def test_a_row_for_the_intent_beats_an_any_row_of_a_much_better_priority() -> None:
    # ConvEngine's score: 400 for the intent, less the priority; the generic row has priority 1.
    pub = publisher(row(1, "RULE_MATCH", "generic", priority=1), row(2, "RULE_MATCH", "for loans", intent_code="LOAN",
                                                                     priority=300))
    assert text(pub, stages.RULE_MATCH) == "for loans"
    assert text(pub, stages.RULE_MATCH, intent="GREETING") == "generic"  # the LOAN row is not eligible


def test_intent_outweighs_state_and_state_outweighs_any() -> None:
    pub = publisher(row(1, "RULE_MATCH", "any"), row(2, "RULE_MATCH", "state", state_code="START"),
                    row(3, "RULE_MATCH", "intent", intent_code="loan"))
    assert text(pub, stages.RULE_MATCH) == "intent"  # intent codes compare without case
    assert text(pub, stages.RULE_MATCH, intent="OTHER") == "state"
    assert text(pub, stages.RULE_MATCH, intent="OTHER", state="END") == "any"


def test_among_equal_rows_the_lower_priority_wins_and_disabled_rows_never_speak() -> None:
    pub = publisher(row(1, "RULE_MATCH", "second", priority=20), row(2, "RULE_MATCH", "first", priority=10),
                    row(3, "RULE_MATCH", "disabled", priority=1, enabled=False))
    assert text(pub, stages.RULE_MATCH) == "first"
    assert [r.verbose_id for r in pub.rows] == [1, 2]


def test_a_step_matches_by_convengine_class_or_own_name_exactly_or_by_regex() -> None:
    pub = publisher(row(1, "STEP_ENTER", "rules step", step_value="rulesstep"),
                    row(2, "STEP_ENTER", "any step", step_match="REGEX", step_value="^Intent.*Step$"))
    assert text(pub, stages.STEP_ENTER) == "rules step"
    assert text(pub, stages.STEP_ENTER, steps=("IntentResolutionStep", "intent_resolution")) == "any step"
    assert text(pub, stages.STEP_ENTER, steps=("memory",)) is None
    found = say(pub, stages.STEP_ENTER)
    assert found is not None and found["stepName"] == "RulesStep" and found["verboseId"] == 1


def test_an_exact_step_row_outscores_a_regex_one() -> None:
    pub = publisher(row(1, "STEP_ENTER", "regex", step_match="REGEX", step_value=".*", priority=1),
                    row(2, "STEP_ENTER", "exact", step_value="rules", priority=50))
    assert text(pub, stages.STEP_ENTER) == "exact"


def test_a_rule_row_speaks_only_for_its_rule() -> None:
    pub = publisher(row(1, "RULE_APPLIED", "rule 7 applied", rule_id=7), row(2, "RULE_APPLIED", "a rule applied"))
    assert text(pub, stages.RULE_APPLIED, {"ruleId": "7"}) == "rule 7 applied"  # ids compare as numbers
    assert text(pub, stages.RULE_APPLIED, {"ruleId": 8}) == "a rule applied"
    assert text(pub, stages.RULE_APPLIED, {"ruleId": True}) == "a rule applied"  # a boolean is no rule id
    found = say(pub, stages.RULE_APPLIED, {"rule_id": 7})
    assert found is not None and found["ruleId"] == 7


def test_a_tool_row_speaks_only_for_its_tool() -> None:
    pub = publisher(row(1, "MCP_TOOL_CALL", "crm", tool_code="CRM.lookup"), row(2, "MCP_TOOL_CALL", "a tool"))
    assert text(pub, "MCP_TOOL_CALL", {"toolCode": "crm.lookup"}) == "crm"
    assert text(pub, "MCP_TOOL_CALL", {"toolCode": "other"}) == "a tool"
    assert text(pub, "MCP_TOOL_CALL") == "a tool"


def test_an_error_speaks_its_error_message_or_convengines_fallback() -> None:
    pub = publisher(row(1, "STEP_ERROR", "step failed", error_message="{{stepName}} broke", step_value="rules"))
    found = say(pub, stages.STEP_ERROR, steps=("rules",))
    assert found is not None
    assert (found["text"], found["message"], found["errorMessage"]) == ("rules broke", "step failed", "rules broke")
    assert (found["level"], found["metadata"]["theme"], found["metadata"]["icon"]) == ("ERROR", "danger", "warning")
    fallback = say(pub, stages.STEP_ERROR, steps=("memory",))  # no row for this step
    assert fallback is not None and fallback["verboseId"] is None
    assert fallback["text"] == "Something went wrong while processing memory." and fallback["level"] == "ERROR"
    assert text(pub, "MCP_TOOL_ERROR", steps=("mcp",)) == "Something went wrong while processing mcp."


def test_a_message_renders_from_the_stage_payload_and_the_turns_facts() -> None:
    pub = publisher(row(1, "RULE_MATCH", "{{intent}}/{{state}} in {{stepName}}: {{count}} rules", priority=1))
    found = say(pub, stages.RULE_MATCH, {"count": 3, "_meta": {"hidden": True}})
    assert found is not None
    assert found["text"] == "LOAN/START in RulesStep: 3 rules"
    assert (found["eventType"], found["determinant"], found["intent"], found["state"]) == (
        "VERBOSE_PROGRESS", "RULE_MATCH", "LOAN", "START")
    assert found["metadata"]["conversationId"] == CID and found["level"] == "INFO"
    unknown = say(pub, stages.RULE_MATCH, intent=None, state=None)
    assert unknown is not None and unknown["text"].startswith("UNKNOWN/UNKNOWN")


@pytest.mark.parametrize("steps", [(), ("rules",)])
def test_nothing_speaks_for_a_verbose_event_itself_or_outside_a_step(steps: tuple[str, ...]) -> None:
    pub = publisher(row(1, "ANY", "everything"))
    assert say(pub, stages.VERBOSE, steps=steps) is None
    assert (say(pub, stages.USER_INPUT, steps=steps) is None) == (not steps)
