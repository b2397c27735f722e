"""The step plan: where custom steps go, and how the router picks the next step after each one.

These drive ``StepPlan`` directly with small step lists: the router is the unit under test, and a
turn is only what the router reads (an explicit route) and writes (skip audits).
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.graph import END

from convengine.catalog import names, stages
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.graph.builder import build_graph, default_steps
from convengine.graph.plan import StepPlan
from convengine.nodes.common import Step


class RouterTurn:
    """What StepPlan.next_step uses of a Turn: the explicit route and the audit."""

    def __init__(self, route: str | None = None, **flags: Any) -> None:
        self.route = route
        self.flags = flags
        self.audits: list[tuple[str, dict[str, Any]]] = []

    def audit(self, stage: str, payload: dict[str, Any] | None = None) -> None:
        self.audits.append((stage, dict(payload or {})))


def noop(turn: Any) -> None:
    return None


def skip_when(flag: str, stage: str | None = "SOME_STAGE") -> Any:
    def skip(turn: Any) -> tuple[str | None, dict[str, Any]] | None:
        return (stage, {"reason": f"{flag.upper()}_SET"}) if turn.flags.get(flag) else None

    return skip


def chain(*steps: Step) -> StepPlan:
    return StepPlan(list(steps))


# --- building: custom steps before/after named steps ------------------------------------------


def test_custom_steps_are_inserted_next_to_the_step_they_name() -> None:
    plan = StepPlan.build(default_steps(), [Step("host_before", noop, before=names.RULES),
                                            Step("host_after", noop, after=names.RULES)])
    order = [s.name for s in plan.steps]
    at = order.index(names.RULES)
    assert order[at - 1:at + 2] == ["host_before", names.RULES, "host_after"]
    assert [n for n in order if n not in ("host_before", "host_after")] == list(names.DEFAULT_ORDER)


def test_custom_steps_can_name_each_other_in_the_order_given() -> None:
    plan = StepPlan.build(default_steps(), [Step("a", noop, after=names.MEMORY), Step("b", noop, after="a"),
                                            Step("c", noop, before="a")])
    order = [s.name for s in plan.steps]
    at = order.index(names.MEMORY)
    assert order[at:at + 4] == [names.MEMORY, "c", "a", "b"]


def test_a_custom_step_may_go_right_after_the_first_and_before_the_last_step() -> None:
    plan = StepPlan.build(default_steps(), [Step("early", noop, after=names.FIRST_STEP),
                                            Step("late", noop, before=names.LAST_STEP)])
    order = [s.name for s in plan.steps]
    assert order[:2] == [names.FIRST_STEP, "early"]
    assert order[-2:] == ["late", names.LAST_STEP]


@pytest.mark.parametrize(("step", "code", "words"), [
    (Step("x", noop, before=names.FIRST_STEP), ErrorCode.PIPELINE_CONSTRAINT_VIOLATION, "cannot run before"),
    (Step("x", noop, before="rules", after="memory"), ErrorCode.PIPELINE_CONSTRAINT_VIOLATION, "exactly one"),
    (Step("x", noop, after="Rules"), ErrorCode.UNKNOWN_STEP, "unknown step 'Rules'"),
    (Step(names.MEMORY, noop, after=names.RULES), ErrorCode.DUPLICATE_ENGINE_STEP, "already exists"),
])
def test_a_misplaced_custom_step_is_refused_with_a_message_naming_it(step: Step, code: ErrorCode, words: str) -> None:
    with pytest.raises(ConvEngineError, match=words) as info:
        StepPlan.build(default_steps(), [step])
    assert info.value.code == code


def test_an_unknown_target_lists_the_steps_there_are() -> None:
    with pytest.raises(ConvEngineError) as info:
        StepPlan.build(default_steps(), [Step("x", noop, before="rulez")])
    assert names.RULES in info.value.message and names.PIPELINE_END_GUARD in info.value.message


def test_the_default_steps_are_convengines_order() -> None:
    assert [s.name for s in default_steps()] == list(names.DEFAULT_ORDER)


# --- routing -------------------------------------------------------------------------------


def test_the_next_step_is_the_following_one_and_the_last_hands_over_to_the_end() -> None:
    plan = chain(Step("a", noop), Step("b", noop), Step("c", noop))
    turn = RouterTurn()
    assert plan.next_step("a", turn) == "b"
    assert plan.next_step("c", turn) == END
    assert turn.audits == []


def test_a_step_with_nothing_to_do_is_skipped_and_the_skip_is_audited() -> None:
    plan = chain(Step("a", noop), Step("b", noop, skip=skip_when("idle", "B_SKIPPED")), Step("c", noop))
    turn = RouterTurn(idle=True)
    assert plan.next_step("a", turn) == "c"
    assert turn.audits == [(stages.STEP_SKIPPED, {"step": "b", "reason": "IDLE_SET"}),
                           ("B_SKIPPED", {"reason": "IDLE_SET"})]


def test_a_skip_without_a_stage_of_its_own_is_audited_only_as_step_skipped() -> None:
    plan = chain(Step("a", noop), Step("b", noop, skip=skip_when("idle", None)), Step("c", noop))
    turn = RouterTurn(idle=True)
    assert plan.next_step("a", turn) == "c"
    assert turn.audits == [(stages.STEP_SKIPPED, {"step": "b", "reason": "IDLE_SET"})]


def test_a_step_that_has_work_is_not_skipped() -> None:
    plan = chain(Step("a", noop), Step("b", noop, skip=skip_when("idle")), Step("c", noop))
    turn = RouterTurn(idle=False)
    assert plan.next_step("a", turn) == "b"
    assert turn.audits == []


def test_consecutive_skips_are_all_passed_and_each_audited_in_order() -> None:
    plan = chain(Step("a", noop), Step("b", noop, skip=skip_when("idle", "B_SKIPPED")),
                 Step("c", noop, skip=skip_when("idle", "C_SKIPPED")), Step("d", noop, skip=skip_when("idle", None)))
    turn = RouterTurn(idle=True)
    assert plan.next_step("a", turn) == END
    assert [a[0] for a in turn.audits] == [stages.STEP_SKIPPED, "B_SKIPPED", stages.STEP_SKIPPED, "C_SKIPPED",
                                           stages.STEP_SKIPPED]
    assert [a[1]["step"] for a in turn.audits if a[0] == stages.STEP_SKIPPED] == ["b", "c", "d"]


def test_an_explicit_route_wins_and_its_target_runs_even_if_it_would_be_skipped() -> None:
    plan = chain(Step("a", noop), Step("b", noop), Step("c", noop, skip=skip_when("idle")), Step("d", noop))
    turn = RouterTurn(route="c", idle=True)
    assert plan.next_step("a", turn) == "c"
    assert turn.audits == []


def test_steps_after_an_explicit_route_target_are_still_skipped_by_their_own_rule() -> None:
    plan = chain(Step("a", noop), Step("b", noop, skip=skip_when("idle")), Step("c", noop))
    turn = RouterTurn(route="b", idle=True)
    assert plan.next_step("a", turn) == "b"  # the route's target itself is not skipped
    turn.route = None
    assert plan.next_step("b", turn) == "c"


def test_a_loop_only_step_is_never_reached_by_falling_through() -> None:
    plan = chain(Step("plan", noop, routes=("call",)), Step("call", noop, loop_only=True, routes=("plan",)),
                 Step("after", noop))
    assert plan.following("plan") == "after"
    assert plan.next_step("plan", RouterTurn()) == "after"
    assert plan.next_step("plan", RouterTurn(route="call")) == "call"


def test_the_end_of_the_planner_loop_continues_after_the_tool_call_step() -> None:
    plan = StepPlan.build(default_steps())
    turn = RouterTurn(route=names.AFTER_MCP_LOOP)
    assert plan.next_step(names.MCP_PLANNER, turn) == names.RULES
    assert turn.route == names.RULES


def test_a_custom_end_node_receives_the_last_step() -> None:
    plan = StepPlan([Step("a", noop), Step("b", noop)], end="commit")
    assert plan.next_step("b", RouterTurn()) == "commit"
    assert plan.following("b") == "commit"


# --- the drawn graph -------------------------------------------------------------------------


def test_destinations_include_every_step_a_skip_chain_can_reach() -> None:
    plan = chain(Step("a", noop), Step("b", noop, skip=skip_when("x")), Step("c", noop, skip=skip_when("x")),
                 Step("d", noop))
    assert plan.destinations("a") == ("b", "c", "d")
    assert plan.destinations("c") == ("d",)
    assert plan.destinations("d") == (END,)


def test_explicit_routes_are_destinations_too() -> None:
    plan = StepPlan.build(default_steps())
    assert names.PERSIST_CONVERSATION in plan.destinations(names.POLICY_ENFORCEMENT)
    assert names.MCP_TOOL_CALL in plan.destinations(names.MCP_PLANNER)
    assert names.MCP_PLANNER in plan.destinations(names.MCP_TOOL_CALL)
    assert names.RULES in plan.destinations(names.RESET_RESOLVED_INTENT)
    assert names.MCP_TOOL_CALL not in plan.destinations(names.TOOL_ORCHESTRATION)  # loop-only: never fallen into


def test_the_built_graph_has_a_node_per_step_and_starts_at_the_first() -> None:
    graph = build_graph([Step("host", noop, after=names.RULES)])
    assert set(graph.nodes) == {*names.DEFAULT_ORDER, "host"}
    compiled = graph.compile()
    drawn = compiled.get_graph()
    starts = {e.target for e in drawn.edges if e.source == "__start__"}
    assert starts == {names.FIRST_STEP}
    policy_targets = {e.target for e in drawn.edges if e.source == names.POLICY_ENFORCEMENT}
    assert names.PERSIST_CONVERSATION in policy_targets and names.DIALOGUE_ACT in policy_targets


def test_a_finish_node_sits_between_the_last_step_and_the_end() -> None:
    async def commit(state: Any) -> None:
        return None

    graph = build_graph(finish=("studio_commit", commit))
    drawn = graph.compile().get_graph()
    assert {e.target for e in drawn.edges if e.source == names.PIPELINE_END_GUARD} == {"studio_commit"}
    assert {e.target for e in drawn.edges if e.source == "studio_commit"} == {"__end__"}


def test_a_skip_that_names_no_reason_is_named_by_its_stage_never_null() -> None:
    """A skip whose payload has no ``reason`` (state_graph's "unchanged", a host's) still says why."""
    def quiet(stage: str | None) -> Any:
        return lambda turn: (stage, {"unchanged": True})

    plan = chain(Step("a", noop), Step("b", noop, skip=quiet("B_VALID")), Step("c", noop, skip=quiet(None)))
    turn = RouterTurn()
    assert plan.next_step("a", turn) == END
    reasons = [a[1]["reason"] for a in turn.audits if a[0] == stages.STEP_SKIPPED]
    assert reasons == ["B_VALID", "NOTHING_TO_DO"]
