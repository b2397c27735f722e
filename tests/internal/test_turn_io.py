"""The edges of a turn: a caller's message, conversation id and params are checked before anything
runs, each refusal naming what was wrong; failures from below become ConvEngine's errors."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa

from convengine._internal.turn_io import (
    DATABASE_UNAVAILABLE_MESSAGE,
    check_params,
    check_request,
    map_failure,
    nesting_depth,
    normalise_conversation_id,
)
from convengine.catalog.errors import (
    ConvEngineError,
    ErrorCode,
    InvalidConversationIdError,
    InvalidInputError,
    MessageTooLargeError,
)

SETTINGS = SimpleNamespace(api=SimpleNamespace(max_message_chars=20, max_input_depth=3))


def test_a_request_without_a_conversation_id_gets_a_new_one() -> None:
    first = check_request("hi", None, None, False, SETTINGS)
    second = check_request("hi", None, None, False, SETTINGS)
    assert uuid.UUID(first.conversation_id) and first.conversation_id != second.conversation_id
    assert first.params == {} and first.turn_id != second.turn_id


def test_conversation_ids_are_canonical_uuids() -> None:
    raw = uuid.uuid4()
    assert normalise_conversation_id(f"  {str(raw).upper()} ") == str(raw)
    assert normalise_conversation_id(raw) == str(raw)
    with pytest.raises(InvalidConversationIdError, match="'abc' is not a UUID"):
        normalise_conversation_id("abc")
    with pytest.raises(InvalidConversationIdError, match="must be a UUID string, got int"):
        normalise_conversation_id(7)
    with pytest.raises(InvalidConversationIdError) as info:
        normalise_conversation_id("x" * 500)
    assert len(info.value.message) < 200  # a huge id is shortened in the error


@pytest.mark.parametrize(("message", "error", "text"), [
    (b"hi", InvalidInputError, "got bytes; decode it as UTF-8 first"),
    (42, InvalidInputError, r"must be text \(str\), got int"),
    ("x" * 21, MessageTooLargeError, "21 characters; the limit is 20"),
    ("a\x00b", InvalidInputError, "NUL character"),
    ("\ud800", InvalidInputError, "not valid Unicode text"),
])
def test_a_bad_message_is_refused_naming_why(message: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        check_request(message, None, None, False, SETTINGS)


def test_an_empty_message_is_a_turn_and_reset_must_be_a_boolean() -> None:
    assert check_request("", None, {"size": "L"}, True, SETTINGS).reset is True
    with pytest.raises(InvalidInputError, match="reset must be true or false, got str"):
        check_request("hi", None, None, "yes", SETTINGS)


@pytest.mark.parametrize(("params", "text"), [
    ([1, 2], "must be an object"),
    ({1: "x"}, "keys must be strings, got 1"),
    ({"a": {"b": {"c": {"d": 1}}}}, "nests deeper than 3 levels"),
    ({"a": float("nan")}, "must be JSON values"),
    ({"a": object()}, "must be JSON values"),
    ({"a": 2**70}, "past the 64-bit range"),
    ({"a": "x\x00"}, "NUL"),
])
def test_bad_params_are_refused_naming_why(params: Any, text: str) -> None:
    with pytest.raises(InvalidInputError, match=text):
        check_params(params, 3)


def test_params_come_back_as_plain_json() -> None:
    assert check_params({"n": (1, 2), "ok": True, "deep": {"x": [None]}}, 3) == {
        "n": [1, 2], "ok": True, "deep": {"x": [None]}}
    assert check_params({"v": 1}, name="inputParams", max_depth=3) == {"v": 1}
    with pytest.raises(InvalidInputError, match="^inputParams must be an object"):
        check_params("x", name="inputParams")


def test_nesting_depth_counts_containers_and_stops_early() -> None:
    assert nesting_depth("text", 10) == 0
    assert nesting_depth({"a": [1, {"b": 2}]}, 10) == 3
    deep: Any = []
    for _ in range(10_000):  # iterative: no recursion limit
        deep = [deep]
    assert nesting_depth(deep, 50) == 50


def test_failures_become_convengine_errors() -> None:
    known = InvalidInputError("bad")
    assert map_failure(known) is known
    down = map_failure(sa.exc.OperationalError("SELECT secret FROM t", {"p": "hunter2"}, Exception("refused")))
    assert isinstance(down, ConvEngineError) and down.recoverable
    assert down.message == DATABASE_UNAVAILABLE_MESSAGE
    assert "hunter2" not in str(down.details) and "SELECT" not in down.message
    other = map_failure(RuntimeError("boom"))
    assert other.code == ErrorCode.INTERNAL_ERROR and not other.recoverable
