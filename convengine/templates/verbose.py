"""ce_verbose: progress messages streamed while a turn runs (ConvEngine's VERBOSE events).

Every audit stage a step emits (``STEP_ENTER``, ``RULE_MATCH``, ``MCP_TOOL_CALL``...) is a
*determinant*; the ``ce_verbose`` rows eligible for the turn's intent and state are matched on it,
on the step (``step_match`` EXACT / REGEX / JSON_PATH against ``step_value``), the rule id and the
tool code, and the best-scoring row's message is rendered and streamed as a ``VERBOSE`` event. It
is never stored in ``ce_audit``. Rows written for ConvEngine name its Java classes
(``RulesStep``, ``IntentResolutionStep``, ``AgentIntentResolver``...): a step matches by its
ConvEngine class name and by its own name (``rules``), and the stages ConvEngine published from a
helper class also match that class.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from convengine.audit.collector import VERBOSE_STAGE
from convengine.catalog import params as pk
from convengine.catalog import stages
from convengine.config.records import VerboseRecord
from convengine.settings import EngineSettings
from convengine.templates.render import referenced_names, render_text
from convengine.templates.variables import TemplateSession, template_variables

logger = logging.getLogger(__name__)

EVENT_TYPE = "VERBOSE_PROGRESS"
ANY = "ANY"
STEP_ERROR = stages.STEP_ERROR

# convengine stage -> the other names ConvEngine published the same moment under.
DETERMINANT_ALIASES: dict[str, tuple[str, ...]] = {
    stages.INTENT_AGENT_LLM_INPUT: ("AGENT_INTENT_START",),
    stages.INTENT_AGENT_ACCEPTED: ("AGENT_INTENT_ACCEPTED",),
    stages.INTENT_AGENT_COLLISION: ("AGENT_INTENT_COLLISION",),
    stages.INTENT_AGENT_NEEDS_CLARIFICATION: ("AGENT_INTENT_NEEDS_CLARIFICATION",),
    stages.INTENT_AGENT_REJECTED: ("AGENT_INTENT_REJECTED",),
    stages.INTENT_CLASSIFICATION_MATCHED: ("INTENT_RESOLVED",),
    stages.RESOLVE_RESPONSE_SELECTED: ("RESPONSE_TYPE_RESOLVER_SELECTED",),
    stages.RESPONSE_MAPPING_NOT_FOUND: ("RESPONSE_TYPE_RESOLVER_NOT_FOUND",),
    stages.RULE_APPLIED: ("RULE_ACTION_RESOLVER_SELECTED",),
}
# Determinant prefix -> ConvEngine's helper classes that published it (matched besides the step).
SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("AGENT_INTENT_", ("AgentIntentResolver",)),
    ("INTENT_AGENT_", ("AgentIntentResolver",)),
    ("MCP_PLAN_LLM_", ("McpPlanner",)),
    ("RESOLVE_RESPONSE_LLM_", ("TextOutputFormatResolver", "JsonOutputFormatResolver")),
    ("RULE_ACTION_RESOLVER_", ("RuleActionResolverFactory",)),
    ("RESPONSE_TYPE_RESOLVER_", ("ResponseTypeResolverFactory",)),
    ("OUTPUT_FORMAT_RESOLVER_", ("OutputFormatResolverFactory",)),
    ("MCP_DB_", ("McpDbExecutor",)),
)
# Scores: ConvEngine's, so the same rows pick the same message.
SCORES = {"intent": 400, "state": 300, "determinant": 250, "exact": 225, "regex": 150, "json_path": 100,
          "rule": 200, "tool": 150}


def determinants(stage: str) -> tuple[str, ...]:
    """The names a verbose row's ``determinant`` may use for ``stage`` (``RULE_MATCH (RulesStep)`` is RULE_MATCH)."""
    base = stage.split(" (", 1)[0].strip()
    return (base, *DETERMINANT_ALIASES.get(base, ()))


def sources(names: Sequence[str]) -> tuple[str, ...]:
    found: list[str] = []
    for name in names:
        for prefix, classes in SOURCES:
            if name.startswith(prefix):
                found.extend(c for c in classes if c not in found)
    return tuple(found)


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.strip().casefold() == b.strip().casefold()


def _blank(value: object) -> bool:
    return value is None or not str(value).strip()


def _eligible(column: str | None, value: str) -> bool:
    return not _blank(column) and (_same(column, ANY) or _same(column, value))


