"""A secret property sent in a turn's params or extracted into its context never reaches the audit
unmasked through what the audit now records of a turn: the caller's params (USER_INPUT
``inputParams``) and the context changes (ENGINE_RETURN ``contextChanges``) — nor the turn view,
the exported test or the stored rows built from them, on a turn that completes or one that fails.
Two sinks this found are covered too: the event reporting a failed turn (its message quoted the
secret) and the logged LLM reply that brought a secret into the context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from convengine import LlmCall, ScriptedLLM
from convengine.api.app import create_app
from convengine.config_loader.companions import pack_options
from tests.console.support import PACK
from tests.security.test_secrets import assert_hidden, stored_rows
from tests.servers import in_process, post

pytestmark = pytest.mark.asyncio

PIN = "8642-1357"
NESTED = "5531-0246"
"""A secret sent as a structured value (not a scalar: only its name says it is secret)."""


def secret_pack(folder: Path) -> Path:
    """The pizza pack with a declared secret property ``pin`` and two schema fields that may carry it."""
    data = yaml.safe_load(PACK.read_text(encoding="utf-8"))
    data["settings"]["conversation_memory"] = {"secret": ["pin"]}
    properties = data["ce_output_schema"][0]["json_schema"]["properties"]
    properties["pin"] = {"type": "string", "description": "the card pin"}
    properties["note"] = {"type": "string", "description": "anything else"}
    path = folder / "secret_pizza.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def extraction(call: LlmCall) -> Any:
    if "explode" in call.user:
        return RuntimeError(f"the model is down (pin {PIN})")
    return {"size": "large", "pin": PIN, "note": f"my pin is {PIN}"}


MODEL = ScriptedLLM({"SCHEMA_EXTRACTION": extraction,
                     "INTENT_AGENT": {"intent": None, "confidence": 0.0, "intentScores": []}})


async def everything(client: httpx.AsyncClient, cid: str) -> str:
    """What the console and the audit API show of the conversation, as text."""
    parts = [(await client.get(f"/api/v1/conversation/audit/{cid}")).text]
    turns = (await client.get(f"/console/api/conversations/{cid}/turns")).json()["turns"]
    for turn in turns:
        parts.append((await client.get(f"/console/api/conversations/{cid}/turns/{turn['turn']}")).text)
    parts.append((await client.get(f"/console/api/conversations/{cid}/export")).text)
    return "\n".join(parts)


async def test_secrets_in_params_and_context_are_masked_in_what_the_audit_records(db_url: str,
                                                                                 tmp_path: Path) -> None:
    app = create_app(db_url, **pack_options(secret_pack(tmp_path), None), llm=MODEL,
                     settings={"llm": {"log_calls": True}})
    async with in_process(app) as client:
        cid = (await post(client, "a pizza", inputParams={"pin": PIN, "name": "Ann", "card": {"code": PIN}}))[
            "conversationId"]
        second = await post(client, "a large pizza", cid, inputParams={"pin": {"code": NESTED}})
        assert second["success"] is True, second
        failed = await post(client, "explode", cid, inputParams={"pin": PIN, "note": PIN})
        assert failed["success"] is False
        shown = await everything(client, cid)
        audit = (await client.get(f"/api/v1/conversation/audit/{cid}")).json()
    for secret in (PIN, NESTED):
        assert_hidden(secret, console_and_audit=shown, stored=stored_rows(db_url))
    # what was recorded is there, masked: the params keep their names, the context change its text
    user_inputs = [yaml.safe_load(e["payloadJson"]) for e in audit if e["stage"] == "USER_INPUT"]
    assert user_inputs[0]["inputParams"] == {"pin": "***", "name": "Ann", "card": {"code": "***"}}
    assert user_inputs[1]["inputParams"] == {"pin": "***"}
    assert user_inputs[2]["inputParams"]["pin"] == "***"
    returned = [yaml.safe_load(e["payloadJson"]) for e in audit if e["stage"] == "ENGINE_RETURN"]
    added = returned[0]["contextChanges"]["added"]
    assert added["note"] == "my pin is ***" and "pin" not in added
