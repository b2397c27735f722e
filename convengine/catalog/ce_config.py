"""Every ``ce_config`` key convengine reads: its component, type, default and what it does.

One table for validation (a value of the wrong type is an error naming the key), for settings (a
key backed by a setting overrides it on every load) and for the readers (``snapshot.config(KEY)``
returns the typed value or the default written here; no read site carries its own default).

Components are ConvEngine's class names; matching is case-insensitive. Prompt keys default to the
call site's built-in prompt; keys backed by a setting default to that setting (see
``docs/reference/settings.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from convengine.catalog.booleans import require_bool
from convengine.catalog.vocab import DEFAULT_ACT_REGEXES

SETTINGS_CONFIG_TYPE = "EngineSettings"
"""ce_config rows of this type hold a pack's ``settings:`` (key = dotted path, value = JSON)."""

Kind = Literal["number", "integer", "boolean", "text", "prompt", "regex"]

_PARSERS: dict[str, Callable[[str], Any]] = {"number": float, "integer": int, "boolean": require_bool}


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One ``ce_config`` key: ``(component, key)`` with its type and default."""

    component: str
    key: str
    kind: Kind
    default: Any = None
    """The value when no enabled row sets one (None: a prompt's built-in text, or the setting)."""
    setting: tuple[str, ...] | None = None
    """The EngineSettings path this key overrides on every load (then the setting is what code reads)."""
    doc: str = ""

    @property
    def ident(self) -> tuple[str, str]:
        """Upper-cased ``(component, key)``, how rows are matched."""
        return self.component.upper(), self.key.upper()

    def parse(self, text: str) -> Any:
        """The row's text as this key's type; ValueError when it is not one."""
        parser = _PARSERS.get(self.kind)
        return parser(text.strip()) if parser else text

    @property
    def type_text(self) -> str:
        return {"number": "a number", "integer": "an integer", "boolean": "a boolean"}.get(self.kind, "text")


def _k(component: str, key: str, kind: Kind, default: str | float | None = None, doc: str = "",
       setting: tuple[str, ...] | None = None) -> ConfigKey:
    return ConfigKey(component, key, kind, default, setting, doc)


AGENT = "AgentIntentResolver"
COLLISION = "AgentIntentCollisionResolver"
DIALOGUE = "DialogueActStep"
INTENT_STEP = "IntentResolutionStep"
DISAMBIGUATION = "DisambiguationStep"
PLANNER = "McpPlanner"
TOOL_STEP = "McpToolStep"
RESET_STEP = "ResetResolvedIntentStep"
POLICY = "PolicyEnforcementStep"

AGENT_MIN_CONFIDENCE = _k(AGENT, "MIN_CONFIDENCE", "number", 0.55,
                          "the intent agent's answer is rejected below this confidence")
AGENT_COLLISION_GAP_THRESHOLD = _k(AGENT, "COLLISION_GAP_THRESHOLD", "number", 0.1,
                                   "the top two scores within this gap are a collision the user is asked about")
AGENT_SYSTEM_PROMPT = _k(AGENT, "SYSTEM_PROMPT", "prompt", doc="the intent agent's system prompt")
AGENT_USER_PROMPT = _k(AGENT, "USER_PROMPT", "prompt", doc="the intent agent's user prompt")
COLLISION_SYSTEM_PROMPT = _k(COLLISION, "SYSTEM_PROMPT", "prompt", doc="the collision question's system prompt")
COLLISION_USER_PROMPT = _k(COLLISION, "USER_PROMPT", "prompt", doc="the collision question's user prompt")
COLLISION_DERIVATION_HINT = _k(COLLISION, "DERIVATION_HINT", "prompt", doc="the collision question's hint")
DIALOGUE_SYSTEM_PROMPT = _k(DIALOGUE, "SYSTEM_PROMPT", "prompt", doc="the dialogue-act system prompt")
DIALOGUE_USER_PROMPT = _k(DIALOGUE, "USER_PROMPT", "prompt", doc="the dialogue-act user prompt")
DIALOGUE_REWRITE_SYSTEM_PROMPT = _k(DIALOGUE, "QUERY_REWRITE_SYSTEM_PROMPT", "prompt",
                                    doc="the system prompt when the act call also rewrites the query")
DIALOGUE_REWRITE_USER_PROMPT = _k(DIALOGUE, "QUERY_REWRITE_USER_PROMPT", "prompt",
                                  doc="the user prompt when the act call also rewrites the query")
DIALOGUE_ACT_REGEX: dict[str, ConfigKey] = {
    act: _k(DIALOGUE, f"REGEX_{act}", "regex", pattern, f"the regex that classifies a message as {act}")
    for act, pattern in DEFAULT_ACT_REGEXES.items()
}
STICKY_INTENT = _k(INTENT_STEP, "STICKY_INTENT", "boolean", True,
                   "keep the intent while its slot schema is incomplete")
DISAMBIGUATION_ENABLE_LLM = _k(DISAMBIGUATION, "ENABLE_LLM", "boolean", False,
                               "ask the model to word the which-action question")
DISAMBIGUATION_QUESTION_TEMPLATE = _k(DISAMBIGUATION, "QUESTION_TEMPLATE", "prompt",
                                      doc="the which-action question (`{{options}}`)")
DISAMBIGUATION_SYSTEM_PROMPT = _k(DISAMBIGUATION, "LLM_SYSTEM_PROMPT", "prompt",
                                  doc="the which-action question's system prompt")
DISAMBIGUATION_USER_PROMPT = _k(DISAMBIGUATION, "LLM_USER_PROMPT", "prompt",
                                doc="the which-action question's user prompt")
PLANNER_SYSTEM_PROMPT = _k(PLANNER, "SYSTEM_PROMPT", "prompt", doc="the planner's system prompt")
PLANNER_USER_PROMPT = _k(PLANNER, "USER_PROMPT", "prompt", doc="the planner's user prompt")
PLANNER_MAX_OBSERVATIONS = _k(PLANNER, "MCP_PLANNER_MAX_OBSERVATIONS_COUNT", "integer",
                              setting=("mcp", "planner_max_observations"), doc="observations the planner sees")
PLANNER_MAX_OBS_CHARS = _k(PLANNER, "MCP_PLANNER_MAX_OBS_CHARS", "integer",
                           setting=("mcp", "planner_max_observation_chars"), doc="characters per observation")
TOOL_MAX_LOOPS = _k(TOOL_STEP, "MCP_TOOL_MAX_LOOPS", "integer", setting=("mcp", "tool_max_loops"),
                    doc="planner tool calls per turn")
TOOL_CALL_DELAY_MS = _k(TOOL_STEP, "MCP_TOOL_CALL_DELAY_MS", "integer", setting=("mcp", "tool_call_delay_ms"),
                        doc="pause before each tool call")
TOOL_CALL_DELAY_AFTER_CALLS = _k(TOOL_STEP, "MCP_TOOL_CALL_DELAY_AFTER_CALLS", "integer",
                                 setting=("mcp", "tool_call_delay_after_calls"), doc="calls before the longer pause")
TOOL_CALL_DELAY_AFTER_MS = _k(TOOL_STEP, "MCP_TOOL_CALL_DELAY_AFTER_MS", "integer",
                              setting=("mcp", "tool_call_delay_after_ms"), doc="the longer pause")
RESET_INTENT_CODES = _k(RESET_STEP, "RESET_INTENT_CODES", "text", "RESET_SESSION",
                        "comma-separated intents that reset the conversation")
POLICY_LLM_FAIL_CLOSED = _k(POLICY, "LLM_FAIL_CLOSED", "boolean", False,
                            "block the message when an LLM policy cannot decide")
POLICY_SYSTEM_PROMPT = _k(POLICY, "LLM_SYSTEM_PROMPT", "prompt", doc="the LLM policy's system prompt")
POLICY_USER_PROMPT = _k(POLICY, "LLM_USER_PROMPT", "prompt", doc="the LLM policy's user prompt")

CONFIG_KEYS: tuple[ConfigKey, ...] = tuple(
    v for v in (*globals().values(), *DIALOGUE_ACT_REGEX.values()) if isinstance(v, ConfigKey))
BY_IDENT: dict[tuple[str, str], ConfigKey] = {k.ident: k for k in CONFIG_KEYS}
SETTING_OVERRIDES: dict[tuple[str, str], tuple[str, ...]] = {k.ident: k.setting for k in CONFIG_KEYS if k.setting}
"""``(COMPONENT, KEY)`` -> the settings path it overrides on every snapshot load."""
