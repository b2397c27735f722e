"""Who is calling: API keys (built in) or a host-supplied authenticator, and when authentication is on.

An API key is read from ``Authorization: Bearer <key>`` or ``X-API-Key: <key>`` and compared in
constant time against the digests of the configured keys. A key is never stored or logged: the
caller's identity is a keyed digest prefix of it (``key:<32 hex>``), or ``tenant:<name>`` for a key
of a tenant (``api.auth.tenants``: keys that share conversations and users), which is what the
engine stores as a conversation's owner and what scopes the users a caller names.

Keys come from the settings (read once) and from ``api.auth.keys_file`` (YAML or JSON with
``api_keys``, ``admin_keys`` and ``tenants``), whose status is checked at most once a second per
worker and re-read when it changed, so a key removed from it is refused within seconds.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from convengine.api.hosts import is_loopback
from convengine.catalog.errors import ConfigError, ErrorCode
from convengine.security.redact import remember_secret
from convengine.settings import AuthSettings

logger = logging.getLogger(__name__)

MIN_KEY_CHARS = 16
_IDENTITY_KEY = b"convengine.api-key.identity.v1"
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
RECHECK_S = 1.0
"""How often (at most) a worker looks at the keys file's status."""
MAX_KEYS_FILE_BYTES = 1_000_000


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: a stable ``identity`` (stored as the owner of the conversations it
    creates, at most 200 characters) and whether it may use the admin endpoints and read any
    conversation."""

    identity: str
    admin: bool = False
    scopes: frozenset[str] = frozenset()
    """What the caller may do besides its own conversations: ``chains`` (:data:`CHAINS_SCOPE`)."""

    def may(self, scope: str) -> bool:
        """Whether the caller has ``scope`` (an admin has every scope)."""
        return self.admin or scope in self.scopes


CHAINS_SCOPE = "chains"
"""List and read every chain run, resume one waiting for a person (``api.auth.chain_keys``)."""


Authenticate = Callable[[Request], Principal | None | Awaitable[Principal | None]]
"""``authenticate(request) -> Principal | None`` (sync or async); None refuses the request with 401.
It sees the request's headers, client and URL, not its body."""


def key_identity(key: str) -> str:
    """The stable identity of an API key (a keyed SHA-256 prefix; the key cannot be read back from it)."""
    return "key:" + hmac.new(_IDENTITY_KEY, key.encode(), hashlib.sha256).hexdigest()[:32]


def tenant_identity(name: str) -> str:
    """The identity every key of tenant ``name`` calls as."""
    return "tenant:" + name


def presented_key(request: Request) -> str | None:
    """The key a request carries (``Authorization: Bearer`` first, then ``X-API-Key``), or None."""
    scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or None


class KeyList(BaseModel):
    """Keys as the settings or a keys file give them."""

    model_config = ConfigDict(extra="forbid")
    api_keys: list[str] = Field(default_factory=list)
    admin_keys: list[str] = Field(default_factory=list)
    chain_keys: list[str] = Field(default_factory=list)
    tenants: dict[str, list[str]] = Field(default_factory=dict)


@dataclass(frozen=True)
class _Table:
    """One reading of every configured key: (digest of the key, who presents it)."""

    entries: tuple[tuple[bytes, Principal], ...] = ()

    @classmethod
    def build(cls, lists: Iterable[KeyList]) -> _Table:
        """Every key checked; a key of a tenant calls as the tenant, an admin key (wherever else it is
        also listed) as itself with admin rights, any other key as itself."""
        users: dict[str, Principal] = {}
        admins: dict[str, Principal] = {}
        tenant_of: dict[str, str] = {}
        for keys in lists:
            for key in keys.admin_keys:
                admins[_check_key(key)] = Principal(key_identity(key), admin=True)
            for name, members in keys.tenants.items():
                _check_tenant(name)
                for key in members:
                    if tenant_of.setdefault(_check_key(key), name) != name:
                        raise ConfigError(f"api.auth.tenants: a key is listed in tenants {tenant_of[key]!r} and "
                                          f"{name!r}; a key belongs to one tenant", code=ErrorCode.SETTINGS_INVALID)
            for key in keys.api_keys:
                users[_check_key(key)] = Principal(key_identity(key))
            for key in keys.chain_keys:
                users[_check_key(key)] = Principal(key_identity(key), scopes=frozenset({CHAINS_SCOPE}))
        for key, name in tenant_of.items():
            if key in admins:
                raise ConfigError(f"api.auth.tenants: tenant {name!r} lists an admin key; admin keys act as the host "
                                  "application, give the tenant a user key of its own",
                                  code=ErrorCode.SETTINGS_INVALID)
        users.update({key: Principal(tenant_identity(name)) for key, name in tenant_of.items()})
        users.update(admins)
        for key in users:
            remember_secret(key)
        return cls(tuple((_digest(key), principal) for key, principal in users.items()))

    def find(self, key: str) -> Principal | None:
        digest = _digest(key)
        found = None
        for expected, principal in self.entries:  # every entry is compared: the time does not depend on which
            if hmac.compare_digest(digest, expected):
                found = principal
        return found


