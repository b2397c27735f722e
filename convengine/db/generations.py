"""Bring ``ce_*`` tables built by any ConvEngine release since 2.0.0 to the current columns.

ConvEngine changed its DDL between releases without migrations: 2.0.5 replaced the
per-entry conversation history (``entry_type``/``role``/``stage``/``content_text``) by one row
per turn (``user_input``/``assistant_output``); 2.0.7 added ``ce_intent_classifier.state_code``
and ``ce_mcp_planner``; 2.0.9 added the prompt templates' interaction columns and
``ce_verbose``; 2.0.1x renamed ``ce_prompt_template.response_type`` to ``output_format`` and
added ``ce_output_schema.schema_type``. Its DDL also declares NOT NULL on columns convengine
lets a pack leave empty (e.g. a rule's ``intent_code``).

:func:`bring_to_current` inspects what exists and changes only what differs, so it is safe on a
database of any generation (and on one already current); :func:`schema_gaps` names what is still
missing, for a clear error where an old schema is used without ``convengine db upgrade``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine.interfaces import ReflectedColumn

from convengine.catalog.ce_config import SETTINGS_CONFIG_TYPE
from convengine.catalog.errors import ConfigError, ErrorCode
from convengine.db.models import CONTROL_MODELS, Base, CeConversationHistory

HISTORY = "ce_conversation_history"
LEGACY_HISTORY = "ce_conversation_history_legacy"
"""Pre-2.0.5 history rows are kept here, unchanged, after they are converted."""
USER_ENTRY_TYPES = frozenset({"USER_INPUT"})
_FILLED = "convengine always fills it but declares it nullable; keeping the NOT NULL is harmless"
RELAXED_COLUMNS: dict[str, str] = {
    "ce_config.config_value": "a ce_config row may be written without a value (a setting left to its default)",
    "ce_container_config.page_id": "a container row may name only the input param it fills",
    "ce_container_config.section_id": "a container row may name only the input param it fills",
    "ce_container_config.container_id": "a container row may name only the input param it fills",
    "ce_llm_call_log.conversation_id": _FILLED,
    "ce_llm_call_log.provider": _FILLED,
    "ce_llm_call_log.model": "a scripted or custom model may have no model name",
    "ce_llm_call_log.prompt_text": _FILLED,
    "ce_llm_call_log.user_context": _FILLED + " (it holds the call site)",
    "ce_llm_call_log.success": _FILLED,
    "ce_mcp_tool.tool_group": "a blank tool group means DB",
    "ce_pending_action.intent_code": "a blank scope means any intent",
    "ce_pending_action.state_code": "a blank scope means any state",
    "ce_prompt_template.intent_code": "a blank scope means any intent",
    "ce_prompt_template.state_code": "a blank scope means any state",
    "ce_prompt_template.system_prompt": "a template may have only a user prompt",
    "ce_prompt_template.user_prompt": "a template may have only a system prompt",
    "ce_response.intent_code": "a blank scope means any intent",
    "ce_rule.intent_code": "a blank scope means any intent (ANY)",
    "ce_rule.state_code": "a blank scope means any state (ANY)",
    "ce_audit.payload_json": "an audit event may carry no payload (convengine writes its events to "
                             "ce_audit_turn; ce_audit keeps ConvEngine's rows)",
}
"""Each NOT NULL of ConvEngine's DDL that ``db upgrade`` drops, and why convengine may write a row
without that value (also in docs/deployment.md). A column convengine does not know is relaxed too,
because convengine's inserts never name it."""
KEEP_CONSTRAINTS = "keep_convengine_constraints"
"""The Alembic config attribute that asks :func:`bring_to_current` to keep ConvEngine's NOT NULLs."""
USER_ROLES = frozenset({"USER"})


def schema_gaps(connection: sa.Connection) -> list[str]:
    """``table.column`` for every column of an existing ``ce_*`` table that the engine needs and
    the database lacks (empty when the schema is current)."""
    inspector = sa.inspect(connection)
    gaps: list[str] = []
    for table in Base.metadata.sorted_tables:
        if not inspector.has_table(table.name):
            gaps.append(table.name)
            continue
        present = {c["name"] for c in inspector.get_columns(table.name)}
        gaps.extend(f"{table.name}.{c.name}" for c in table.columns if c.name not in present)
    return gaps


