"""Build the turn graph: one node per step, routed by Command; compile with a checkpointer."""

from __future__ import annotations

from collections.abc import Iterable

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from convengine.graph import names
from convengine.graph.plan import StepPlan
from convengine.graph.wrapper import make_node
from convengine.nodes import actions, bootstrap, correction, dialogue, finish, intent, policy, response
from convengine.nodes import rules_steps, schema_steps, tools
from convengine.nodes.common import Step
from convengine.nodes.context import TurnContext
from convengine.state import EngineState


def default_steps() -> list[Step]:
    """ConvEngine's steps in convengine's default order (policy before any LLM call)."""
    by_name = {s.name: s for module in (bootstrap, policy, dialogue, actions, correction, intent, schema_steps,
                                        tools, rules_steps, response, finish) for s in module.STEPS}
    missing = [n for n in names.DEFAULT_ORDER if n not in by_name]
    assert not missing, f"steps without an implementation: {missing}"
    return [by_name[n] for n in names.DEFAULT_ORDER]


def build_graph(custom_steps: Iterable[Step] = ()) -> StateGraph[EngineState, TurnContext, EngineState, EngineState]:
    """The uncompiled graph (what ``langgraph dev`` and users compile with their own saver)."""
    plan = StepPlan.build(default_steps(), custom_steps)
    graph: StateGraph[EngineState, TurnContext, EngineState, EngineState] = StateGraph(
        EngineState, context_schema=TurnContext)
    for step in plan.steps:
        graph.add_node(step.name, make_node(step, plan), destinations=plan.destinations(step.name))
    graph.add_edge(START, plan.steps[0].name)
    return graph


def compile_graph(graph: StateGraph[EngineState, TurnContext, EngineState, EngineState], *,
                  checkpointer: BaseCheckpointSaver[str] | None = None) -> CompiledStateGraph[EngineState, TurnContext, EngineState, EngineState]:
    """The only place the turn graph is compiled."""
    return graph.compile(checkpointer=checkpointer, name="convengine")
