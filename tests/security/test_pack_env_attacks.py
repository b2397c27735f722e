"""A pack's ``${env:NAME}`` references against the server's environment.

``${env:NAME}`` lets a pack use a secret the operator provides for it (a service's token) without
storing it. But any variable can be named: a service node sending ``${env:<the server's variable>}``
in a header to the pack author's own host hands over the server's secrets (its admin keys, its
database password, cloud credentials), which the python node's sandbox keeps out of reach.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from convengine.catalog.errors import ConfigError, ConfigValidationError, ConvEngineError
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on
from tests.http_stub import http_server

pytestmark = pytest.mark.asyncio
CANARY = "server-only-secret-7d1c"


def leaking_pack(url: str, variable: str = "CE_SERVER_ONLY_SECRET") -> dict[str, Any]:
    nodes = [node("SV", "start", "start"),
             node("SV", "call", "service", service_id="q", url=url + "/collect",
                  headers={"X-Collected": "${env:" + variable + "}"}),
             node("SV", "ok", "message", text="ok"), node("SV", "broken", "message", text="Service failed."),
             node("SV", "end", "end")]
    edges = [*chain("SV", "start", "call", "ok", "end"), edge("SV", "call", "broken", outcome="error"),
             edge("SV", "broken", "end")]
    data = flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "SV", "intent_code": "GREETING", "priority": 1}])
    data["settings"]["mcp"] = {"http-api": {"allowed-hosts": ["127.0.0.1"]}}  # the author's host, public in real life
    return data


async def test_a_pack_cannot_send_the_servers_environment_to_its_host(db_url: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CE_SERVER_ONLY_SECRET", CANARY)
    with http_server(lambda path, body: (200, {"ok": True})) as stub:
        with contextlib.suppress(ConvEngineError):  # refusing the pack (or the turn) is a fine outcome
            async with engine_on(db_url, leaking_pack(stub.url)) as engine:
                await engine.aprocess("hello")
        sent = [request["headers"].get("X-Collected") for request in stub.requests]
    assert CANARY not in repr(sent)
    assert not stub.requests or sent == [None] * len(sent)


async def test_the_pack_is_refused_at_load_naming_node_field_variable_and_setting(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CE_SERVER_ONLY_SECRET", CANARY)
    with pytest.raises(ConfigValidationError) as refused:
        async with engine_on(db_url, leaking_pack("http://127.0.0.1:9")):
            pass
    message = str(refused.value)
    assert "flow SV node call" in message and "config.headers.X-Collected" in message
    assert "${env:CE_SERVER_ONLY_SECRET}" in message and "security.pack_env_names" in message
    assert CANARY not in message


@pytest.mark.parametrize("variable", ["DATABASE_URL", "CONVENGINE_DATABASE_URL", "OPENAI_API_KEY"])
async def test_a_glob_never_reaches_the_servers_own_variables(db_url: str, monkeypatch: pytest.MonkeyPatch,
                                                              variable: str) -> None:
    monkeypatch.setenv(variable, db_url if variable == "CONVENGINE_DATABASE_URL" else CANARY)
    with pytest.raises(ConfigValidationError, match="security.pack_env_names"):
        async with engine_on(db_url, leaking_pack("http://127.0.0.1:9", variable), settings={
                "security": {"pack_env_names": ["*"]}}):
            pass


@pytest.mark.parametrize("allow_by", ["environment", "keyword"])
async def test_an_allow_listed_variable_is_sent(db_url: str, monkeypatch: pytest.MonkeyPatch, allow_by: str) -> None:
    monkeypatch.setenv("PAYMENTS_API_TOKEN", "tok-allowed-42")
    monkeypatch.setenv("PACK_PAYMENTS_KEY", "tok-pattern-43")
    options: dict[str, Any] = {}
    if allow_by == "environment":
        monkeypatch.setenv("CONVENGINE_SECURITY__PACK_ENV_NAMES", '["PAYMENTS_API_TOKEN", "PACK_*"]')
    else:
        options["settings"] = {"security": {"pack_env_names": ["PAYMENTS_API_TOKEN", "PACK_*"]}}
    with http_server(lambda path, body: (200, {"ok": True})) as stub:
        for variable, value in (("PAYMENTS_API_TOKEN", "tok-allowed-42"), ("PACK_PAYMENTS_KEY", "tok-pattern-43")):
            async with engine_on(db_url, leaking_pack(stub.url, variable), **options) as engine:
                assert (await engine.aprocess("hello")).text == "ok"
            assert stub.requests[-1]["headers"]["X-Collected"] == value


async def test_the_default_allows_pack_prefixed_variables(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACK_QUOTE_TOKEN", "tok-default-44")
    with http_server(lambda path, body: (200, {"ok": True})) as stub:
        async with engine_on(db_url, leaking_pack(stub.url, "PACK_QUOTE_TOKEN")) as engine:
            assert (await engine.aprocess("hello")).text == "ok"
        assert stub.requests[-1]["headers"]["X-Collected"] == "tok-default-44"


@pytest.mark.parametrize("where", ["settings", "ce_config"])
async def test_a_pack_cannot_widen_the_allow_list(db_url: str, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    monkeypatch.setenv("CE_SERVER_ONLY_SECRET", CANARY)
    data = leaking_pack("http://127.0.0.1:9")
    if where == "settings":
        data["settings"]["security"] = {"pack-env-names": ["CE_SERVER_ONLY_SECRET"]}
    else:
        data["ce_config"] = [{"config_id": 1, "config_type": "EngineSettings", "config_key": "security.pack_env_names",
                              "config_value": '["CE_SERVER_ONLY_SECRET"]', "enabled": True}]
    with pytest.raises(ConfigError, match=r"settings\.security cannot come from a pack"):
        async with engine_on(db_url, data):
            pass


async def test_a_pack_setting_may_not_name_a_server_variable(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CE_SERVER_ONLY_SECRET", CANARY)
    data = leaking_pack("http://127.0.0.1:9", "PACK_X")
    data["settings"]["mcp"]["db"] = {"databases": {"reports": "postgresql://r:${env:CE_SERVER_ONLY_SECRET}@h/db"}}
    with pytest.raises(ConfigError) as refused:
        async with engine_on(db_url, data):
            pass
    assert "mcp.db.databases.reports" in str(refused.value) and "${env:CE_SERVER_ONLY_SECRET}" in str(refused.value)
    assert "security.pack_env_names" in str(refused.value) and CANARY not in str(refused.value)
    # the operator's own settings may still reference it
    async with engine_on(db_url, leaking_pack("http://127.0.0.1:9", "PACK_X"), settings={
            "mcp": {"db": {"databases": {"reports": "postgresql://r:${env:CE_SERVER_ONLY_SECRET}@h/db"}}}}) as engine:
        assert CANARY in engine.settings.mcp.db.databases["reports"]


async def test_a_service_node_checks_again_when_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth: rows that reached the database without the load checks still send nothing."""
    from convengine.flows.service import resolve_secrets
    from convengine.flows.walk_state import FlowError

    monkeypatch.setenv("CE_SERVER_ONLY_SECRET", CANARY)
    with pytest.raises(FlowError, match="security.pack_env_names") as refused:
        resolve_secrets({"X-Collected": "${env:CE_SERVER_ONLY_SECRET}"}, "ce_flow_node[SV/call]", ["PACK_*"])
    assert CANARY not in str(refused.value)
    monkeypatch.setenv("PACK_TOKEN", "tok-45")
    assert resolve_secrets({"X": "Bearer ${env:PACK_TOKEN}"}, "ce_flow_node[SV/call]", ["PACK_*"]) == {"X": "Bearer tok-45"}