def require_current(engine: sa.Engine) -> None:
    """Raise a :class:`ConfigError` (``SCHEMA_OUTDATED``) naming every missing table and column
    and the command that adds them; nothing when the schema is current."""
    with engine.connect() as connection:
        gaps = schema_gaps(connection)
    if gaps:
        shown = ", ".join(gaps[:12]) + (f" and {len(gaps) - 12} more" if len(gaps) > 12 else "")
        raise ConfigError(f"the database's ce_* tables are older than this convengine: missing {shown}; "
                          "run `convengine db upgrade --url <database url>` to bring them up to date",
                          code=ErrorCode.SCHEMA_OUTDATED, details={"missing": gaps})


def bring_to_current(connection: sa.Connection, *, relax: bool = True) -> list[str]:
    """Upgrade every existing ``ce_*`` table to the current columns; the changes made, in words.

    ``relax=False`` keeps ConvEngine's NOT NULL constraints (for a Java ConvEngine still sharing the
    database): rows convengine would leave empty there are then refused by the database."""
    changes: list[str] = []
    changes += _rename_response_type(connection)
    changes += _convert_legacy_history(connection)
    for table in Base.metadata.sorted_tables:
        if sa.inspect(connection).has_table(table.name):
            changes += _align_table(connection, table, relax=relax)
    return changes


_OWN_WITHOUT_MODEL = ("ce_knowledge_fts",)
"""convengine's own tables that have no model: SQLite's full-text index of knowledge passages (0006)."""
UNSUPPORTED_PREFIXES = ("ce_semantic_",)
"""ConvEngine's tables convengine does not implement (its semantic-query tables): a pack naming
them is read with a warning, their rows left out."""


def unsupported_tables(connection: sa.Connection) -> dict[str, int]:
    """ConvEngine's ``ce_*`` tables this database holds that convengine neither uses nor exports,
    with their row counts (the pre-2.0.5 history kept by an upgrade is not one of them)."""
    known = set(Base.metadata.tables) | {LEGACY_HISTORY}
    found: dict[str, int] = {}
    for name in sorted(sa.inspect(connection).get_table_names()):
        if name.startswith("ce_") and name not in known and not name.startswith(_OWN_WITHOUT_MODEL):
            found[name] = connection.execute(sa.select(sa.func.count()).select_from(sa.table(name))).scalar_one()
    return found


def unsupported_warning(tables: dict[str, int], *, where: str) -> str | None:
    """One warning naming every unsupported table and its rows; None when there is none."""
    if not tables:
        return None
    listed = ", ".join(f"{name} ({count} row{'s' if count != 1 else ''})" for name, count in tables.items())
    return (f"{where} holds ConvEngine tables convengine does not support, so their rows are not used nor "
            f"exported: {listed}")


def relax_constraints(connection: sa.Connection) -> list[str]:
    """Drop the NOT NULLs :data:`RELAXED_COLUMNS` lists (and those of columns convengine does not
    know) wherever they are still declared; nothing on a database that has none."""
    changes: list[str] = []
    for table in Base.metadata.sorted_tables:
        if sa.inspect(connection).has_table(table.name):
            changes += _relax_table(connection, table, _columns(connection, table.name), relax=True)
    return changes


def holds_foreign_configuration(connection: sa.Connection, version_table: str) -> bool:
    """Whether control rows exist that no convengine migration has seen: a ConvEngine database
    being adopted (its first ``db upgrade``)."""
    inspector = sa.inspect(connection)
    if inspector.has_table(version_table):
        return False
    for table in CONTROL_MODELS:
        name = table.__tablename__
        if inspector.has_table(name) and connection.execute(
                sa.select(sa.literal(1)).select_from(sa.table(name)).limit(1)).first() is not None:
            return True
    return False


