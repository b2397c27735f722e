"""Errors raised by convengine, and the error codes they carry.

Every error is a :class:`ConvEngineError` with an :class:`ErrorCode`, a message and a
``recoverable`` flag (ConvEngine's error contract). The tree::

    ConvEngineError
    ├── InvalidInputError            caller mistakes (bad message, params, ids)
    │   ├── MessageTooLargeError
    │   └── InvalidConversationIdError
    ├── ConversationNotFoundError
    ├── ConversationBusyError         another turn holds the conversation
    ├── ConversationEndedError        a message to an ENDED conversation (recoverable by a reset)
    ├── UndoError                     nothing to undo/redo, or undo forbidden past a side effect
    ├── ConfigError                   control-plane rows, packs, settings
    │   ├── ConfigValidationError     carries every Violation found at once
    │   └── PackError                 a pack file that cannot be read or imported
    ├── StepError                     a pipeline step failed (names the step)
    │   ├── ResponseMappingNotFoundError
    │   ├── PromptRenderError
    │   └── RuleError
    ├── LlmError                      LLM call failures, all recoverable
    │   ├── LlmNotConfiguredError
    │   ├── LlmTimeoutError
    │   ├── LlmInvalidResponseError
    │   └── LlmSchemaViolationError
    ├── ToolError                     tool execution, SQL and HTTP guards
    └── PersistenceError              database or checkpointer unavailable
        └── UnsafeCheckpointError     a checkpoint holds what the engine never stores
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ConfigError",
    "ConfigValidationError",
    "ConvEngineError",
    "ConversationBusyError",
    "ConversationEndedError",
    "ConversationNotFoundError",
    "ErrorCode",
    "InvalidConversationIdError",
    "InvalidInputError",
    "LlmError",
    "LlmInvalidResponseError",
    "LlmNotConfiguredError",
    "LlmSchemaViolationError",
    "LlmTimeoutError",
    "MessageTooLargeError",
    "PackError",
    "PersistenceError",
    "PromptRenderError",
    "ResponseMappingNotFoundError",
    "RuleError",
    "ServerBusyError",
    "StepError",
    "ToolError",
    "UndoError",
    "UnsafeCheckpointError",
    "Violation",
]


class ErrorCode(str, enum.Enum):
    """ConvEngine's error codes plus the ones this project adds.

    Each member's value is its name; :attr:`default_message` and :attr:`recoverable`
    give ConvEngine's defaults.
    """

    # ConvEngine's codes
    PROMPT_RENDER_FAILED = "PROMPT_RENDER_FAILED"
    AUDIT_SAVE_FAILED = "AUDIT_SAVE_FAILED"
    RESPONSE_MAPPING_NOT_FOUND = "RESPONSE_MAPPING_NOT_FOUND"
    UNRESOLVED_PROMPT_VARIABLE = "UNRESOLVED_PROMPT_VARIABLE"
    PROMPT_SCHEMA_INVALID = "PROMPT_SCHEMA_INVALID"
    PROMPT_CONTEXT_MISSING = "PROMPT_CONTEXT_MISSING"
    PROMPT_VAR_ACCESS_FAILED = "PROMPT_VAR_ACCESS_FAILED"
    LLM_CALL_FAILED = "LLM_CALL_FAILED"
    LLM_TIMEOUT = "LLM_TIMEOUT"
    LLM_INVALID_RESPONSE = "LLM_INVALID_RESPONSE"
    LLM_EMPTY_RESPONSE = "LLM_EMPTY_RESPONSE"
    LLM_SCHEMA_VIOLATION = "LLM_SCHEMA_VIOLATION"
    INTENT_RESOLUTION_FAILED = "INTENT_RESOLUTION_FAILED"
    AGENT_INTENT_FAILED = "AGENT_INTENT_FAILED"
    CLASSIFIER_INTENT_FAILED = "CLASSIFIER_INTENT_FAILED"
    RULE_EVALUATION_FAILED = "RULE_EVALUATION_FAILED"
    INVALID_RULE_ACTION = "INVALID_RULE_ACTION"
    CONTAINER_EXECUTION_FAILED = "CONTAINER_EXECUTION_FAILED"
    INVALID_CONTAINER_TRANSFORMER = "INVALID_CONTAINER_TRANSFORMER"
    CONTAINER_INTERCEPTOR_FAILED = "CONTAINER_INTERCEPTOR_FAILED"
    PIPELINE_STEP_FAILED = "PIPELINE_STEP_FAILED"
    PIPELINE_CONSTRAINT_VIOLATION = "PIPELINE_CONSTRAINT_VIOLATION"
    PIPELINE_NO_FINAL_RESULT = "PIPELINE_NO_FINAL_RESULT"
    PIPELINE_NO_RESPONSE_PAYLOAD = "PIPELINE_NO_RESPONSE_PAYLOAD"
    DUPLICATE_ENGINE_STEP = "DUPLICATE_ENGINE_STEP"
    MISSING_BOOTSTRAP_STEP = "MISSING_BOOTSTRAP_STEP"
    MISSING_TERMINAL_STEP = "MISSING_TERMINAL_STEP"
    MISSING_DEPENDENT_STEP = "MISSING_DEPENDENT_STEP"
    MISSING_DAG_CYCLE = "MISSING_DAG_CYCLE"
    NO_RESPONSE_CONFIGURED = "NO_RESPONSE_CONFIGURED"
    INVALID_RESPONSE_TRANSFORMER = "INVALID_RESPONSE_TRANSFORMER"
    RESPONSE_RESOLUTION_FAILED = "RESPONSE_RESOLUTION_FAILED"
    CONVERSATION_PERSIST_FAILED = "CONVERSATION_PERSIST_FAILED"
    AUDIT_WRITE_FAILED = "AUDIT_WRITE_FAILED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    # Added by convengine
    INVALID_INPUT = "INVALID_INPUT"
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    INVALID_CONVERSATION_ID = "INVALID_CONVERSATION_ID"
    CONVERSATION_NOT_FOUND = "CONVERSATION_NOT_FOUND"
    CONVERSATION_BUSY = "CONVERSATION_BUSY"
    CONFIG_INVALID = "CONFIG_INVALID"
    PACK_INVALID = "PACK_INVALID"
    SETTINGS_INVALID = "SETTINGS_INVALID"
    SCHEMA_OUTDATED = "SCHEMA_OUTDATED"
    LLM_NOT_CONFIGURED = "LLM_NOT_CONFIGURED"
    TASK_NOT_FOUND = "TASK_NOT_FOUND"
    TASK_FAILED = "TASK_FAILED"
    TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
    TOOL_EXECUTION_FAILED = "TOOL_EXECUTION_FAILED"
    TOOL_ADAPTER_NOT_CONFIGURED = "TOOL_ADAPTER_NOT_CONFIGURED"
    TOOL_RESULT_TOO_LARGE = "TOOL_RESULT_TOO_LARGE"
    UNSAFE_SQL = "UNSAFE_SQL"
    URL_NOT_ALLOWED = "URL_NOT_ALLOWED"
    CIRCUIT_OPEN = "CIRCUIT_OPEN"
    REGEX_TIMEOUT = "REGEX_TIMEOUT"
    DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
    CHECKPOINT_FAILED = "CHECKPOINT_FAILED"
    CHECKPOINT_REJECTED = "CHECKPOINT_REJECTED"
    AUDIT_ROW_REJECTED = "AUDIT_ROW_REJECTED"
    UNKNOWN_STEP = "UNKNOWN_STEP"
    # Conversation memory (undo/redo, lifecycle)
    NOTHING_TO_UNDO = "NOTHING_TO_UNDO"
    NOTHING_TO_REDO = "NOTHING_TO_REDO"
    UNDO_FORBIDDEN = "UNDO_FORBIDDEN"
    CONVERSATION_ENDED = "CONVERSATION_ENDED"
    # Versioned configuration (convengine.versions)
    VERSION_NOT_FOUND = "VERSION_NOT_FOUND"
    PUBLISH_REFUSED = "PUBLISH_REFUSED"
    GATE_REQUIRED = "GATE_REQUIRED"
    DRAFT_NOT_NAMED = "DRAFT_NOT_NAMED"
    REPLAY_CHANGED = "REPLAY_CHANGED"
    # Chains (convengine.chains)
    CHAIN_RUN_NOT_FOUND = "CHAIN_RUN_NOT_FOUND"
    CHAIN_RUN_NOT_PAUSED = "CHAIN_RUN_NOT_PAUSED"
    CHAIN_STEP_FAILED = "CHAIN_STEP_FAILED"
    CHAIN_STEP_LIMIT = "CHAIN_STEP_LIMIT"
    # Load: every turn slot of the process is taken and its admission queue is full (HTTP 503)
    SERVER_BUSY = "SERVER_BUSY"
    # HTTP API refusals (never raised by the engine itself)
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    HOST_NOT_ALLOWED = "HOST_NOT_ALLOWED"
    ORIGIN_NOT_ALLOWED = "ORIGIN_NOT_ALLOWED"
    TOO_MANY_STREAMS = "TOO_MANY_STREAMS"

    @property
    def recoverable(self) -> bool:
        """Whether retrying the same request may succeed (ConvEngine's flag)."""
        return self in _RECOVERABLE

    @property
    def default_message(self) -> str:
        """A one-line description used when no specific message is given."""
        return _MESSAGES.get(self, self.value.replace("_", " ").capitalize())


_RECOVERABLE = frozenset(
    {
        ErrorCode.PROMPT_RENDER_FAILED,
        ErrorCode.LLM_CALL_FAILED,
        ErrorCode.LLM_TIMEOUT,
        ErrorCode.LLM_INVALID_RESPONSE,
        ErrorCode.LLM_EMPTY_RESPONSE,
        ErrorCode.LLM_SCHEMA_VIOLATION,
        ErrorCode.AGENT_INTENT_FAILED,
        ErrorCode.CONTAINER_EXECUTION_FAILED,
        ErrorCode.CONVERSATION_PERSIST_FAILED,
        ErrorCode.CONVERSATION_BUSY,
        ErrorCode.TOOL_EXECUTION_FAILED,
        ErrorCode.CIRCUIT_OPEN,
        ErrorCode.DATABASE_UNAVAILABLE,
        ErrorCode.CHECKPOINT_FAILED,
        ErrorCode.CONVERSATION_ENDED,
        ErrorCode.SERVER_BUSY,
    }
)

_MESSAGES = {
    ErrorCode.RESPONSE_MAPPING_NOT_FOUND: "No response found for the current intent and state",
    ErrorCode.UNRESOLVED_PROMPT_VARIABLE: "A prompt template refers to a variable that has no value",
    ErrorCode.LLM_CALL_FAILED: "The LLM call failed",
    ErrorCode.LLM_TIMEOUT: "The LLM call timed out",
    ErrorCode.LLM_INVALID_RESPONSE: "The LLM reply was not valid JSON",
    ErrorCode.LLM_SCHEMA_VIOLATION: "The LLM reply did not match the requested JSON schema",
    ErrorCode.PIPELINE_NO_RESPONSE_PAYLOAD: "The turn ended without a response payload",
    ErrorCode.CONVERSATION_BUSY: "Another turn of this conversation is still running",
    ErrorCode.INTERNAL_ERROR: "Internal error",
    ErrorCode.NOTHING_TO_UNDO: "There is no turn to undo",
    ErrorCode.NOTHING_TO_REDO: "There is no undone turn to redo",
    ErrorCode.CONVERSATION_ENDED: "The conversation has ended; send a reset to start it again",
    ErrorCode.VERSION_NOT_FOUND: "No such configuration version or channel",
    ErrorCode.PUBLISH_REFUSED: "The draft was not published: it failed validation or a conversation test",
    ErrorCode.GATE_REQUIRED: "A gated channel serves only versions that passed the publish gate, unless an "
                             "override gives a reason",
    ErrorCode.DRAFT_NOT_NAMED: "The draft to publish is not the one named, or holds another author's edits: "
                               "name the draft (its version number) to publish it",
    ErrorCode.REPLAY_CHANGED: "Replaying recorded conversations against the version changed more of them than "
                              "versions.replay_gate.max_changed allows: accept the changes to publish it",
    ErrorCode.SERVER_BUSY: "The server is running as many turns as it can and its queue is full; retry later",
    ErrorCode.DATABASE_UNAVAILABLE: "The database is unavailable or busy; retry later",
}


@dataclass(frozen=True, slots=True)
class Violation:
    """One problem found in the control-plane rows: where it is and why."""

    table: str
    row_id: Any
    column: str | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.table}[{self.row_id}]"
        if self.column:
            where += f".{self.column}"
        return f"{where}: {self.reason}"


