"""convengine: a data-driven conversational engine on LangGraph.

Behaviour lives in rows of ``ce_*`` tables; each user message is one turn through a
LangGraph ``StateGraph`` whose nodes are the pipeline steps.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:  # the names below, for type checkers; at run time each is imported on first use
    from convengine.catalog.errors import (
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
    from convengine.config_loader import ConfigSnapshot, export_pack, import_pack, validate_pack
    from convengine.engine import Engine, Payload, TurnResult
    from convengine.engine.feedback import Feedback
    from convengine.llm import Delay, LlmCall, ScriptedLLM
    from convengine.nodes.common import Step
    from convengine.nodes.context import StepHook
    from convengine.nodes.turn import Turn
    from convengine.registry import TaskContext
    from convengine.settings import EngineSettings

__version__ = "0.1.0"

# Where each public name lives. ``import convengine`` stays cheap (LangGraph, SQLAlchemy, alembic and
# pydantic load on first use of a name that needs them), so the CLI's --help answers at once.
_HOMES = {
    "ConfigSnapshot": "convengine.config_loader", "export_pack": "convengine.config_loader",
    "import_pack": "convengine.config_loader", "validate_pack": "convengine.config_loader",
    "Engine": "convengine.engine", "Payload": "convengine.engine", "TurnResult": "convengine.engine",
    "ConfigError": "convengine.catalog.errors", "ConfigValidationError": "convengine.catalog.errors",
    "ConvEngineError": "convengine.catalog.errors", "ConversationBusyError": "convengine.catalog.errors",
    "ConversationNotFoundError": "convengine.catalog.errors", "ErrorCode": "convengine.catalog.errors",
    "InvalidInputError": "convengine.catalog.errors", "LlmError": "convengine.catalog.errors",
    "PackError": "convengine.catalog.errors",
    "ToolError": "convengine.catalog.errors", "Violation": "convengine.catalog.errors",
    "Feedback": "convengine.engine.feedback",
    "Delay": "convengine.llm", "LlmCall": "convengine.llm", "ScriptedLLM": "convengine.llm",
    "Step": "convengine.nodes.common", "StepHook": "convengine.nodes.context", "Turn": "convengine.nodes.turn",
    "TaskContext": "convengine.registry", "EngineSettings": "convengine.settings",
}


def __getattr__(name: str) -> _typing.Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'convengine' has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


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
