"""The one wrapper every node goes through: STEP_ENTER / STEP_EXIT / STEP_ERROR, timings, hooks, routing."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from langgraph.runtime import Runtime
from langgraph.types import Command

from convengine._internal.turn_io import (
    DATABASE_FAILED_MESSAGE,
    DATABASE_UNAVAILABLE_MESSAGE,
    database_detail,
    database_error,
    is_database_unavailable,
    map_failure,
)
from convengine.catalog import stages
from convengine.catalog.errors import ConvEngineError, StepError
from convengine.catalog.names import JAVA_STEP_CLASSES, PERSIST_CONVERSATION
from convengine.catalog.state import EngineState, changed_params
from convengine.graph.plan import StepPlan
from convengine.nodes.common import Step
from convengine.nodes.context import StepHook, TurnContext
from convengine.nodes.turn import Turn
from convengine.security.redact import redact_error, redact_text


class Node(Protocol):
    """A node as LangGraph calls it: the state, and the runtime by keyword."""

    def __call__(self, state: EngineState, runtime: Runtime[TurnContext]) -> Awaitable[Command[Any]]: ...


logger = logging.getLogger(__name__)

ContextProvider = Callable[[EngineState], Awaitable[TurnContext]]


def make_node(step: Step, plan: StepPlan, provider: ContextProvider | None = None) -> Node:
    """The node for ``step``; ``provider`` supplies the TurnContext when the caller passed none (Studio)."""
    java_class = step.java_class or JAVA_STEP_CLASSES.get(step.name, step.name)
    applicable = _Applicable(step.name)

    async def node(state: EngineState, runtime: Runtime[TurnContext]) -> Command[Any]:
        ctx = runtime.context
        if not isinstance(ctx, TurnContext):
            if provider is None:
                raise TypeError("the turn graph needs a TurnContext; run turns through convengine.Engine")
            ctx = await provider(state)
        turn = Turn(state, ctx, step.name)
        ctx.audit.enter_step(step.name, java_class, turn)
        started = time.perf_counter()
        turn.audit(stages.STEP_ENTER, {"step": step.name, "stepClass": java_class})
        hooks = applicable.of(ctx.services.hooks)
        if hooks:
            await _hooks(hooks, turn, "before")
        before = dict(turn.read_params()) if step.before or step.after else None
        try:
            outcome = step.run(turn)
            if outcome is not None and inspect.isawaitable(outcome):  # most steps are plain functions
                await outcome
            if before is not None and (changed := changed_params(before, turn.read_params())):
                turn.keep_params(changed)  # a host's custom step: its params persist like a rule's
        except Exception as exc:
            millis = (time.perf_counter() - started) * 1000
            ctx.audit.record_timing(step.name, millis)
            turn.audit(stages.STEP_ERROR, {"step": step.name, "stepClass": java_class, "errorType": type(exc).__name__,
                                      "errorMessage": _public_text(exc), "durationMs": round(millis, 3)})
            if hooks:
                await _hooks(hooks, turn, "on_error", exc)
            ctx.audit.leave_step()
            error = redact_error(_as_step_error(exc, step.name))  # before LangGraph stores or logs it
            if error is exc:
                raise
            raise error from exc
        millis = (time.perf_counter() - started) * 1000
        ctx.audit.record_timing(step.name, millis)
        turn.audit(stages.STEP_EXIT, {"step": step.name, "stepClass": java_class,
                                 "outcome": "Stop" if turn.route == PERSIST_CONVERSATION else "Continue",
                                 "durationMs": round(millis, 3)})
        if hooks:
            await _hooks(hooks, turn, "after")
        ctx.audit.leave_step()
        update, goto = turn.changes(), plan.next_step(step.name, turn)
        if goto == plan.end:
            ctx.final_state = {**state, **update}
        return Command(update=update, goto=goto)

    node.__name__ = step.name
    return node


class _Applicable:
    """The hooks that apply to one step, worked out once per set of registered hooks."""

    __slots__ = ("_for", "_hooks", "_step")

    def __init__(self, step: str) -> None:
        self._step = step
        self._for: object = None
        self._hooks: tuple[StepHook, ...] = ()

    def of(self, hooks: tuple[Any, ...]) -> tuple[StepHook, ...]:
        if hooks is not self._for:
            self._hooks = tuple(h for h in hooks if isinstance(h, StepHook) and h.applies(self._step))
            self._for = hooks
        return self._hooks


async def _hooks(hooks: tuple[StepHook, ...], turn: Turn, phase: str, *extra: object) -> None:
    for hook in hooks:
        fn = getattr(hook, phase)
        if fn is None:
            continue
        try:
            outcome = fn(turn.step, turn, *extra)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as exc:  # noqa: BLE001 - a hook never breaks the turn
            turn.audit(stages.STEP_HOOK_ERROR, {"step": turn.step, "hook": phase, "errorType": type(exc).__name__,
                                           "errorMessage": str(exc)})


def _public_text(exc: Exception) -> str:
    """What the audit (which callers read) says of a failure: a database library's text stays in the log."""
    if database_error(exc) is not None:
        logger.warning("a step failed on the database: %s", database_detail(exc))
        return DATABASE_UNAVAILABLE_MESSAGE if is_database_unavailable(exc) else DATABASE_FAILED_MESSAGE
    return redact_text(str(exc))


def _as_step_error(exc: Exception, step: str) -> ConvEngineError:
    if isinstance(exc, ConvEngineError):
        exc.details.setdefault("step", step)
        return exc
    if database_error(exc) is not None:  # its own code and a message without the driver's text
        error = map_failure(exc)
        error.details["step"] = step
        return error
    return StepError(f"step {step} failed: {type(exc).__name__}: {exc}", details={"step": step})
