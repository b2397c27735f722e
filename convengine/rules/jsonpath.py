"""JSONPath as ConvEngine's rules use it (Jayway semantics over jsonpath-ng).

A filter on the root object (``$[?(@.schemaComplete == true)]``) tests the document
itself, as Jayway does; a rule matches when the path finds anything, or, when it finds
exactly one boolean, when that boolean is true.

Existence and null checks mean what they say:

* ``@.x`` - ``x`` exists (even when its value is null); ``!@.x`` - ``x`` does not exist;
* ``@.x != null`` - ``x`` exists and is not null (a missing ``x`` does not match);
* ``@.x == null`` - ``x`` has no value: it is missing or null.

(jsonpath-ng follows RFC 9535, where a missing member is ``!= null``; Jayway's ConvEngine rules
were written to mean "has a value".)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from jsonpath_ng import JSONPath
from jsonpath_ng.ext import filter as _filter
from jsonpath_ng.ext.parser import parse as _parse
from jsonpath_ng.ext.string import Sub
from jsonpath_ng.jsonpath import DatumInContext

from convengine._internal.textmatch import PatternError, linear_regex


@dataclass(frozen=True, slots=True)
class JsonPathMatcher:
    """A parsed JSONPath expression."""

    source: str
    expression: Any
    root_filter: bool

    def find(self, document: object) -> list[Any]:
        """Every value the path selects in ``document`` (empty when nothing matches)."""
        target = [document] if self.root_filter and isinstance(document, dict) else document
        try:
            return [m.value for m in self.expression.find(target)]
        except Exception:  # noqa: BLE001 - Jayway suppresses evaluation errors too
            return []

    def matches(self, document: object) -> bool:
        values = self.find(document)
        if len(values) == 1 and isinstance(values[0], bool):
            return values[0]
        return bool(values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonPathMatcher) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)


def can_reach(path: str | None, name: str) -> bool:
    """Whether JSONPath ``path`` can select anything under the document's member ``name``: a path
    reaches a member only by naming it, unless it has a wildcard, descends or escapes a character
    (``*``, ``..``, ``\\``). (A conservative test: None, any of those or any mention of the name says yes.)"""
    return path is None or "*" in path or ".." in path or "\\" in path or name in path


def compile_jsonpath(source: str) -> JsonPathMatcher:
    """Parse ``source``; raises ValueError naming the problem."""
    text = (source or "").strip()
    if not text:
        raise ValueError("JSONPath must not be blank")
    if not text.startswith("$"):
        raise ValueError(f"JSONPath must start with '$', got {text!r}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expression = _parse(text)
    except Exception as exc:  # noqa: BLE001 - the parser raises several unrelated types
        raise ValueError(f"invalid JSONPath {text!r}: {exc}") from None
    _bound_regexes(expression)
    _null_comparisons(expression)
    return JsonPathMatcher(text, expression, text.startswith("$[?"))


class _NullComparison(_filter.Expression):
    """``@.x == null`` / ``@.x != null``: compares "has a value" (present and not null)."""

    def find(self, datum: object) -> list[Any]:
        wrapped = DatumInContext.wrap(datum)
        has_value = any(m.value is not None for m in self.target.find(wrapped))
        return [wrapped] if has_value == (self.op == "!=") else []


def _null_comparisons(node: JSONPath) -> None:
    for item in _nodes(node):
        if type(item) is _filter.Expression and item.op in ("==", "!=") and item.value is None:
            item.__class__ = _NullComparison


def _bound_regexes(node: JSONPath) -> None:
    """Every regex in the path (``=~`` literals, ``sub(/re/, ...)``) must run in linear time: RE2
    compiles it now, or the path is refused with the reason."""
    for item in _nodes(node):
        try:
            if isinstance(item, _filter.Expression) and item.op == "=~" and isinstance(item.value, str):
                linear_regex(item.value)
            elif isinstance(item, Sub):
                item.regex = linear_regex(item.expr)
        except PatternError as exc:
            raise ValueError(f"invalid JSONPath regex: {exc}") from None


def _nodes(root: JSONPath) -> list[Any]:
    """The nodes of a parsed path (a path is small; walked iteratively)."""
    found: list[Any] = []
    pending: list[object] = [root]
    while pending:
        item = pending.pop()
        if isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, JSONPath):
            found.append(item)
            pending.extend(v for v in vars(item).values() if isinstance(v, (JSONPath, list, tuple)))
    return found


def _linear_search(text: object, pattern: object) -> bool:
    """JSONPath's ``=~`` on RE2: a pattern from a pack or from the document itself runs in linear time."""
    if not isinstance(text, str) or not isinstance(pattern, str):
        return False
    try:
        return linear_regex(pattern).search(text) is not None
    except PatternError:
        return False


_filter.OPERATOR_MAP["=~"] = _linear_search  # jsonpath-ng calls re.search (backtracking) here
