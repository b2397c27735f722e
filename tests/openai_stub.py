"""A local OpenAI-compatible HTTP server for tests (127.0.0.1, no network).

``mode`` decides what the server supports: ``json_schema`` (everything), ``json_object``
(rejects ``response_format.type=json_schema`` with a 400 like servers without structured
output), or ``slow`` (answers after ``delay`` seconds); while ``outage`` is set it answers 503. ``reply(request) -> str`` produces the
assistant text; every request is recorded in ``requests``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StubServer:
    def __init__(self, reply: Callable[[dict[str, Any]], str], mode: str = "json_schema", delay: float = 0.0) -> None:
        self.reply = reply
        self.mode = mode
        self.delay = delay
        self.outage = False
        self.requests: list[dict[str, Any]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                stub.requests.append(body)
                status, payload = stub._answer(body)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        fmt = (body.get("response_format") or {}).get("type")
        if self.outage:
            return 503, {"error": {"message": "the model is overloaded", "type": "server_error", "code": None}}
        if self.mode == "json_object" and fmt == "json_schema":
            return 400, {"error": {"message": "response_format json_schema is not supported by this server",
                                   "type": "invalid_request_error", "code": None}}
        if self.mode == "slow":
            time.sleep(self.delay)
        text = self.reply(body)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if body.get("tools") and body.get("tool_choice"):
            name = body["tools"][0]["function"]["name"]
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": name, "arguments": text}}]}
        return 200, {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
                     "model": body.get("model", "stub"), "choices": [{"index": 0, "message": message,
                                                                        "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}


@contextmanager
def stub_server(reply: Callable[[dict[str, Any]], str], mode: str = "json_schema",
                delay: float = 0.0) -> Iterator[StubServer]:
    server = StubServer(reply, mode, delay)
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


def last_user_message(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def system_message(body: dict[str, Any]) -> str:
    for message in body.get("messages", []):
        if message.get("role") == "system":
            return str(message.get("content"))
    return ""
