"""ConvEngine's application.yml `convengine:` block loads as ConvEngine writes it: keys convengine
does not use, settings it accepts but does not act on, and ce_config rows it never reads are
warnings that `pack validate` shows, not errors; a known key with a wrong value is still an error."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from convengine.catalog.errors import ConfigValidationError
from convengine.config_loader import validate_pack
from tests.config_loader.test_validation import BASE

ROOT = Path(__file__).resolve().parents[2]

# The shape of ConvEngine's README "Flow Configuration (application.yml)" plus a demo
# application's LLM and demo keys.
APPLICATION_YML = """
convengine:
  schema:
    active: v2
  flow:
    dialogue-act:
      resolute: REGEX_ONLY
    llm-threshold: 0.90
  interaction-policy:
    execute-pending-on-affirm: true
  action-lifecycle:
    ttl-turns: 3
  mcp:
    db:
      semantic:
        enabled: true
    http-api:
      defaults:
        connect-timeout-ms: 2000
  llm:
    provider: openai
    temperature: 0.2
    openai:
      api-key: sk-not-a-real-key-1234567890
      model: gpt-4o-mini
      base-url: https://api.openai.com
    lmstudio:
      base-url: http://localhost:1234
  demo:
    stream-mode: sse
    step-hook:
      enabled: true
  transport:
    sse:
      emitter-timeout-ms: 1800000
"""


def with_settings(settings: Any, **tables: list[dict[str, Any]]) -> dict[str, Any]:
    pack = copy.deepcopy(BASE)
    pack["settings"] = settings
    for table, rows in tables.items():
        pack.setdefault(table, []).extend(rows)
    return pack


def test_convengines_application_yml_loads_and_lists_what_is_not_used() -> None:
    snapshot = validate_pack(with_settings(yaml.safe_load(APPLICATION_YML)))
    settings = snapshot.settings
    assert settings.flow.dialogue_act.resolute == "REGEX_ONLY" and settings.llm.temperature == 0.2
    assert settings.transport.sse.emitter_timeout_ms == 1_800_000
    warnings = "\n".join(snapshot.warnings)
    for expected in ("settings.llm.openai is not a convengine setting; ignored",
                     "settings.llm.lmstudio is not a convengine setting",
                     "settings.demo is not a convengine setting",
                     ("settings.flow.llm_threshold is not read here (nor by ConvEngine): the setting is "
                      "flow.dialogue-act.llm-threshold"),
                     "settings.interaction_policy is not read here (nor by ConvEngine)",
                     "settings.mcp.db.semantic is accepted but does nothing",
                     "settings.schema_active is accepted but does nothing"):
        assert expected in warnings, warnings
    assert "sk-not-a-real-key" not in warnings


def test_a_known_setting_with_a_wrong_value_is_still_an_error() -> None:
    with pytest.raises(ConfigValidationError, match="resolute"):
        validate_pack(with_settings({"flow": {"dialogue-act": {"resolute": "SOMETIMES"}}, "demo": {"x": 1}}))


def test_ce_config_rows_convengine_never_reads_are_warnings() -> None:
    rows = [{"config_id": 70, "config_type": "DialogueActStep", "config_key": "REGEX_AFFIRM", "config_value": "^y"},
            {"config_id": 71, "config_type": "SemanticQueryStep", "config_key": "MAX_HOPS", "config_value": "3"}]
    snapshot = validate_pack(with_settings({}, ce_config=rows))
    unread = [w for w in snapshot.warnings if "is not read by convengine" in w]
    assert unread == ["ce_config[71]: SemanticQueryStep.MAX_HOPS is not read by convengine; the row does nothing"]


def test_pack_validate_shows_the_warnings(tmp_path: Path) -> None:
    pack = tmp_path / "app.yaml"
    pack.write_text(yaml.safe_dump(with_settings(yaml.safe_load(APPLICATION_YML))))
    done = subprocess.run([sys.executable, "-m", "convengine.cli", "pack", "validate", str(pack)],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "warning settings.llm.openai is not a convengine setting" in " ".join(done.stderr.split())
