"""Helpers shared by several steps: rule phases, scope lookups, steps' shape."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from convengine.catalog.vocab import UNKNOWN
from convengine.config.records import RuleRecord
from convengine.nodes.turn import Turn
from convengine.registry import TaskContext, call_task
from convengine.rules.engine import PhaseRun
from convengine.rules.model import PhaseResult, RuleSession
from convengine.rules.scope import in_scope, specificity

SkipAudit = tuple[str | None, dict[str, Any]]
"""(stage, payload): the stage ConvEngine emits when the step has nothing to do (None: only STEP_SKIPPED)."""


@dataclass(frozen=True, slots=True)
class Step:
    """A pipeline step: its node name, what it does, and when it has nothing to do.

    Attributes:
        name: the node name (snake_case ConvEngine step name).
        run: the step body, working on a :class:`Turn`.
        skip: returns the audit ``(stage, payload)`` ConvEngine would emit when the step has
            nothing to do for the current intent/state; the graph then routes past it.
        loop_only: reached only when another step routes to it (the planner's tool call).
        routes: steps it may jump to besides the next one (drawn as edges).
        java_class: ConvEngine's class name, kept in STEP_ENTER payloads.
        before / after: where a custom step goes (exactly one, naming an existing step).
    """

    name: str
    run: Callable[[Turn], Awaitable[None] | None]
    skip: Callable[[Turn], SkipAudit | None] | None = None
    loop_only: bool = False
    routes: tuple[str, ...] = ()
    java_class: str | None = None
    before: str | None = None
    after: str | None = None


def resolved(value: str | None) -> bool:
    return bool(value) and value != UNKNOWN


T = TypeVar("T")


def most_specific(rows: Iterable[T], intent: str, state: str, *, tie: Callable[[T], Any]) -> T | None:
    """The enabled row in scope with the highest specificity (ties broken by ``tie``, max wins)."""
    best: T | None = None
    best_key: tuple[int, Any] | None = None
    for row in rows:
        r: Any = row
        if not r.enabled or not in_scope(r.intent_code, r.state_code, intent, state):
            continue
        key = (specificity(r.intent_code, r.state_code, intent, state), tie(row))
        if best_key is None or key > best_key:
            best, best_key = row, key
    return best


async def run_rules(turn: Turn, phase: str, source: str, *, origin: str = "RULES_STEP") -> PhaseResult:
    """Run one rule phase on the turn; audits carry ``(source)`` suffixes like ConvEngine's."""
    run = PhaseRun(
        phase=phase,
        rules=turn.snapshot.rules_for(phase),
        session=turn,
        registry=turn.ctx.services.rule_registry,
        source=source,
        emit=turn.audit,
        run_task=_task_runner(turn),
        max_passes=turn.settings.max_rule_passes,
        origin=origin,
    )
    return await run.run()


def _task_runner(turn: Turn) -> Callable[[str, str, RuleSession, RuleRecord], Awaitable[Any]]:
    async def run_task(bean: str, method: str, session: RuleSession, rule: RuleRecord) -> Any:
        fn = turn.ctx.services.registries.tasks.resolve(bean, method)
        return await call_task(fn, TaskContext(turn, rule), rule)

    return run_task


def now_ms(turn: Turn) -> int:
    """Epoch milliseconds from the engine's clock (injectable for tests)."""
    clock = turn.ctx.services.clock
    return int(clock() if clock else time.time() * 1000)


def dig(mapping: Mapping[str, Any] | None, *path: str) -> Any:
    node: Any = mapping
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node