class ConvEngineError(Exception):
    """Root of every convengine error.

    Attributes:
        code: the :class:`ErrorCode`.
        message: a human-readable explanation naming what was wrong.
        recoverable: whether the same request may succeed later.
        details: extra structured context (step, row, call site...).
    """

    default_code = ErrorCode.INTERNAL_ERROR

    def __init__(
        self,
        message: str | None = None,
        *,
        code: ErrorCode | None = None,
        recoverable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.code = code or self.default_code
        self.message = message or self.code.default_message
        self.recoverable = self.code.recoverable if recoverable is None else recoverable
        self.details = dict(details or {})
        super().__init__(self.message)

    def to_payload(self) -> dict[str, Any]:
        """ConvEngine's error payload: ``{errorCode, message, recoverable}``."""
        return {"errorCode": self.code.value, "message": self.message, "recoverable": self.recoverable}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code.value!r}, message={self.message!r})"


class InvalidInputError(ConvEngineError, ValueError):
    """The caller passed something the engine cannot accept."""

    default_code = ErrorCode.INVALID_INPUT


class MessageTooLargeError(InvalidInputError):
    default_code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidConversationIdError(InvalidInputError):
    default_code = ErrorCode.INVALID_CONVERSATION_ID


class ConversationNotFoundError(ConvEngineError, LookupError):
    default_code = ErrorCode.CONVERSATION_NOT_FOUND


