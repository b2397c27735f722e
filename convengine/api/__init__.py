"""ConvEngine-compatible HTTP API (FastAPI): message, audit, trace, SSE stream, cache, health.

``create_app(url, authenticate=...)`` takes a host's own authentication scheme: a callable
``(Request) -> Principal | None`` (sync or async); see docs/security.md.
"""

from convengine.api.app import create_app
from convengine.api.auth import Principal

__all__ = ["Principal", "create_app"]
