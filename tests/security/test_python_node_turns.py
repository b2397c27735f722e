"""A python node inside whole turns: a script cannot hang a turn (on asyncio's loop nor on uvloop),
cannot carry the server's environment out over HTTP, and a host without the sandbox refuses python
nodes at load unless ``flows.python-sandbox: weak`` accepts the weaker mode."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvloop
import yaml

from convengine._internal.sandbox import host
from convengine._internal.sandbox.runner import REAP_S
from convengine.catalog.errors import ConfigValidationError
from tests.api.auth_support import USER_A, auth_env, send
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on, payload_of, turn_events

TIMEOUT_S = 1.0
CANARY = "canary-4f1d-server-secret"
ESCAPE = "re.enum.sys.modules['__main__']._BLOCKED = ()\np = re.enum.sys.modules['posix']\n"
FLOODS = {
    # writes to the real fd 1 (no audit event) without end: hung asyncio's loop for good before the fix
    "fd1_endless": "session['from_the_script'] = 1\np = re.enum.sys.modules['posix']\nwhile True:\n"
                   "    p.write(1, b'x' * 1_000_000)",
    "stdout_endless": "session['from_the_script'] = 1\nw = re.enum.sys.__stdout__\nwhile True:\n    w.write('x' * 65536)",
    # fills the pipe once, then runs past the time limit
    "past_the_timeout": "session['from_the_script'] = 1\nw = re.enum.sys.__stdout__\nw.write('x' * 300_000)\nw.flush()\n"
                        "while True:\n    pass",
}
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def python_flow(code: str, **settings: Any) -> dict[str, Any]:
    """GREETING ("hello") enters PY: the script, then its message, or "Script failed." on the error edge."""
    nodes = [node("PY", "start", "start"), node("PY", "calc", "python", code=code),
             node("PY", "ok", "message", text="Result: {{ session.leak }}"),
             node("PY", "broken", "message", text="Script failed."), node("PY", "end", "end")]
    edges = [*chain("PY", "start", "calc", "ok", "end"), edge("PY", "calc", "broken", outcome="error"),
             edge("PY", "broken", "end")]
    return flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "PY", "intent_code": "GREETING", "priority": 1}],
                      **settings)


def turns_on_their_own_loop(loop: Callable[[], asyncio.AbstractEventLoop], db_url: str, data: dict[str, Any],
                            turns: int, limit_s: float) -> dict[str, Any]:
    """``turns`` "hello" turns on a fresh event loop in a thread; fails (instead of hanging) past ``limit_s``."""
    seen: dict[str, Any] = {}

    async def turn() -> None:
        async with engine_on(db_url, data) as engine:
            for _ in range(turns):  # the hang was a race: lost about one time in two
                started = time.monotonic()
                result = await engine.aprocess("hello")
                seen["elapsed"] = max(seen.get("elapsed", 0.0), time.monotonic() - started)
                seen.setdefault("texts", []).append(result.text)
                seen.setdefault("errors", []).append(
                    payload_of(await turn_events(engine, result.conversation_id), "FLOW_SCRIPT_FAILED")["error"])
                seen.setdefault("states", []).append(await engine.astate(result.conversation_id))

    def run() -> None:
        try:
            with asyncio.Runner(loop_factory=loop) as runner:
                runner.run(turn())
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            seen["exception"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"the turn still runs after {limit_s} s"
    if "exception" in seen:
        raise seen["exception"]
    return seen


@pytest.mark.parametrize("flood", sorted(FLOODS))
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_script_flooding_its_stdout_cannot_hang_the_turn(db_url: str, loop: str, flood: str) -> None:
    data = python_flow(FLOODS[flood], **{"python-timeout-s": TIMEOUT_S})
    seen = turns_on_their_own_loop(LOOPS[loop], db_url, data, turns=4, limit_s=120)
    assert seen["elapsed"] < TIMEOUT_S + REAP_S + 2.0
    assert seen["texts"] == ["Script failed."] * 4  # the error edge
    assert all(error.startswith(("TimeoutError", "OutputError")) for error in seen["errors"]), seen["errors"]
    assert "from_the_script" not in repr(seen["states"])  # nothing the script set is kept


@pytest.fixture
def fresh_probe() -> Iterator[None]:
    """The host check is cached per process: each of these tests probes afresh, and leaves no trace."""
    host.boundary.cache_clear()
    yield
    host.boundary.cache_clear()


def _no_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")


def _no_namespaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "_probe_run", lambda argv, seccomp: "bwrap: No permissions to create new namespace")


def _no_seccomp(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> bytes:
        raise OSError("libseccomp.so.2: cannot open shared object file")

    monkeypatch.setattr(host, "seccomp_program", missing)


HOSTS = {"no_bwrap": (_no_bwrap, "bubblewrap (bwrap) is not installed"),
         "no_namespaces": (_no_namespaces, "No permissions to create new namespace"),
         "no_seccomp": (_no_seccomp, "libseccomp is not available")}


@pytest.mark.asyncio
@pytest.mark.parametrize("missing", sorted(HOSTS))
async def test_python_nodes_are_refused_at_load_where_the_sandbox_cannot_be_set_up(
        db_url: str, missing: str, monkeypatch: pytest.MonkeyPatch, fresh_probe: None) -> None:
    simulate, says = HOSTS[missing]
    simulate(monkeypatch)
    with pytest.raises(ConfigValidationError) as caught:
        async with engine_on(db_url, python_flow("session['leak'] = 'fine'")):
            pass
    message = str(caught.value)
    assert "flow PY node calc" in message and says in message and "flows.python-sandbox: weak" in message


@pytest.mark.asyncio
@pytest.mark.parametrize("missing", sorted(HOSTS))
async def test_the_weak_setting_accepts_the_weaker_sandbox(
        db_url: str, missing: str, monkeypatch: pytest.MonkeyPatch, fresh_probe: None) -> None:
    HOSTS[missing][0](monkeypatch)
    async with engine_on(db_url, python_flow("session['leak'] = json.dumps(math.floor(2.5))",
                                             **{"python-sandbox": "weak"})) as engine:
        assert (await engine.aprocess("hello")).text == "Result: 2"
        # the hook is still a layer: a plain open() is refused
    async with engine_on(db_url, python_flow("session['leak'] = open('/etc/passwd').read()",
                                             **{"python-sandbox": "weak"})) as engine:
        assert (await engine.aprocess("hello")).text == "Script failed."


@pytest.mark.asyncio
async def test_the_servers_environment_does_not_come_back_over_http(serve: Any, tmp_path: Path) -> None:
    code = ESCAPE + "session['leak'] = open('/proc/%d/environ' % p.getppid()).read()"
    pack = tmp_path / "pack.yaml"
    pack.write_text(yaml.safe_dump(python_flow(code)))
    server = serve(pack=pack, env=auth_env(CE_TEST_CANARY=CANARY))
    async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
        response = await send(client, USER_A, "hello")
    assert response.status_code == 200, response.text
    assert CANARY not in response.text
    assert "Script failed." in response.text
