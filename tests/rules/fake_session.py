"""A RuleSession for driving the pure rules engine directly: what the node layer's Turn provides,
kept in plain dicts so a test can see exactly what the actions changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from convengine._internal.textmatch import compile_regex
from convengine.config.records import RuleRecord
from convengine.rules.facts import FactsInput, build_facts, session_fields
from convengine.rules.jsonpath import compile_jsonpath


@dataclass
class FakeSession:
    user_text: str = ""
    intent: str = "LOAN"
    state: str = "START"
    conversation_id: str = "c-1"
    params: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    kept: dict[str, Any] = field(default_factory=dict)
    moves: list[tuple[str, str, str]] = field(default_factory=list)
    acts: list[dict[str, Any]] = field(default_factory=list)

    def keep_params(self, values: Mapping[str, Any]) -> None:
        self.params.update(values)
        self.kept.update(values)

    def read_context(self) -> Mapping[str, Any]:
        return self.context

    def set_state(self, value: str, *, cause: str) -> None:
        self.moves.append(("state", value, cause))
        self.state = value

    def set_intent(self, value: str, *, cause: str) -> None:
        self.moves.append(("intent", value, cause))
        self.intent = value

    def _facts_input(self) -> FactsInput:
        return FactsInput(self.conversation_id, self.intent, self.state, self.context, self.params,
                          user_text=self.user_text)

    def facts(self, path: str | None = None) -> dict[str, Any]:
        return build_facts(self._facts_input())

    def schema_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.context.items() if k in ("size", "crust")}

    def session_dict(self) -> dict[str, Any]:
        return session_fields(self._facts_input())

    def set_dialogue_act(self, act: str, *, confidence: float | None, source: str | None,
                         standalone_query: str | None) -> None:
        self.acts.append({"act": act, "confidence": confidence, "source": source, "query": standalone_query})


_NEXT_ID = [1000]


def make_rule(action: str, value: str | None = None, *, kind: str = "EXACT", match: str = "ANY",
              intent: str = "LOAN", state: str = "START", priority: int = 100, rule_id: int | None = None,
              phase: str = "PRE_RESPONSE_RESOLUTION", timeout_s: float = 0.1) -> RuleRecord:
    """A rule row with its matcher compiled the way the pack loader compiles it."""
    if rule_id is None:
        _NEXT_ID[0] += 1
        rule_id = _NEXT_ID[0]
    matcher: Any = None
    if kind == "REGEX":
        matcher = compile_regex(match, timeout_s=timeout_s)
    elif kind in ("JSON_PATH", "CONTEXT_JSON_PATH"):
        matcher = compile_jsonpath(match)
    return RuleRecord(rule_id=rule_id, phase=phase, intent_code=intent, state_code=state, rule_type=kind,
                      match_pattern=match, action=action, action_value=value, priority=priority, matcher=matcher)


class Recorder:
    """The ``emit`` a PhaseRun writes its audit stages to."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, stage: str, payload: dict[str, Any]) -> None:
        self.events.append((stage, payload))

    def stages(self) -> list[str]:
        return [stage for stage, _ in self.events]

    def payloads(self, stage: str) -> list[dict[str, Any]]:
        return [payload for name, payload in self.events if name == stage]
