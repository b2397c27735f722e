"""JSONPath as ConvEngine's rules use it (Jayway semantics over jsonpath-ng).

A filter on the root object (``$[?(@.schemaComplete == true)]``) tests the document
itself, as Jayway does; a rule matches when the path finds anything, or, when it finds
exactly one boolean, when that boolean is true.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from jsonpath_ng.ext import parse as _parse


@dataclass(frozen=True, slots=True)
class JsonPathMatcher:
    """A parsed JSONPath expression."""

    source: str
    expression: Any
    root_filter: bool

    def find(self, document: Any) -> list[Any]:
        """Every value the path selects in ``document`` (empty when nothing matches)."""
        target = [document] if self.root_filter and isinstance(document, dict) else document
        try:
            return [m.value for m in self.expression.find(target)]
        except Exception:  # noqa: BLE001 - Jayway suppresses evaluation errors too
            return []

    def matches(self, document: Any) -> bool:
        values = self.find(document)
        if len(values) == 1 and isinstance(values[0], bool):
            return values[0]
        return bool(values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonPathMatcher) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)


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
    return JsonPathMatcher(text, expression, text.startswith("$[?"))
