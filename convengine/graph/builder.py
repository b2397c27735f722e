"""Build the turn graph: one node per step, routed by Command; compile with a checkpointer."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Any, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from convengine.catalog import names
from convengine.catalog.state import EngineInput, EngineState
from convengine.graph.plan import StepPlan
from convengine.graph.wrapper import ContextProvider, make_node
from convengine.nodes import (
    actions,
    bootstrap,
    correction,
    dialogue,
    finish,
    intent,
    knowledge,
    policy,
    response,
    rules_steps,
    schema_steps,
    tools,
)
from convengine.nodes.common import Step
from convengine.nodes.context import TurnContext
from convengine.workflows import step as flow_step


class FinishNode(Protocol):
    """The node a run ends in (LangGraph passes it the state by name)."""

    def __call__(self, state: EngineState) -> Awaitable[None]: ...




def default_steps() -> list[Step]:
    """ConvEngine's steps in convengine's default order (policy before any LLM call)."""
    by_name = {s.name: s for module in (bootstrap, policy, dialogue, actions, correction, intent, schema_steps,
                                        tools, rules_steps, knowledge, response, finish, flow_step) for s in module.STEPS}
    missing = [n for n in names.DEFAULT_ORDER if n not in by_name]
    assert not missing, f"steps without an implementation: {missing}"
    return [by_name[n] for n in names.DEFAULT_ORDER]


def build_graph(custom_steps: Iterable[Step] = (), *, context_provider: ContextProvider | None = None,
                with_context_schema: bool = True,
                finish: tuple[str, FinishNode] | None = None) -> StateGraph[Any, Any, Any, Any]:
    """The uncompiled graph (what ``langgraph dev`` and users compile with their own saver).

    Args:
        custom_steps: extra steps placed before/after named ones.
        context_provider: builds the TurnContext when a run brings none (LangGraph Studio).
        with_context_schema: declare TurnContext as the context schema (not for Studio, whose
            server introspects it as JSON).
        finish: a node (name, function of the final state) the last step hands over to before the
            run ends (Studio commits the turn there; the engine commits after the run).
    """
    plan = StepPlan.build(default_steps(), custom_steps, finish[0] if finish else END)
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(
        EngineState, context_schema=TurnContext if with_context_schema else None, input_schema=EngineInput)
    for step in plan.steps:
        graph.add_node(step.name, make_node(step, plan, context_provider), destinations=plan.destinations(step.name))
    graph.add_edge(START, plan.steps[0].name)
    if finish is not None:
        graph.add_node(finish[0], finish[1])
        graph.add_edge(finish[0], END)
    return graph


def compile_graph(graph: StateGraph[EngineState, TurnContext, EngineState, EngineState], *,
                  checkpointer: BaseCheckpointSaver[str] | None = None) -> CompiledStateGraph[EngineState, TurnContext, EngineState, EngineState]:
    """The only place the turn graph is compiled."""
    return graph.compile(checkpointer=checkpointer, name="convengine")
