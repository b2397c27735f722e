"""The YAML format of conversation tests (``*.conv.yaml``).

::

    pack: ../examples/support_desk.yaml      # relative to this file
    tasks: ../examples/support_desk_tasks.py # optional (default: <pack>_tasks.py next to the pack)
    settings: {flow: {dialogue-act: {resolute: REGEX_ONLY}}}   # optional EngineSettings
    knowledge: {faq: [../examples/faq]}      # optional: bases ingested before the tests (relative paths)
    embeddings: hashing                      # optional: none (default) or hashing (offline, deterministic)
    tests:
      - name: cancel an order
        context: {customer_id: C1}           # optional fixtures
        input_params: {channel: web}
        llm: {DIALOGUE_ACT: [{dialogueAct: AFFIRM, confidence: 0.9}]}   # scripted replies per call site
        llm_default: {dialogueAct: NEW_REQUEST, confidence: 0.8}         # for any other call
        tools:                                # stubs by tool code: one reply, or one per call
          crm.lookup: {result: {name: Ann}}
          orders.find: [{result: []}, {error: database down}]
        turns:
          - user: I want to cancel my order
            params: {order_id: A1}
            expect:
              intent: CANCEL_ORDER
              state: ASK_REASON
              payload: {contains: "Why would you like to cancel"}   # or a string (equals), or {regex: ...}
                                                                      # {source: faq.md}: the best of payload.sources
              context: {cancel_reason: null}  # dotted paths
              stages: [USER_INPUT, INTENT_CLASSIFICATION_MATCHED]   # in this order, others may sit between
              absent_stages: [POLICY_BLOCK]
              llm_calls: {DIALOGUE_ACT: 0}    # per call site; sites not listed must not be called
              tool_calls: {crm.lookup: 1}     # counts, or a list of the expected args per call
              error: LLM_TIMEOUT              # the turn must fail with this code
              flow: {at: LOAN/ask_amount, vars: {amount: 5000}}   # flow position ("root": none) and session.*
              workflow: {at: root, vars: {order.status: shipped}}   # the same, of the workflow runtime
          - event: welcome                    # instead of user: the bot speaks first (or handoff_resume)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from convengine.catalog.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PayloadExpectation(_Strict):
    equals: Any = None
    contains: str | None = None
    regex: str | None = None
    type: str | None = None
    source: str | None = None
    """The first (best) of the payload's ``sources`` (a knowledge answer) is this document."""


class FlowExpectation(_Strict):
    at: str | None = None
    """``FLOW/node`` of the innermost flow call, or ``root`` when no flow is active."""
    vars: dict[str, Any] = Field(default_factory=dict)
    """Dotted paths into the flow variables (``session.*``)."""


class Expect(_Strict):
    intent: str | None = None
    state: str | None = None
    status: str | None = None
    payload: PayloadExpectation | None = None
    context: dict[str, Any] = Field(default_factory=dict)
    stages: list[str] = Field(default_factory=list)
    absent_stages: list[str] = Field(default_factory=list)
    llm_calls: dict[str, int] | None = None
    tool_calls: dict[str, int | list[dict[str, Any]]] | None = None
    error: str | None = None
    flow: FlowExpectation | None = None
    workflow: FlowExpectation | None = None
    """The workflow runtime's position and variables, as ``flow`` (``WORKFLOW/node`` or ``root``)."""

    @field_validator("payload", mode="before")
    @classmethod
    def _text_means_equals(cls, value: object) -> object:
        if value is None or isinstance(value, dict):
            return value
        return {"equals": value}


class Turn(_Strict):
    user: str
    event: Literal["welcome", "handoff_resume"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _event_needs_no_text(cls, value: object) -> object:
        if isinstance(value, dict) and value.get("event") is not None and "user" not in value:
            return {**value, "user": ""}
        return value
    params: dict[str, Any] = Field(default_factory=dict)
    reset: bool = False
    expect: Expect = Field(default_factory=Expect)


class ToolStub(_Strict):
    result: Any = None
    error: str | None = None


class ConversationTest(_Strict):
    name: str
    context: dict[str, Any] = Field(default_factory=dict)
    input_params: dict[str, Any] = Field(default_factory=dict)
    llm: dict[str, Any] = Field(default_factory=dict)
    llm_default: Any = None
    tools: dict[str, ToolStub | list[ToolStub]] = Field(default_factory=dict)
    turns: list[Turn]


class TestFile(_Strict):
    pack: str
    tasks: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    knowledge: dict[str, list[str]] = Field(default_factory=dict)
    """Knowledge bases ingested into the test database first: name -> files or folders (relative to this file)."""
    embeddings: Literal["none", "hashing"] = "none"
    """The engine's embeddings model: none (full-text search only) or the offline HashingEmbeddings."""
    tests: list[ConversationTest]
    path: Path | None = None

    def resolve(self, relative: str) -> Path:
        assert self.path is not None
        candidate = Path(relative)
        return candidate if candidate.is_absolute() else (self.path.parent / candidate).resolve()


def load_test_file(path: str | Path) -> TestFile:
    """Read and check a conversation-test file; ConfigError names what is wrong and where."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read conversation tests: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a conversation-test file is a mapping with 'pack' and 'tests'")
    try:
        parsed = TestFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{path}: invalid conversation tests: {problems}") from None
    parsed.path = path.resolve()
    return parsed
