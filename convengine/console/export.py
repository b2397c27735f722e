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

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

from convengine.console.queries import _database
from convengine.engine.core import Engine
from convengine.engine.recording import RecordedTurn, RecordingError, read_recording
from convengine.security.redact import MASK, MIN_SECRET_CHARS, SENSITIVE_NAME, redact_text

HEADER = "# Recorded from conversation {cid}; replays its inputs with the LLM replies and tool results it got.\n"


ExportError = RecordingError
"""The conversation cannot be exported as a test (the message says why)."""


async def export_conversation(engine: Engine, conversation_id: str, *, pack: str, tasks: str | None = None,
                              upto: int | None = None, owner: str | None = None) -> str:
    """The ``.conv.yaml`` text replaying the conversation (its first ``upto`` turns when given).

    Raises ExportError when there is nothing to replay or an LLM call was not logged.
    """
    turns = await read_recording(engine, _database(engine), conversation_id, owner=owner)
    if upto is not None:
        turns = [t for t in turns if t.number <= upto]
    if not turns:
        raise ExportError(f"conversation {conversation_id} has no completed turn to export")
    for turn in turns:
        if turn.missing:
            raise ExportError(turn.missing + (_UPTO_HINT if "inputParams" in turn.missing else ""))
    document: dict[str, Any] = {"pack": pack, **({"tasks": tasks} if tasks else {}),
                                "tests": [_without_secrets(_test(conversation_id, turns))]}
    return HEADER.format(cid=conversation_id) + yaml.safe_dump(document, sort_keys=False, allow_unicode=True,
                                                              width=120)


_UPTO_HINT = "; export the turns before it with ?upto= (convengine export-test --upto)"


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


def _test(cid: str, turns: list[RecordedTurn]) -> dict[str, Any]:
    llm: dict[str, list[Any]] = defaultdict(list)
    tools: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for turn in turns:
        for site, reply in turn.llm:
            llm[site].append(reply)
        for tool_call in turn.tools:
            stub = {"error": tool_call["error"]} if tool_call["error"] else {"result": tool_call["result"]}
            tools[str(tool_call["tool"])].append(stub)
    test: dict[str, Any] = {"name": f"replay of conversation {cid}"}
    if llm:
        test["llm"] = dict(llm)
    if tools:
        test["tools"] = {code: stubs[0] if len(stubs) == 1 else stubs for code, stubs in tools.items()}
    test["turns"] = [_turn(turn) for turn in turns]
    return test


def _turn(recorded: RecordedTurn) -> dict[str, Any]:
    result = recorded.result
    turn: dict[str, Any] = {"event": recorded.event} if recorded.event else {"user": recorded.user}
    if recorded.params:
        turn["params"] = recorded.params
    if recorded.reset:
        turn["reset"] = True
    expect: dict[str, Any] = {"intent": result.get("intent"), "state": result.get("state")}
    if result.get("status"):
        expect["status"] = result["status"]
    payload = result.get("payload") or {}
    if payload.get("value") is not None:
        expect["payload"] = {"equals": payload["value"], "type": payload.get("type")}
    expect["llm_calls"] = recorded.llm_sites
    expect["tool_calls"] = dict(Counter(str(c["tool"]) for c in recorded.tools))
    turn["expect"] = expect
    return turn


def relative_pack(pack: Path, output: Path) -> str:
    """The pack's path as the test file should name it (relative to the file when possible)."""
    try:
        return str(pack.resolve().relative_to(output.resolve().parent))
    except ValueError:
        return str(pack.resolve())
