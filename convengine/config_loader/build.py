"""Rows -> typed records -> validated :class:`ConfigSnapshot` (one path for packs and the DB)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from convengine.catalog.ce_config import SETTINGS_CONFIG_TYPE
from convengine.catalog.errors import ConfigError, ConfigValidationError, Violation
from convengine.catalog.vocab import ANY, RULE_ACTIONS, RULE_TYPES, canonical_phase, canonical_tool_group
from convengine.config.records import RECORD_TYPES, ConfigRow, Record
from convengine.config.snapshot import ConfigSnapshot
from convengine.config_loader.chain_checks import validate_chains
from convengine.config_loader.flow_checks import validate_flows
from convengine.config_loader.rows import RowSet, coerce_rows
from convengine.config_loader.validate import Validation, validate
from convengine.config_loader.workflow_checks import validate_workflows
from convengine.settings import EngineSettings, _submodel, apply_component_overrides

_SNAPSHOT_FIELDS = {
    "ce_config": "config",
    "ce_intent": "intents",
    "ce_intent_classifier": "classifiers",
    "ce_output_schema": "output_schemas",
    "ce_prompt_template": "prompt_templates",
    "ce_response": "responses",
    "ce_rule": "rules",
    "ce_policy": "policies",
    "ce_pending_action": "pending_actions",
    "ce_container_config": "containers",
    "ce_mcp_tool": "tools",
    "ce_mcp_db_tool": "db_tools",
    "ce_mcp_planner": "planners",
    "ce_verbose": "verbose",
    "ce_state_graph": "state_graph",
    "ce_memory": "memory",
    "ce_flow": "flows",
    "ce_flow_node": "flow_nodes",
    "ce_flow_edge": "flow_edges",
    "ce_chain": "chains",
    "ce_chain_step": "chain_steps",
}


@dataclass(frozen=True, slots=True)
class Extensions:
    """Names the engine accepts beyond ConvEngine's built-ins (custom rule types/actions)."""

    rule_types: frozenset[str] = frozenset()
    rule_actions: frozenset[str] = frozenset()


@dataclass(slots=True)
class SnapshotInput:
    """Everything a snapshot is built from."""

    tables: Mapping[str, Iterable[Mapping[str, Any]] | None]
    origin: str = "pack"
    settings_overrides: Mapping[str, Any] = field(default_factory=dict)
    extensions: Extensions = field(default_factory=Extensions)
    source: str = "configuration"
    notes: tuple[str, ...] = ()
    """Warnings found while reading the rows (ConvEngine tables left out), listed first."""


def build_snapshot(data: SnapshotInput) -> ConfigSnapshot:
    """Build and validate a snapshot.

    Raises:
        ConfigValidationError: with every violation found (table, row id, column, reason).
    """
    rowset = coerce_rows(dict(data.tables), origin=data.origin)
    tables, labels = _records(rowset)
    settings, settings_violations, settings_warnings = _settings(tables, data.settings_overrides)
    check = Validation(
        tables,
        rule_types=frozenset(RULE_TYPES) | {t.upper() for t in data.extensions.rule_types},
        rule_actions=frozenset(RULE_ACTIONS) | {a.upper() for a in data.extensions.rule_actions},
        regex_timeout_s=(settings.regex_timeout_ms if settings else 100) / 1000,
    )
    validate(check, labels)
    check.warnings[:0] = [*data.notes, *settings_warnings]
    validate_flows(check, labels, python_sandbox=settings.flows.python_sandbox if settings else "strict",
                   **({"pack_env_names": settings.security.pack_env_names} if settings else {}))
    validate_workflows(check, labels, root=settings.flows.root_workflow if settings else None)
    validate_chains(check, labels, **({"pack_env_names": settings.security.pack_env_names} if settings else {}))
    violations = rowset.violations + settings_violations + check.violations
    if violations or settings is None:
        raise ConfigValidationError(violations, source=data.source)
    values = {name: tuple(check.tables.get(table, ())) for table, name in _SNAPSHOT_FIELDS.items()}
    return ConfigSnapshot(
        settings=settings,
        warnings=tuple(check.warnings),
        known_states=check.known_states,
        version=_fingerprint(values),
        # each table's records are of its record type (RECORD_TYPES), which mypy cannot see through a dict
        **values,  # type: ignore[arg-type]
    )


