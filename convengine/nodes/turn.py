"""Turn: a node's view of the state, collecting its partial update.

Reads fall through to the incoming state; writes go to the update the node returns.
``params`` and ``context`` are copied on first write, so a node never mutates the
state LangGraph handed it in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from convengine._internal.jsontext import copy_tree
from convengine.catalog import params as pk
from convengine.catalog import stages
from convengine.catalog import state as keys
from convengine.catalog.state import EngineState
from convengine.catalog.vocab import UNKNOWN
from convengine.config.snapshot import ConfigSnapshot
from convengine.nodes.context import TurnContext
from convengine.rules.facts import FactsInput, build_facts, session_fields
from convengine.rules.jsonpath import can_reach
from convengine.settings import EngineSettings
from convengine.templates.namespaces import PRODUCERS as MEMORY_NAMESPACES


class Turn:
    """The working view of one node run (implements the rules engine's RuleSession)."""

    __slots__ = ("_state", "_update", "ctx", "route", "step")

    def __init__(self, state: EngineState, ctx: TurnContext, step: str) -> None:
        self._state = state
        self.ctx = ctx
        self.step = step
        self._update: dict[str, Any] = {}
        self.route: str | None = None

    def route_to(self, step: str) -> None:
        """Go to ``step`` next instead of the following one (policy stop, reset path, loops)."""
        self.route = step

    # --- plumbing ---------------------------------------------------------------------

    @property
    def snapshot(self) -> ConfigSnapshot:
        return self.ctx.snapshot

    @property
    def settings(self) -> EngineSettings:
        return self.ctx.snapshot.settings

    @property
    def conversation_id(self) -> str:
        return self.ctx.conversation_id

    def get(self, key: str, default: object = None) -> Any:
        if key in self._update:
            return self._update[key]
        value = self._state.get(key, default)
        return default if value is None else value

    def set(self, key: str, value: object) -> None:
        self._update[key] = value

    def changes(self) -> dict[str, Any]:
        return self._update

    def audit(self, stage: str, payload: Mapping[str, Any] | None = None) -> None:
        # self.intent and self.state, read inline: a turn audits some eighty events
        update, state = self._update, self._state
        intent = (update[keys.INTENT] if keys.INTENT in update else state.get(keys.INTENT)) or UNKNOWN
        current = (update[keys.STATE] if keys.STATE in update else state.get(keys.STATE)) or UNKNOWN
        self.ctx.audit.emit(stage, payload, intent=intent, state=current)

    # --- intent and state -------------------------------------------------------------

    @property
    def intent(self) -> str:
        return self.get(keys.INTENT) or UNKNOWN

    @property
    def state(self) -> str:
        return self.get(keys.STATE) or UNKNOWN

    def set_state(self, value: str, *, cause: str) -> None:
        before = self.state
        if value == before:
            return
        self.set(keys.STATE, value)
        self._transition(before, value, cause)

    def set_intent(self, value: str, *, cause: str) -> None:
        """Set the intent; a change is audited (``INTENT_UPDATED``) with its ``cause``: the resolver
        (``CLASSIFIER``, ``AGENT``), ``rule <id>``, ``task``, ``FLOW`` or ``response``."""
        before = self.intent
        self.set(keys.INTENT, value)
        if value != before:
            self.audit(stages.INTENT_UPDATED, {"fromIntent": before, "toIntent": value, "cause": cause})

    def _transition(self, before: str, after: str, cause: str) -> None:
        transitions = list(self.get(keys.TRANSITIONS) or [])
        transitions.append({"from": before, "to": after, "intent": self.intent, "cause": cause, "step": self.step})
        self.set(keys.TRANSITIONS, transitions)

    # --- text ---------------------------------------------------------------------------

    @property
    def user_text(self) -> str:
        return str(self.get(keys.USER_TEXT) or "")

    @property
    def standalone_query(self) -> str | None:
        return self.get(keys.STANDALONE_QUERY)

    @property
    def resolved_input(self) -> str:
        return self.standalone_query or self.user_text

    # --- params and context (copy on first write) -----------------------------------------

    @property
    def params(self) -> dict[str, Any]:
        if keys.PARAMS not in self._update:
            self._update[keys.PARAMS] = dict(self._state.get(keys.PARAMS) or {})
        return self._update[keys.PARAMS]

    def keep_params(self, values: Mapping[str, Any]) -> None:
        """Set params that persist into later turns (SET_INPUT_PARAM, tasks); engine keys never do."""
        self.params.update(values)
        kept = list(self.get(keys.KEPT_PARAMS) or [])
        kept.extend(k for k in values if k not in kept)
        self.set(keys.KEPT_PARAMS, kept)

    def read_params(self) -> Mapping[str, Any]:
        return self._update.get(keys.PARAMS) or self._state.get(keys.PARAMS) or {}

    @property
    def context(self) -> dict[str, Any]:
        if keys.CONTEXT not in self._update:
            self._update[keys.CONTEXT] = copy_tree(self._state.get(keys.CONTEXT) or {})
        return self._update[keys.CONTEXT]

    def read_context(self) -> Mapping[str, Any]:
        return self._update.get(keys.CONTEXT) or self._state.get(keys.CONTEXT) or {}

    def replace_context(self, value: dict[str, Any]) -> None:
        self._update[keys.CONTEXT] = value

    # --- derived views ----------------------------------------------------------------

    def facts_input(self) -> FactsInput:
        return FactsInput(
            conversation_id=self.conversation_id,
            intent=self.intent,
            state=self.state,
            context=self.read_context(),
            params=self.read_params(),
            user_text=self.user_text,
            standalone_query=self.standalone_query,
            schema_facts=self.get(keys.SCHEMA_FACTS) or {},
            schema_json=self.schema_json(),
            payload=self.get(keys.PAYLOAD),
            last_llm=self.get(keys.LAST_LLM) or {},
        )

    def facts(self, path: str | None = None) -> dict[str, Any]:
        """The document JSON_PATH rules match: ConvEngine's facts plus the memory namespaces
        (``userInfo``, ``conversationInfo``, ``properties``, ``memory``); a context key of the same
        name keeps its place, except ``memory``, whose namespace holds the context's keys too.
        With ``path``, only the namespaces that path can reach are built (the rest are left out)."""
        doc = build_facts(self.facts_input())
        for name, produce in MEMORY_NAMESPACES.items():
            if (name == "memory" or name != "conversationLog" and name not in doc) and can_reach(path, name):
                doc[name] = produce(self)
        return doc

    def session_dict(self) -> dict[str, Any]:
        fields = session_fields(self.facts_input())
        fields["context"] = dict(self.read_context())
        fields["schemaJson"] = self.schema_json()
        return fields

    def schema_json(self) -> dict[str, Any]:
        """The context restricted to the resolved schema's properties."""
        props = (self.get(keys.SCHEMA_FACTS) or {}).get("properties") or ()
        ctx = self.read_context()
        return {name: ctx.get(name) for name in props if name in ctx}

    def set_dialogue_act(self, act: str, *, confidence: float | None, source: str | None,
                         standalone_query: str | None) -> None:
        params = self.params
        params[pk.DIALOGUE_ACT] = act
        if confidence is not None:
            params[pk.DIALOGUE_ACT_CONFIDENCE] = confidence
        if source:
            params[pk.DIALOGUE_ACT_SOURCE] = source
        if standalone_query:
            self.set(keys.STANDALONE_QUERY, standalone_query)
            params[pk.STANDALONE_QUERY] = standalone_query
            params[pk.RESOLVED_USER_INPUT] = standalone_query

    @property
    def dialogue_act(self) -> str:
        return str(self.read_params().get(pk.DIALOGUE_ACT) or "NEW_REQUEST")
