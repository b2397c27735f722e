"""A JSON Schema of pack files, for editors (completion and checks while a pack is written).

Each control table's rows get a pydantic model built from the table's columns (the SQLAlchemy
models of :mod:`convengine.db.models`): one property per column with its type, the columns a row
must give as required, no other column. A pack is then ``settings:`` plus a list of rows per table.
The schema checks the shape only; :func:`convengine.validate_pack` checks the rest (vocabularies,
references between rows, templates). It is stricter than the loader on one point: numbers are
numbers and booleans booleans (the loader also takes ``"5"`` and ``"true"``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, create_model

from convengine.config_loader.packs import SETTINGS_KEY
from convengine.config_loader.rows import columns_of, is_required, kind_of
from convengine.db.models import CONTROL_TABLES

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FILE_NAME = "pack.schema.json"
"""Where the example packs expect it, next to them (``# yaml-language-server: $schema=pack.schema.json``)."""

_TYPES: dict[str, Any] = {"int": int, "bool": bool, "float": float, "json": Any, "datetime": datetime,
                          "text": str}
_JSON_DOC = "JSON: an object or list here, or the same as a JSON string"


def _field(column: sa.Column[Any]) -> tuple[Any, Any]:
    kind = kind_of(column)
    described = _JSON_DOC if kind == "json" else None
    if is_required(column):
        return _TYPES[kind], Field(description=described)
    return _TYPES[kind] | None, Field(None, description=described)


def row_model(table: str) -> type[BaseModel]:
    """The rows of ``table`` as a pydantic model: its columns, nothing else."""
    fields: dict[str, Any] = {name: _field(column) for name, column in columns_of(table).items()}
    config = ConfigDict(extra="forbid", title=f"{table} row")
    return create_model(f"Row_{table}", __config__=config, **fields)


def pack_model() -> type[BaseModel]:
    """A pack file: ``settings:`` and, per control table, a list of its rows."""
    fields: dict[str, Any] = {
        SETTINGS_KEY: (dict[str, Any] | None, Field(None, description=(
            "Engine settings, stored as ce_config rows of type EngineSettings (see the settings reference)"))),
    }
    for table in CONTROL_TABLES:
        rows: Any = list.__class_getitem__(row_model(table))  # list[<the table's row model>], built at run time
        fields[table] = (rows | None, Field(None, description=f"rows of {table}"))
    return create_model("Pack", __config__=ConfigDict(extra="forbid", title="convengine pack"), **fields)


def pack_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a pack file."""
    schema = pack_model().model_json_schema()
    return {"$schema": SCHEMA_DIALECT,
            "description": "A convengine pack: ce_* control-table rows and settings (convengine pack schema)",
            **schema}


def pack_schema_text() -> str:
    """:func:`pack_schema` as the text ``convengine pack schema`` writes (stable, for committing)."""
    return json.dumps(pack_schema(), indent=2, sort_keys=True) + "\n"
