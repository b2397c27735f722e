"""Python callables the rows refer to by name: tasks, transformers, context-data providers, tools.

``ce_rule`` SET_TASK and ``ce_pending_action`` name tasks as ``bean:method1,method2``. A
task registry is built from a mapping given to :class:`convengine.Engine`:

- ``{"bean": obj}`` -> ``obj.method`` (sync or async);
- ``{"bean": {"method": fn}}``;
- ``{"bean:method": fn}``;
- ``{"bean": fn}`` -> ``fn`` when the method name equals the bean name.

A task is called with a :class:`TaskContext` (and the rule, for SET_TASK, when it takes two
arguments).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.turn_view import TurnView


class TaskSession(TurnView, Protocol):
    """The slice of a turn a task sees and changes (implemented by the nodes' Turn)."""

    @property
    def user_text(self) -> str: ...

    @property
    def params(self) -> dict[str, Any]: ...

    @property
    def context(self) -> dict[str, Any]: ...

    def keep_params(self, values: Mapping[str, Any]) -> None: ...

    def set_state(self, value: str, *, cause: str) -> None: ...

    def set_intent(self, value: str, *, cause: str) -> None: ...


class TaskNotFoundError(ConvEngineError):
    default_code = ErrorCode.TASK_NOT_FOUND


class TaskContext:
    """What a task sees: the conversation, its intent/state, params and context (mutable)."""

    __slots__ = ("_turn", "rule")

    def __init__(self, turn: TaskSession, rule: Any = None) -> None:
        self._turn = turn
        self.rule = rule

    @property
    def conversation_id(self) -> str:
        return self._turn.conversation_id

    @property
    def intent(self) -> str:
        return self._turn.intent

    @property
    def state(self) -> str:
        return self._turn.state

    @property
    def user_text(self) -> str:
        return self._turn.user_text

    @property
    def params(self) -> MutableMapping[str, Any]:
        """The turn's params; values a task sets persist into later turns (engine keys excepted)."""
        return KeptParams(self._turn)

    @property
    def context(self) -> dict[str, Any]:
        return self._turn.context

    def set_state(self, value: str) -> None:
        self._turn.set_state(value.strip().upper(), cause="task")

    def set_intent(self, value: str) -> None:
        self._turn.set_intent(value.strip().upper(), cause="task")


class KeptParams(MutableMapping[str, Any]):
    """The turn's params as a task sees them: reads fall through, writes are kept for later turns."""

    __slots__ = ("_turn",)

    def __init__(self, turn: TaskSession) -> None:
        self._turn = turn

    def __getitem__(self, key: str) -> Any:
        return self._turn.read_params()[key]

    def __setitem__(self, key: str, value: object) -> None:
        self._turn.keep_params({key: value})

    def __delitem__(self, key: str) -> None:
        del self._turn.params[key]

    def __iter__(self) -> Iterator[str]:
        return iter(dict(self._turn.read_params()))

    def __len__(self) -> int:
        return len(self._turn.read_params())

    def __repr__(self) -> str:
        return f"KeptParams({dict(self._turn.read_params())!r})"


@dataclass
class TaskRegistry:
    """Resolves ``bean:method`` references to callables."""

    tasks: Mapping[str, Any] = field(default_factory=dict)

    def resolve(self, bean: str, method: str) -> Callable[..., Any]:
        direct = self.tasks.get(f"{bean}:{method}")
        if callable(direct):
            return direct
        target = self.tasks.get(bean)
        if target is None:
            raise TaskNotFoundError(f"no task registered for bean {bean!r} (method {method!r}); "
                                    f"registered: {', '.join(sorted(self.tasks)) or 'none'}")
        if isinstance(target, Mapping):
            fn = target.get(method)
        elif callable(target) and not hasattr(target, method) and method == bean:
            fn = target
        else:
            fn = getattr(target, method, None)
        if not callable(fn):
            raise TaskNotFoundError(f"task bean {bean!r} has no method {method!r}")
        return fn

    def __contains__(self, bean: str) -> bool:
        return bean in self.tasks


async def call_task(fn: Callable[..., Any], context: TaskContext, *extra: object) -> Any:
    """Call a task with as many of (context, *extra) as it accepts; await it when async."""
    try:
        params = inspect.signature(fn).parameters.values()
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        takes_all = any(p.kind == p.VAR_POSITIONAL for p in params)
        count = len(extra) + 1 if takes_all else min(len(positional), len(extra) + 1)
    except (TypeError, ValueError):
        count = 1
    outcome = fn(*((context, *extra)[:count]))
    if inspect.isawaitable(outcome):
        outcome = await outcome
    return outcome


@dataclass
class Registries:
    """Everything the engine looks up by name at turn time."""

    tasks: TaskRegistry = field(default_factory=TaskRegistry)
    response_transformers: Mapping[tuple[str, str, str], Callable[..., Any]] = field(default_factory=dict)
    """(intent, state, LLM|FINAL) -> fn(payload, context) returning a new payload or None."""
    container_providers: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    tool_handlers: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    tool_adapters: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
