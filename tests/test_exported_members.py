"""The public surface is explicit: ``convengine.__all__`` is sorted and complete."""

from __future__ import annotations

import convengine


def test_all_is_sorted_and_every_name_exists() -> None:
    assert convengine.__all__ == sorted(convengine.__all__)
    for name in convengine.__all__:
        assert hasattr(convengine, name), name


def test_all_lists_every_public_member() -> None:
    public = {
        name
        for name, value in vars(convengine).items()
        if not name.startswith("_") and not isinstance(value, type(convengine))
    }
    assert public == set(convengine.__all__)
