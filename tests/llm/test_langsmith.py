"""LangSmith tracing as docs/langsmith.md describes it: ``LANGSMITH_TRACING=true`` and nothing else.

A turn is one root run named ``convengine`` (the conversation id as ``thread_id``), each step a
child run, and a LangChain chat model's calls LLM runs under the step that made them. The
LangSmith endpoint is a local server here (no network); the engine runs in a child process because
LangSmith reads its environment once per process.
"""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from email import policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.openai_stub import stub_server

ROOT = Path(__file__).resolve().parents[2]

TURN = """
import sys
from convengine import Engine
from langchain_core.tracers.langchain import wait_for_all_tracers

engine = Engine.open(sys.argv[1], pack=sys.argv[2], llm="openai")
result = engine.process("I'd like a pizza")
print(result.conversation_id)
engine.close()
wait_for_all_tracers()
"""


class LangSmithStub:
    """Accepts LangSmith's multipart run ingestion and keeps every run posted, by id."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _handle(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.startswith("/runs/multipart"):
                    stub.take(self.headers["Content-Type"], raw)
                status = 404 if self.path.startswith("/info") else 200  # no /info: the client's defaults
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PATCH = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def take(self, content_type: str, raw: bytes) -> None:
        message = email.message_from_bytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw, policy=policy.HTTP)
        for part in message.iter_parts():  # type: ignore[attr-defined]
            _post_or_patch, _, rest = str(part.get_param("name", header="content-disposition")).partition(".")
            run_id, _, field = rest.partition(".")
            body = json.loads(part.get_payload(decode=True))
            run = self.runs.setdefault(run_id, {})
            if field:
                run[field] = body
            else:
                run.update({k: v for k, v in body.items() if v is not None or k not in run})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@contextmanager
def langsmith_server() -> Iterator[LangSmithStub]:
    stub = LangSmithStub()
    thread = threading.Thread(target=stub.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        stub.server.shutdown()
        stub.server.server_close()


def test_a_turn_is_traced_to_langsmith_with_its_steps_and_llm_calls(tmp_path: Path) -> None:
    with langsmith_server() as langsmith, stub_server(lambda _request: '{"size": null}') as openai:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LANGSMITH_TRACING": "true",
               "LANGSMITH_ENDPOINT": langsmith.url, "LANGSMITH_API_KEY": "ls-test-key",
               "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": openai.base_url}
        done = subprocess.run([sys.executable, "-c", TURN, f"sqlite:///{tmp_path / 'traced.db'}",
                               str(ROOT / "examples" / "pizza.yaml")], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        conversation_id = done.stdout.split()[-1]

    runs = langsmith.runs
    roots = [r for r in runs.values() if r.get("parent_run_id") is None]
    assert [r["name"] for r in roots] == ["convengine"]
    root = roots[0]
    assert root["extra"]["metadata"]["thread_id"] == conversation_id  # LangSmith groups a conversation's turns
    assert root["inputs"]["turn_input"]["text"] == "I'd like a pizza"
    assert root["outputs"]["state"] == "CHOOSE_SIZE"
    steps = {r["name"]: r for r in runs.values() if r.get("parent_run_id") == root["id"]}
    assert {"load_or_create_conversation", "intent_resolution", "rules", "response_resolution"} <= set(steps)
    llm_runs = [r for r in runs.values() if r.get("run_type") == "llm"]
    assert len(llm_runs) == 1
    ancestors = []
    run = llm_runs[0]
    while run.get("parent_run_id"):
        run = runs[run["parent_run_id"]]
        ancestors.append(run["name"])
    assert ancestors[-1] == "convengine" and set(ancestors) & set(steps), ancestors
    assert "ls-test-key" not in json.dumps(runs) and "sk-test" not in json.dumps(runs)
