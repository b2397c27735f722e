"""The one spelling of "a JSON value" in type hints: what ``json.loads`` returns, recursively.

A value typed :data:`JsonValue` is plain data: text, a number, a boolean, null, a list of JSON
values or an object mapping text to JSON values. Functions that take *anything* and only inspect
it (``isinstance``) or pass it on take ``object`` instead.
"""

from __future__ import annotations

from typing import TypeAlias, Union

JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = Union[JsonScalar, list["JsonValue"], dict[str, "JsonValue"]]  # noqa: UP007 - recursive
JsonObject: TypeAlias = dict[str, JsonValue]
