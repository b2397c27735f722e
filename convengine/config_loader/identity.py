"""The configuration id: one id for one set of control rows, wherever it is shown.

A configuration's content is what the control tables hold (ids assigned, column defaults filled,
timestamps left out) as a pack, serialised as canonical JSON (sorted keys, no insignificant spaces);
its hash is the SHA-256 of that text. ``pack versions`` lists each version by the first
:data:`ID_LENGTH` characters of its hash, and the same characters are the configuration id that
``pack validate``, ``pack import``, ``/health`` and the console show for the rows being served.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from convengine.config_loader.packs import rows_to_pack

TIMESTAMPS = frozenset({"created_at", "updated_at"})
ID_LENGTH = 12
"""Characters of the content hash that make the configuration id."""


def canonical(pack: Mapping[str, Any]) -> str:
    """The pack as canonical JSON: sorted keys, no insignificant spaces."""
    return json.dumps(pack, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(text: str) -> str:
    """The SHA-256 (hex) of canonical content."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_of_rows(rows: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Control-table rows (as read from the database) -> the configuration's content (a pack)."""
    stripped = {table: [{k: v for k, v in row.items() if k not in TIMESTAMPS} for row in table_rows]
                for table, table_rows in rows.items()}
    loaded: dict[str, Any] = json.loads(canonical(rows_to_pack(stripped)))
    return loaded


def configuration_id(rows: Mapping[str, list[dict[str, Any]]]) -> str:
    """The id of the configuration ``rows`` (control-table rows as read from the database) make."""
    return short_id(digest(canonical(content_of_rows(rows))))


def short_id(content_hash: str) -> str:
    """A version's content hash as the configuration id."""
    return content_hash[:ID_LENGTH]
