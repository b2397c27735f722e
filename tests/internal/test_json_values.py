"""JSON Schemas a pack hands the engine (slot schemas, tool and reply schemas), the JSON text the
engine stores, and the numbers it can keep."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest

from convengine._internal import jsontext, numbers
from convengine._internal.jsonschemas import check_refs, checked_validator


def _errors(schema: dict[str, Any], value: Any) -> list[str]:
    return [error.message for error in checked_validator(schema).iter_errors(value)]


def test_a_schema_validates_as_json_schema_says() -> None:
    schema = {"type": "object", "required": ["size"], "properties": {"size": {"enum": ["S", "M", "L"]}}}
    assert _errors(schema, {"size": "M"}) == []
    assert _errors(schema, {"size": "XL"}) == ["'XL' is not one of ['S', 'M', 'L']"]
    assert _errors(schema, {}) == ["'size' is a required property"]


def test_an_invalid_schema_is_refused_before_use() -> None:
    with pytest.raises(jsonschema.SchemaError):
        checked_validator({"type": "strange"})


@pytest.mark.parametrize("ref", ["https://example.com/s.json", "file:///etc/passwd", "other.json#/x"])
def test_references_outside_the_schema_are_refused(ref: str) -> None:
    with pytest.raises(jsonschema.SchemaError, match="points outside the schema"):
        checked_validator({"properties": {"x": {"$ref": ref}}})


def test_local_references_resolve() -> None:
    schema = {"$defs": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
              "properties": {"airport": {"$ref": "#/$defs/code"}}}
    check_refs(schema)
    assert _errors(schema, {"airport": "OSL"}) == []
    assert _errors(schema, {"airport": "osl"})  # patterns are case-sensitive, as JSON Schema says


@pytest.mark.parametrize("schema", [
    {"type": "string", "pattern": r"(\w)\1"},
    {"type": "object", "patternProperties": {r"(?=a)b": {}}},
])
def test_patterns_needing_backtracking_are_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.SchemaError, match="only linear-time"):
        checked_validator(schema)


def test_pattern_properties_with_unevaluated_properties_are_refused() -> None:
    with pytest.raises(jsonschema.SchemaError, match="not supported"):
        checked_validator({"patternProperties": {"^x": {}}, "unevaluatedProperties": False})


def test_additional_properties_are_named_when_refused() -> None:
    schema = {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x_": {}},
              "additionalProperties": False}
    assert _errors(schema, {"a": 1, "x_1": 2}) == []
    [message] = _errors(schema, {"a": 1, "b": 2, "c": 3})
    assert "'b', 'c'" in message and "were unexpected" in message


def test_stored_json_is_compact_and_keeps_non_ascii() -> None:
    text = jsontext.dumps({"name": "Zoë", "n": [1, 2.5, None], "ok": True})
    assert text == '{"name":"Zoë","n":[1,2.5,null],"ok":true}'
    assert json.loads(text)["name"] == "Zoë"


def test_values_that_are_not_json_are_written_as_text() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert json.loads(jsontext.dumps({"at": when, 1: "key"})) == {"at": str(when), "1": "key"}
    big = 2**80  # past what orjson holds: the standard library writes it
    assert json.loads(jsontext.dumps({"big": big})) == {"big": big}


def test_numbers_past_64_bits_are_found_anywhere() -> None:
    assert numbers.in_range(numbers.INT_MAX) and not numbers.in_range(numbers.INT_MAX + 1)
    assert numbers.first_out_of_range({"a": [1, {"b": -(2**63) - 1}]}) == -(2**63) - 1
    assert numbers.first_out_of_range({"a": [True, 2**63 - 1, 1e300]}) is None  # booleans and floats pass


def test_a_huge_number_is_described_not_printed() -> None:
    huge = 10**5000  # str() refuses past 4,300 digits
    assert numbers.shown(huge) == "a number of about 5001 digits"