class ChainRunNotFoundError(ConversationNotFoundError):
    """No chain run of that id (or, with an owner, none of that owner's): answered like a missing conversation."""

    default_code = ErrorCode.CHAIN_RUN_NOT_FOUND


class ChainRunNotPausedError(InvalidInputError):
    """A resume of a chain run that is not paused at the kind of step the caller resumes."""

    default_code = ErrorCode.CHAIN_RUN_NOT_PAUSED


class ConversationBusyError(ConvEngineError):
    default_code = ErrorCode.CONVERSATION_BUSY


class ServerBusyError(ConvEngineError):
    """The process runs ``admission.max_turns`` turns and its queue is full (or the wait passed
    ``admission.queue_timeout_s``): nothing of the turn ran or was written. ``retry_after_s`` says when
    to retry (the HTTP API sends it as ``Retry-After`` with a 503)."""

    default_code = ErrorCode.SERVER_BUSY

    def __init__(self, message: str | None = None, *, retry_after_s: int = 1) -> None:
        super().__init__(message, details={"retryAfterS": retry_after_s})
        self.retry_after_s = retry_after_s


class ConversationEndedError(ConvEngineError):
    default_code = ErrorCode.CONVERSATION_ENDED


class UndoError(ConvEngineError):
    """Undo or redo refused: NOTHING_TO_UNDO, NOTHING_TO_REDO or UNDO_FORBIDDEN (HTTP 409)."""

    default_code = ErrorCode.NOTHING_TO_UNDO


