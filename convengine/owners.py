"""The owners of conversations this process has seen.

A conversation's owner (``ce_conversation.owner_id``) is written with its row and never changes,
so once read it can be remembered: a turn or read by the owner then costs no ownership query.
Only owned conversations are remembered (an unowned or missing row may still be created or
adopted), and the oldest entries are forgotten past ``capacity``.
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULT_CAPACITY = 100_000


class KnownOwners:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._owners: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owners)

    def get(self, conversation_id: str) -> str | None:
        """The remembered owner, or None when it must be read from the database."""
        owner = self._owners.get(conversation_id)
        if owner is not None:
            self._owners.move_to_end(conversation_id)
        return owner

    def remember(self, conversation_id: str, owner: str | None) -> None:
        if owner is None:
            return
        self._owners[conversation_id] = owner
        self._owners.move_to_end(conversation_id)
        while len(self._owners) > self.capacity:
            self._owners.popitem(last=False)
