"""The slice of a turn the LLM gateway talks to (LlmSession) and a call-log store, in memory, so the
gateway's own behaviour (retries, audit, log rows, masking) can be checked call by call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from convengine.settings import EngineSettings


@dataclass
class FakeTurn:
    settings: EngineSettings = field(default_factory=EngineSettings)
    params: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    conversation_id: str = "c-1"
    intent: str = "LOAN"
    state: str = "START"
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    ctx: Any = None

    def __post_init__(self) -> None:
        self.ctx = SimpleNamespace(extras={}, secret_values=[], services=SimpleNamespace(store=None))

    def read_params(self) -> Mapping[str, Any]:
        return self.params

    def read_context(self) -> Mapping[str, Any]:
        return self.context

    def audit(self, stage: str, payload: Mapping[str, Any] | None = None) -> None:
        self.events.append((stage, dict(payload or {})))

    def stages(self) -> list[str]:
        return [stage for stage, _ in self.events]

    def payloads(self, stage: str) -> list[dict[str, Any]]:
        return [payload for name, payload in self.events if name == stage]


class FakeStore:
    """A CallStore: keeps call-log rows; ``fail`` makes every write raise (a database that refuses)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.rows: list[dict[str, Any]] = []
        self.fail = fail
        self.writes: list[Any] = []

    async def write_llm_calls(self, rows: Sequence[dict[str, Any]]) -> None:
        if self.fail:
            raise RuntimeError("the database refused the row")
        self.rows.extend(rows)

    async def run(self, write: Any) -> None:
        if self.fail:
            raise RuntimeError("the database refused the row")
        self.writes.append(write)


def settings(**sections: Any) -> EngineSettings:
    """EngineSettings with some sections set, e.g. ``settings(llm={"max_retries": 0})``."""
    return EngineSettings(**sections)
