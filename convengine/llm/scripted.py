"""ScriptedLLM: a deterministic LLM for tests, notebooks and offline demos.

Replies are scripted per call site, as a queue or as a function of the request::

    llm = ScriptedLLM({
        "DIALOGUE_ACT": [{"dialogueAct": "AFFIRM", "confidence": 0.9}],
        "RESPONSE_TEXT": lambda call: f"You said {call.user_text!r}",
    })

A reply may be text, a JSON value (dict/list), an :class:`LlmReply` (text, parsed value, token
usage and model name: what spend and analytics count), an exception (raised, to simulate outages),
or :class:`Delay` (sleep first, to simulate slow models). Every call is logged in
:attr:`ScriptedLLM.calls`. A call with no script left fails with a message naming the call
site, unless a ``default`` reply was given.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from convengine.catalog.errors import ErrorCode, LlmError


class UnscriptedCallError(LlmError):
    """ScriptedLLM was asked for a call site it has no reply for."""

    default_code = ErrorCode.LLM_CALL_FAILED

    def __init__(self, message: str, *, code: ErrorCode | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code, recoverable=False, details=details)


@dataclass(frozen=True, slots=True)
class Delay:
    """Wait ``seconds`` before replying with ``reply`` (a slow model)."""

    seconds: float
    reply: Any


@dataclass(frozen=True, slots=True)
class LlmReply:
    """A model's reply: its text, the parsed JSON value when the backend gave one, token usage."""

    text: str
    value: Any = None
    usage: dict[str, int] = field(default_factory=dict)
    model: str | None = None


@dataclass(frozen=True, slots=True)
class LlmCall:
    """One request to the model.

    Attributes:
        call_site: DIALOGUE_ACT, INTENT_AGENT, SCHEMA_EXTRACTION, RESPONSE_TEXT...
        system: the system prompt.
        user: the user prompt.
        schema: the JSON schema asked for (JSON calls), else None.
        conversation_id, intent, state: where the call came from.
        model, temperature: per-call options a call site may set (a flow ``agent`` node's ``model``
            and ``temperature``); None means the backend's configured model and temperature.
    """

    call_site: str
    system: str
    user: str
    schema: dict[str, Any] | None = None
    conversation_id: str | None = None
    intent: str | None = None
    state: str | None = None
    model: str | None = None
    temperature: float | None = None

    @property
    def prompt(self) -> str:
        return f"{self.system}\n\n{self.user}".strip()

    @property
    def user_text(self) -> str:
        return self.user

    @property
    def wants_json(self) -> bool:
        return self.schema is not None


@dataclass
class LoggedCall:
    call: LlmCall
    reply: Any


Script = list[object] | tuple[object, ...] | Callable[[LlmCall], object] | object
"""A call site's script: a list/tuple of replies, a single callable, or a single reply."""


class ScriptedLLM:
    """Scripted replies per call site; see the module docstring."""

    def __init__(self, script: Mapping[str, Script] | None = None, **kwargs: object) -> None:
        self.calls: list[LoggedCall] = []
        self.load(script, **kwargs)

    def load(self, script: Mapping[str, Script] | None = None, **kwargs: object) -> ScriptedLLM:
        """Replace the whole script (and ``default``); the call log is kept."""
        self.script: dict[str, Script] = {k.upper(): v for k, v in dict(script or {}).items()}
        self.has_default = "default" in kwargs
        self.default = kwargs.pop("default", None)
        if kwargs:
            raise TypeError(f"unknown ScriptedLLM options: {', '.join(kwargs)}")
        self._queues: dict[str, deque[object]] = {}
        for site, replies in self.script.items():
            if isinstance(replies, (list, tuple)):
                self._queues[site] = deque(replies)
        return self

    def add(self, call_site: str, *replies: object) -> ScriptedLLM:
        """Queue more replies for a call site."""
        self._queues.setdefault(call_site.upper(), deque()).extend(replies)
        return self

    def count(self, call_site: str | None = None) -> int:
        """Calls made (to one call site, or in all)."""
        return sum(1 for c in self.calls if call_site is None or c.call.call_site == call_site.upper())

    def calls_to(self, call_site: str) -> list[LlmCall]:
        return [c.call for c in self.calls if c.call.call_site == call_site.upper()]

    def sites(self) -> list[str]:
        """Call sites in call order."""
        return [c.call.call_site for c in self.calls]

    def reset_log(self) -> None:
        self.calls.clear()

    async def respond(self, call: LlmCall) -> Any:
        """The scripted reply for ``call`` (raised if it is an exception)."""
        reply = self._next(call)
        if isinstance(reply, Delay):
            await asyncio.sleep(reply.seconds)
            reply = reply.reply
        self.calls.append(LoggedCall(call, reply))
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, type) and issubclass(reply, BaseException):
            raise reply()
        return reply

    def _next(self, call: LlmCall) -> Any:
        site = call.call_site.upper()
        queue = self._queues.get(site)
        if queue:
            return self._resolve(queue.popleft(), call)
        scripted = self.script.get(site)
        if callable(scripted) and not isinstance(scripted, (list, tuple)):
            return self._resolve(scripted, call)
        if scripted is not None and not isinstance(scripted, (list, tuple)):
            return scripted
        if self.has_default:
            return self._resolve(self.default, call)
        raise UnscriptedCallError(
            f"ScriptedLLM has no reply for call site {site} (conversation {call.conversation_id}, "
            f"{call.intent}/{call.state}); script it, e.g. ScriptedLLM({{{site!r}: [...]}})",
            details={"callSite": site})

    @staticmethod
    def _resolve(reply: object, call: LlmCall) -> object:
        if callable(reply) and not isinstance(reply, type):
            return reply(call)
        return reply


def reply_text(reply: object) -> str:
    """A scripted reply as the text a model would have produced."""
    if isinstance(reply, str):
        return reply
    return json.dumps(reply, ensure_ascii=False)


def scripted(replies: Mapping[str, Script], **kwargs: object) -> ScriptedLLM:
    """Shorthand for ``ScriptedLLM(replies, ...)``."""
    return ScriptedLLM(dict(replies), **kwargs)
