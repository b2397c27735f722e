"""Slot schemas (ce_output_schema): selection, completeness facts, merge and field coercion.

Pure functions over JSON Schema dicts (an XSD text is converted to the same shape).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from convengine.catalog.booleans import parse_bool
from convengine.catalog.vocab import ANY
from convengine.config.records import OutputSchemaRecord
from convengine.config.snapshot import ConfigSnapshot


def select_schema(snapshot: ConfigSnapshot, intent: str, state: str) -> OutputSchemaRecord | None:
    """Enabled SCHEMA_JSON schema for (intent, state), else (intent, ANY); lowest priority wins."""
    for wanted_state in (state, ANY):
        rows = [s for s in snapshot.output_schemas
                if s.enabled and s.intent_code == intent and s.state_code == wanted_state
                and (s.schema_type or "SCHEMA_JSON") == "SCHEMA_JSON"]
        if rows:
            return min(rows, key=lambda s: (s.priority, s.schema_id))
    return None


def schema_dict(record: OutputSchemaRecord) -> dict[str, Any]:
    value = record.json_schema
    if isinstance(value, str):
        return _xsd_to_json_schema(value)
    return value if isinstance(value, dict) else {}


@lru_cache(maxsize=256)
def _xsd_to_json_schema(text: str) -> dict[str, Any]:
    """XSD elements -> ``{type: object, properties, required}`` (minOccurs="0" = optional)."""
    root = ET.fromstring(text)
    props: dict[str, Any] = {}
    required: list[str] = []
    for el in root.iter():
        if not el.tag.endswith("element") or not el.get("name"):
            continue
        name = el.get("name", "")
        xsd_type = (el.get("type") or "string").split(":")[-1]
        props[name] = {"type": _XSD_TYPES.get(xsd_type, "string")}
        if el.get("minOccurs", "1") != "0":
            required.append(name)
    return {"type": "object", "properties": props, "required": required}


_XSD_TYPES = {"int": "integer", "integer": "integer", "long": "integer", "decimal": "number", "double": "number",
              "float": "number", "boolean": "boolean", "string": "string", "date": "string", "dateTime": "string"}


def meaningful(value: object) -> bool:
    """Not null, not a blank string, not an empty list or object."""
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, (list, dict)):
        return bool(value)
    return True


def _field_complete(spec: Mapping[str, Any], value: object) -> bool:
    if not meaningful(value):
        return False
    if spec.get("type") == "array":
        return isinstance(value, list) and len(value) >= int(spec.get("minItems") or 1)
    return True


def compute_facts(record: OutputSchemaRecord, context: Mapping[str, Any]) -> dict[str, Any]:
    """Completeness facts of ``context`` against the schema."""
    schema = schema_dict(record)
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    missing = [name for name in required if not _field_complete(props.get(name) or {}, context.get(name))]
    options = {name: list(props[name]["enum"]) for name in missing
               if isinstance(props.get(name), Mapping) and isinstance(props[name].get("enum"), list)}
    return {
        "schema_id": record.schema_id,
        "complete": not missing,
        "has_any": any(meaningful(context.get(name)) for name in props),
        "missing": missing,
        "options": options,
        "properties": list(props),
        "description": record.description,
        "field_details": {name: {"description": (spec or {}).get("description"), "type": (spec or {}).get("type"),
                                 "enumOptions": (spec or {}).get("enum")} for name, spec in props.items()},
    }


def prune_empty(value: object) -> Any:
    """Drop nulls, blank strings and empty lists (recursively in objects) from an extraction."""
    if isinstance(value, dict):
        out = {k: prune_empty(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if meaningful(v) or isinstance(v, (bool, int, float))}
    return value


def deep_merge(target: dict[str, Any], source: Mapping[str, Any]) -> None:
    """Merge ``source`` into ``target``: objects recurse, scalars and lists overwrite, nulls never erase."""
    for key, value in source.items():
        if value is None:
            continue
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            deep_merge(target[key], value)
        else:
            target[key] = value


# --- single-field correction patches ---------------------------------------------------

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def normalise_alias(text: str) -> str:
    return _NON_ALNUM.sub(" ", _CAMEL.sub(" ", text).lower()).strip()


def field_aliases(schema: Mapping[str, Any]) -> dict[str, str]:
    """Normalised alias -> property name (the description when it is longer than the name)."""
    aliases: dict[str, str] = {}
    for name, spec in (schema.get("properties") or {}).items():
        aliases[normalise_alias(name)] = name
        description = (spec or {}).get("description") if isinstance(spec, Mapping) else None
        if isinstance(description, str) and len(description) > len(name):
            aliases[normalise_alias(description)] = name
    return aliases


_UNSET = object()


def coerce_field(spec: Mapping[str, Any], raw: str) -> Any:
    """Coerce a patch value by the field's schema type; returns _UNSET when it does not fit."""
    text = raw.strip().lstrip("=:,").strip().rstrip(".?!").strip()
    if text.lower() == "null":
        return None
    kind = spec.get("type")
    if kind == "integer":
        cleaned = text.replace(",", "")
        return int(cleaned) if re.fullmatch(r"-?\d+", cleaned) else _UNSET
    if kind == "number":
        cleaned = text.replace(",", "")
        if not re.fullmatch(r"-?\d+(\.\d+)?", cleaned):
            return _UNSET
        return int(cleaned) if "." not in cleaned else float(cleaned)
    if kind == "boolean":
        parsed = parse_bool(text)
        return _UNSET if parsed is None else parsed
    if spec.get("enum") and text not in spec["enum"]:
        matches = [e for e in spec["enum"] if str(e).casefold() == text.casefold()]
        return matches[0] if matches else _UNSET
    return text if text else _UNSET


def is_unset(value: object) -> bool:
    return value is _UNSET
