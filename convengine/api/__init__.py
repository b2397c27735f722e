"""ConvEngine-compatible HTTP API (FastAPI): message, audit, trace, SSE stream, cache, health.

``create_app(url, authenticate=...)`` takes a host's own authentication scheme: a callable
``(Request) -> Principal | None`` (sync or async); see docs/security.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convengine._internal.lazy import lazy_names

if TYPE_CHECKING:  # the names below, for type checkers and the import-graph checks; at run time each
    # loads on first use, so importing one submodule does not run the others (see convengine/_internal/lazy.py)
    from convengine.api.app import create_app
    from convengine.api.auth import Principal

__all__ = [
    "Principal",
    "create_app",
]

__getattr__, __dir__ = lazy_names(__name__, {
    "Principal": "auth",
    "create_app": "app",
})
