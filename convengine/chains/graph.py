"""A chain compiled into a LangGraph graph: one node per step, routed by the step each node names
next, with the engine's checkpointer (a run is the thread ``chain:<run_id>``). Compiled once per
configuration version and chain."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from convengine.catalog import chains as vocab
from convengine.chains.model import Chain


class ChainState(TypedDict, total=False):
    """A run's checkpointed state: the next step's place in the run, the step to run, the outputs so far."""

    seq: int
    at: str
    outputs: dict[str, Any]
    input: dict[str, Any]
    """The run's input (the run row keeps it too; a Studio thread gives it here)."""


StepDriver = Callable[[str, ChainState], Awaitable[ChainState]]


@dataclass(frozen=True, slots=True)
class ChainContext:
    """``Runtime.context`` of a chain run: runs one step (see :mod:`convengine.chains.runtime`)."""

    run_step: StepDriver


ChainGraph = CompiledStateGraph[ChainState, ChainContext, ChainState, ChainState]
ContextProvider = Callable[[str], Awaitable[ChainContext]]
"""Where a node gets its context when the run brings none (LangGraph Studio): from the chain code."""
CACHE_SIZE = 64


def thread_of(run_id: str) -> str:
    return vocab.run_thread(run_id)


def build_chain_graph(chain: Chain, provider: ContextProvider | None = None,
                      ) -> StateGraph[ChainState, ChainContext, ChainState, ChainState]:
    graph: StateGraph[ChainState, ChainContext, ChainState, ChainState] = StateGraph(
        ChainState, context_schema=ChainContext)
    ids = [s.step_id for s in chain.steps]
    for step_id in ids:
        graph.add_node(step_id, _node(step_id, chain.code, provider))
        graph.add_conditional_edges(step_id, _route, {**{i: i for i in ids}, vocab.END: END})
    graph.add_edge(START, chain.first)
    return graph


class StepNode(Protocol):
    """A node as LangGraph calls it: the state, and the runtime by keyword."""

    def __call__(self, state: ChainState, runtime: Runtime[ChainContext]) -> Awaitable[ChainState]: ...


def _node(step_id: str, code: str, provider: ContextProvider | None) -> StepNode:
    async def run(state: ChainState, runtime: Runtime[ChainContext]) -> ChainState:
        context = runtime.context
        if context is None:
            if provider is None:
                raise RuntimeError(f"chain {code}: a run needs its ChainContext (convengine.chains.Chains runs it)")
            context = await provider(code)
        return await context.run_step(step_id, state)

    run.__name__ = f"chain_step_{step_id}"
    return run


def _route(state: ChainState) -> str:
    return state.get("at") or vocab.END


class ChainGraphs:
    """Compiled chain graphs by (configuration hash, chain code), the most recent kept."""

    def __init__(self, saver: BaseCheckpointSaver[str] | None) -> None:
        self.saver = saver
        self._cache: OrderedDict[tuple[str, str], ChainGraph] = OrderedDict()

    def get(self, version_hash: str, chain: Chain) -> ChainGraph:
        key = (version_hash, chain.code)
        graph = self._cache.get(key)
        if graph is None:
            graph = build_chain_graph(chain).compile(checkpointer=self.saver, name=f"chain:{chain.code}")
            self._cache[key] = graph
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return graph
