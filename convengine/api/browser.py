"""What the API tells browsers and refuses from them: security headers on every response, and
state-changing requests from web pages of origins the server does not allow.

A web page may make any browser send a "simple" cross-site POST (no preflight) that carries no
credential the server checks, and on a keyless loopback server every caller is an admin. CORS only
stops the page from reading the answer; the request has already run. :class:`OriginCheck` refuses it.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from convengine.api.config import ApiConfig
from convengine.api.middleware import header_map
from convengine.api.refusals import ApiRefusal
from convengine.catalog.errors import ErrorCode

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ANTI_FRAMING_CSP = "frame-ancestors 'none'"
ALWAYS = {"x-content-type-options": "nosniff", "referrer-policy": "no-referrer", "x-frame-options": "DENY"}
ADDED = tuple((name.encode("latin-1"), value.encode("latin-1"))
              for name, value in {**ALWAYS, "content-security-policy": ANTI_FRAMING_CSP}.items())
"""The headers every response gets unless it sets them itself, encoded once."""


class SecurityHeaders:
    """``nosniff``, ``no-referrer`` and anti-framing (``X-Frame-Options: DENY``, and CSP
    ``frame-ancestors 'none'`` on a response that sets no policy of its own) on every HTTP response:
    no site can frame ``/docs`` (whose Execute sends real requests) or the console."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name for name, _ in headers}
                headers.extend(header for header in ADDED if header[0] not in present)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


class OriginCheck:
    """403 ``ORIGIN_NOT_ALLOWED`` for a POST, PUT, PATCH or DELETE sent by a web page of another origin
    than the server's own and those allowed (``api.cors.allowed_origins`` / ``--cors-origin``).

    A request without ``Origin`` (curl, a server calling the API) is not a browser's cross-site request
    and passes, unless the browser says it is one (``Sec-Fetch-Site: cross-site``)."""

    def __init__(self, app: ASGIApp, config: Callable[[], ApiConfig | None]) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        config = self.config() if scope["type"] == "http" else None
        if config is not None and scope["method"] in STATE_CHANGING:
            refusal = _refusal(header_map(scope), config.cors_origins)
            if refusal is not None:
                return await refusal.response()(scope, receive, send)
        await self.app(scope, receive, send)


def _refusal(headers: dict[bytes, bytes], allowed: tuple[str, ...]) -> ApiRefusal | None:
    origin = headers.get(b"origin", b"").decode("latin-1").strip()
    host = headers.get(b"host", b"").decode("latin-1").strip().lower()
    if not origin:
        if headers.get(b"sec-fetch-site", b"").lower() == b"cross-site":
            return _refused("a cross-site request without an Origin header")
        return None
    if "*" in allowed or origin in allowed or _authority(origin) == host:
        return None
    return _refused(f"Origin {origin[:100]!r}")


def _authority(origin: str) -> str | None:
    """``host[:port]`` of an origin (``null`` and malformed origins have none)."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return None
    return parts.netloc.lower() if parts.scheme in ("http", "https") and parts.netloc else None


def _refused(what: str) -> ApiRefusal:
    return ApiRefusal(403, ErrorCode.ORIGIN_NOT_ALLOWED,
                      f"{what} may not change anything here: only this server's own pages and the origins in "
                      "api.cors.allowed_origins (serve --cors-origin) may send POST, PUT, PATCH or DELETE")
