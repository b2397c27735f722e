"""What the API enforces, resolved once at startup from the engine's settings and how it is served."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from convengine.api.auth import Authenticate, authenticator_for
from convengine.api.hosts import allowed_hosts, is_loopback
from convengine.catalog.errors import ConfigError, ErrorCode
from convengine.settings import ApiSettings, EngineSettings

DEFAULT_HOST = "127.0.0.1"
_ORIGIN = re.compile(r"\*|https?://[^/\s?#]+")


@dataclass(frozen=True)
class ApiConfig:
    settings: ApiSettings
    authenticate: Authenticate | None
    """None: authentication is off (every caller may do everything)."""
    ownership: bool
    """Conversations belong to the caller that created them."""
    hosts: tuple[str, ...] | None
    """Host header patterns answered; None: any."""
    cors_origins: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    refuse_relayed: bool = False
    """Authentication is off only because the server listens on loopback (api.auth.mode=auto, no
    keys): a request relayed by a proxy (Forwarded, X-Forwarded-For, X-Real-IP) comes from elsewhere
    and is refused."""


def resolve_api(settings: EngineSettings, *, host: str = DEFAULT_HOST, authenticate: Authenticate | None = None,
                cors_origins: Sequence[str] = ()) -> ApiConfig:
    """The API's configuration serving on ``host``; ConfigError (one line saying what to set) when unsafe."""
    api = settings.api
    auth = authenticator_for(api.auth, host, authenticate)
    warnings = []
    if auth is None and not is_loopback(host):
        warnings.append(f"authentication is OFF (api.auth.mode=off) while serving on {host}: anyone who can reach "
                        "this server can read and continue every conversation")
    origins = tuple(_origin(o) for o in dict.fromkeys([*api.cors.allowed_origins, *cors_origins]))
    return ApiConfig(api, auth, auth is not None and api.auth.conversation_ownership,
                     allowed_hosts(api.trusted_hosts, host), origins, tuple(warnings),
                     refuse_relayed=auth is None and api.auth.mode == "auto")


def _origin(origin: str) -> str:
    if not _ORIGIN.fullmatch(origin):
        raise ConfigError(f"api.cors.allowed_origins: {origin!r} is not an origin (scheme://host[:port], no path, "
                          "e.g. http://localhost:5173)", code=ErrorCode.SETTINGS_INVALID)
    return origin
