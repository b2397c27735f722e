"""Load-time template checks: every template column compiles, and its variables are known.

A template that does not compile (``{{size pizza``, an unclosed ``[# th:if]`` block) is a violation
naming table, row and column. A top-level variable that neither the engine provides nor anything
in the pack sets (a SET_INPUT_PARAM key, a SET_JSON/GET_* name, a schema property) is a warning
naming the row: it can only come from the caller's inputParams or a host task, and when it does not,
strict rendering fails the turn there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol

from convengine.catalog.state import TURN_PARAM_KEYS
from convengine.catalog.vocab import GET_CONTEXT, GET_SCHEMA_JSON, GET_SESSION, SET_INPUT_PARAM, SET_JSON
from convengine.config.records import Record
from convengine.rules.facts import FactsInput, session_fields
from convengine.rules.params import parse_input_params
from convengine.templates.namespaces import NAMESPACES
from convengine.templates.render import check_syntax, referenced_names
from convengine.templates.variables import _ALIASES


class Findings(Protocol):
    """What the template checks need from validate.Validation: the rows, and where findings go."""

    warnings: list[str]

    def rows(self, table: str) -> list[Any]: ...

    def bad(self, record: Record | str, row_id: object, column: str | None, reason: str) -> None: ...


TEMPLATE_COLUMNS: dict[str, tuple[str, ...]] = {
    "ce_response": ("exact_text", "derivation_hint"),
    "ce_prompt_template": ("system_prompt", "user_prompt"),
    "ce_verbose": ("message", "error_message"),
    "ce_memory": ("system_prompt", "user_prompt"),
}

# Names the engine gives every template (templates/variables.py), what call sites add to
# prompts, and the context keys the engine itself writes.
_ENGINE_NAMES = frozenset({
    "session", "context", "intent", "state", "schema", "schema_json", "schema_description",
    "schema_field_details", "schema_id", "missing_fields", "missing_field_options", "allowed_intents",
    "intent_collision_candidates", "llmHint", "pending_clarification", "pending_action_runtime",
    "intent_lock", "memory", "mcp", "container_data", "tool_result",
    "loop", "true", "false", "none", "True", "False", "None",
})
_GETTER_DEFAULTS = {GET_CONTEXT: "context", GET_SCHEMA_JSON: "schema_json", GET_SESSION: "session"}


def engine_names() -> frozenset[str]:
    aliases = {alias for names in _ALIASES.values() for alias in names} | set(_ALIASES)
    session = set(session_fields(FactsInput("", "", "", {}, {})))
    return _ENGINE_NAMES | NAMESPACES | aliases | session | TURN_PARAM_KEYS


def pack_names(v: Findings) -> set[str]:
    """Names the pack itself sets: rule params, SET_JSON/GET_* targets, schema properties."""
    names: set[str] = set()
    for rule in v.rows("ce_rule"):
        r: Any = rule
        value = (r.action_value or "").strip()
        if r.action == SET_INPUT_PARAM and value:
            try:
                names.update(parse_input_params(value))
            except (ValueError, TypeError, KeyError, AttributeError):
                pass
        elif r.action == SET_JSON:
            names.add((value.partition(":")[0].strip() or "llm_json") if value else "llm_json")
        elif r.action in _GETTER_DEFAULTS:
            names.add(value or _GETTER_DEFAULTS[r.action])
    for schema in v.rows("ce_output_schema"):
        names.update(_properties(getattr(schema, "json_schema", None)))
    return names


def _properties(schema: object) -> Iterable[str]:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return ()
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props.keys() if isinstance(props, dict) else ()


def check_templates(v: Findings) -> None:
    """Compile every template column; warn about variables nothing provides."""
    known = engine_names() | pack_names(v)
    for table, columns in TEMPLATE_COLUMNS.items():
        for rec in v.rows(table):
            if not getattr(rec, "enabled", True):
                continue
            for column in columns:
                _check(v, rec, column, known)


def _check(v: Findings, rec: Record, column: str, known: frozenset[str] | set[str]) -> None:
    text = getattr(rec, column, None)
    if not isinstance(text, str) or not text:
        return
    reason = check_syntax(text)
    if reason:
        v.bad(rec, rec.row_id, column, f"template {reason}")
        return
    unknown = sorted(referenced_names(text) - known)
    if unknown:
        v.warnings.append(
            f"{rec.TABLE}[{rec.row_id}].{column}: {', '.join(repr(n) for n in unknown)} "
            f"{'is' if len(unknown) == 1 else 'are'} not provided by the engine or set by this pack "
            "(only the caller's inputParams or a host task can supply it; strict rendering fails the "
            "turn when none does)")
