"""A recorded conversation exported as a ``.conv.yaml`` conversation test that replays it.

The test sends the recorded inputs (user text and the caller's input params) in order, scripts the LLM with the recorded replies (from
``ce_llm_call_log``, so ``llm.log_calls`` must have been on when the model was called), stubs the
tools with their recorded results, and expects what happened: intent, state, status, payload, the
LLM calls per call site and the tool calls per tool. Turns that were undone or failed are left out
(neither changed the conversation). The file holds no secret: every value the secret masker knows
(settings secrets, ``${env:}`` values, tool credentials) or recognises (passwords in URLs, bearer
tokens, ``password=...``) and every value of an input param named like a secret (``token``,
``apiKey``...) is written as ``***`` wherever it occurs, in inputs and expectations alike, so the
test replays as recorded. Run it with ``convengine test``: it passes while the pack
behaves as recorded and fails, naming the turn and what changed, once it does not.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

from convengine.audit.events import AuditEvent
from convengine.catalog import stages
from convengine.catalog.errors import InvalidInputError
from convengine.console.queries import llm_log
from convengine.console.turns import completed, logged_llm_call, split_turns, tool_calls, undone_marks
from convengine.engine.core import Engine
from convengine.security.redact import MASK, MIN_SECRET_CHARS, SENSITIVE_NAME, redact_text

HEADER = "# Recorded from conversation {cid}; replays its inputs with the LLM replies and tool results it got.\n"


class ExportError(InvalidInputError):
    """The conversation cannot be exported as a test (the message says why)."""


async def export_conversation(engine: Engine, conversation_id: str, *, pack: str, tasks: str | None = None,
                              upto: int | None = None, owner: str | None = None) -> str:
    """The ``.conv.yaml`` text replaying the conversation (its first ``upto`` turns when given).

    Raises ExportError when there is nothing to replay or an LLM call was not logged.
    """
    events = await engine.aaudit(conversation_id, owner=owner)
    rows = await llm_log(engine, conversation_id)
    steps = await engine.asteps(conversation_id, owner=owner)
    turns = _replayable(split_turns(events), steps)
    if upto is not None:
        turns = [t for t in turns if t[0] <= upto]
    if not turns:
        raise ExportError(f"conversation {conversation_id} has no completed turn to export")
    test = _test(conversation_id, turns, _rows_by_turn(split_turns(events), rows))
    document: dict[str, Any] = {"pack": pack, **({"tasks": tasks} if tasks else {}), "tests": [_without_secrets(test)]}
    return HEADER.format(cid=conversation_id) + yaml.safe_dump(document, sort_keys=False, allow_unicode=True,
                                                              width=120)


def _without_secrets(test: dict[str, Any]) -> Any:
    """``test`` with every secret masked the same way everywhere (see the module docstring)."""
    named: set[str] = set()
    for replayed in test["turns"]:
        _secret_params(replayed.get("params"), named)
    values = sorted(named, key=len, reverse=True)

    def clean(value: object) -> Any:
        if isinstance(value, str):
            for secret in values:
                value = value.replace(secret, MASK)
            return redact_text(value)
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        if isinstance(value, list):
            return [clean(item) for item in value]
        return value

    return clean(test)


def _secret_params(value: object, found: set[str], sensitive: bool = False) -> None:
    """Collect the string values held under keys named like a secret, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            _secret_params(item, found, sensitive or bool(SENSITIVE_NAME.search(str(key))))
    elif isinstance(value, list):
        for item in value:
            _secret_params(item, found, sensitive)
    elif sensitive and isinstance(value, str) and len(value) >= MIN_SECRET_CHARS:
        found.add(value)


def _replayable(turns: list[list[AuditEvent]], steps: list[dict[str, Any]]) -> list[tuple[int, list[AuditEvent]]]:
    """(turn number, events) of the turns that completed (a failed one was rolled back) and were not undone."""
    marks = undone_marks(turns, steps)
    return [(number, events) for number, (events, undone) in enumerate(zip(turns, marks, strict=True), start=1)
            if completed(events) and not undone]