def render_like_convengine(connection: sa.Connection) -> list[str]:
    """Record ``template_strict: false`` for an adopted ConvEngine configuration (unless the
    configuration already sets it): a null variable renders empty there, as ConvEngine did."""
    config = sa.table("ce_config", *(sa.column(c) for c in (
        "config_id", "config_type", "config_key", "config_value", "enabled")))
    setting = "template_strict"
    found = connection.execute(sa.select(config.c.config_id).where(
        config.c.config_type == SETTINGS_CONFIG_TYPE, config.c.config_key == setting)).first()
    if found is not None:
        return []
    next_id = (connection.execute(sa.select(sa.func.max(config.c.config_id))).scalar() or 0) + 1
    connection.execute(sa.insert(config).values(config_id=next_id, config_type=SETTINGS_CONFIG_TYPE,
                                                config_key=setting, config_value="false", enabled=True))
    return [(f"ce_config[{next_id}]: {SETTINGS_CONFIG_TYPE} {setting} = false (templates render a null "
             "variable empty, as ConvEngine did; set it to true for strict rendering)")]


def _columns(connection: sa.Connection, table: str) -> dict[str, ReflectedColumn]:
    return {c["name"]: c for c in sa.inspect(connection).get_columns(table)}


def _rename_response_type(connection: sa.Connection) -> list[str]:
    """ConvEngine before 2.0.1x called the prompt templates' output format ``response_type``."""
    table = "ce_prompt_template"
    if not sa.inspect(connection).has_table(table):
        return []
    columns = _columns(connection, table)
    if "response_type" not in columns:
        return []
    if "output_format" not in columns:
        connection.exec_driver_sql(f"ALTER TABLE {table} RENAME COLUMN response_type TO output_format")
        return [f"{table}.response_type renamed to output_format"]
    connection.exec_driver_sql(f"UPDATE {table} SET output_format = response_type WHERE output_format IS NULL")
    return [f"{table}.response_type copied into output_format where it was empty"]


def _convert_legacy_history(connection: sa.Connection) -> list[str]:
    """Pre-2.0.5 history (one row per entry) becomes one row per turn; the old table is kept."""
    inspector = sa.inspect(connection)
    if not inspector.has_table(HISTORY):
        return []
    columns = _columns(connection, HISTORY)
    if "entry_type" not in columns or "user_input" in columns:
        return []
    if inspector.has_table(LEGACY_HISTORY):
        raise ConfigError(f"{HISTORY} has ConvEngine's pre-2.0.5 columns and {LEGACY_HISTORY} already "
                          "exists: rename or drop one of them, then upgrade again", code=ErrorCode.SCHEMA_OUTDATED)
    _drop_history_indexes(connection)
    connection.exec_driver_sql(f"ALTER TABLE {HISTORY} RENAME TO {LEGACY_HISTORY}")
    CeConversationHistory.__table__.create(connection)
    turns = list(_paired_turns(connection))
    if turns:
        connection.execute(CeConversationHistory.__table__.insert(), turns)
    return [(f"{HISTORY}: {len(turns)} turns converted from ConvEngine's pre-2.0.5 entries "
            f"(the entries are kept in {LEGACY_HISTORY})")]


def _drop_history_indexes(connection: sa.Connection) -> None:
    """Index names are per schema: the old table's would collide with the new table's."""
    new_names = {index.name for index in CeConversationHistory.__table__.indexes}
    for index in sa.inspect(connection).get_indexes(HISTORY):
        if index["name"] in new_names:
            connection.exec_driver_sql(f'DROP INDEX "{index["name"]}"')


