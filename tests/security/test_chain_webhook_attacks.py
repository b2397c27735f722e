"""Chain webhooks reach only where the operator allows, and a paused run's stored interrupt runs no code.

Attacks: a ``webhook`` step (configured by a pack author, or with a URL a caller's input fills in) aimed
at the server's own loopback services, a private network or the cloud metadata address; a host name
resolving to loopback; a redirect from an allowed host to another address; a caller's input that
changes the configured host; an ``${env:NAME}`` reading a server secret. And a checkpoint row rewritten
so a paused run's interrupt carries an object constructor (e.g. ``os.system``).
"""

from __future__ import annotations

from pathlib import Path

import ormsgpack
import pytest
from langgraph.types import Interrupt

from convengine.catalog import stages
from convengine.catalog.errors import ConfigValidationError, InvalidInputError, UnsafeCheckpointError
from convengine.chains import Chains
from convengine.checkpointing.serde import StrictSerializer
from convengine.config_loader import validate_pack
from tests.chains.support import chain_pack, step
from tests.helpers import engine_on
from tests.http_stub import http_server

EXT_CONSTRUCTOR_POS_ARGS, EXT_CONSTRUCTOR_KW_ARGS = 1, 3


def _hook(url: str, allowed: list[str] | None = None) -> dict[str, object]:
    return chain_pack(step("hook", "webhook", url=url, retries=0, timeout_ms=1000),
                      settings={"mcp": {"http-api": {"allowed-hosts": allowed or []}}})


@pytest.mark.parametrize("target", ["http://127.0.0.1:{port}/internal", "http://localhost:{port}/internal",
                                    "http://10.0.0.1/x", "http://169.254.169.254/latest/meta-data",
                                    "http://[::1]:{port}/x", "http://0.0.0.0:{port}/x"])
async def test_a_webhook_to_loopback_or_a_private_address_is_refused(db_url: str, target: str) -> None:
    with http_server(lambda path, body: (200, {"secret": "internal"})) as stub:
        port = stub.url.rsplit(":", 1)[1]
        async with engine_on(db_url, _hook(target.format(port=port))) as engine:
            run = await Chains(engine).astart("C")
            assert run.status == "FAILED" and "URL_NOT_ALLOWED" in (run.error or "")
            assert stub.requests == []  # nothing reached the internal service
            refused = [e for e in await engine.aaudit(run.conversation_id) if e.stage == stages.CHAIN_WEBHOOK_REFUSED]
            assert refused and refused[0].payload["step"] == "hook"


async def test_an_allow_listed_host_is_reached_and_its_redirect_is_not_followed(db_url: str) -> None:
    with http_server(lambda path, body: (200, {"reached": True})) as inner:
        def redirect(path: str, body: object) -> tuple[int, object]:
            return (302, "moved") if path == "/go" else (200, {"ok": True})

        with http_server(redirect) as outer:
            host_port = outer.url.split("//", 1)[1]
            async with engine_on(db_url, _hook(f"http://{host_port}/go", [host_port.split(':')[0] + "/32"])) as engine:
                run = await Chains(engine).astart("C")
            assert run.status == "COMPLETED", run.error
            assert run.output["hook"]["status"] == 302 and [r["path"] for r in outer.requests] == ["/go"]
            assert inner.requests == []


@pytest.mark.parametrize("url", ["https://api.example.com/{{ input.path }}", "https://api.example.com{{ input.path }}"])
async def test_caller_input_in_the_url_cannot_reach_a_loopback_service(db_url: str, url: str) -> None:
    """``@127.0.0.1:port`` after the host makes it userinfo: the request would go to loopback."""
    with http_server(lambda path, body: (200, {})) as stub:
        async with engine_on(db_url, chain_pack(step("hook", "webhook", url=url, retries=0))) as engine:
            run = await Chains(engine).astart("C", {"path": f"@{stub.url.split('//', 1)[1]}/x"})
        assert run.status == "FAILED" and run.steps[0]["status"] == "FAILED"  # no network here: api.example.com
        assert stub.requests == []  # does not resolve, and the loopback stub was never asked


def test_a_webhook_may_not_read_a_server_secret_from_the_environment() -> None:
    with pytest.raises(ConfigValidationError, match=r"chain C step hook: config\.headers\.Authorization"):
        validate_pack(chain_pack(step("hook", "webhook", url="https://api.example.com/x",
                                      headers={"Authorization": "Bearer ${env:CONVENGINE_DATABASE_URL}"})))


def test_a_rewritten_interrupt_cannot_rebuild_an_object(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = ormsgpack.Ext(EXT_CONSTRUCTOR_POS_ARGS, ormsgpack.packb(("os", "system", [f"touch {marker}"])))
    planted = ormsgpack.Ext(EXT_CONSTRUCTOR_KW_ARGS, ormsgpack.packb(
        ("langgraph.types", "Interrupt", {"value": evil, "id": "x"})))
    serde = StrictSerializer()
    with pytest.raises(UnsafeCheckpointError, match="os.system"):
        serde.loads_typed(("msgpack", ormsgpack.packb([planted])))
    assert not marker.exists()
    genuine = serde.loads_typed(serde.dumps_typed([Interrupt(value={"kind": "human"}, id="i-1")]))
    assert genuine == [Interrupt(value={"kind": "human"}, id="i-1")]


async def test_unstorable_text_in_input_answer_or_a_reply_never_breaks_a_run(db_url: str) -> None:
    """A NUL (PostgreSQL cannot store one) from a caller is refused; from a webhook's reply it is replaced."""
    with http_server(lambda path, body: (200, {"note": "bad\u0000byte"})) as stub:
        data = chain_pack(step("ask", "human", prompt="ok?"), step("hook", "webhook", url=f"{stub.url}/x"),
                          settings={"mcp": {"http-api": {"allowed-hosts": ["127.0.0.1"]}}})
        async with engine_on(db_url, data) as engine:
            chains = Chains(engine)
            with pytest.raises(InvalidInputError, match="input"):
                await chains.astart("C", {"name": "a\u0000b"})
            run = await chains.astart("C", {"name": "ok"})
            with pytest.raises(InvalidInputError):
                await chains.aresume(run.run_id, {"why": "x\u0000"})
            done = await chains.aresume(run.run_id, {"why": "fine"})
        assert done.status == "COMPLETED", done.error
        assert done.output["hook"]["response"]["note"] == "bad\ufffdbyte"
