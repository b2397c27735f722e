"""Which Host headers the API answers (against DNS rebinding), and what counts as loopback."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from convengine.catalog.errors import ConfigError, ErrorCode

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_HOST_HEADER = re.compile(r"(?:\[(?P<ipv6>[0-9a-fA-F:.]+)\]|(?P<name>[A-Za-z0-9.\-_]+))(?::\d{1,5})?")
_PATTERN = re.compile(r"\*|(?:\*\.)?[a-z0-9.\-_]+|[0-9a-f:.]+")


def is_loopback(host: str) -> bool:
    """Whether a listening interface (``--host``) is reachable from this machine only."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def allowed_hosts(configured: Sequence[str], listen_host: str) -> tuple[str, ...] | None:
    """Host patterns to answer (``name``, ``*.domain``), or None for any host.

    Empty ``configured``: the loopback names when listening on loopback, any host otherwise.
    """
    patterns = tuple(_pattern(h) for h in configured)
    if "*" in patterns:
        return None
    if patterns:
        return patterns
    return LOOPBACK_NAMES if is_loopback(listen_host) else None


def _pattern(host: str) -> str:
    value = host.strip().strip("[]").lower()
    if not _PATTERN.fullmatch(value):
        raise ConfigError(f"api.trusted_hosts: {host!r} is not a host name, an IP address, '*.domain' or '*'",
                          code=ErrorCode.SETTINGS_INVALID)
    return value


def host_name(header: str | None) -> str | None:
    """The host of a Host header without its port (lower case), or None when it is malformed."""
    match = _HOST_HEADER.fullmatch(header or "")
    if match is None:
        return None
    return (match["ipv6"] or match["name"]).lower()


def host_allowed(header: str | None, patterns: tuple[str, ...] | None) -> bool:
    if patterns is None:
        return True
    name = host_name(header)
    return name is not None and any(name == p or (p.startswith("*.") and name.endswith(p[1:])) for p in patterns)
