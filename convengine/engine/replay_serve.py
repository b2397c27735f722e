"""What answers a replayed turn from its recording: the LLM replies, the tool results and the flow
service responses the recorded turn got. Nothing here reaches a model (unless the live one is given),
a tool or a network: a call the recording cannot answer fails, and the replayed turn shows it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from convengine.audit.events import AuditEvent
from convengine.catalog import stages
from convengine.catalog.errors import ToolError
from convengine.engine.recording import RecordedTurn
from convengine.llm.gateway import LlmBackend
from convengine.llm.scripted import LlmCall, ScriptedLLM
from convengine.security.redact import redact_text
from convengine.settings import HttpApiSettings
from convengine.tools.http import HttpRequest

SERVICE_STAGES = (stages.FLOW_SERVICE_CALLED, stages.FLOW_SERVICE_FAILED)


class RecordedLLM(ScriptedLLM):
    """Serves each turn's recorded replies per call site; past them, the live model when given, else a
    failure naming the call site (the turn then differs from its recording)."""

    def __init__(self, live: LlmBackend | None) -> None:
        super().__init__()
        self.live = live
        self.live_calls = 0

    async def respond(self, call: LlmCall) -> Any:
        if self.live is None or self._queues.get(call.call_site.upper()):
            return await super().respond(call)
        self.live_calls += 1
        reply = await self.live.complete(call)
        return reply.value if call.wants_json and reply.value is not None else reply.text


class RecordedTools:
    """Tool handlers answering from the turn's recorded calls (same tool, same arguments), each once."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def load(self, turn: RecordedTurn) -> None:
        self.calls = [dict(call) for call in turn.tools]

    def handler(self, code: str) -> Callable[[dict[str, Any]], Any]:
        def answer(args: dict[str, Any]) -> Any:
            wanted = plain(args)
            found = next((c for c in self.calls if str(c["tool"]).lower() == code.lower() and plain(c["args"]) == wanted),
                         None)
            if found is None:
                raise ToolError(f"replay: the recording holds no result of tool {code} with these arguments "
                                "(the tool was not called)")
            self.calls.remove(found)
            if found["error"]:
                raise ToolError(str(found["error"]))
            return found["result"]

        return answer


def plain(value: object) -> Any:
    """``value`` as JSON reads it back (what the audit recorded)."""
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def service_calls(events: list[AuditEvent]) -> list[dict[str, Any]]:
    """The flow service calls of a turn: ``{service, method, url, response, error}`` in order."""
    calls = []
    for event in events:
        if event.stage in SERVICE_STAGES:
            p = event.payload
            calls.append({"service": f"{p.get('flow')}/{p.get('serviceId')}", "method": p.get("method"),
                          "url": p.get("url"), "status": p.get("status"), "response": p.get("response"),
                          "error": p.get("message") if event.stage == stages.FLOW_SERVICE_FAILED else None})
    return calls


class RecordedHttp:
    """Stands in for the HTTP runner of flow service nodes: each call answered by the turn's recorded
    response of the same service, method and URL (each once), never sent."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def load(self, turn: RecordedTurn) -> None:
        self.calls = service_calls(turn.events)

    async def execute(self, tool_code: str, spec: HttpRequest, settings: HttpApiSettings) -> dict[str, Any]:
        del settings
        parts = urlsplit(spec.url)
        wanted = {"service": tool_code.removeprefix("flow:").replace(":", "/", 1), "method": spec.method,
                  "url": redact_text(f"{parts.scheme}://{parts.netloc}{parts.path}")}
        found = next((c for c in self.calls if all(c[k] in (None, v) for k, v in wanted.items())), None)
        if found is None:
            raise ToolError(f"replay: the recording holds no response of {wanted['method']} {wanted['url']} for "
                            f"service {wanted['service']} (it was not called)")
        self.calls.remove(found)
        if found["error"]:
            raise ToolError(str(found["error"]))
        return {"status": found["status"] or 200, "attempt": 1, "latencyMs": 0.0, "mapped": found["response"]}

    async def aclose(self) -> None:
        return None