class VerboseSignal:
    """One moment of a turn a verbose row may describe."""

    __slots__ = ("determinants", "error", "intent", "metadata", "rule_id", "state", "step_names", "tool_code")

    def __init__(self, *, stage: str, step_names: Sequence[str], intent: str, state: str, rule_id: int | None,
                 tool_code: str | None, metadata: dict[str, Any]) -> None:
        self.determinants = determinants(stage)
        self.step_names = (*sources(self.determinants), *step_names)
        self.error = self.determinants[0] == STEP_ERROR or self.determinants[0].endswith("_ERROR")
        self.intent, self.state = intent, state
        self.rule_id, self.tool_code = rule_id, tool_code
        self.metadata = metadata


def select(rows: Sequence[VerboseRecord], signal: VerboseSignal) -> tuple[VerboseRecord, str, str] | None:
    """The best row for ``signal`` with the determinant and step name it matched, or None."""
    best: tuple[int, VerboseRecord, str, str] | None = None
    ordered = sorted(rows, key=lambda r: (r.priority if r.priority is not None else 2**31, r.verbose_id))
    for row in ordered:
        if not row.enabled or not _eligible(row.intent_code, signal.intent) or not _eligible(row.state_code,
                                                                                          signal.state):
            continue
        determinant = _determinant(row, signal)
        step = _step(row, signal)
        if determinant is None or step is None or not _rule_ok(row, signal) or not _tool_ok(row, signal):
            continue
        score = _score(row, signal, determinant, step)
        if best is None or score > best[0]:
            best = (score, row, determinant, step)
    return None if best is None else (best[1], best[2], best[3])


def _determinant(row: VerboseRecord, signal: VerboseSignal) -> str | None:
    if _blank(row.determinant) or _same(row.determinant, ANY):
        return signal.determinants[0]
    return next((d for d in signal.determinants if _same(row.determinant, d)), None)


def _step(row: VerboseRecord, signal: VerboseSignal) -> str | None:
    """The step name ``row`` matches (its step_match against step_value), or None."""
    names = signal.step_names
    if _blank(row.step_value):
        return names[0] if names else ""
    match = (row.step_match or "EXACT").strip().upper()
    if match == "REGEX":
        return next((n for n in names if _regex(row, n)), None)
    if match == "JSON_PATH":
        return (names[0] if names else "") if _json_path(row, signal.metadata) else None
    if _same(row.step_value, ANY):
        return names[0] if names else ""
    return next((n for n in names if _same(row.step_value, n)), None)


def _regex(row: VerboseRecord, name: str) -> bool:
    matcher = row.matcher
    if matcher is None:
        return False
    try:
        return matcher.search(name) is not None
    except Exception:  # noqa: BLE001 - a pattern that times out is no match, as a bad one in ConvEngine
        return False


def _json_path(row: VerboseRecord, metadata: Mapping[str, Any]) -> bool:
    matcher = row.matcher
    values = matcher.find(dict(metadata)) if matcher is not None else []
    if not values or values[0] is None:
        return False
    if isinstance(values[0], bool):
        return values[0]
    text = str(values[0]).strip()
    return bool(text) and text.casefold() != "false"


def _rule_ok(row: VerboseRecord, signal: VerboseSignal) -> bool:
    return row.rule_id is None or (signal.rule_id is not None and int(row.rule_id) == signal.rule_id)


def _tool_ok(row: VerboseRecord, signal: VerboseSignal) -> bool:
    return _blank(row.tool_code) or _same(row.tool_code, signal.tool_code)


def _score(row: VerboseRecord, signal: VerboseSignal, determinant: str, step: str) -> int:
    score = 0
    score += SCORES["intent"] if _same(row.intent_code, signal.intent) and not _same(row.intent_code, ANY) else 0
    score += SCORES["state"] if _same(row.state_code, signal.state) and not _same(row.state_code, ANY) else 0
    if not _blank(row.determinant) and not _same(row.determinant, ANY):
        score += SCORES["determinant"]
    match = (row.step_match or "EXACT").strip().upper()
    if not _blank(row.step_value):
        if match == "REGEX":
            score += SCORES["regex"]
        elif match == "JSON_PATH":
            score += SCORES["json_path"]
        elif _same(row.step_value, step):
            score += SCORES["exact"]
    score += SCORES["rule"] if row.rule_id is not None and signal.rule_id is not None else 0
    score += SCORES["tool"] if not _blank(row.tool_code) and not _blank(signal.tool_code) else 0
    return score - (row.priority if row.priority is not None else 2**29)


