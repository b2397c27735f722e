"""The state of one turn's walk (:class:`Walk`: the flow position it carries, the messages it says, the step
guard), what a node run returns (:class:`Result`) and the walk's errors. The call stack that moves
between flows is :mod:`convengine.flows.call_stack`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from convengine.catalog import stages
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.config.flows import Flow, FlowCatalog
from convengine.nodes.turn import Turn
from convengine.rules.expr import ExpressionError, compile_expression
from convengine.templates.render import render_text


class FlowError(ConvEngineError):
    """A flow could not go on (no edge for an outcome, a bad expression at run time...)."""

    default_code = ErrorCode.PIPELINE_STEP_FAILED


class FlowStepLimitError(ConvEngineError):
    """The walk took more node steps in one turn than ``flows.max_steps_per_turn`` allows."""

    default_code = ErrorCode.PIPELINE_CONSTRAINT_VIOLATION


@dataclass(frozen=True, slots=True)
class Result:
    """What a node did: ``next`` (follow an edge for ``outcome``), ``wait``, ``end``, ``call`` a
    subflow, or ``handoff`` to a human."""

    kind: str
    outcome: str | None = None
    flow: str | None = None


NEXT = Result("next")
WAIT = Result("wait")


@dataclass(frozen=True, slots=True)
class WalkStages:
    """The audit stages a walk writes and the payload key naming the graph: the conversation flows'
    (``FLOW_*``, ``flow``) or the workflow runtime's (``workflow.*``, ``workflow``)."""

    key: str = "flow"
    started: str = stages.FLOW_STARTED
    node: str = stages.FLOW_NODE
    waiting: str = stages.FLOW_WAITING
    completed: str = stages.FLOW_COMPLETED
    returned: str = stages.FLOW_RETURNED
    routed: str | None = None
    """Audited when an edge is chosen (the flows do not audit it)."""


FLOW_STAGES = WalkStages()


@dataclass
class Walk:
    """Mutable for one turn; what it holds in ``data`` is checkpointed as ``EngineState['flow']``."""

    turn: Turn
    catalog: FlowCatalog
    data: dict[str, Any]
    max_steps: int
    input: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    last_service: Any = None
    trace: list[dict[str, Any]] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    """Passages the turn's answer came from (knowledge nodes that said their answer)."""
    handlers: Mapping[str, Any] | None = None
    """What each node type does (None: the conversation flows' node types); the workflow runtime
    passes its own."""
    names: WalkStages = FLOW_STAGES

    # --- position -----------------------------------------------------------------------

    @property
    def stack(self) -> list[dict[str, Any]]:
        return self.data.setdefault("stack", [])

    @property
    def variables(self) -> dict[str, Any]:
        """``session.*``: the conversation's flow variables."""
        return self.data.setdefault("vars", {})

    def frame_vars(self) -> dict[str, Any]:
        """``flow.*``: variables of the running flow call (dropped when it returns)."""
        return self.stack[-1].setdefault("vars", {}) if self.stack else {}

    def attempts(self, flow: Flow, node_id: str) -> int:
        return int(self.data.get("attempts", {}).get(f"{flow.code}/{node_id}", 0))

    def set_attempts(self, flow: Flow, node_id: str, value: int) -> None:
        attempts = self.data.setdefault("attempts", {})
        key = f"{flow.code}/{node_id}"
        if value:
            attempts[key] = value
        else:
            attempts.pop(key, None)

    def tick(self, flow: Flow, node_id: str) -> None:
        """Count a node step; over the limit the turn fails (nothing of it is kept)."""
        self.steps += 1
        if self.steps > self.max_steps:
            self.turn.audit(stages.FLOW_STEP_LIMIT, {self.names.key: flow.code, "node": node_id, "limit": self.max_steps})
            raise FlowStepLimitError(
                f"{self.names.key} {flow.code} took more than {self.max_steps} node steps in one turn (at node {node_id}); "
                "the turn was stopped and the conversation left as it was (settings flows.max_steps_per_turn)",
                details={self.names.key: flow.code, "node": node_id, "limit": self.max_steps})

    # --- output -------------------------------------------------------------------------

    def say(self, text: str, blocks: object = None, sources: list[dict[str, Any]] | None = None) -> None:
        message: dict[str, Any] = {"text": text}
        if blocks:
            message["blocks"] = blocks
        self.messages.append(message)
        self.sources.extend(sources or ())

    def payload(self) -> dict[str, Any] | None:
        if not self.messages:
            return None
        if any("blocks" in m for m in self.messages):
            payload: dict[str, Any] = {"type": "JSON", "value": {"messages": self.messages}}
        else:
            payload = {"type": "TEXT", "value": "\n".join(m["text"] for m in self.messages if m["text"])}
        if self.sources:
            payload["sources"] = list(self.sources)
        return payload

    # --- variables ----------------------------------------------------------------------

    def scopes(self) -> dict[str, Any]:
        """What templates and expressions see."""
        return {"session": self.variables, "flow": self.frame_vars(), "user": dict(self.turn.read_params()),
                "input": self.turn.user_text, "text": self.turn.user_text, "intent": self.turn.intent,
                "tool_response": self.last_service, "workspace": self.turn.settings.flows.workspace}

    def render(self, source: object, name: str) -> Any:
        """Render ``{{ }}`` templates in a string, or in every string of a JSON value."""
        if isinstance(source, str):
            return render_text(source, self.scopes(), template=name, limits=self.turn.settings)
        if isinstance(source, dict):
            return {k: self.render(v, name) for k, v in source.items()}
        if isinstance(source, list):
            return [self.render(v, name) for v in source]
        return source

    def evaluate(self, source: str, where: str) -> Any:
        try:
            return compile_expression(source).evaluate(self.scopes())
        except ExpressionError as exc:
            raise FlowError(f"{where}: expression {source[:80]!r} failed: {exc}") from None
