"""The savers' serializer: checkpoints hold plain JSON-like values, and only those are read back.

LangGraph's default serializer rebuilds objects of any module named in a checkpoint (a msgpack
extension carries ``module, name, args``), so whoever can write a checkpoint row can make the
server call ``os.system``. The engine's state is plain data, so :class:`StrictSerializer`
rebuilds nothing but a few value types (dates, UUIDs, decimals, sets) and refuses every other
extension, and every ``pickle`` or ``json``-constructor payload, with :class:`UnsafeCheckpointError`:
the conversation fails with a clear error and nothing runs.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_METHOD_SINGLE_ARG,
    JsonPlusSerializer,
)
from langgraph.types import Interrupt

from convengine.catalog.errors import UnsafeCheckpointError

# (module, name) -> the callable that rebuilds it; nothing else is ever imported or called.
VALUE_TYPES: dict[tuple[str, str], Callable[..., Any]] = {
    ("datetime", "datetime"): datetime.datetime,
    ("datetime", "date"): datetime.date,
    ("datetime", "time"): datetime.time,
    ("datetime", "timedelta"): datetime.timedelta,
    ("datetime", "timezone"): datetime.timezone,
    ("uuid", "UUID"): uuid.UUID,
    ("decimal", "Decimal"): decimal.Decimal,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("collections", "deque"): collections.deque,
    ("langgraph.types", "Interrupt"): Interrupt,
    # a paused chain run's pending interrupt (convengine.chains): LangGraph's frozen record of a value and
    # an id, which runs no code; its value is read back under these same rules
}
METHODS: dict[tuple[str, str, str], Callable[[Any], Any]] = {
    ("datetime", "datetime", "fromisoformat"): datetime.datetime.fromisoformat,
}
_OPTIONS = ormsgpack.OPT_NON_STR_KEYS


def _unpack(data: bytes) -> Any:
    return ormsgpack.unpackb(data, ext_hook=_ext_hook, option=_OPTIONS)


_last_refusal = threading.local()


def _refuse(what: str) -> UnsafeCheckpointError:
    _last_refusal.what = what  # ormsgpack replaces an ext hook's exception with its own
    return UnsafeCheckpointError(f"a stored checkpoint holds {what}, which the engine never stores; it was not "
                                 "loaded and nothing ran (the checkpoint was altered outside the engine)")


def _construct(code: int, data: bytes) -> Any:
    parts = _unpack(data)
    key = (str(parts[0]), str(parts[1]))
    build = VALUE_TYPES.get(key)
    if build is None:
        raise _refuse(f"an object of type {key[0]}.{key[1]}")
    if code == EXT_CONSTRUCTOR_SINGLE_ARG:
        return build(parts[2])
    if code == EXT_CONSTRUCTOR_POS_ARGS:
        return build(*parts[2])
    return build(**parts[2])


def _call_method(data: bytes) -> Any:
    parts = _unpack(data)
    key = (str(parts[0]), str(parts[1]), str(parts[3]))
    method = METHODS.get(key)
    if method is None:
        raise _refuse(f"a call of {'.'.join(key)}")
    return method(parts[2])


def _ext_hook(code: int, data: bytes) -> Any:
    if code in (EXT_CONSTRUCTOR_SINGLE_ARG, EXT_CONSTRUCTOR_POS_ARGS, EXT_CONSTRUCTOR_KW_ARGS):
        return _construct(code, data)
    if code == EXT_METHOD_SINGLE_ARG:
        return _call_method(data)
    raise _refuse(f"a msgpack extension of kind {code}")


class StrictSerializer(JsonPlusSerializer):
    """LangGraph's serializer for writing; reading rebuilds only :data:`VALUE_TYPES`."""

    def __init__(self) -> None:
        super().__init__(pickle_fallback=False, allowed_json_modules=None, allowed_msgpack_modules=None,
                         __unpack_ext_hook__=_ext_hook)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, payload = data
        if kind == "msgpack":
            return _unpack_checked(payload)
        if kind == "json":
            return _json_checked(payload)
        if kind in ("null", "bytes", "bytearray"):
            return super().loads_typed(data)
        raise _refuse(f"a value serialized as {kind!r}")


def _json_checked(payload: bytes) -> Any:
    """Plain JSON (no constructor revival); nesting too deep or a number too long is refused like bad msgpack."""
    try:
        return json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise _refuse(f"bytes that are not plain JSON ({type(exc).__name__})") from None


def _unpack_checked(payload: bytes) -> Any:
    _last_refusal.what = None
    try:
        return _unpack(payload)
    except UnsafeCheckpointError:
        raise
    except (ormsgpack.MsgpackDecodeError, ValueError, TypeError) as exc:
        raise _refuse(_last_refusal.what or f"bytes that are not valid msgpack ({exc})") from None
