"""``${env:NAME}`` in settings: secrets referenced from the environment instead of stored in packs.

Any string setting (a pack's ``settings:`` block, an ``EngineSettings`` ce_config row, keyword
settings) may contain ``${env:NAME}`` references, alone or inside a longer value
(``postgresql://reporter:${env:REPORTS_DB_PASSWORD}@db/reports``). They are resolved each time
settings are built; the rows keep the reference, so ``pack export`` writes the reference back,
never the value. A reference to a variable that is not set is a ``SETTINGS_INVALID`` error naming
the setting and the variable. Values read through a variable whose name looks sensitive
(``*_PASSWORD``, ``*_TOKEN``, ``*_KEY``...) are remembered as secrets and redacted.

A reference that comes from a pack (its ``settings:``, ``ce_config`` rows, a service node's config)
may only name a variable the operator allows in ``security.pack_env_names`` (names or glob
patterns, default ``PACK_*``): otherwise a pack could send any of the server's secrets to a host of
its choosing. The server's own variables (``CONVENGINE_*``, ``DATABASE_URL``, ``OPENAI_*``) match
no pattern; the operator may still list one of them by its exact name. The operator's own settings
(environment, keyword settings) may reference any variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from convengine.catalog.errors import ConfigError, ErrorCode
from convengine.security.redact import ENV_REF, SENSITIVE_NAME, remember_secret

PACK_ENV_SETTING = "security.pack_env_names"
PACK_ENV_VARIABLE = "CONVENGINE_SECURITY__PACK_ENV_NAMES"
DEFAULT_PACK_ENV_NAMES: tuple[str, ...] = ("PACK_*",)
# The server's own variables: no pattern reaches them (an exact name in the allow-list still does).
SERVER_VARIABLES: tuple[str, ...] = ("CONVENGINE_*", "DATABASE_URL", "OPENAI_*")


def pack_may_read(name: str, allowed: Sequence[str]) -> bool:
    """Whether a pack may reference the environment variable ``name`` under the allow-list ``allowed``."""
    if name in allowed:
        return True
    if any(fnmatchcase(name, pattern) for pattern in SERVER_VARIABLES):
        return False
    return any(fnmatchcase(name, pattern) for pattern in allowed)


def refused_reason(name: str) -> str:
    """Why a pack's ``${env:NAME}`` is refused, and what the operator changes to allow it."""
    return (f"${{env:{name}}} names an environment variable packs may not read; the operator allows it in "
            f"{PACK_ENV_SETTING} (the server's environment {PACK_ENV_VARIABLE} or keyword settings, never a pack)")


def refused_refs(data: object, path: str, allowed: Sequence[str]) -> Iterator[tuple[str, str]]:
    """``(path, variable)`` for each ``${env:NAME}`` in ``data`` that a pack may not reference."""
    if isinstance(data, str):
        yield from ((path, m.group(1)) for m in ENV_REF.finditer(data) if not pack_may_read(m.group(1), allowed))
    elif isinstance(data, Mapping):
        for key, value in data.items():
            yield from refused_refs(value, f"{path}.{key}" if path else str(key), allowed)
    elif isinstance(data, list):
        for item in data:
            yield from refused_refs(item, path, allowed)


def resolve_env_refs(data: object, path: str = "", environ: Mapping[str, str] | None = None,
                     allowed: Sequence[str] | None = None) -> Any:
    """A copy of ``data`` (nested mappings, lists, strings) with every ``${env:NAME}`` replaced.

    ``allowed`` is the allow-list of a pack's references (``None``: the operator's own, any variable).

    Raises:
        ConfigError: ``SETTINGS_INVALID`` when a referenced variable is not set or not allowed.
    """
    env = os.environ if environ is None else environ
    if isinstance(data, str):
        return ENV_REF.sub(lambda match: _value(match, path, env, allowed), data) if "${env:" in data else data
    if isinstance(data, Mapping):
        return {key: resolve_env_refs(value, f"{path}.{key}" if path else str(key), env, allowed)
                for key, value in data.items()}
    if isinstance(data, list):
        return [resolve_env_refs(item, path, env, allowed) for item in data]
    return data


def _value(match: re.Match[str], path: str, env: Mapping[str, str], allowed: Sequence[str] | None) -> str:
    name = match.group(1)
    if allowed is not None and not pack_may_read(name, allowed):
        raise ConfigError(f"the pack's setting {path or '(top level)'}: {refused_reason(name)}",
                          code=ErrorCode.SETTINGS_INVALID)
    if name not in env:
        raise ConfigError(f"setting {path or '(top level)'} refers to ${{env:{name}}}, but the environment "
                          f"variable {name} is not set", code=ErrorCode.SETTINGS_INVALID)
    if SENSITIVE_NAME.search(name):
        remember_secret(env[name])
    return env[name]