class ConfigError(ConvEngineError):
    """Control-plane configuration that cannot be used."""

    default_code = ErrorCode.CONFIG_INVALID


class ConfigValidationError(ConfigError):
    """Every violation found while validating control-plane rows, reported at once."""

    def __init__(self, violations: list[Violation], *, source: str = "configuration") -> None:
        self.violations = list(violations)
        lines = "\n".join(f"  - {v}" for v in self.violations)
        count = len(self.violations)
        noun = "violation" if count == 1 else "violations"
        super().__init__(
            f"{source} is invalid ({count} {noun}):\n{lines}",
            details={"violations": [str(v) for v in self.violations]},
        )


class PackError(ConfigError):
    default_code = ErrorCode.PACK_INVALID


class StepError(ConvEngineError):
    """A pipeline step failed; ``details['step']`` names it."""

    default_code = ErrorCode.PIPELINE_STEP_FAILED


class ResponseMappingNotFoundError(StepError):
    default_code = ErrorCode.RESPONSE_MAPPING_NOT_FOUND


class PromptRenderError(StepError):
    default_code = ErrorCode.UNRESOLVED_PROMPT_VARIABLE


class RuleError(StepError):
    default_code = ErrorCode.RULE_EVALUATION_FAILED


class LlmError(StepError):
    """An LLM call failed; ``details['call_site']`` names the call site."""

    default_code = ErrorCode.LLM_CALL_FAILED


class LlmNotConfiguredError(LlmError):
    default_code = ErrorCode.LLM_NOT_CONFIGURED


class LlmTimeoutError(LlmError):
    default_code = ErrorCode.LLM_TIMEOUT


class LlmInvalidResponseError(LlmError):
    default_code = ErrorCode.LLM_INVALID_RESPONSE


class LlmSchemaViolationError(LlmError):
    default_code = ErrorCode.LLM_SCHEMA_VIOLATION


class ToolError(StepError):
    default_code = ErrorCode.TOOL_EXECUTION_FAILED


class ChainStepError(StepError):
    """A chain step failed (its run is FAILED; the message names chain, run and step)."""

    default_code = ErrorCode.CHAIN_STEP_FAILED


class PersistenceError(ConvEngineError):
    default_code = ErrorCode.DATABASE_UNAVAILABLE


class UnsafeCheckpointError(PersistenceError):
    """A stored checkpoint holds something the engine never writes; it is refused unread."""

    default_code = ErrorCode.CHECKPOINT_REJECTED


class AuditRowRejectedError(PersistenceError):
    """A stored audit row is not one the engine writes (corrupt, truncated or oversized); it is refused."""

    default_code = ErrorCode.AUDIT_ROW_REJECTED
