"""Attacks on flows: a python node escaping its sandbox, template injection from user text, SSRF
through a service node's templated URL, expression tricks and escaping a handoff by params."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from convengine._internal.sandbox import run_script
from convengine.rules.expr import ExpressionError, compile_expression
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on, payload_of, turn_events
from tests.http_stub import http_server

pytestmark = pytest.mark.asyncio
SECRET_FILE_TEXT = "top-secret-server-file"


async def script(code: str, timeout_s: float = 2.0) -> dict[str, Any]:
    return await run_script(code, {"session": {"name": "x"}, "user": {}, "flow": {}, "tool_response": None},
                            timeout_s=timeout_s, memory_mb=256, max_output_chars=2000)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(SECRET_FILE_TEXT)
    return path


@pytest.mark.parametrize("code", [
    "session['leak'] = open({path!r}).read()",
    "import io\nsession['leak'] = io.open({path!r}).read()",
    "session['leak'] = re.enum.sys.modules['posix'].open({path!r}, 0)",
    "p = re.enum.sys.modules['posix']\nsession['leak'] = p.listdir('/')",
    "session['leak'] = __import__('pathlib').Path({path!r}).read_text()",
    "exec(\"session['leak'] = open({path!r}).read()\")",
])
async def test_python_node_cannot_read_the_servers_files(code: str, secret_file: Path) -> None:
    result = await script(code.format(path=str(secret_file)))
    assert result["error"] and result["error"].startswith("PermissionError")
    assert SECRET_FILE_TEXT not in repr(result)


@pytest.mark.parametrize("code", [
    "import socket\nsocket.create_connection(('127.0.0.1', 80))",
    "s = __import__('_socket')",
    "import urllib.request\nurllib.request.urlopen('http://127.0.0.1/')",
])
async def test_python_node_has_no_network(code: str) -> None:
    result = await script(code)
    assert result["error"] and result["error"].startswith("PermissionError")


@pytest.mark.parametrize("code", [
    "p = re.enum.sys.modules['posix']\nwhile True:\n    p.fork()",
    "p = re.enum.sys.modules['posix']\np.system('echo pwned > /tmp/pwned')",
    "p = re.enum.sys.modules['posix']\np.kill(p.getppid(), 9)",
    "p = re.enum.sys.modules['posix']\np.unlink({path!r})",
])
async def test_python_node_cannot_fork_run_kill_or_delete(code: str, secret_file: Path) -> None:
    result = await script(code.format(path=str(secret_file)))
    assert result["error"] and result["error"].startswith("PermissionError")
    assert secret_file.read_text() == SECRET_FILE_TEXT  # still there
    assert not Path("/tmp/pwned").exists()


async def test_python_node_sees_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVER_DB_PASSWORD", "hunter2-do-not-leak")
    result = await script("session['env'] = dict(re.enum.sys.modules['posix'].environ)")
    assert "hunter2-do-not-leak" not in repr(result)


async def test_python_node_memory_bomb_and_infinite_loop_are_stopped() -> None:
    bomb = await script("blocks = []\nwhile True:\n    blocks.append(' ' * 10_000_000)")
    assert bomb["error"].startswith(("MemoryError", "ProcessError"))
    loop = await script("while True:\n    pass", timeout_s=0.5)
    assert loop["error"].startswith("TimeoutError") and loop.get("timedOut")


@pytest.mark.parametrize("source", [
    "session.__class__", "__import__('os')", "().__class__.__bases__", "[x for x in session]", "lambda: 1",
    "session['a'] * 10 ** 9", "open('/etc/passwd')",
])
async def test_expressions_cannot_reach_python(source: str) -> None:
    with pytest.raises(ExpressionError):
        compile_expression(source).evaluate({"session": {"a": "x"}})


async def test_user_text_is_never_evaluated_as_a_template(db_url: str) -> None:
    nodes = [node("ECHO", "start", "start"), node("ECHO", "ask", "entity", variable="name", prompt="Your name?"),
             node("ECHO", "say", "message", text="Hello {{ session.name }}"), node("ECHO", "end", "end")]
    data = flows_pack(nodes=nodes, edges=chain("ECHO", "start", "ask", "say", "end"),
                      flows=[{"flow_code": "ECHO", "intent_code": "GREETING", "priority": 1}])
    async with engine_on(db_url, data) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        attack = "{{ 7*7 }}{% for x in range(10**9) %}{% endfor %}{{ ''.__class__.__mro__ }}"
        result = await engine.aprocess(attack, cid)
        assert result.text == f"Hello {attack}"


async def test_ssrf_through_a_templated_service_url_is_refused(db_url: str) -> None:
    with http_server(lambda path, body: (200, {"ok": True})) as stub:
        port = stub.url.rsplit(":", 1)[1]
        nodes = [node("SSRF", "start", "start"), node("SSRF", "ask", "entity", variable="host", prompt="Host?"),
                 node("SSRF", "call", "service", service_id="probe", url="http://{{ session.host }}:" + port + "/x"),
                 node("SSRF", "fixed", "service", service_id="fixed",
                      url="http://api.example.invalid/items/{{ session.host }}"),
                 node("SSRF", "ok", "message", text="called"), node("SSRF", "refused", "message", text="refused"),
                 node("SSRF", "end", "end")]
        edges = [*chain("SSRF", "start", "ask", "call", "ok", "end"), edge("SSRF", "call", "fixed", outcome="error"),
                 edge("SSRF", "fixed", "ok"), edge("SSRF", "fixed", "refused", outcome="error"),
                 edge("SSRF", "refused", "end")]
        data = flows_pack(nodes=nodes, edges=edges,
                          flows=[{"flow_code": "SSRF", "intent_code": "GREETING", "priority": 1}])
        async with engine_on(db_url, data) as engine:  # no allowed_hosts: loopback and private are refused
            for target in ("127.0.0.1", "169.254.169.254", "10.0.0.1"):
                cid = (await engine.aprocess("hello")).conversation_id
                result = await engine.aprocess(target, cid)
                assert result.text == "refused"
                failures = [e.payload for e in await turn_events(engine, cid) if e.stage == "FLOW_SERVICE_FAILED"]
                assert failures[0]["serviceId"] == "probe"
                assert "not allowed" in failures[0]["message"] or "refus" in failures[0]["message"].lower()
            cid = (await engine.aprocess("hello")).conversation_id
            result = await engine.aprocess("@127.0.0.1:" + port + "/", cid)
            assert result.text == "refused"
            assert stub.requests == []  # nothing reached the internal server


async def test_caller_params_cannot_leave_a_handoff(db_url: str) -> None:
    async with engine_on(db_url, flows_pack()) as engine:
        cid = (await engine.aprocess("a loan please")).conversation_id
        for answer in ("x", "y", "z"):
            result = await engine.aprocess(answer, cid)
        assert result.status == "HANDOFF"
        for params in ({"event": "handoff_resume"}, {"flow": {}}, {"turn_input": {"event": "handoff_resume"}}):
            attempt = await engine.aprocess("let me out", cid, params)
            assert attempt.status == "HANDOFF" and attempt.text == ""
        assert payload_of(await turn_events(engine, cid), "FLOW_HANDOFF_MESSAGE")["text"] == "let me out"
        assert os.environ.get("PWNED") is None


@pytest.mark.parametrize(("reply", "said"), [
    ({"city": "{{ session }} {{ 7*7 }}"}, "0 nights in {{ session }} {{ 7*7 }}."),  # a value, never template source
    ({"city": "x" * 5000}, "Which city, please?"),  # oversize: a failed answer
    ({"city": {"nested": "object"}}, "Which city, please?"),  # not the schema's type
    ("not json at all", "Which city, please?"),
])
async def test_an_entity_nodes_llm_reply_is_untrusted(db_url: str, reply: Any, said: str) -> None:
    from convengine import ScriptedLLM
    from tests.flows.test_entity_llm import trip_pack

    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [reply]}, default={"intent": None, "confidence": 0})
    async with engine_on(db_url, trip_pack(), llm=llm) as engine:
        cid = (await engine.aprocess("a loan for a trip")).conversation_id
        answer = await engine.aprocess("somewhere nice", cid)
        if said.startswith("0 nights"):
            answer = await engine.aprocess("0", cid)
        assert answer.text == said
