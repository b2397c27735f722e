"""convengine: a data-driven conversational engine on LangGraph.

Behaviour lives in rows of ``ce_*`` tables; each user message is one turn through a
LangGraph ``StateGraph`` whose nodes are the pipeline steps.
"""

from convengine.config_loader import ConfigSnapshot, export_pack, import_pack, validate_pack
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
from convengine.settings import EngineSettings

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConfigSnapshot",
    "ConfigValidationError",
    "ConvEngineError",
    "ConversationBusyError",
    "ConversationNotFoundError",
    "EngineSettings",
    "ErrorCode",
    "InvalidInputError",
    "LlmError",
    "PackError",
    "ToolError",
    "Violation",
    "export_pack",
    "import_pack",
    "validate_pack",
]
