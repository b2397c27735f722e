"""The rules engine driven directly (it is pure): candidate buckets, every match fires, re-passes
on intent/state changes, the pass limit, and the audit each evaluation leaves, including the
reasons a rule did not fire and what happens when a host's own action fails."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog import params as pk
from convengine.catalog.errors import ConvEngineError, ErrorCode, RuleError
from convengine.rules import PhaseRun, RuleRegistry, bucket_order
from tests.rules.fake_session import FakeSession, Recorder, make_rule

SOURCE = "RulesStep"


def stage(name: str) -> str:
    return f"{name} ({SOURCE})"


async def run(rules: list[Any], session: FakeSession, *, registry: RuleRegistry | None = None,
              max_passes: int = 5, run_task: Any = None) -> tuple[Any, Recorder]:
    recorder = Recorder()
    phase = PhaseRun("PRE_RESPONSE_RESOLUTION", rules, session, registry or RuleRegistry(), SOURCE, recorder,
                     run_task=run_task, max_passes=max_passes)
    return await phase.run(), recorder


def test_bucket_order_keeps_only_rules_in_scope_most_specific_bucket_first() -> None:
    rules = [make_rule("X", rule_id=1, intent="ANY", state="ANY", priority=1),
             make_rule("X", rule_id=2, intent="OTHER", state="START", priority=1),  # other intent: out
             make_rule("X", rule_id=3, intent="LOAN", state="DONE", priority=1),  # other state: out
             make_rule("X", rule_id=4, intent="ANY", state="START", priority=1),
             make_rule("X", rule_id=5, intent="LOAN", state="ANY", priority=1),
             make_rule("X", rule_id=6, priority=50),
             make_rule("X", rule_id=7, priority=10),
             make_rule("X", rule_id=8, priority=10)]  # same priority as 7: the lower id first
    assert [r.rule_id for r in bucket_order(rules, "LOAN", "START")] == [7, 8, 6, 5, 4, 1]
    assert [r.rule_id for r in bucket_order(rules, "LOAN", "DONE")] == [3, 5, 1]
    assert bucket_order(rules[1:3], "BILLING", "IDLE") == []


async def test_every_matching_rule_fires_and_misses_are_audited_with_their_reason() -> None:
    rules = [make_rule("SET_INPUT_PARAM", "first", priority=1),
             make_rule("SET_INPUT_PARAM", "not_me", match="something else", priority=2),
             make_rule("SET_INPUT_PARAM", "second", kind="REGEX", match=r"\bsmall\b", priority=3)]
    session = FakeSession("a SMALL loan")
    result, audit = await run(rules, session)
    assert result.matched == [rules[0].rule_id, rules[2].rule_id]
    assert (result.passes, result.changed) == (1, False)
    assert session.kept == {"first": True, "second": True}
    miss = audit.payloads(stage("RULE_NO_MATCH"))
    assert [(m["ruleId"], m["reason"]) for m in miss] == [(rules[1].rule_id, "TYPE_CONDITION_NOT_MET")]
    assert audit.stages() == [stage("RULE_MATCH"), "SET_INPUT_PARAM", stage("RULE_APPLIED"),
                              stage("RULE_NO_MATCH"),
                              stage("RULE_MATCH"), "SET_INPUT_PARAM", stage("RULE_APPLIED"),
                              stage("RULE_PHASE_RUN")]
    assert audit.payloads(stage("RULE_PHASE_RUN"))[0] == {
        "phase": "PRE_RESPONSE_RESOLUTION", "passes": 1, "matched": result.matched, "changed": False,
        "intent": "LOAN", "state": "START"}


async def test_a_phase_with_no_candidate_says_so_once() -> None:
    result, audit = await run([make_rule("SET_INPUT_PARAM", "x", intent="BILLING")], FakeSession("hi"))
    assert (result.passes, result.matched) == (1, [])
    assert audit.payloads(stage("RULE_NO_MATCH")) == [
        {"phase": "PRE_RESPONSE_RESOLUTION", "reason": "NO_CANDIDATES", "intent": "LOAN", "state": "START"}]


async def test_the_phase_stamps_where_the_rules_ran_in_the_params() -> None:
    session = FakeSession("hi")
    await run([], session)
    assert session.params[pk.RULE_PHASE] == "PRE_RESPONSE_RESOLUTION"
    assert session.params[pk.RULE_EXECUTION_SOURCE] == SOURCE
    assert session.params[pk.RULE_EXECUTION_ORIGIN] == "RULES_STEP"
    assert session.kept == {}  # stamps are turn-scoped: not kept for later turns


async def test_a_state_change_runs_the_phase_again_for_the_new_scope() -> None:
    rules = [make_rule("SET_STATE", "review", priority=1),  # lower case: stored upper-cased
             make_rule("SET_INPUT_PARAM", "any_state_rule", state="ANY", priority=1),
             make_rule("SET_INPUT_PARAM", "in_review", state="REVIEW", priority=1)]
    session = FakeSession("go")
    result, audit = await run(rules, session)
    assert session.state == "REVIEW" and result.changed and result.passes == 2
    # pass 1: SET_STATE and the ANY-state rule; pass 2: REVIEW's own rule, then the ANY-state rule again
    assert result.matched == [rules[0].rule_id, rules[1].rule_id, rules[2].rule_id, rules[1].rule_id]
    assert session.moves == [("state", "REVIEW", f"rule {rules[0].rule_id}")]
    assert audit.payloads("SET_STATE") == [{"ruleId": rules[0].rule_id, "fromState": "START", "toState": "REVIEW"}]


async def test_rules_that_keep_moving_stop_at_the_pass_limit() -> None:
    rules = [make_rule("SET_INTENT", "BILLING", intent="LOAN", state="ANY"),
             make_rule("SET_INTENT", "LOAN", intent="BILLING", state="ANY")]
    session = FakeSession("ping")
    result, audit = await run(rules, session, max_passes=4)
    assert result.passes == 4 and session.intent == "LOAN"  # LOAN->BILLING->LOAN->BILLING->LOAN
    assert [m[1] for m in session.moves] == ["BILLING", "LOAN", "BILLING", "LOAN"]
    limit = audit.payloads(stage("RULE_PASS_LIMIT_REACHED"))
    assert limit == [{"phase": "PRE_RESPONSE_RESOLUTION", "passes": 4, "maxPasses": 4, "intent": "LOAN",
                      "state": "START"}]


async def test_an_unknown_rule_type_or_action_is_audited_and_the_rest_still_run() -> None:
    registry = RuleRegistry.with_custom()
    rules = [make_rule("SET_INPUT_PARAM", "never", kind="FUZZY", priority=1),
             make_rule("PAINT", "blue", priority=2),
             make_rule("SET_INPUT_PARAM", "still_ran", priority=3)]
    session = FakeSession("x")
    result, audit = await run(rules, session, registry=registry)
    reasons = [(p["ruleId"], p["reason"]) for p in audit.payloads(stage("RULE_NO_MATCH"))]
    assert reasons == [(rules[0].rule_id, "TYPE_RESOLVER_MISSING"), (rules[1].rule_id, "ACTION_RESOLVER_MISSING")]
    assert session.kept == {"still_ran": True}
    assert stage("RULE_APPLIED") in audit.stages() and "PAINT" not in audit.stages()
    assert result.matched == [rules[1].rule_id, rules[2].rule_id]  # PAINT matched, though it did nothing


async def test_a_pattern_that_runs_out_of_time_counts_as_no_match() -> None:
    slow = make_rule("SET_INPUT_PARAM", "slow", kind="REGEX", match=r"^(a|aa)+(?=b)\1$", timeout_s=0.001)
    assert slow.matcher.engine == "regex"  # the look-ahead needs the bounded fallback engine
    session = FakeSession("a" * 30 + "c")
    _, audit = await run([slow, make_rule("SET_INPUT_PARAM", "after")], session)
    miss = audit.payloads(stage("RULE_NO_MATCH"))[0]
    assert miss["reason"] == "PATTERN_TIMEOUT" and "took longer than 1 ms" in miss["error"]
    assert session.kept == {"after": True}


async def test_custom_match_types_and_actions_async_ones_included() -> None:
    async def tag(rule: Any, session: Any, env: Any) -> dict[str, Any]:
        session.params["tag"] = rule.action_value
        session.params["untouched"] = session.params.get("untouched")
        return {"ruleId": rule.rule_id, "tagged": rule.action_value}

    def shorter_than(rule: Any, session: Any) -> bool:
        return len(session.user_text) < int(rule.match_pattern)

    registry = RuleRegistry.with_custom({"shorter_than": shorter_than}, {"tag": tag})
    rules = [make_rule("TAG", "brief", kind="SHORTER_THAN", match="10"),
             make_rule("TAG", "never", kind="SHORTER_THAN", match="2")]
    session = FakeSession("hi there", params={"untouched": 1})
    result, audit = await run(rules, session, registry=registry)
    assert result.matched == [rules[0].rule_id]
    assert audit.payloads("TAG") == [{"ruleId": rules[0].rule_id, "tagged": "brief"}]
    # what a host's action sets persists like SET_INPUT_PARAM's; a value it left as it was is not re-kept
    assert session.kept == {"tag": "brief"}


async def test_a_failing_custom_action_fails_the_phase_naming_the_rule() -> None:
    def broken(rule: Any, session: Any, env: Any) -> dict[str, Any]:
        raise KeyError("customer")

    def refused(rule: Any, session: Any, env: Any) -> dict[str, Any]:
        raise ConvEngineError("refused on purpose", code=ErrorCode.INVALID_INPUT)

    registry = RuleRegistry.with_custom(actions={"BROKEN": broken, "REFUSED": refused})
    rule = make_rule("BROKEN", None, rule_id=77)
    with pytest.raises(RuleError) as info:
        await run([rule], FakeSession("x"), registry=registry)
    assert info.value.code is ErrorCode.RULE_EVALUATION_FAILED
    assert "ce_rule[77] action BROKEN failed" in info.value.message and info.value.details["ruleId"] == 77
    with pytest.raises(ConvEngineError) as passed:  # the engine's own errors keep their code
        await run([make_rule("REFUSED", None)], FakeSession("x"), registry=registry)
    assert passed.value.code is ErrorCode.INVALID_INPUT


async def test_rule_applied_carries_the_action_value_parsed_when_it_is_json() -> None:
    rules = [make_rule("SET_INPUT_PARAM", '{"a": [1, 2]}', priority=1), make_rule("SET_INPUT_PARAM", "b:2", priority=2)]
    _, audit = await run(rules, FakeSession("x"))
    assert [p["actionValue"] for p in audit.payloads(stage("RULE_APPLIED"))] == [{"a": [1, 2]}, "b:2"]
