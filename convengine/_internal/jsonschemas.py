"""JSON Schema validation whose regexes run in linear time.

``jsonschema`` evaluates ``pattern``, ``patternProperties`` and the pattern part of
``additionalProperties`` with Python's backtracking ``re``; a pack's schema with ``^(a+)+$``
checking an LLM reply (untrusted text) would stall the server. :func:`checked_validator`
gives a validator whose three keywords use RE2 instead, and refuses at load a schema whose
patterns RE2 cannot run (or that combines ``patternProperties`` with ``unevaluatedProperties``,
which jsonschema evaluates with ``re`` internally).

A schema may refer only to itself (``$ref: "#/$defs/x"``): a ``$ref`` to a URL or a file would make the
server fetch it (jsonschema's default resolver retrieves remote references, with no address check and
no timeout) or read it. Such references are refused at load, and the validator's registry retrieves
nothing, so none can be followed at validation either.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import jsonschema
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource

from convengine._internal.jsonvalue import JsonObject
from convengine._internal.textmatch import PatternError, linear_regex


class _Walker(Protocol):
    """What a keyword's check calls back on the validator running it (jsonschema types only its public part)."""

    def is_type(self, instance: object, type: str) -> bool: ...

    def descend(self, instance: object, schema: object, path: str | None = None,
                schema_path: str | None = None) -> Iterator[ValidationError]: ...


def _pattern(validator: _Walker, pattern: str, instance: object, schema: object) -> Iterator[ValidationError]:
    if (validator.is_type(instance, "string") and isinstance(instance, str)
            and linear_regex(pattern).search(instance) is None):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: _Walker, patterns: Mapping[str, object], instance: object,
                        schema: object) -> Iterator[ValidationError]:
    if not (validator.is_type(instance, "object") and isinstance(instance, Mapping)):
        return
    for pattern, subschema in patterns.items():
        compiled = linear_regex(pattern)
        for key, value in instance.items():
            if compiled.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _extras(instance: Mapping[str, object], schema: Mapping[str, Any]) -> list[str]:
    known = schema.get("properties", {})
    patterns = [linear_regex(p) for p in schema.get("patternProperties", {})]
    return [k for k in instance if k not in known and not any(p.search(k) for p in patterns)]


def _additional_properties(validator: _Walker, allowed: object, instance: object,
                           schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not (validator.is_type(instance, "object") and isinstance(instance, Mapping)):
        return
    extras = _extras(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, sorted(extras)))} "
                              f"{'was' if len(extras) == 1 else 'were'} unexpected)")


_LINEAR = {"pattern": _pattern, "patternProperties": _pattern_properties,
           "additionalProperties": _additional_properties}


REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


def _retrieve_nothing(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # an attrs class


NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_retrieve_nothing)  # type: ignore[call-arg]  # attrs
"""A registry that fetches no URL and reads no file: only the schema itself (and the metaschemas) resolve."""


def _dict_nodes(schema: object) -> Iterator[dict[str, Any]]:
    """Every object of a JSON Schema document, iteratively (schemas may be deep)."""
    pending: list[object] = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            yield node
            pending.extend(node.values())


def check_refs(schema: object) -> None:
    """Raise SchemaError for a reference outside the schema itself (a URL, a file, another document)."""
    for node in _dict_nodes(schema):
        for keyword in REF_KEYWORDS:
            ref = node.get(keyword)
            if isinstance(ref, str) and not ref.startswith("#"):
                raise SchemaError(f"{keyword} {ref[:200]!r} points outside the schema; only local references "
                                  "('#/$defs/name', '#/properties/x') are allowed, remote and file references "
                                  "are refused")


def check_patterns(schema: object) -> None:
    """Raise SchemaError when a pattern of ``schema`` needs a backtracking engine."""
    for node in _dict_nodes(schema):
        _check_node(node)


def _check_node(node: dict[str, Any]) -> None:
    patterns = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
    if isinstance(node.get("patternProperties"), dict):
        patterns.extend(node["patternProperties"])
        if "unevaluatedProperties" in node:
            raise SchemaError("patternProperties together with unevaluatedProperties is not supported")
    for pattern in patterns:
        try:
            linear_regex(pattern)
        except PatternError as exc:
            raise SchemaError(str(exc)) from None


def checked_validator(schema: JsonObject) -> Validator:
    """A validator for ``schema`` (checked: SchemaError names what is wrong) with linear-time regexes
    and local references only."""
    base = jsonschema.validators.validator_for(schema)
    base.check_schema(schema)
    check_patterns(schema)
    check_refs(schema)
    validator: Validator = jsonschema.validators.extend(base, _LINEAR)(schema, registry=NO_RETRIEVAL)
    return validator
