"""The step order (defaults plus custom steps) and where each step may go next.

Routing is decided after each step: an explicit route (policy stop, reset path, planner loop)
or the next step, then past every following step that has nothing to do, auditing each skip
with the stage ConvEngine would have emitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from langgraph.graph import END

from convengine.catalog import names, stages
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.nodes.common import Step
from convengine.nodes.turn import Turn


class StepPlan:
    """An ordered list of steps with routing helpers."""

    def __init__(self, steps: Sequence[Step], end: str = END) -> None:
        self.steps = list(steps)
        self.end = end
        """Where the last step hands over: END, or a node that finishes the run (Studio's commit)."""
        self.index = {s.name: i for i, s in enumerate(self.steps)}
        self.by_name = {s.name: s for s in self.steps}
        self._following = {s.name: self._next_in_order(s.name) for s in self.steps}

    @classmethod
    def build(cls, defaults: Sequence[Step], custom: Iterable[Step] = (), end: str = END) -> StepPlan:
        """Insert custom steps before/after named steps.

        Raises:
            ConvEngineError: a duplicate name, an unknown target, or a step outside the turn's bookends.
        """
        steps = list(defaults)
        for step in custom:
            _check_custom(step, steps)
            target = step.before or step.after
            at = next(i for i, s in enumerate(steps) if s.name == target)
            steps.insert(at if step.before else at + 1, step)
        return cls(steps, end)

    def following(self, name: str) -> str:
        """The next step in order that is not loop-only (``end`` after the last)."""
        return self._following[name]

    def _next_in_order(self, name: str) -> str:
        for step in self.steps[self.index[name] + 1:]:
            if not step.loop_only:
                return step.name
        return self.end

    def next_step(self, current: str, turn: Turn) -> str:
        if turn.route == names.AFTER_MCP_LOOP:
            turn.route = self.following(names.MCP_TOOL_CALL)
        target = turn.route or self.following(current)
        while target != self.end:
            step = self.by_name[target]
            audit = step.skip(turn) if step.skip and turn.route != target else None
            if audit is None:
                return target
            stage, payload = audit
            # a skip naming no reason is named by the stage it emits (or NOTHING_TO_DO): never null
            reason = payload.get("reason") or stage or "NOTHING_TO_DO"
            turn.audit(stages.STEP_SKIPPED, {"step": target, "reason": reason})
            if stage:
                turn.audit(stage, payload)
            target = self.following(target)
        return target

    def destinations(self, name: str) -> tuple[str, ...]:
        """Every step this one may hand over to (for drawing the graph)."""
        step = self.by_name[name]
        starts = [self.following(name), *step.routes]
        found: list[str] = []
        for start in starts:
            for target in self._skip_chain(start):
                if target not in found:
                    found.append(target)
        return tuple(found)

    def _skip_chain(self, start: str) -> list[str]:
        chain = [start]
        while start != self.end and self.by_name[start].skip is not None:
            start = self.following(start)
            chain.append(start)
        return chain


def _check_custom(step: Step, steps: list[Step]) -> None:
    existing = {s.name for s in steps}
    if step.name in existing:
        raise ConvEngineError(f"a step named {step.name!r} already exists", code=ErrorCode.DUPLICATE_ENGINE_STEP)
    if bool(step.before) == bool(step.after):
        raise ConvEngineError(f"custom step {step.name!r} needs exactly one of before= or after=",
                              code=ErrorCode.PIPELINE_CONSTRAINT_VIOLATION)
    target = step.before or step.after
    if target not in existing:
        raise ConvEngineError(f"custom step {step.name!r} refers to unknown step {target!r}; steps are: "
                              f"{', '.join(s.name for s in steps)}", code=ErrorCode.UNKNOWN_STEP)
    if step.before == names.FIRST_STEP or step.after == names.LAST_STEP:
        raise ConvEngineError(f"custom step {step.name!r} cannot run before {names.FIRST_STEP} or after "
                              f"{names.LAST_STEP}", code=ErrorCode.PIPELINE_CONSTRAINT_VIOLATION)
