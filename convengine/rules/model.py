"""What the rules engine reads and writes: the session protocol and a phase's outcome."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

Emit = Callable[[str, dict[str, Any]], None]


class RuleSession(Protocol):
    """The slice of a turn that rules see and change (implemented by the node's Turn)."""

    @property
    def conversation_id(self) -> str: ...

    @property
    def user_text(self) -> str: ...

    @property
    def intent(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def params(self) -> dict[str, Any]: ...

    def keep_params(self, values: Mapping[str, Any]) -> None: ...

    def read_context(self) -> Mapping[str, Any]: ...

    @property
    def context(self) -> dict[str, Any]: ...

    def set_state(self, value: str, *, cause: str) -> None: ...

    def set_intent(self, value: str, *, cause: str) -> None: ...

    def facts(self, path: str | None = None) -> dict[str, Any]: ...

    def schema_json(self) -> dict[str, Any]: ...

    def session_dict(self) -> dict[str, Any]: ...

    def get(self, key: str, default: object = None) -> Any: ...

    def set(self, key: str, value: object) -> None: ...

    def audit(self, stage: str, payload: Mapping[str, Any] | None = None) -> None: ...

    def set_dialogue_act(self, act: str, *, confidence: float | None, source: str | None,
                         standalone_query: str | None) -> None: ...


@dataclass(slots=True)
class PhaseResult:
    """What one phase invocation did."""

    phase: str
    passes: int = 0
    matched: list[int] = field(default_factory=list)
    changed: bool = False