def payload(row: VerboseRecord | None, signal: VerboseSignal, determinant: str, step: str, texts: tuple[str, str, str]) -> dict[str, Any]:
    """ConvEngine's VerboseStreamPayload; ``texts`` are the rendered (text, message, errorMessage)."""
    text, message, error_message = texts
    level = "ERROR" if signal.error else "INFO"
    meta = {"conversationId": signal.metadata.get("conversationId"), "stepName": step, "determinant": determinant,
            "intent": signal.intent, "state": signal.state, "severity": level,
            "theme": "danger" if signal.error else "progress", "icon": "warning" if signal.error else "spark"}
    return {"verboseId": None if row is None else row.verbose_id, "eventType": EVENT_TYPE, "stepName": step,
            "determinant": determinant, "intent": signal.intent, "state": signal.state, "ruleId": signal.rule_id,
            "toolCode": signal.tool_code, "level": level, "text": text, "message": message or None,
            "errorMessage": error_message or None, "metadata": meta}


class VerbosePublisher:
    """Resolves the verbose message of an audit stage against one snapshot's ``ce_verbose`` rows."""

    def __init__(self, rows: Sequence[VerboseRecord], settings: EngineSettings | None = None) -> None:
        self.rows = tuple(r for r in rows if r.enabled)
        self.settings = settings

    def resolve(self, stage: str, stage_payload: Mapping[str, Any], *, conversation_id: str, intent: str | None,
                state: str | None, step_names: Sequence[str], turn: TemplateSession | None = None) -> dict[str, Any] | None:
        """The VerboseStreamPayload for ``stage``, or None when no row speaks for it."""
        if stage == VERBOSE_STAGE or not step_names:
            return None
        intent, state = intent or "UNKNOWN", state or "UNKNOWN"
        metadata = {k: v for k, v in stage_payload.items() if k != "_meta"}
        metadata.update(conversationId=conversation_id, stepName=step_names[0], determinant=determinants(stage)[0],
                        intent=intent,
                        state=state)
        params = _params(turn)
        signal = VerboseSignal(stage=stage, step_names=step_names, intent=intent, state=state,
                               rule_id=_rule_id(stage_payload, params), tool_code=_tool_code(stage_payload, params),
                               metadata=metadata)
        chosen = select(self.rows, signal)
        if chosen is None:
            if not signal.error:
                return None
            fallback = f"Something went wrong while processing {step_names[0]}."
            return payload(None, signal, signal.determinants[0], step_names[0], (fallback, "", ""))
        row, determinant, step = chosen
        raw = (row.error_message or row.message) if signal.error else (row.message or row.error_message)
        text = self._render(raw, turn, metadata, row, "error_message" if raw is row.error_message else "message")
        if not text.strip():
            return None
        message = self._render(row.message, turn, metadata, row, "message")
        error_message = self._render(row.error_message, turn, metadata, row, "error_message")
        return payload(row, signal, determinant, step, (text, message, error_message))

    def _render(self, source: str | None, turn: TemplateSession | None, metadata: dict[str, Any], row: VerboseRecord,
                column: str) -> str:
        """A row's text rendered like an EXACT response; a failing template gives no message (logged)."""
        if not source:
            return ""
        where = f"ce_verbose[{row.verbose_id}].{column}"
        try:
            names = referenced_names(source)
            variables = template_variables(turn, metadata, names=names) if turn is not None else metadata
            return render_text(source, variables, template=where, limits=self.settings)
        except Exception as exc:  # noqa: BLE001 - a progress message never breaks a turn
            logger.warning("verbose message %s not rendered: %s", where, exc)
            return ""


def _params(turn: TemplateSession | None) -> Mapping[str, Any]:
    try:
        return turn.read_params() if turn is not None else {}
    except Exception:  # noqa: BLE001 - a turn that cannot say its params has none for this purpose
        return {}


def _rule_id(stage_payload: Mapping[str, Any], params: Mapping[str, Any]) -> int | None:
    for raw in (stage_payload.get("ruleId"), stage_payload.get("rule_id"), params.get("rule_id")):
        if isinstance(raw, bool) or raw is None:
            continue
        try:
            return int(str(raw).strip())
        except ValueError:
            continue
    return None


def _tool_code(stage_payload: Mapping[str, Any], params: Mapping[str, Any]) -> str | None:
    for raw in (stage_payload.get("toolCode"), stage_payload.get("tool_code"), params.get(pk.MCP_TOOL_CODE),
                params.get("tool_code")):
        if isinstance(raw, str) and raw.strip():
            return raw
    return None
