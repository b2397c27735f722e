"""Request and response bodies of ConvEngine's REST contract."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class MessageRequest(BaseModel):
    """``POST /api/v1/conversation/message``."""

    model_config = ConfigDict(extra="ignore")

    conversationId: str | None = Field(None, description="Continue this conversation (a UUID); omit to start one.")
    message: str | None = Field(None, description="The user's message; empty or omitted for a silent submit "
                                                   "(a turn driven by inputParams alone).")
    reset: bool = Field(False, description="Wipe the conversation before processing the message.")
    inputParams: dict[str, Any] | None = Field(None, description="Caller params for this turn (an object).")
    userId: str | None = Field(None, description="The end user the conversation belongs to (stored on its first "
                               "turn, never changed).")


class PayloadBody(BaseModel):
    type: str
    value: Any


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

    conversationId: str = Field(..., description="The conversation the feedback is on (a UUID).")
    feedbackType: Any = Field(None, description="THUMBS_UP or THUMBS_DOWN.")
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
