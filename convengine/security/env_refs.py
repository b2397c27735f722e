"""``${env:NAME}`` in settings: secrets referenced from the environment instead of stored in packs.

Any string setting (a pack's ``settings:`` block, an ``EngineSettings`` ce_config row, keyword
settings) may contain ``${env:NAME}`` references, alone or inside a longer value
(``postgresql://reporter:${env:REPORTS_DB_PASSWORD}@db/reports``). They are resolved each time
settings are built; the rows keep the reference, so ``pack export`` writes the reference back,
never the value. A reference to a variable that is not set is a ``SETTINGS_INVALID`` error naming
the setting and the variable. Values read through a variable whose name looks sensitive
(``*_PASSWORD``, ``*_TOKEN``, ``*_KEY``...) are remembered as secrets and redacted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from convengine.errors import ConfigError, ErrorCode
from convengine.security.redact import ENV_REF, SENSITIVE_NAME, remember_secret


def resolve_env_refs(data: Any, path: str = "", environ: Mapping[str, str] | None = None) -> Any:
    """A copy of ``data`` (nested mappings, lists, strings) with every ``${env:NAME}`` replaced.

    Raises:
        ConfigError: ``SETTINGS_INVALID`` when a referenced variable is not set.
    """
    env = os.environ if environ is None else environ
    if isinstance(data, str):
        return ENV_REF.sub(lambda match: _value(match, path, env), data) if "${env:" in data else data
    if isinstance(data, Mapping):
        return {key: resolve_env_refs(value, f"{path}.{key}" if path else str(key), env)
                for key, value in data.items()}
    if isinstance(data, list):
        return [resolve_env_refs(item, path, env) for item in data]
    return data


def _value(match: re.Match[str], path: str, env: Mapping[str, str]) -> str:
    name = match.group(1)
    if name not in env:
        raise ConfigError(f"setting {path or '(top level)'} refers to ${{env:{name}}}, but the environment "
                          f"variable {name} is not set", code=ErrorCode.SETTINGS_INVALID)
    if SENSITIVE_NAME.search(name):
        remember_secret(env[name])
    return env[name]
