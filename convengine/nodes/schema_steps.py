"""add_container_data, schema_extraction and auto_advance."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from convengine.catalog import names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.catalog.errors import LlmNotConfiguredError
from convengine.catalog.vocab import ANY, POST_SCHEMA_EXTRACTION
from convengine.config.records import ContainerConfigRecord, OutputSchemaRecord
from convengine.nodes.common import Step, dig, run_rules
from convengine.nodes.extraction import extract
from convengine.nodes.schema_scope import current_schema, finish_schema
from convengine.nodes.slot_schema import compute_facts, meaningful, schema_dict
from convengine.nodes.turn import Turn

# --- context data (ce_container_config) --------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """What a context-data provider receives for one ce_container_config row."""

    row: ContainerConfigRecord
    input_value: Any
    conversation_id: str
    intent: str
    state: str
    params: dict[str, Any]


def container_rows(turn: Turn) -> list[ContainerConfigRecord]:
    """Rows for (intent, state), else (ANY, state), else (ANY, ANY), by priority."""
    rows = [c for c in turn.snapshot.containers if c.enabled]
    for intent, state in ((turn.intent, turn.state), (ANY, turn.state), (ANY, ANY)):
        chosen = [c for c in rows if c.intent_code == intent and c.state_code == state]
        if chosen:
            return sorted(chosen, key=lambda c: (c.priority, c.id))
    return []


def _provider(turn: Turn, row: ContainerConfigRecord) -> Any:
    providers = turn.ctx.services.registries.container_providers
    for key in (f"{row.page_id}:{row.section_id}:{row.container_id}", str(row.container_id),
                row.input_param_name, "*"):
        if key in providers:
            return providers[key]
    return None


async def add_container_data(turn: Turn) -> None:
    attached: dict[str, Any] = {}
    for row in container_rows(turn):
        provider = _provider(turn, row)
        name = row.input_param_name
        if provider is None:
            turn.audit(stages.CONTAINER_DATA_FAILED, {"containerId": row.container_id, "inputParamName": name,
                                                 "error": f"no context-data provider registered for container "
                                                          f"{row.page_id}:{row.section_id}:{row.container_id}"})
            continue
        try:
            attached[name] = await _fetch(turn, provider, row)
        except Exception as exc:  # noqa: BLE001 - context data never fails a turn
            turn.audit(stages.CONTAINER_DATA_FAILED, {"containerId": row.container_id, "inputParamName": name,
                                                 "errorType": type(exc).__name__, "error": str(exc)})
            continue
        turn.audit(stages.CONTAINER_DATA_EXECUTED, {"containerId": row.container_id, "inputParamName": name})
    if attached:
        turn.context.setdefault("container_data", {}).update(attached)
    turn.audit(stages.CONTAINER_DATA_ATTACHED, {"names": list(attached)})


async def _fetch(turn: Turn, provider: Callable[[ContainerRequest], object], row: ContainerConfigRecord) -> Any:
    value = turn.read_context().get(row.input_param_name)
    request = ContainerRequest(row, value if value is not None else turn.user_text, turn.conversation_id,
                               turn.intent, turn.state, dict(turn.read_params()))
    result = provider(request)
    return await result if inspect.isawaitable(result) else result


def _container_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    if container_rows(turn):
        return None
    return stages.CONTAINER_DATA_SKIPPED, {"intent": turn.intent, "state": turn.state, "reason": "NO_CONTAINER_CONFIG"}


# --- schema extraction --------------------------------------------------------------------


def _seed_from_params(turn: Turn, record: OutputSchemaRecord) -> list[str]:
    """Copy same-named, non-blank input params into missing context fields."""
    seeded: list[str] = []
    params = turn.read_params()
    for name in (schema_dict(record).get("properties") or {}):
        if not meaningful(turn.read_context().get(name)) and meaningful(params.get(name)):
            turn.context[name] = params[name]
            seeded.append(name)
    return seeded


async def schema_extraction(turn: Turn) -> None:
    record = current_schema(turn)
    if record is None:
        turn.context["intent_lock"] = {"locked": False, "reason": None}
        turn.audit(stages.SCHEMA_EXTRACTION_SKIPPED, {"reason": "NO_SCHEMA", "intent": turn.intent, "state": turn.state})
        return
    seeded = _seed_from_params(turn, record)
    if turn.read_params().get(pk.SKIP_SCHEMA_EXTRACTION):
        turn.audit(stages.SCHEMA_EXTRACTION_SKIPPED, {"reason": "CORRECTION_STEP", "schemaId": record.schema_id,
                                                 "routingDecision": turn.read_params().get(pk.ROUTING_DECISION)})
        finish_schema(turn, record)
        return
    if turn.ctx.services.llm is None:
        await _without_llm(turn, record, seeded)
        return

    await extract(turn, record)


async def _without_llm(turn: Turn, record: OutputSchemaRecord, seeded: list[str]) -> None:
    facts = compute_facts(record, turn.read_context())
    if not facts["complete"]:
        raise LlmNotConfiguredError(
            f"schema extraction needs an LLM: ce_output_schema[{record.schema_id}] applies to "
            f"{turn.intent}/{turn.state} and fields {', '.join(facts['missing'])} are missing "
            "(configure a chat model, or pass the fields as input params)",
            details={"callSite": "SCHEMA_EXTRACTION", "table": "ce_output_schema", "rowId": record.schema_id})
    turn.audit(stages.SCHEMA_EXTRACTION_SKIPPED, {"reason": "NO_LLM_CONFIGURED", "callSite": "SCHEMA_EXTRACTION",
                                             "schemaId": record.schema_id, "seeded": seeded, "schemaComplete": True})
    finish_schema(turn, record)
    if seeded:  # the schema was filled this turn (from params): its rules apply as after an extraction
        await run_rules(turn, POST_SCHEMA_EXTRACTION, "SchemaExtractionStep")


def _schema_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    locked = dig(turn.read_context(), "intent_lock", "locked")
    if locked or current_schema(turn) is not None:
        return None
    return stages.SCHEMA_EXTRACTION_SKIPPED, {"reason": "NO_SCHEMA", "intent": turn.intent, "state": turn.state}


async def auto_advance(turn: Turn) -> None:
    record = current_schema(turn)
    if record is None:
        turn.audit(stages.AUTO_ADVANCE_SKIPPED_NO_SCHEMA, {"intent": turn.intent, "state": turn.state})
        return
    facts = compute_facts(record, turn.read_context())
    turn.set(keys.SCHEMA_FACTS, facts)
    turn.params.update(schema_complete=facts["complete"], schema_has_any_value=facts["has_any"],
                       missing_fields=facts["missing"], missing_field_options=facts["options"])
    turn.audit(stages.AUTO_ADVANCE_FACTS, {"schemaComplete": facts["complete"], "hasAnySchemaValue": facts["has_any"],
                                      "missingRequiredFields": facts["missing"], "schemaId": record.schema_id})


def _auto_advance_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    if current_schema(turn) is not None:
        return None
    return stages.AUTO_ADVANCE_SKIPPED_NO_SCHEMA, {"intent": turn.intent, "state": turn.state, "reason": "NO_SCHEMA"}


STEPS = (
    Step(names.ADD_CONTAINER_DATA, add_container_data, skip=_container_skip),
    Step(names.SCHEMA_EXTRACTION, schema_extraction, skip=_schema_skip),
    Step(names.AUTO_ADVANCE, auto_advance, skip=_auto_advance_skip),
)
