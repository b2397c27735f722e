"""``convengine pack schema``: a JSON Schema every example pack validates against and points at,
which rejects what the loader rejects for its shape (unknown tables and columns, missing required
columns, values of the wrong type)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from convengine import ConfigError, validate_pack
from convengine.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PACKS = sorted(p for p in EXAMPLES.glob("*.yaml") if not p.name.endswith(".conv.yaml"))
SCHEMA_LINE = "# yaml-language-server: $schema=pack.schema.json"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("schema") / "pack.schema.json"
    done = CliRunner().invoke(app, ["pack", "schema", "-o", str(out)])
    assert done.exit_code == 0, done.output
    schema: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def test_stdout_and_the_committed_schema_are_what_the_command_writes(written: dict[str, Any]) -> None:
    done = CliRunner().invoke(app, ["pack", "schema"])
    assert done.exit_code == 0 and json.loads(done.stdout) == written
    committed = json.loads((EXAMPLES / "pack.schema.json").read_text(encoding="utf-8"))
    assert committed == written, "examples/pack.schema.json is stale: convengine pack schema -o examples/pack.schema.json"


@pytest.mark.parametrize("pack", PACKS, ids=[p.stem for p in PACKS])
def test_every_example_pack_points_at_the_schema_and_validates(pack: Path, written: dict[str, Any]) -> None:
    text = pack.read_text(encoding="utf-8")
    assert text.splitlines()[0] == SCHEMA_LINE
    jsonschema.validate(yaml.safe_load(text), written, cls=jsonschema.Draft202012Validator)


def test_the_schema_knows_every_table_and_column(written: dict[str, Any]) -> None:
    from convengine.db.models import CONTROL_TABLES, MODEL_BY_TABLE

    assert set(written["properties"]) == {"settings", *CONTROL_TABLES}
    for table in CONTROL_TABLES:
        row = written["$defs"][f"Row_{table}"]
        assert set(row["properties"]) == {c.name for c in MODEL_BY_TABLE[table].__table__.columns}, table


_GOOD = {"ce_intent": [{"intent_code": "PIZZA", "description": "Order a pizza", "priority": 10}],
         "ce_response": [{"intent_code": "PIZZA", "state_code": "ANY", "exact_text": "Which size?"}]}
_BAD = {
    "misspelt table": {**_GOOD, "ce_intnet": [{"intent_code": "PIZZA"}]},
    "unknown column": {**_GOOD, "ce_intent": [{"intent_code": "PIZZA", "colour": "red"}]},
    "missing required column": {**_GOOD, "ce_intent": [{"description": "no code"}]},
    "a word where a number goes": {**_GOOD, "ce_intent": [{"intent_code": "PIZZA", "priority": "high"}]},
    "a row that is not a mapping": {**_GOOD, "ce_response": ["Which size?"]},
    "a table that is not a list": {**_GOOD, "ce_intent": {"intent_code": "PIZZA"}},
}


def test_a_good_pack_passes_both(written: dict[str, Any]) -> None:
    jsonschema.validate(_GOOD, written, cls=jsonschema.Draft202012Validator)
    validate_pack(_GOOD)


@pytest.mark.parametrize("case", list(_BAD))
def test_an_invalid_pack_is_rejected_by_the_schema_and_the_loader(case: str, written: dict[str, Any]) -> None:
    pack = _BAD[case]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(pack, written, cls=jsonschema.Draft202012Validator)
    with pytest.raises(ConfigError):  # ConfigValidationError, or PackError for the shape of the file
        validate_pack(pack)
