"""The one yes/no parser: pack columns, ce_config rows, params and query strings all accept the same
spellings, and anything else is refused or counts as false — never guessed."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog.booleans import FALSE_SPELLINGS, TRUE_SPELLINGS, parse_bool, require_bool, truthy


@pytest.mark.parametrize("value", [*TRUE_SPELLINGS, "TRUE", " Yes ", "On", True, 1, 1.0])
def test_true_spellings(value: Any) -> None:
    assert parse_bool(value) is True and truthy(value) and require_bool(value) is True


@pytest.mark.parametrize("value", [*FALSE_SPELLINGS, "FALSE", " no ", "Off", False, 0, 0.0])
def test_false_spellings(value: Any) -> None:
    assert parse_bool(value) is False and not truthy(value) and require_bool(value) is False


@pytest.mark.parametrize("value", ["maybe", "", "2", "tru", None, 2, -1, 0.5, [], {}, "yes please"])
def test_anything_else_is_no_boolean(value: Any) -> None:
    assert parse_bool(value) is None
    assert truthy(value) is False
    with pytest.raises(ValueError, match="expected true or false") as info:
        require_bool(value)
    assert repr(value) in str(info.value)


def test_the_spellings_do_not_overlap() -> None:
    assert not set(TRUE_SPELLINGS) & set(FALSE_SPELLINGS)
