"""ConvEngine-compatible HTTP API (FastAPI): message, audit, trace, SSE stream, cache, health."""

from convengine.api.app import create_app

__all__ = ["create_app"]
