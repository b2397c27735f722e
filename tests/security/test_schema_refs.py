"""Issue 34: a JSON Schema ``$ref`` in a pack (``ce_output_schema.json_schema``, a flow node's
``value_schema``, a draft sent over HTTP) may point only inside the schema.

Before: jsonschema's default resolver followed any reference when a turn validated against the schema:
the server sent a GET to whatever URL the pack named (a loopback admin port, a cloud metadata address;
no address check, no timeout) and read ``file://`` references from its disk. Now remote and file
references are refused when the configuration loads, naming the table, row, field and reference, and
nothing is fetched; local references (``#/$defs/...``) keep working.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from convengine.catalog.errors import ConfigValidationError
from convengine.engine import Engine
from tests.flows.packs import chain, flows_pack, node
from tests.helpers import pack


class _Witness(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        body = json.dumps({"type": "string"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def witness() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that records every GET: (its base URL, the paths requested)."""
    handler = type("Witness", (_Witness,), {"hits": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler.hits
    server.shutdown()
    server.server_close()


def _output_schema(ref: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"customerId": {"$ref": ref}}, "$defs": {"id": {"type": "string"}}}
    return pack(ce_output_schema=[{"schema_id": 21, "intent_code": "LOAN", "state_code": "START",
                                   "schema_type": "SCHEMA_JSON", "json_schema": json.dumps(schema),
                                   "description": "loan slots", "priority": 1, "enabled": True}])


def _flow_schema(ref: str) -> dict[str, Any]:
    ask = node("NAME", "ask_name", "entity", variable="name", prompt="Your name?", extract="llm",
               description="the name", value_schema={"type": "object", "properties": {"name": {"$ref": ref}}})
    return flows_pack(flows=[{"flow_code": "NAME", "description": "asks a name"}],
                      nodes=[node("NAME", "start", "start"), ask, node("NAME", "end", "end")],
                      edges=chain("NAME", "start", "ask_name", "end"))


def _refs(base: str, secret: Path) -> list[str]:
    return [f"{base}/schema.json", f"file://{secret}", "other.json#/x", f"{base}/s.json#/definitions/a"]


@pytest.mark.parametrize("build,where", [(_output_schema, "ce_output_schema[21].json_schema"),
                                         (_flow_schema, "ce_flow_node")], ids=["output-schema", "value-schema"])
def test_remote_and_file_refs_are_refused_at_load(db_url: str, tmp_path: Path, witness: Any, build: Any,
                                                  where: str) -> None:
    base, hits = witness
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string"}')
    for ref in _refs(base, secret):
        with pytest.raises(ConfigValidationError) as refused:
            Engine.open(db_url, pack=build(ref)).close()
        assert where in refused.value.message and ref in refused.value.message, refused.value.message
        assert "only local references" in refused.value.message
    assert hits == []


def test_local_refs_keep_working(db_url: str) -> None:
    with Engine.open(db_url, pack=_output_schema("#/$defs/id")) as engine:
        assert engine.process("hello").state == "IDLE"
    with Engine.open(db_url, pack=_flow_schema("#/properties/name"), replace=True) as engine:
        assert engine.snapshot.version


async def test_a_draft_over_http_is_refused_too(serve: Any, witness: Any) -> None:
    base, hits = witness
    server = serve()
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        drafted = await client.post("/api/v1/versions/draft", json={"pack": _output_schema(f"{base}/x.json")})
    assert drafted.status_code == 422, drafted.text
    assert f"{base}/x.json" in drafted.text and "ce_output_schema[21].json_schema" in drafted.text
    assert hits == []
