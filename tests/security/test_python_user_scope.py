"""A python node's ``user`` scope is its conversation's user's long-term properties, and only those: a
script cannot write another user's properties (naming them, spoofing the user id in params or session),
a secret property, or any name the pack did not declare long-term. A refused write fails the node
(``error`` edge) and keeps nothing, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.flows.packs import chain, edge, node
from tests.flows.test_nodes import one_flow
from tests.helpers import engine_on, payload_of, turn_events

pytestmark = pytest.mark.asyncio

SCRIPT = """
attack = params.get("attack")
if attack == "gold":
    user["tier"] = "gold"
elif attack == "secret":
    user["pin"] = "0000"
elif attack == "other":
    user["bob"] = {"tier": "hacked"}
elif attack == "namespace":
    user["convengine/users/bob/properties/tier"] = "hacked"
elif attack == "spoof":
    params["userId"] = "bob"
    session["userId"] = "bob"
    user["tier"] = "hacked"
"""


def attack_pack() -> dict[str, Any]:
    nodes = [node("PY", "start", "start"), node("PY", "run", "python", code=SCRIPT),
             node("PY", "ok", "message", text="kept"), node("PY", "refused", "message", text="refused"),
             node("PY", "end", "end")]
    edges = [*chain("PY", "start", "run", "ok", "end"), edge("PY", "run", "refused", outcome="error"),
             edge("PY", "refused", "end")]
    data = one_flow("PY", nodes, edges)
    data["settings"]["conversation_memory"] = {"long_term": ["tier", "pin"], "secret": ["pin"]}
    return data


@pytest.mark.parametrize("attack", ["secret", "other", "namespace"])
async def test_a_script_cannot_write_a_property_outside_its_users_long_term_scope(db_url: str, attack: str) -> None:
    async with engine_on(db_url, attack_pack()) as engine:
        assert (await engine.aprocess("hello", input_params={"attack": "gold"}, user_id="bob")).text == "kept"
        result = await engine.aprocess("hello", input_params={"attack": attack}, user_id="eve")
        assert result.text == "refused"
        failed = payload_of(await turn_events(engine, result.conversation_id), "FLOW_SCRIPT_FAILED")
        assert failed["error"].startswith("PermissionError: user.") and "is not a long-term property" in failed["error"]
        assert not {"bob", "pin"} & set(result.context)
        assert not any(key.startswith("convengine/") for key in result.context)
        assert await engine.aproperties("eve") == {}
        assert await engine.aproperties("bob") == {"tier": "gold"}


async def test_spoofing_the_user_id_writes_only_the_scripts_own_user(db_url: str) -> None:
    async with engine_on(db_url, attack_pack()) as engine:
        await engine.aprocess("hello", input_params={"attack": "gold"}, user_id="bob")
        result = await engine.aprocess("hello", input_params={"attack": "spoof"}, user_id="eve")
        assert result.text == "kept"
        assert await engine.aproperties("eve") == {"tier": "hacked"}
        assert await engine.aproperties("bob") == {"tier": "gold"}
        again = await engine.aprocess("hello", user_id="bob")
        assert again.context.get("tier") == "gold"
