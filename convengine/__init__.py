"""convengine: a data-driven conversational engine on LangGraph.

Behaviour lives in rows of ``ce_*`` tables; each user message is one turn through a
LangGraph ``StateGraph`` whose nodes are the pipeline steps.
"""

from convengine.config_loader import ConfigSnapshot, export_pack, import_pack, validate_pack
from convengine.engine import Engine, Payload, TurnResult
from convengine.errors import (
    ConfigError,
    ConfigValidationError,
    ConvEngineError,
    ConversationBusyError,
    ConversationNotFoundError,
    ErrorCode,
    InvalidInputError,
    LlmError,
    PackError,
    ToolError,
    Violation,
)
from convengine.feedback import Feedback
from convengine.llm import Delay, LlmCall, ScriptedLLM
from convengine.nodes.common import Step
from convengine.nodes.context import StepHook
from convengine.nodes.turn import Turn
from convengine.registry import TaskContext
from convengine.settings import EngineSettings

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConfigSnapshot",
    "ConfigValidationError",
    "ConvEngineError",
    "ConversationBusyError",
    "ConversationNotFoundError",
    "Delay",
    "Engine",
    "EngineSettings",
    "ErrorCode",
    "Feedback",
    "InvalidInputError",
    "LlmCall",
    "LlmError",
    "PackError",
    "Payload",
    "ScriptedLLM",
    "Step",
    "StepHook",
    "TaskContext",
    "ToolError",
    "Turn",
    "TurnResult",
    "Violation",
    "export_pack",
    "import_pack",
    "validate_pack",
]
