"""Request and response bodies of ConvEngine's REST contract."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema

from convengine.engine.results import Payload
from convengine.security.users import user_id_pattern

UUID_TEXT: dict[str, Any] = {"format": "uuid"}
"""A conversation id: a UUID (the engine checks it, so a bad one gets INVALID_CONVERSATION_ID)."""
NO_NUL = "^[^\\u0000]*$"
"""Text the database can store: no NUL character."""


def any_case(*words: str) -> str:
    """A portable pattern matching any of ``words`` in any letter case, with surrounding blanks."""
    spelled = ["".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in w) for w in words]
    return f"^\\s*({'|'.join(spelled)})\\s*$"


def _reset(value: object) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if type(value) is int and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError("reset must be true or false (also accepted: 1 or 0, \"true\" or \"false\", null)")


ResetFlag = Annotated[bool, PlainValidator(_reset), WithJsonSchema({
    "anyOf": [{"type": "boolean"}, {"type": "integer", "enum": [0, 1]},
              {"type": "string", "pattern": "^([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])$"}, {"type": "null"}],
    "default": False, "description": "Wipe the conversation before processing the message. A JSON boolean; "
    "1/0, \"true\"/\"false\" and null (false) are accepted too, as ConvEngine's Java server accepts them."})]
"""ConvEngine's ``Boolean reset``, read as its Java server (Jackson) reads it."""


def _user_id_schema(schema: dict[str, Any]) -> None:
    schema["anyOf"] = [{"type": "string", "pattern": user_id_pattern(declared=True)}, {"type": "null"}]


def _feedback_type_schema(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update({"type": "string", "pattern": any_case("THUMBS_UP", "THUMBS_DOWN"),
                   "description": "THUMBS_UP or THUMBS_DOWN (any case)."})


class MessageRequest(BaseModel):
    """``POST /api/v1/conversation/message``."""

    model_config = ConfigDict(extra="ignore")

    conversationId: str | None = Field(None, description="Continue this conversation (a UUID); omit to start one.",
                                       json_schema_extra=UUID_TEXT)
    message: str | None = Field(None, description="The user's message; empty or omitted for a silent submit "
                                "(a turn driven by inputParams alone); at most api.max_message_chars characters "
                                "(413 beyond).", json_schema_extra={"pattern": NO_NUL})
    reset: ResetFlag = False
    inputParams: dict[str, Any] | None = Field(None, description="Caller params for this turn (an object).")
    userId: str | None = Field(None, description="The end user the conversation belongs to (stored on its first "
                               "turn, never changed): 1-200 characters, no control or invisible formatting "
                               "characters.", json_schema_extra=_user_id_schema)


SOURCES_SCHEMA: dict[str, Any] = {
    "type": "array", "description": "Only on an answer from knowledge bases (the fallback or a flow's knowledge "
    "node): the passages it came from, best first. Absent otherwise (ConvEngine's payload is {type, value}).",
    "items": {"type": "object", "required": ["kb", "source", "score"], "properties": {
        "kb": {"type": "string"}, "source": {"type": "string", "description": "The document (its stable id)."},
        "title": {"type": ["string", "null"]}, "position": {"type": ["integer", "null"]},
        "score": {"type": "number"}}}}


def _sources_schema(schema: dict[str, Any]) -> None:
    schema.setdefault("properties", {})["sources"] = SOURCES_SCHEMA


class PayloadBody(BaseModel):
    """The answer; ``sources`` is added (only) to an answer from knowledge bases."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_sources_schema)

    type: str
    value: Any

    @classmethod
    def of(cls, payload: Payload) -> PayloadBody:
        """The HTTP form of a turn's :class:`~convengine.engine.results.Payload`."""
        if payload.sources:
            return cls(type=payload.type, value=payload.value, sources=[dict(s) for s in payload.sources])
        return cls(type=payload.type, value=payload.value)


class MessageResponse(BaseModel):
    """ConvEngine's reply; on failure ``success`` is false, intent/state are ERROR and ``payload`` is of type ERROR."""

    success: bool
    conversationId: str | None
    intent: str
    state: str
    payload: PayloadBody
    context: str = Field(..., description="The conversation's context as a JSON string (ConvEngine's shape).")
    errorCode: str | None = None
    recoverable: bool | None = None
    message: str | None = None


class ErrorBody(BaseModel):
    """A request the API refused (4xx)."""

    success: bool = False
    errorCode: str
    message: str
    details: list[dict[str, Any]] = Field(default_factory=list)


class AuditRow(BaseModel):
    auditId: int | None
    conversationId: str
    stage: str
    payloadJson: str = Field(..., description="The stored payload as a JSON string (ConvEngine's shape).")
    createdAt: str


class FeedbackRequestBody(BaseModel):
    """``POST /api/v1/conversation/feedback`` (ConvEngine's ConversationFeedbackRequest)."""

    model_config = ConfigDict(extra="ignore")

    conversationId: str = Field(..., description="The conversation the feedback is on (a UUID).",
                                json_schema_extra=UUID_TEXT)
    feedbackType: Any = Field(..., json_schema_extra=_feedback_type_schema)
    messageId: Any = Field(None, description="The client's id of the answer (at most 128 characters).")
    assistantResponse: Any = Field(None, description="The answer as the client showed it.")
    metadata: Any = Field(None, description="Any JSON object the client attaches (at most 64 KiB).")


class FeedbackResponse(BaseModel):
    """ConvEngine's ConversationFeedbackResponse."""

    success: bool
    feedbackId: int | None
    capturedQueryKnowledgeCount: int | None
    capturedUserQueryKnowledgeCount: int | None
    embeddedUserQueryKnowledgeCount: int | None
    message: str


class FeedbackRow(BaseModel):
    """A stored ``ce_mcp_user_feedback`` row."""

    feedbackId: int
    conversationId: str
    feedbackType: str
    messageId: str | None
    intentCode: str | None
    stateCode: str | None
    userQuery: str | None
    assistantResponse: str | None
    mcpToolCode: str | None
    capturedQueryKnowledgeCount: int
    appliedQueryKnowledgeJson: str
    metadataJson: str
    createdAt: str


class HealthBody(BaseModel):
    """``GET /health``: the process is alive (nothing about the database)."""

    status: Literal["ok"]
    configVersion: str = Field(..., description="The configuration version in use.")


class ReadyBody(BaseModel):
    """``GET /ready``: whether the server can serve turns (its database answers)."""

    status: Literal["ready", "unavailable"]
    errorCode: str | None = Field(None, description="DATABASE_UNAVAILABLE when not ready.")
    message: str | None = Field(None, description="Why not ready (names no host, user or driver error).")
