"""ConfigSnapshot: every control table, typed, validated and indexed, immutable.

Runtime steps read the snapshot, never the tables. A new snapshot replaces the old one
atomically on reload (see :class:`convengine.config_loader.loader.SnapshotHolder`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from convengine.catalog.booleans import truthy
from convengine.catalog.ce_config import ConfigKey
from convengine.catalog.vocab import ANY, PHASES, UNKNOWN
from convengine.config.records import (
    ChainRecord,
    ChainStepRecord,
    ClassifierRecord,
    ConfigRow,
    ContainerConfigRecord,
    DbToolRecord,
    FlowEdgeRecord,
    FlowNodeRecord,
    FlowRecord,
    IntentRecord,
    MemoryRecord,
    OutputSchemaRecord,
    PendingActionRecord,
    PlannerRecord,
    PolicyRecord,
    PromptTemplateRecord,
    Record,
    ResponseRecord,
    RuleRecord,
    StateGraphRecord,
    ToolRecord,
    VerboseRecord,
)
from convengine.settings import EngineSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigSnapshot:
    """The control plane at one moment. Table fields hold enabled and disabled rows alike."""

    settings: EngineSettings = field(compare=False)
    """Effective settings: kwargs > env > pack settings > defaults, then ce_config overrides."""
    config: tuple[ConfigRow, ...] = ()
    intents: tuple[IntentRecord, ...] = ()
    classifiers: tuple[ClassifierRecord, ...] = ()
    output_schemas: tuple[OutputSchemaRecord, ...] = ()
    prompt_templates: tuple[PromptTemplateRecord, ...] = ()
    responses: tuple[ResponseRecord, ...] = ()
    rules: tuple[RuleRecord, ...] = ()
    policies: tuple[PolicyRecord, ...] = ()
    pending_actions: tuple[PendingActionRecord, ...] = ()
    containers: tuple[ContainerConfigRecord, ...] = ()
    tools: tuple[ToolRecord, ...] = ()
    db_tools: tuple[DbToolRecord, ...] = ()
    planners: tuple[PlannerRecord, ...] = ()
    verbose: tuple[VerboseRecord, ...] = ()
    state_graph: tuple[StateGraphRecord, ...] = ()
    memory: tuple[MemoryRecord, ...] = ()
    flows: tuple[FlowRecord, ...] = ()
    flow_nodes: tuple[FlowNodeRecord, ...] = ()
    flow_edges: tuple[FlowEdgeRecord, ...] = ()
    chains: tuple[ChainRecord, ...] = ()
    chain_steps: tuple[ChainStepRecord, ...] = ()
    warnings: tuple[str, ...] = field(default=(), compare=False)
    known_states: frozenset[str] = field(default=frozenset(), compare=False)
    version: str = field(default="", compare=False)
    # --- indexes, built in __post_init__ -------------------------------------------
    _component: Mapping[tuple[str, str], str] = field(default_factory=dict, compare=False, repr=False)
    _rules_by_phase: Mapping[str, tuple[RuleRecord, ...]] = field(default_factory=dict, compare=False, repr=False)
    _tool_by_code: Mapping[str, ToolRecord] = field(default_factory=dict, compare=False, repr=False)
    _db_tool_by_id: Mapping[int, DbToolRecord] = field(default_factory=dict, compare=False, repr=False)
    _intent_by_code: Mapping[str, IntentRecord] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        setattr_ = object.__setattr__
        component = {
            (r.config_type.upper(), r.config_key.upper()): r.config_value or ""
            for r in sorted(self.config, key=lambda r: r.config_id, reverse=True)
            if r.enabled
        }
        setattr_(self, "_component", MappingProxyType(component))
        by_phase = {p: tuple(r for r in self.rules if r.enabled and r.phase == p) for p in PHASES}
        setattr_(self, "_rules_by_phase", MappingProxyType(by_phase))
        setattr_(self, "_tool_by_code", MappingProxyType({t.tool_code.lower(): t for t in self.tools}))
        setattr_(self, "_db_tool_by_id", MappingProxyType({t.tool_id: t for t in self.db_tools}))
        setattr_(self, "_intent_by_code", MappingProxyType({i.intent_code: i for i in self.intents}))

    # --- ce_config --------------------------------------------------------------------

    def component(self, config_type: str, key: str, default: str | None = None) -> str | None:
        """The enabled ce_config value for ``(config_type, key)`` (case-insensitive) or ``default``."""
        value = self._component.get((config_type.upper(), key.upper()))
        return default if value is None or value == "" else value

    def config_value(self, key: ConfigKey) -> Any:
        """The typed value of a ce_config key (convengine.catalog.ce_config), or the table's default when no enabled
        row sets it. Validation has checked the row's type when the pack loaded."""
        value = self.component(key.component, key.key)
        return key.default if value is None else key.parse(value)

    def component_float(self, config_type: str, key: str, default: float) -> float:
        value = self.component(config_type, key)
        return default if value is None else float(value)

    def component_int(self, config_type: str, key: str, default: int) -> int:
        value = self.component(config_type, key)
        return default if value is None else int(float(value))

    def component_bool(self, config_type: str, key: str, default: bool) -> bool:
        value = self.component(config_type, key)
        return default if value is None else truthy(value)

    # --- lookups ----------------------------------------------------------------------

    def rules_for(self, phase: str) -> tuple[RuleRecord, ...]:
        """Enabled rules of a canonical phase, in table order."""
        return self._rules_by_phase.get(phase, ())

    def tool(self, tool_code: str) -> ToolRecord | None:
        return self._tool_by_code.get(tool_code.lower())

    def db_tool(self, tool_id: int) -> DbToolRecord | None:
        return self._db_tool_by_id.get(tool_id)

    def intent(self, code: str) -> IntentRecord | None:
        return self._intent_by_code.get(code)

    @property
    def enabled_intent_codes(self) -> frozenset[str]:
        return frozenset(i.intent_code for i in self.intents if i.enabled)

    def allowed_intents(self) -> tuple[IntentRecord, ...]:
        """Enabled intents except UNKNOWN, by priority: what the intent agent may answer."""
        chosen = [i for i in self.intents if i.enabled and i.intent_code != UNKNOWN]
        return tuple(sorted(chosen, key=lambda i: (i.priority, i.intent_code)))

    def is_known_state(self, state: str) -> bool:
        return state in self.known_states

    # --- statistics -------------------------------------------------------------------

    def tables(self) -> dict[str, tuple[Record, ...]]:
        """Table name -> records, for export and statistics."""
        out: dict[str, tuple[Record, ...]] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.startswith("_") or not isinstance(value, tuple) or f.name == "warnings":
                continue
            if value and isinstance(value[0], Record):
                out[value[0].TABLE] = value
        return out

    def has_rows(self) -> bool:
        """Whether any table has a row (what :meth:`tables` would say, stopping at the first)."""
        for name in _TABLE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, tuple) and value and isinstance(value[0], Record):
                return True
        return False

    def statistics(self) -> dict[str, Any]:
        """Row counts per table (total and enabled), for ``/cache/analyze``."""
        counts = {}
        for table, rows in self.tables().items():
            enabled = sum(1 for r in rows if getattr(r, "enabled", True))
            counts[table] = {"rows": len(rows), "enabled": enabled}
        return {
            "version": self.version,
            "tables": counts,
            "rulesByPhase": {p: len(r) for p, r in self._rules_by_phase.items() if r},
            "knownStates": sorted(self.known_states),
            "warnings": list(self.warnings),
        }


def scope_matches(row_value: str | None, actual: str) -> bool:
    """A row's intent/state scope matches ``actual`` when equal or ``ANY`` (null counts as ANY)."""
    return row_value is None or row_value == ANY or row_value == actual


_TABLE_FIELDS = tuple(f.name for f in fields(ConfigSnapshot) if not f.name.startswith("_") and f.name != "warnings")
"""The snapshot's fields that may hold a table's records (:meth:`ConfigSnapshot.has_rows` reads them in turn)."""

