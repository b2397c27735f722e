"""The conversation's slot schema: chosen while collecting, kept through confirmation and processing.

ConvEngine's usual layout scopes a slot schema (ce_output_schema plus its SCHEMA_JSON prompt) to the
collecting state and moves on to a confirmation and a processing state that have none; ConvEngine
keeps the schema it chose (its ``schema_id`` param) for those turns, so the confirmation can accept,
patch and re-check the collected slots. convengine keeps the same choice as the checkpointed,
conversation-scoped ``schema_scope`` ``{schema_id, intent, state}``: a state's own schema always wins
(and becomes the kept one); a state without one uses the kept schema while the intent is the one it
was chosen for. An intent change or a reset drops it (ConvEngine's ``schema_id`` outlived the intent
and applied one intent's schema to another).
"""

from __future__ import annotations

from typing import Any

from convengine.catalog import stages
from convengine.catalog import state as keys
from convengine.config.records import OutputSchemaRecord
from convengine.nodes.slot_schema import compute_facts, select_schema
from convengine.nodes.turn import Turn

SCOPE_KEY = "schema_scope"


def current_schema(turn: Turn) -> OutputSchemaRecord | None:
    """The state's own schema, else the one kept for the conversation's current intent."""
    own = select_schema(turn.snapshot, turn.intent, turn.state)
    if own is not None:
        return own
    scope: Any = turn.get(SCOPE_KEY)
    if not isinstance(scope, dict) or scope.get("intent") != turn.intent:
        return None
    return next((s for s in turn.snapshot.output_schemas
                 if s.enabled and s.schema_id == scope.get("schema_id") and s.intent_code == turn.intent), None)


def remember_schema(turn: Turn, record: OutputSchemaRecord) -> None:
    """Keep ``record`` for the conversation (when it was selected for the current intent)."""
    if record.intent_code != turn.intent:
        return
    scope: Any = turn.get(SCOPE_KEY)
    if isinstance(scope, dict) and scope.get("schema_id") == record.schema_id and scope.get("intent") == turn.intent:
        return
    turn.set(SCOPE_KEY, {"schema_id": record.schema_id, "intent": turn.intent, "state": turn.state})


def settle_schema_scope(turn: Turn) -> None:
    """At the end of a turn: a kept schema of another intent is dropped (the intent changed)."""
    scope: Any = turn.get(SCOPE_KEY)
    if isinstance(scope, dict) and scope.get("intent") != turn.intent:
        turn.set(SCOPE_KEY, None)
        turn.audit(stages.SCHEMA_SCOPE_CLEARED, {"schemaId": scope.get("schema_id"), "schemaIntent": scope.get("intent"),
                                            "intent": turn.intent, "reason": "INTENT_CHANGED"})


def adopt_schema(turn: Turn, schema_id: int) -> None:
    """Keep the schema a ConvEngine conversation was collecting (its ``schema_id`` param) when the row
    exists and belongs to the conversation's intent; any other id is ignored."""
    record = next((s for s in turn.snapshot.output_schemas if s.schema_id == schema_id and s.enabled), None)
    if record is not None and record.intent_code == turn.intent:
        turn.set(SCOPE_KEY, {"schema_id": schema_id, "intent": turn.intent, "state": record.state_code})


def finish_schema(turn: Turn, record: OutputSchemaRecord, *, audit: bool = True) -> dict[str, Any]:
    """Recompute facts, lock or unlock the intent, publish the facts as params and audit."""
    facts = compute_facts(record, turn.read_context())
    turn.set(keys.SCHEMA_FACTS, facts)
    remember_schema(turn, record)
    locked = not facts["complete"]
    turn.context["intent_lock"] = {"locked": locked, "reason": "SCHEMA_INCOMPLETE" if locked else None}
    turn.params.update(missing_fields=facts["missing"], missing_field_options=facts["options"],
                       schema_id=record.schema_id, schema_description=record.description,
                       schema_field_details=facts["field_details"], schema_complete=facts["complete"],
                       schema_has_any_value=facts["has_any"])
    if audit:
        turn.audit(stages.SCHEMA_STATUS, {
            "schemaComplete": facts["complete"], "hasAnySchemaValue": facts["has_any"],
            "missingRequiredFields": facts["missing"], "missingFieldOptions": facts["options"],
            "schemaId": record.schema_id, "intent": turn.intent, "state": turn.state, "intentLocked": locked,
            "intentLockReason": "SCHEMA_INCOMPLETE" if locked else None, "schemaJson": turn.schema_json()})
    return facts
