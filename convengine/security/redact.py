"""Secrets kept secret: one place that knows the secret values in effect and hides them in text.

Two kinds of knowledge:

* **known values** - passwords of configured database URLs (``database_url``, ``mcp.db.databases``,
  ``mcp.servers.*.url``, ``llm.base_url``), API keys (``api.auth.api_keys``/``admin_keys``/``tenants``
  and those of ``api.auth.keys_file``), STOMP
  passcodes, MCP server ``headers``/``env`` entries with sensitive names, values read through a
  sensitive ``${env:NAME}`` reference, and the auth values HTTP tools send. They are remembered
  when settings are built and when a tool runs (see :func:`remember_secret`).
* **patterns** - URL passwords (``scheme://user:PASSWORD@``), ``Bearer``/``Basic`` credentials,
  ``password=...``-style pairs and quoted ``"password": "..."`` fields.

:func:`redact_text` applies both; :func:`redact_value`, :func:`redact_error` and
:class:`RedactingFilter` apply it to structures, engine errors and log records.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from convengine.catalog.errors import ConvEngineError

MASK = "***"
MIN_SECRET_CHARS = 4
"""Shorter values are not remembered: hiding them everywhere would garble ordinary text."""
MAX_DYNAMIC_SECRETS = 1024
"""Values learnt at run time (tool auth) kept at most, the newest (a rotating token does not grow memory)."""

ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
SENSITIVE_NAME = re.compile(r"(?i)auth|token|secret|pass|pwd|key|cookie|credential|session|signature")

_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*:)"
                           r"(?P<secret>[^\s/@'\"]+)(?=@)")
_AUTH_SCHEME = re.compile(r"(?i)(?P<head>(?<![A-Za-z])(?:bearer|basic)\s+)"
                          r"(?P<secret>(?=[A-Za-z0-9\-._~+/]*[0-9\-._~+/])[A-Za-z0-9\-._~+/]{8,}=*)")
_KEYS = (r"password|passwd|pwd|secret|client[_-]?secret|api[_-]?key|access[_-]?token|refresh[_-]?token"
         r"|passcode")
_KEY_VALUE = re.compile(rf"(?i)(?P<head>\b(?:{_KEYS})\s*=\s*)(?P<secret>[^\s&;,'\"]+)")
_QUOTED_KEY = re.compile(rf"(?i)(?P<head>[\"'](?:{_KEYS}|x-api-key|authorization)[\"']\s*:\s*[\"'])"
                         r"(?P<secret>[^\"']+)")
_PATTERNS = (_URL_PASSWORD, _AUTH_SCHEME, _KEY_VALUE, _QUOTED_KEY)

URL, VALUE, NAMED = "url", "value", "named"
SECRET_SETTINGS: dict[str, str] = {
    "database_url": URL,
    "llm.base_url": URL,
    "mcp.db.databases.*": URL,
    "mcp.servers.*.url": URL,
    "api.auth.api_keys": VALUE,
    "api.auth.admin_keys": VALUE,
    "api.auth.tenants.*": VALUE,
    "transport.stomp.broker.*passcode": VALUE,
    "mcp.servers.*.headers.*": NAMED,
    "mcp.servers.*.env.*": NAMED,
}
"""Settings paths that hold secrets: a URL whose password is secret, a whole value, or a map entry
that is secret when its name looks sensitive (``Authorization``, ``API_KEY``...)."""


class _Secrets:
    """The secret values in effect (process-wide: every engine's, plus recent tool auth values)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._static: set[str] = set()
        self._dynamic: OrderedDict[str, None] = OrderedDict()
        self._pattern: re.Pattern[str] | None = None
        self._stale = False

    def add(self, value: str, *, dynamic: bool) -> None:
        variants = {v for v in _variants(value) if len(v) >= MIN_SECRET_CHARS}
        with self._lock:
            if dynamic:
                self._add_dynamic(variants)
            elif not variants <= self._static:
                self._static |= variants
                self._stale = True

    def _add_dynamic(self, variants: set[str]) -> None:
        for variant in variants - self._static:
            self._stale |= variant not in self._dynamic
            self._dynamic[variant] = None
            self._dynamic.move_to_end(variant)
        while len(self._dynamic) > MAX_DYNAMIC_SECRETS:
            self._dynamic.popitem(last=False)

    def pattern(self) -> re.Pattern[str] | None:
        with self._lock:
            if self._stale:
                values = sorted(self._static | set(self._dynamic), key=len, reverse=True)
                self._pattern = re.compile("|".join(map(re.escape, values))) if values else None
                self._stale = False
            return self._pattern


_SECRETS = _Secrets()


def _variants(value: str) -> set[str]:
    """The forms a secret takes in text: as given, trimmed, URL-encoded and escaped as in a repr."""
    trimmed = value.strip()
    return {value, trimmed, quote(trimmed, safe=""), repr(trimmed)[1:-1], unquote(trimmed)}


def remember_secret(value: object, *, dynamic: bool = False) -> None:
    """Hide ``value`` (and its trimmed, encoded and escaped forms) from now on; ``dynamic`` for
    values learnt at run time, of which only the newest :data:`MAX_DYNAMIC_SECRETS` are kept."""
    if isinstance(value, str) and not ENV_REF.fullmatch(value.strip()):
        _SECRETS.add(value, dynamic=dynamic)


def remember_url_password(url: object, *, dynamic: bool = False) -> None:
    """Hide the password of a URL (``scheme://user:password@host``), if it has one."""
    if not isinstance(url, str):
        return
    try:
        password = urlsplit(url.strip()).password
    except ValueError:
        return
    if password:
        remember_secret(password, dynamic=dynamic)


def redact_text(text: str) -> str:
    """``text`` with every known secret and every secret-looking pattern replaced by ``***``."""
    if not text:
        return text
    known = _SECRETS.pattern()
    if known is not None:
        text = known.sub(MASK, text)
    for pattern in _PATTERNS:
        text = pattern.sub(_masked, text)
    return text


def _masked(match: re.Match[str]) -> str:
    secret = match.group("secret")
    if secret == MASK or ENV_REF.fullmatch(secret):
        return match.group(0)
    return match.group("head") + MASK


def redact_value(value: object) -> Any:
    """A copy of a JSON-like structure with every string redacted (keys kept)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {key: redact_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(item) for item in value]
    return value


def scrub_chain(exc: BaseException) -> None:
    """Redact the string arguments of ``exc`` and of the exceptions it was raised from or during
    (what their messages and tracebacks show, for most exception types)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        clean = tuple(redact_text(a) if isinstance(a, str) else a for a in current.args)
        if clean != current.args and not isinstance(current, ConvEngineError):
            current.args = clean
        current = current.__cause__ or current.__context__


def redact_error(error: ConvEngineError) -> ConvEngineError:
    """The same error with its message and details redacted (changed in place, so ``is`` still holds)."""
    message = redact_text(error.message)
    if message != error.message:
        error.message = message
        error.args = (message,)
    error.details = redact_value(error.details)
    return error


# --- settings -----------------------------------------------------------------------------


def secret_kind(path: str) -> str | None:
    """:data:`URL` or :data:`VALUE` when the settings ``path`` (dotted, any key case) holds a secret."""
    normal = path.replace("-", "_").lower()
    for pattern, kind in SECRET_SETTINGS.items():
        if fnmatchcase(normal, pattern):
            if kind != NAMED:
                return kind
            return VALUE if SENSITIVE_NAME.search(path.rsplit(".", 1)[-1]) else None
    return None


def setting_leaves(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every leaf of a nested settings mapping; list items share the list's path."""
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            yield from setting_leaves(value, path)
        elif isinstance(value, (list, tuple)):
            yield from ((path, item) for item in value)
        else:
            yield path, value


def remember_settings_secrets(data: Mapping[str, Any]) -> None:
    """Remember the secrets of a settings mapping (``EngineSettings.model_dump()``) and make sure
    the ``convengine`` loggers redact."""
    for path, value in setting_leaves(data):
        kind = secret_kind(path)
        if kind == URL:
            remember_url_password(value)
        elif kind == VALUE:
            remember_secret(value)
    install_log_redaction()


def mask_setting(path: str, value: object) -> object:
    """The value to export for a settings leaf: secrets masked, ``${env:NAME}`` references kept."""
    kind = secret_kind(path)
    if not isinstance(value, str) or kind is None or ENV_REF.fullmatch(value.strip()):
        return value
    return _URL_PASSWORD.sub(_masked, value) if kind == URL else MASK


# --- logs ---------------------------------------------------------------------------------


class RedactingFilter(logging.Filter):
    """Redacts a record's message, arguments, traceback and stack (never drops the record)."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_text(record.msg)
        record.args = _redacted_args(record.args)
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


_LogArgs = tuple[object, ...] | Mapping[str, object]
"""What ``LogRecord.args`` holds (or None)."""


def _redacted_args(args: _LogArgs | None) -> _LogArgs | None:
    if isinstance(args, Mapping):
        return {key: _redacted_arg(value) for key, value in args.items()}
    if isinstance(args, tuple):
        return tuple(_redacted_arg(value) for value in args)
    return args


def _redacted_arg(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else str(value)
    clean = redact_text(text)
    return value if clean == text else clean


LOG_FILTER = RedactingFilter()


def install_log_redaction(root: str = "convengine") -> None:
    """Put :data:`LOG_FILTER` on the ``root`` logger and every one of its descendants that exists
    (a filter on a logger applies to the records logged on that very logger)."""
    names = [root, *(name for name in list(logging.root.manager.loggerDict) if name.startswith(root + "."))]
    for name in names:
        logger = logging.getLogger(name)
        if LOG_FILTER not in logger.filters:
            logger.addFilter(LOG_FILTER)