def _paired_turns(connection: sa.Connection) -> Iterator[dict[str, Any]]:
    """A user entry and the next assistant entry of the same conversation make one turn."""
    legacy = sa.table(LEGACY_HISTORY, *(sa.column(c) for c in (
        "history_id", "conversation_id", "entry_type", "role", "content_text", "payload_json", "created_at")))
    rows = connection.execute(sa.select(
        legacy.c.conversation_id, legacy.c.entry_type, legacy.c.role, legacy.c.content_text,
        sa.cast(legacy.c.payload_json, sa.Text).label("payload"), legacy.c.created_at,
    ).order_by(legacy.c.conversation_id, legacy.c.created_at, legacy.c.history_id))
    pending: sa.Row[Any] | None = None
    for row in rows:
        if _is_user(row):
            pending = row
        elif pending is not None and pending.conversation_id == row.conversation_id:
            yield {"conversation_id": str(row.conversation_id), "user_input": _text(pending) or "",
                   "assistant_output": row.content_text if row.content_text else row.payload,
                   "created_at": _when(pending.created_at), "modified_at": _when(row.created_at)}
            pending = None


def _when(value: object) -> datetime:
    """A stored time as an aware datetime: drivers return datetimes, ISO text or epoch numbers."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            value = None
    elif isinstance(value, int | float):
        value = datetime.fromtimestamp(value / 1000 if value > 1e11 else value, UTC)
    if not isinstance(value, datetime):
        return datetime.now(UTC)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _is_user(row: sa.Row[Any]) -> bool:
    return (row.entry_type or "").upper() in USER_ENTRY_TYPES or (row.role or "").upper() in USER_ROLES


def _text(row: sa.Row[Any]) -> str | None:
    return row.content_text if row.content_text else row.payload


def _align_table(connection: sa.Connection, table: sa.Table, *, relax: bool) -> list[str]:
    """Add the columns the table lacks; drop NOT NULL where the engine may write nothing."""
    columns = _columns(connection, table.name)
    changes = [_add_column(connection, table.name, column) for column in table.columns
               if column.name not in columns]
    return changes + _relax_table(connection, table, columns, relax=relax)


def _relax_table(connection: sa.Connection, table: sa.Table, columns: dict[str, ReflectedColumn], *,
                 relax: bool) -> list[str]:
    names = [name for name, info in columns.items() if _needs_relaxing(table, name, info)]
    if not names:
        return []
    why = "; ".join(f"{name}: {_why_relaxed(table.name, name)}" for name in names)
    if not relax:
        return [(f"{table.name}: NOT NULL kept on {', '.join(names)} (ConvEngine's constraints kept; a row "
                 f"convengine writes without them is refused. Otherwise: {why})")]
    _relax_not_null(connection, table.name, [(name, columns[name]["type"]) for name in names])
    return [f"{table.name}: NOT NULL dropped from {', '.join(names)} ({why})"]


def _why_relaxed(table: str, column: str) -> str:
    return RELAXED_COLUMNS.get(f"{table}.{column}", "a column convengine does not know: its inserts never name it")


def _add_column(connection: sa.Connection, table: str, column: sa.Column[Any]) -> str:
    default = column.server_default
    added = sa.Column(column.name, column.type, nullable=column.nullable or default is None,
                      server_default=sa.DefaultClause(default.arg) if isinstance(default, sa.DefaultClause) else None)
    Operations(MigrationContext.configure(connection)).add_column(table, added)
    return f"{table}.{column.name} added"


def _needs_relaxing(table: sa.Table, name: str, info: ReflectedColumn) -> bool:
    """A NOT NULL column with no default that the engine's own rows may leave empty."""
    if info.get("nullable", True) or info.get("default") is not None or info.get("autoincrement") is True:
        return False
    column = table.columns.get(name)
    if column is None:
        return True  # a column convengine never writes
    return bool(column.nullable) and not column.primary_key


def _relax_not_null(connection: sa.Connection, table: str, columns: list[tuple[str, Any]]) -> None:
    operations = Operations(MigrationContext.configure(connection))
    if connection.dialect.name == "postgresql":
        for name, type_ in columns:
            operations.alter_column(table, name, nullable=True, existing_type=type_)
        return
    # SQLite cannot alter a column: the table is rebuilt (foreign keys are off during the
    # migration, see convengine.db.migrate, so no cascade fires while the copy replaces it).
    with operations.batch_alter_table(table, recreate="always") as batch:
        for name, type_ in columns:
            batch.alter_column(name, nullable=True, existing_type=type_)
