"""Who is calling: API keys (built in) or a host-supplied authenticator, and when authentication is on.

An API key is read from ``Authorization: Bearer <key>`` or ``X-API-Key: <key>`` and compared in
constant time against the digests of the configured keys. A key is never stored or logged: the
caller's identity is a keyed digest prefix of it (``key:<32 hex>``), which is what the engine
stores as a conversation's owner.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from fastapi import Request

from convengine.api.hosts import is_loopback
from convengine.errors import ConfigError, ErrorCode
from convengine.settings import AuthSettings

MIN_KEY_CHARS = 16
_IDENTITY_KEY = b"convengine.api-key.identity.v1"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: a stable ``identity`` (stored as the owner of the conversations it
    creates, at most 200 characters) and whether it may use the admin endpoints and read any
    conversation."""

    identity: str
    admin: bool = False


Authenticate = Callable[[Request], Principal | None | Awaitable[Principal | None]]
"""``authenticate(request) -> Principal | None`` (sync or async); None refuses the request with 401.
It sees the request's headers, client and URL, not its body."""


def key_identity(key: str) -> str:
    """The stable identity of an API key (a keyed SHA-256 prefix; the key cannot be read back from it)."""
    return "key:" + hmac.new(_IDENTITY_KEY, key.encode(), hashlib.sha256).hexdigest()[:32]


def presented_key(request: Request) -> str | None:
    """The key a request carries (``Authorization: Bearer`` first, then ``X-API-Key``), or None."""
    scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or None


class ApiKeys:
    """The built-in authenticator: ``api.auth.api_keys`` (users) and ``api.auth.admin_keys``."""

    def __init__(self, users: Sequence[str], admins: Sequence[str]) -> None:
        for key in (*users, *admins):
            _check_key(key)
        entries = [(k, False) for k in users] + [(k, True) for k in admins]  # an admin key listed twice is admin
        self._entries = [(_digest(k), Principal(key_identity(k), admin)) for k, admin in entries]

    @property
    def configured(self) -> bool:
        return bool(self._entries)

    def __call__(self, request: Request) -> Principal | None:
        key = presented_key(request)
        if key is None:
            return None
        digest = _digest(key)
        found = None
        for expected, principal in self._entries:  # every entry is compared: the time does not depend on which
            if hmac.compare_digest(digest, expected):
                found = principal
        return found


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _check_key(key: str) -> None:
    if len(key) < MIN_KEY_CHARS or key != key.strip():
        raise ConfigError(f"api.auth keys must be at least {MIN_KEY_CHARS} characters without surrounding spaces "
                          f"(one is {len(key)} characters); generate one with: python -c \"import secrets; "
                          "print(secrets.token_urlsafe(32))\"", code=ErrorCode.SETTINGS_INVALID)


def authenticator_for(settings: AuthSettings, host: str, custom: Authenticate | None) -> Authenticate | None:
    """The authenticator serving on ``host`` uses, or None when authentication is off.

    ``mode`` off: none. ``on``: always. ``auto``: when keys or a custom authenticator are given, or
    the server listens beyond loopback. On with nothing to authenticate with is a ConfigError that
    says what to set.
    """
    if settings.mode == "off":
        return None
    keys = ApiKeys(settings.api_keys, settings.admin_keys)
    if settings.mode == "auto" and custom is None and not keys.configured and is_loopback(host):
        return None
    if custom is not None:
        return custom
    if keys.configured:
        return keys
    raise ConfigError(f"refusing to serve on {host} without authentication (api.auth.mode={settings.mode}): set "
                      "CONVENGINE_API__AUTH__API_KEYS='[\"<key>\"]' (and CONVENGINE_API__AUTH__ADMIN_KEYS for the "
                      "cache endpoints), or CONVENGINE_API__AUTH__MODE=off to serve without authentication on "
                      "purpose", code=ErrorCode.SETTINGS_INVALID)
