"""The slice of a turn that LLM calls see (implemented by the nodes' Turn).

The gateway audits, logs and accounts each call against it; prompt rendering reads the turn's
templates variables and ``ce_config`` prompts through it. Nothing in ``llm/`` knows the steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from convengine.config_loader.snapshot import ConfigSnapshot
from convengine.settings import EngineSettings
from convengine.templates.variables import TemplateSession


class LlmSession(Protocol):
    """What the gateway and spend accounting need: who is calling, the settings, the audit."""

    ctx: Any
    """The run context: the store (spend), and the secret values taken out this turn (call log)."""

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


class PromptSession(TemplateSession, LlmSession, Protocol):
    """What prompt rendering needs: template variables, the snapshot's ``ce_config`` prompts."""

    @property
    def snapshot(self) -> ConfigSnapshot: ...
