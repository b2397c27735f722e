"""The slice of a turn that LLM calls see (implemented by the nodes' Turn).

The gateway audits, logs and accounts each call against it; prompt rendering reads the turn's
templates variables and ``ce_config`` prompts through it. Nothing in ``llm/`` knows the steps.
"""

from __future__ import annotations

from typing import Any, Protocol

from convengine.config.snapshot import ConfigSnapshot
from convengine.templates.variables import TemplateSession
from convengine.turn_view import TurnView


class LlmSession(TurnView, Protocol):
    """What the gateway and spend accounting need: who is calling, the settings, the audit."""

    ctx: Any
    """The run context: the store (spend), and the secret values taken out this turn (call log)."""


class PromptSession(TemplateSession, LlmSession, Protocol):
    """What prompt rendering needs: template variables, the snapshot's ``ce_config`` prompts."""

    @property
    def snapshot(self) -> ConfigSnapshot: ...
