"""EngineSettings: ConvEngine's defaults, and kwargs > environment > pack > defaults."""

from __future__ import annotations

import pytest

from convengine.catalog.errors import ConfigError, ConfigValidationError
from convengine.config_loader import validate_pack
from convengine.settings import EngineSettings


def test_defaults_match_convengine() -> None:
    s = EngineSettings.build()
    assert s.flow.dialogue_act.resolute == "REGEX_THEN_LLM"
    assert s.flow.dialogue_act.llm_threshold == 0.90
    assert s.flow.conversation_history.max_turns == 20
    assert s.flow.action_lifecycle.ttl_turns == 3 and s.flow.action_lifecycle.ttl_minutes == 30
    assert s.flow.interaction_policy.matrix["PENDING_ACTION:AFFIRM"] == "EXECUTE_PENDING_ACTION"
    assert s.flow.memory.summary_max_chars == 1200 and s.flow.memory.recent_turns_for_summary == 3
    assert s.flow.disambiguation.max_options == 5
    assert s.mcp.tool_max_loops == 5
    assert s.mcp.http_api.defaults.retry_status_codes == [429, 502, 503, 504]
    assert s.mcp.http_api.defaults.circuit_failure_threshold == 5
    assert s.audit.level == "ALL" and s.transport.sse.emitter_timeout_ms == 600_000
    assert s.database_url == "sqlite:///convengine.db"


def test_precedence_kwargs_over_env_over_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    pack = {"flow": {"dialogue-act": {"resolute": "LLM_ONLY", "llm-threshold": 0.5}}, "mcp": {"tool-max-loops": 7}}
    assert EngineSettings.build(pack_settings=pack).flow.dialogue_act.resolute == "LLM_ONLY"
    monkeypatch.setenv("CONVENGINE_FLOW__DIALOGUE_ACT__RESOLUTE", "REGEX_ONLY")
    s = EngineSettings.build(pack_settings=pack)
    assert s.flow.dialogue_act.resolute == "REGEX_ONLY"  # env beats pack
    assert s.flow.dialogue_act.llm_threshold == 0.5  # pack beats defaults
    assert s.mcp.tool_max_loops == 7
    s = EngineSettings.build(pack_settings=pack, flow={"dialogue_act": {"resolute": "REGEX_THEN_LLM"}})
    assert s.flow.dialogue_act.resolute == "REGEX_THEN_LLM"  # kwargs beat env


def test_convengine_wrapper_and_dotted_keys_are_accepted() -> None:
    s = EngineSettings.build(pack_settings={"convengine": {"flow.guardrail.sensitive-patterns": ["ssn"]}})
    assert s.flow.guardrail.sensitive_patterns == ["ssn"]


def test_free_form_maps_keep_their_keys() -> None:
    s = EngineSettings.build(pack_settings={"flow": {"state-graph": {"allowed-transitions": {"COLLECT-A": ["B"]}}}})
    assert s.flow.state_graph.allowed_transitions == {"COLLECT-A": ["B"]}


def test_bad_values_and_unknown_keys_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"flow\.dialogue_act\.resolute"):
        EngineSettings.build(flow={"dialogue_act": {"resolute": "SOMETIMES"}})
    with pytest.raises(ConfigError, match=r"flow\.colour"):
        EngineSettings.build(flow={"colour": "blue"})
    monkeypatch.setenv("CONVENGINE_MCP__TOOL_MAX_LOOPS", "many")
    with pytest.raises(ConfigError, match=r"mcp\.tool_max_loops"):
        EngineSettings.build()


def test_ce_config_overrides_per_component() -> None:
    pack = {"settings": {"mcp": {"tool-max-loops": 9}},
            "ce_config": [{"config_type": "McpToolStep", "config_key": "MCP_TOOL_MAX_LOOPS", "config_value": "3"},
                          {"config_type": "McpPlanner", "config_key": "MCP_PLANNER_MAX_OBS_CHARS",
                           "config_value": "2500"}]}
    snapshot = validate_pack(pack)
    assert snapshot.settings.mcp.tool_max_loops == 3
    assert snapshot.settings.mcp.planner_max_observation_chars == 2500


def test_an_invalid_ce_config_override_is_a_violation() -> None:
    pack = {"ce_config": [{"config_id": 4, "config_type": "McpToolStep", "config_key": "MCP_TOOL_MAX_LOOPS",
                           "config_value": "0"}]}
    with pytest.raises(ConfigValidationError, match="MCPTOOLSTEP.MCP_TOOL_MAX_LOOPS"):
        validate_pack(pack)
