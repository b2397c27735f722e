"""Packs: YAML files whose top-level keys are ce_* table names (plus optional ``settings:``).

A pack's ``settings:`` block is stored as ce_config rows of type ``EngineSettings`` (key =
dotted path, value = JSON), so importing a pack into a database and exporting it again
gives back the same pack.

Reading a pack file is bounded before anything is built: at most :data:`MAX_PACK_BYTES` bytes,
:data:`MAX_ALIASES` aliases, :data:`MAX_DEPTH` levels of nesting and :data:`MAX_EXPANDED_NODES`
values once aliases are expanded (what a "billion laughs" pack of nested aliases would blow up
to), each refused with ``PACK_INVALID`` naming the limit. :func:`redact_pack` hides the secrets
of an exported pack (see :mod:`convengine.security.redact`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from convengine.catalog.ce_config import SETTINGS_CONFIG_TYPE
from convengine.catalog.errors import PackError
from convengine.config_loader.build import flatten_settings, settings_from_config_rows
from convengine.db.generations import UNSUPPORTED_PREFIXES, unsupported_warning
from convengine.db.models import CONTROL_TABLES
from convengine.security.redact import mask_setting, redact_text

SETTINGS_KEY = "settings"
MAX_PACK_BYTES = 8 * 1024 * 1024
MAX_ALIASES = 1_000
MAX_DEPTH = 64
MAX_EXPANDED_NODES = 1_000_000


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that counts aliases and nesting while it composes the document."""

    def __init__(self, stream: str, origin: str) -> None:
        super().__init__(stream)
        self.origin, self.depth, self.aliases = origin, 0, 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            _limit(self.aliases > MAX_ALIASES, self.origin, f"more than {MAX_ALIASES} aliases (*name)")
        self.depth += 1
        _limit(self.depth > MAX_DEPTH, self.origin, f"nests deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _limit(exceeded: bool, origin: str, what: str) -> None:
    if exceeded:
        raise PackError(f"{origin} is refused: it {what} (packs are bounded so that loading one stays fast "
                        "and small)")


def _expanded_size(node: yaml.Node, origin: str, memo: dict[int, int], path: tuple[int, ...] = ()) -> int:
    """How many values ``node`` stands for once every alias is expanded (shared nodes counted per use)."""
    key = id(node)
    if key in memo:
        return memo[key]
    _limit(key in path, origin, "has a recursive alias (an alias inside the node it refers to)")
    _limit(len(path) >= MAX_DEPTH, origin, f"nests deeper than {MAX_DEPTH} levels once aliases are expanded")
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [item for pair in node.value for item in pair]
    size = 1
    for child in children:
        size += _expanded_size(child, origin, memo, (*path, key))
        _limit(size > MAX_EXPANDED_NODES, origin, f"expands to more than {MAX_EXPANDED_NODES} values "
                                                  "through its aliases")
    memo[key] = size
    return size


def load_yaml(text: str, origin: str) -> Any:
    """One YAML document, safely and within the limits above.

    Raises:
        PackError: ``PACK_INVALID`` for invalid YAML or a document over a limit (named).
    """
    _limit(len(text) > MAX_PACK_BYTES, origin, f"is larger than {MAX_PACK_BYTES} bytes")
    try:
        loader = _BoundedLoader(text, origin)
    except yaml.YAMLError as exc:
        raise PackError(f"{origin} is not valid YAML: {exc}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, origin, {})
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise PackError(f"{origin} is not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def read_pack(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Read a pack from a path, YAML text or an already-parsed mapping.

    Raises:
        PackError: the file is missing, is not YAML, or is not a mapping of tables.
    """
    if isinstance(source, Mapping):
        data: Any = dict(source)
        origin = "pack"
    elif not isinstance(source, (str, Path)):
        raise PackError(f"a pack must be a mapping of table name -> rows or a file path, got {type(source).__name__}")
    else:
        path = Path(source)
        if not path.is_file():
            raise PackError(f"pack file not found: {path}")
        origin = str(path)
        _limit(path.stat().st_size > MAX_PACK_BYTES, origin, f"is larger than {MAX_PACK_BYTES} bytes")
        try:
            data = load_yaml(path.read_text(encoding="utf-8"), origin)
        except UnicodeDecodeError as exc:
            raise PackError(f"{origin} is not UTF-8 text: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise PackError(f"{origin}: a pack must be a mapping of table name -> rows, got {type(data).__name__}")
    unknown = [k for k in data if k != SETTINGS_KEY and k not in CONTROL_TABLES and not _unsupported(k)]
    if unknown:
        raise PackError(
            f"{origin}: unknown top-level key(s) {', '.join(map(str, unknown))}; "
            f"expected table names ({', '.join(CONTROL_TABLES)}) or 'settings'"
        )
    settings = data.get(SETTINGS_KEY)
    if settings is not None and not isinstance(settings, Mapping):
        raise PackError(f"{origin}: 'settings' must be a mapping")
    return dict(data)


def _unsupported(key: object) -> bool:
    return isinstance(key, str) and key.startswith(UNSUPPORTED_PREFIXES)


def unsupported_in_pack(pack: Mapping[str, Any]) -> str | None:
    """A warning naming the pack's ConvEngine tables convengine leaves out (None when there are none)."""
    tables = {k: len(v) if isinstance(v, list) else 0 for k, v in pack.items() if _unsupported(k)}
    return unsupported_warning(tables, where="the pack")


def pack_tables(pack: Mapping[str, Any]) -> dict[str, Any]:
    """The pack's rows per table, with ``settings:`` turned into ce_config rows (a table that is not a
    list is passed on as it is, for the row checks to report)."""
    tables = {t: list(pack.get(t) or []) if isinstance(pack.get(t), list) else pack.get(t)
              for t in CONTROL_TABLES if t in pack}
    settings = pack.get(SETTINGS_KEY) or {}
    if settings:
        config = list(tables.get("ce_config") or [])
        for key, value in flatten_settings(settings).items():
            config.append({"config_type": SETTINGS_CONFIG_TYPE, "config_key": key,
                           "config_value": json.dumps(value), "enabled": True})
        tables["ce_config"] = config
    return tables


def rows_to_pack(tables: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Database rows (per table, in id order) -> a pack mapping, settings folded back."""
    pack: dict[str, Any] = {}
    config_rows = tables.get("ce_config", [])
    settings_rows = [r for r in config_rows if str(r.get("config_type", "")).upper() == SETTINGS_CONFIG_TYPE.upper()]
    if settings_rows:
        nested, _ = settings_from_config_rows(_RowView(r) for r in settings_rows)
        pack[SETTINGS_KEY] = nested
    for table in CONTROL_TABLES:
        rows = tables.get(table, [])
        if table == "ce_config":
            rows = [r for r in rows if r not in settings_rows]
        if rows:
            pack[table] = [_clean(r) for r in rows]
    return pack


class _RowView:
    def __init__(self, row: Mapping[str, Any]) -> None:
        self.config_type = row.get("config_type") or ""
        self.config_key = row.get("config_key") or ""
        self.config_value = row.get("config_value")
        self.enabled = bool(row.get("enabled", True))
        self.row_id = row.get("config_id")


def _clean(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key == "created_at" or value is None:
            continue
        if isinstance(value, Decimal):
            value = float(value)
        out[key] = value
    return out


def redact_pack(pack: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """A copy of ``pack`` with its secrets masked as ``***``, and how many values were masked.

    Secret settings (database URLs' passwords, API keys, sensitive MCP headers and env...) are
    masked unless they are ``${env:NAME}`` references; every other string loses what looks like
    a secret (URL passwords, ``Bearer`` tokens, ``password=`` values, known secret values).
    """
    changed = [0]
    out: dict[str, Any] = {}
    for key, value in pack.items():
        if key == SETTINGS_KEY and isinstance(value, Mapping):
            out[key] = _masked_settings(value, changed)
        else:
            out[key] = _masked_strings(value, changed)
    return out, changed[0]


def _masked_settings(settings: Mapping[str, Any], changed: list[int], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in settings.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out[key] = _masked_settings(value, changed, path)
        elif isinstance(value, list):
            out[key] = [_masked_leaf(path, item, changed) for item in value]
        else:
            out[key] = _masked_leaf(path, value, changed)
    return out


def _masked_leaf(path: str, value: object, changed: list[int]) -> Any:
    masked = mask_setting(path, value)
    masked = redact_text(masked) if isinstance(masked, str) else masked
    changed[0] += masked != value
    return masked


def _masked_strings(value: object, changed: list[int]) -> Any:
    if isinstance(value, str):
        masked = redact_text(value)
        changed[0] += masked != value
        return masked
    if isinstance(value, Mapping):
        return {key: _masked_strings(item, changed) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked_strings(item, changed) for item in value]
    return value


class _PackDumper(yaml.SafeDumper):
    """Safe YAML that keeps every string exact (Unicode line breaks are escaped, not folded)."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if any(ch in value for ch in "\x85\u2028\u2029"):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    return dumper.represent_str(value)


_PackDumper.add_representer(str, _represent_str)


def dump_pack(pack: Mapping[str, Any]) -> str:
    """YAML text for a pack (tables in pack order, columns as stored)."""
    return yaml.dump(dict(pack), Dumper=_PackDumper, sort_keys=False, allow_unicode=True, width=100)