@dataclass
class KeysFile:
    """``api.auth.keys_file``: read at start (errors are a ConfigError), then re-read when its status
    (modification time, size, inode) changes, looked at no more than every ``RECHECK_S`` seconds."""

    path: Path
    clock: Callable[[], float] = time.monotonic
    _stamp: tuple[int, int, int] | None = None
    _checked_at: float = field(default=float("-inf"))

    def read(self) -> KeyList:
        """The file's keys now; ConfigError naming the file and what is wrong."""
        self._stamp = _stamp(self.path)
        self._checked_at = self.clock()
        return _parse(self.path)

    def changed(self) -> bool:
        """Whether the file may hold other keys than at the last read (at most one stat per RECHECK_S)."""
        now = self.clock()
        if now - self._checked_at < RECHECK_S:
            return False
        self._checked_at = now
        return _stamp(self.path) != self._stamp


class ApiKeys:
    """The built-in authenticator: ``api.auth.api_keys`` (users), ``admin_keys``, ``tenants`` and the
    same three from ``keys_file``, which is followed while serving."""

    def __init__(self, settings: AuthSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = KeyList(api_keys=settings.api_keys, admin_keys=settings.admin_keys,
                                 chain_keys=settings.chain_keys, tenants=settings.tenants)
        self._file = KeysFile(Path(settings.keys_file), clock) if settings.keys_file else None
        if self._file is not None and not self._file.path.is_file():
            raise ConfigError(f"api.auth.keys_file {self._file.path} is not a file", code=ErrorCode.SETTINGS_INVALID)
        self._table = _Table.build([self._settings, *([self._file.read()] if self._file else [])])

    @property
    def configured(self) -> bool:
        return bool(self._table.entries) or self._file is not None

    def __call__(self, request: Request) -> Principal | None:
        key = presented_key(request)
        if key is None:
            return None
        self._follow_file()
        return self._table.find(key)

    def _follow_file(self) -> None:
        """Take the keys file's new content; an unreadable or invalid file keeps the keys in use (a file
        being rewritten in place may be seen half written) and says why in the log; a removed file
        revokes every key it held."""
        if self._file is None or not self._file.changed():
            return
        try:
            self._table = _Table.build([self._settings, self._file.read()])
        except ConfigError as exc:
            logger.error("api.auth.keys_file: keeping the keys in use: %s", exc.message)
            return
        logger.info("api.auth.keys_file %s re-read: %d keys in use", self._file.path, len(self._table.entries))


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    except OSError:
        return (-1, -1, -1)  # unreadable now: read() says why
    return (status.st_mtime_ns, status.st_size, status.st_ino)


def _parse(path: Path) -> KeyList:
    """The keys of a keys file; a missing file holds none (removing it revokes its keys)."""
    where = f"api.auth.keys_file {path}"
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_KEYS_FILE_BYTES + 1)
    except FileNotFoundError:
        return KeyList()
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read: {exc.strerror}", code=ErrorCode.SETTINGS_INVALID) from None
    if len(raw) > MAX_KEYS_FILE_BYTES:
        raise ConfigError(f"{where} is larger than {MAX_KEYS_FILE_BYTES} bytes", code=ErrorCode.SETTINGS_INVALID)
    try:
        data: Any = yaml.safe_load(raw.decode("utf-8")) if raw.strip() else {}
        return KeyList.model_validate(data if data is not None else {})
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where} is not YAML or JSON: {str(exc).splitlines()[0][:200]}",
                          code=ErrorCode.SETTINGS_INVALID) from None
    except ValidationError as exc:
        problems = "; ".join(f"{_field(e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        raise ConfigError(f"{where} must be a mapping of api_keys, admin_keys (lists of keys) and tenants "
                          f"(name -> list of keys): {problems}", code=ErrorCode.SETTINGS_INVALID) from None


def _field(loc: tuple[Any, ...]) -> str:
    """Where a keys file is wrong, without quoting what it holds (it may be a file that holds other secrets)."""
    if not loc:
        return "(top)"
    return str(loc[0]) if loc[0] in KeyList.model_fields else \
        "a field other than api_keys, admin_keys, chain_keys, tenants"


def _check_tenant(name: str) -> None:
    if not isinstance(name, str) or not TENANT_NAME.fullmatch(name):
        raise ConfigError(f"api.auth.tenants: tenant name {str(name)[:40]!r} must be 1 to 100 letters, digits, "
                          "'_', '.' or '-', starting with a letter or digit", code=ErrorCode.SETTINGS_INVALID)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _check_key(key: str) -> str:
    if len(key) < MIN_KEY_CHARS or key != key.strip():
        raise ConfigError(f"api.auth keys must be at least {MIN_KEY_CHARS} characters without surrounding spaces "
                          f"(one is {len(key)} characters); generate one with: python -c \"import secrets; "
                          "print(secrets.token_urlsafe(32))\"", code=ErrorCode.SETTINGS_INVALID)
    return key


def authenticator_for(settings: AuthSettings, host: str, custom: Authenticate | None) -> Authenticate | None:
    """The authenticator serving on ``host`` uses, or None when authentication is off.

    ``mode`` off: none. ``on``: always. ``auto``: when keys or a custom authenticator are given, or
    the server listens beyond loopback. On with nothing to authenticate with is a ConfigError that
    says what to set.
    """
    if settings.mode == "off":
        return None
    keys = ApiKeys(settings)
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
