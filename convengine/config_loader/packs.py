"""Packs: YAML files whose top-level keys are ce_* table names (plus optional ``settings:``).

A pack's ``settings:`` block is stored as ce_config rows of type ``EngineSettings`` (key =
dotted path, value = JSON), so importing a pack into a database and exporting it again
gives back the same pack.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from convengine.config_loader.build import flatten_settings, settings_from_config_rows
from convengine.config_loader.snapshot import SETTINGS_CONFIG_TYPE
from convengine.db.models import CONTROL_TABLES
from convengine.errors import PackError

SETTINGS_KEY = "settings"


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
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise PackError(f"{origin} is not valid YAML: {exc}") from None
        except UnicodeDecodeError as exc:
            raise PackError(f"{origin} is not UTF-8 text: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise PackError(f"{origin}: a pack must be a mapping of table name -> rows, got {type(data).__name__}")
    unknown = [k for k in data if k != SETTINGS_KEY and k not in CONTROL_TABLES]
    if unknown:
        raise PackError(
            f"{origin}: unknown top-level key(s) {', '.join(map(str, unknown))}; "
            f"expected table names ({', '.join(CONTROL_TABLES)}) or 'settings'"
        )
    settings = data.get(SETTINGS_KEY)
    if settings is not None and not isinstance(settings, Mapping):
        raise PackError(f"{origin}: 'settings' must be a mapping")
    return dict(data)


def pack_tables(pack: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The pack's rows per table, with ``settings:`` turned into ce_config rows."""
    tables = {t: list(pack.get(t) or []) if isinstance(pack.get(t), list) else pack.get(t)
              for t in CONTROL_TABLES if t in pack}
    settings = pack.get(SETTINGS_KEY) or {}
    if settings:
        config = list(tables.get("ce_config") or [])
        for key, value in flatten_settings(settings).items():
            config.append({"config_type": SETTINGS_CONFIG_TYPE, "config_key": key,
                           "config_value": json.dumps(value), "enabled": True})
        tables["ce_config"] = config
    return tables  # type: ignore[return-value]


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
