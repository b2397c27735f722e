"""What every lower layer reads of a turn: the one base of the narrow session protocols
(``LlmSession``, ``ToolSession``, ``TaskSession``, ``TemplateSession``), implemented by the steps' ``Turn``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from convengine.settings import EngineSettings


class TurnView(Protocol):
    """Where the turn is and what it holds, read-only, plus its audit."""

    @property
    def settings(self) -> EngineSettings: ...

    @property
    def conversation_id(self) -> str: ...

    @property
    def intent(self) -> str: ...

    @property
    def state(self) -> str: ...

    def read_params(self) -> Mapping[str, Any]: ...

    def read_context(self) -> Mapping[str, Any]: ...

    def audit(self, stage: str, payload: Mapping[str, Any] | None = None) -> None: ...
