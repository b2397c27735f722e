"""A pack author's python node against the server's limits, through whole turns (Python API).

The node's own ``memory_mb`` and ``timeout_s`` are a pack author's values: they may lower the
operator's limits, never lift them past the bounds of ``flows.python-memory-mb`` (8192 MiB) and
``flows.python-timeout-s`` (60 s), and a value that is not a positive finite number is refused when
the pack loads. What a script sends back is a stored value like any other: one nested too deep for
the server to read fails the node (its ``error`` edge), never the turn.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from convengine.catalog.errors import ConfigValidationError
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on, payload_of, turn_events

pytestmark = pytest.mark.asyncio
ESCAPE = "re.enum.sys.modules['__main__']._BLOCKED = ()\np = re.enum.sys.modules['posix']\n"


def python_flow(code: str, node_config: dict[str, Any] | None = None, **settings: Any) -> dict[str, Any]:
    """GREETING ("hello") enters PY: the script, then its message, or "Script failed." on the error edge."""
    nodes = [node("PY", "start", "start"), node("PY", "calc", "python", code=code, **(node_config or {})),
             node("PY", "ok", "message", text="Result: {{ session.leak }}"),
             node("PY", "broken", "message", text="Script failed."), node("PY", "end", "end")]
    edges = [*chain("PY", "start", "calc", "ok", "end"), edge("PY", "calc", "broken", outcome="error"),
             edge("PY", "broken", "end")]
    return flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "PY", "intent_code": "GREETING", "priority": 1}],
                      **settings)


@pytest.mark.parametrize(("config", "says"), [
    # bytes(n) reserves address space without touching it: 9 GiB passes an address-space limit of 12000 MiB
    ({"memory_mb": 12000}, "memory_mb"),
    ({"memory_mb": "lots"}, "memory_mb"),
    ({"memory_mb": -5}, "memory_mb"),
    ({"timeout_s": ".nan"}, "timeout_s"),
    ({"timeout_s": float("nan")}, "timeout_s"),
    ({"timeout_s": -1}, "timeout_s"),
    ({"timeout_s": "soon"}, "timeout_s"),
])
async def test_a_node_cannot_lift_its_limits_past_the_servers_bounds(db_url: str, config: dict[str, Any],
                                                                     says: str) -> None:
    code = "b = bytes(9 * 1024 ** 3)\nsession['leak'] = len(b)"
    with pytest.raises(ConfigValidationError) as caught:
        async with engine_on(db_url, python_flow(code, config)):
            pass
    message = str(caught.value)
    assert "flow PY node calc" in message and says in message, message


async def test_a_node_may_lower_its_limits(db_url: str) -> None:
    code = "b = bytes(200 * 1024 ** 2)\nsession['leak'] = len(b)"
    async with engine_on(db_url, python_flow(code, {"memory_mb": 64, "timeout_s": 5})) as engine:
        assert (await engine.aprocess("hello")).text == "Script failed."  # 200 MiB > 64 MiB
    async with engine_on(db_url, python_flow("session['leak'] = 7", {"memory_mb": 64, "timeout_s": 5})) as engine:
        assert (await engine.aprocess("hello")).text == "Result: 7"


@pytest.mark.parametrize("depth", [100, 200_000])
async def test_a_script_answering_deeply_nested_values_fails_its_node_not_the_turn(db_url: str, depth: int) -> None:
    # the script writes its own answer on the real stdout and leaves before the child writes the real one
    code = (ESCAPE + "out = re.enum.sys.modules['__main__']._out\n"
            f"out.write('{{\"session\": {{\"leak\": ' + '[' * {depth} + ']' * {depth} + '}}, \"error\": null}}')\n"
            "out.flush()\np._exit(0)")
    async with engine_on(db_url, python_flow(code)) as engine:
        result = await engine.aprocess("hello")
        assert result.text == "Script failed.", result
        failed = payload_of(await turn_events(engine, result.conversation_id), "FLOW_SCRIPT_FAILED")
        assert "nest" in failed["error"], failed
        assert "leak" not in repr(await engine.astate(result.conversation_id))


async def test_the_script_does_not_learn_the_servers_host_name(db_url: str) -> None:
    async with engine_on(db_url, python_flow(ESCAPE + "session['leak'] = p.uname().nodename")) as engine:
        text = (await engine.aprocess("hello")).text
    assert text.startswith("Result: "), text
    assert socket.gethostname() not in text


async def test_a_script_cannot_grow_the_conversations_state_without_end(db_url: str) -> None:
    # each turn doubled its value: 224 MB of session (and 1.3 GB of server memory) by the sixth turn, no end
    code = ("prev = session.get('blob', '')\nsession['blob'] = (prev * 2) if prev else 'a' * 5_000_000\n"
            "session['leak'] = len(session['blob'])")
    async with engine_on(db_url, python_flow(code, {"memory_mb": 1024, "timeout_s": 20})) as engine:
        first = await engine.aprocess("hello")
        assert first.text == "Result: 5000000"
        second = await engine.aprocess("hello", first.conversation_id)
        assert second.text == "Script failed."
        failed = payload_of(await turn_events(engine, first.conversation_id), "FLOW_SCRIPT_FAILED")
        assert failed["error"].startswith("OutputError"), failed
        assert len(repr(await engine.astate(first.conversation_id))) < 6_000_000


async def test_a_forged_answer_cannot_put_more_than_the_output_limit_in_the_audit(db_url: str) -> None:
    code = (ESCAPE + "out = re.enum.sys.modules['__main__']._out\n"
            "out.write(json.dumps({'session': {'leak': 1}, 'error': None, 'stdout': 'x' * 3_000_000}))\n"
            "out.flush()\np._exit(0)")
    async with engine_on(db_url, python_flow(code, **{"python-max-output-chars": 1000})) as engine:
        result = await engine.aprocess("hello")
        assert result.text == "Result: 1"
        ran = payload_of(await turn_events(engine, result.conversation_id), "FLOW_SCRIPT_RAN")
        assert isinstance(ran["stdout"], str) and len(ran["stdout"]) <= 1000