def _records(rowset: RowSet) -> tuple[dict[str, list[Record]], dict[str, dict[Any, str]]]:
    tables: dict[str, list[Record]] = {}
    labels: dict[str, dict[Any, str]] = {}
    for table, rows in rowset.rows.items():
        kind = RECORD_TYPES[table]
        names = {f.name for f in fields(kind)}
        recs = [kind(**{k: v for k, v in _normalise(table, row).items() if k in names}) for row in rows]
        recs.sort(key=lambda r: r.row_id)  # one canonical order, whatever the source
        tables[table] = recs
        labels[table] = {row.get(kind.ID): rowset.label(table, i) for i, row in enumerate(rows)}
    return tables, labels


def _code(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip().upper()
    return text or None


_SCOPE_COLUMNS = ("intent_code", "state_code", "from_state", "to_state")


def _normalise(table: str, row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for column in _SCOPE_COLUMNS:
        if column in out:
            out[column] = _code(out[column])
    for column in ("rule_type", "action", "output_format", "response_type", "schema_type", "step_match",
                   "interaction_mode", "dialect"):
        if out.get(column) is not None:
            out[column] = str(out[column]).strip().upper()
    if table == "ce_rule":
        out["intent_code"] = out.get("intent_code") or ANY
        out["state_code"] = out.get("state_code") or ANY
        phase = canonical_phase(out.get("phase"))
        out["phase"] = phase or f"?{out.get('phase')}"
    if table == "ce_mcp_tool":
        out["group"] = canonical_tool_group(out.get("tool_group")) or f"?{out.get('tool_group')}"
    return out


def _settings(
    tables: dict[str, list[Record]], overrides: Mapping[str, Any]
) -> tuple[EngineSettings | None, list[Violation], list[str]]:
    pack_settings, violations = settings_from_config_rows(tables.get("ce_config", []))
    try:
        base, warnings = EngineSettings.build_tolerant(pack_settings=pack_settings, **overrides)
    except ConfigError as exc:
        return None, violations + [Violation("ce_config", SETTINGS_CONFIG_TYPE, "config_value", exc.message)], []
    component = {
        (r.config_type.upper(), r.config_key.upper()): r.config_value
        for r in tables.get("ce_config", [])
        if isinstance(r, ConfigRow) and r.enabled and r.config_value not in (None, "")
    }
    effective, bad = apply_component_overrides(base, component)
    for (ctype, key), msg in bad:
        violations.append(Violation("ce_config", f"{ctype}.{key}", "config_value", msg))
    return effective, violations, warnings


def settings_from_config_rows(rows: Iterable[Any]) -> tuple[dict[str, Any], list[Violation]]:
    """A nested settings dict from ce_config rows of type ``EngineSettings``."""
    nested: dict[str, Any] = {}
    violations: list[Violation] = []
    for row in rows:
        if row.config_type.upper() != SETTINGS_CONFIG_TYPE.upper() or not row.enabled:
            continue
        try:
            value = json.loads(row.config_value) if row.config_value is not None else None
        except json.JSONDecodeError:
            value = row.config_value
        node = nested
        parts = [p for p in row.config_key.split(".") if p]
        if not parts:
            violations.append(Violation("ce_config", row.row_id, "config_key", "settings key must not be blank"))
            continue
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested, violations


def flatten_settings(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The inverse of :func:`settings_from_config_rows` for nested dicts of sections."""
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value and _is_section(path):
            flat.update(flatten_settings(value, path))
        else:
            flat[path] = value
    return flat


def _is_section(path: str) -> bool:
    """Whether ``path`` names a settings section (recursed into) rather than a free-form map."""
    model: Any = EngineSettings
    for part in path.split("."):
        name = part.replace("-", "_")
        sub = _submodel(model, name)
        if sub is None:
            return False
        model = sub
    return True


def _fingerprint(values: Mapping[str, tuple[Record, ...]]) -> str:
    digest = hashlib.sha256()
    for name in sorted(values):
        for rec in values[name]:
            cells = [getattr(rec, f.name) for f in fields(rec) if f.compare]
            digest.update(json.dumps(cells, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]