def _rows_by_turn(turns: list[list[AuditEvent]], rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The LLM log rows of each turn: calls are logged in the order they are audited."""
    out: dict[int, list[dict[str, Any]]] = {}
    position = 0
    for number, events in enumerate(turns, start=1):
        count = sum(1 for e in events if logged_llm_call(e))
        out[number] = rows[position:position + count]
        position += count
    return out


def _test(cid: str, turns: list[tuple[int, list[AuditEvent]]],
          rows: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    llm: dict[str, list[Any]] = defaultdict(list)
    tools: dict[str, list[dict[str, Any]]] = defaultdict(list)
    steps = []
    for number, events in turns:
        for call, row in _llm_replies(number, events, rows.get(number, [])):
            llm[call].append(row)
        for tool_call in tool_calls(events):
            stub = {"error": tool_call["error"]} if tool_call["error"] else {"result": tool_call["result"]}
            tools[str(tool_call["tool"])].append(stub)
        steps.append(_turn(number, events))
    test: dict[str, Any] = {"name": f"replay of conversation {cid}"}
    if llm:
        test["llm"] = dict(llm)
    if tools:
        test["tools"] = {code: stubs[0] if len(stubs) == 1 else stubs for code, stubs in tools.items()}
    test["turns"] = steps
    return test


def _llm_replies(number: int, events: list[AuditEvent], rows: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    calls = [e for e in events if e.stage == stages.LLM_CALL]
    logged = [e for e in events if logged_llm_call(e)]
    if calls and len(rows) < len(logged):
        raise ExportError(f"turn {number} called the LLM {len(logged)} time(s) but ce_llm_call_log holds "
                          f"{len(rows)} of them: set llm.log_calls=true (CONVENGINE_LLM__LOG_CALLS=true) "
                          "before recording conversations to export")
    replies = []
    for event, row in zip(logged, rows, strict=False):
        if event.stage != stages.LLM_CALL:
            continue  # a failed attempt: the retry's reply is what the turn used
        site = str(event.payload.get("callSite") or row.get("user_context"))
        replies.append((site, _reply(row.get("response_text") or "", bool(event.payload.get("json")))))
    return replies


def _reply(text: str, wants_json: bool) -> Any:
    if wants_json:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _turn(number: int, events: list[AuditEvent]) -> dict[str, Any]:
    user_input = next((e.payload for e in events if e.stage == stages.USER_INPUT), {})
    result = _result(events) or {}
    turn: dict[str, Any] = {"user": user_input.get("text") or ""}
    if user_input.get("inputParamsOmitted"):
        omitted = user_input["inputParamsOmitted"]
        raise ExportError(f"turn {number}'s inputParams ({omitted.get('bytes')} bytes) were too large for the audit "
                          "to record them, so the turn cannot be replayed; export the turns before it with ?upto= "
                          "(convengine export-test --upto)")
    if user_input.get("inputParams"):
        turn["params"] = user_input["inputParams"]
    if any(e.stage == stages.CONVERSATION_RESET and str(e.payload.get("reason", "")).startswith("INPUT_PARAM") for e in events):
        turn["reset"] = True
    expect: dict[str, Any] = {"intent": result.get("intent"), "state": result.get("state")}
    if result.get("status"):
        expect["status"] = result["status"]
    payload = result.get("payload") or {}
    if payload.get("value") is not None:
        expect["payload"] = {"equals": payload["value"], "type": payload.get("type")}
    expect["llm_calls"] = dict(Counter(str(e.payload.get("callSite")) for e in events if e.stage == stages.LLM_CALL))
    expect["tool_calls"] = dict(Counter(str(c["tool"]) for c in tool_calls(events)))
    turn["expect"] = expect
    return turn


def _result(events: list[AuditEvent]) -> dict[str, Any] | None:
    for event in reversed(events):
        if event.stage == stages.ENGINE_RETURN:
            return event.payload
    return None


def relative_pack(pack: Path, output: Path) -> str:
    """The pack's path as the test file should name it (relative to the file when possible)."""
    try:
        return str(pack.resolve().relative_to(output.resolve().parent))
    except ValueError:
        return str(pack.resolve())
