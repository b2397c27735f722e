"""Property-based tests of pack loading: any input is a snapshot or one clear error; valid packs round-trip."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convengine.catalog.errors import ConfigValidationError, PackError
from convengine.config_loader import dump_pack, export_pack, import_pack, load_snapshot, validate_pack
from convengine.db import create_sync_engine, parse_database_url, upgrade
from convengine.db.models import CONTROL_TABLES, Base
from tests.fuzz.strategies import json_values, rule_lists
from tests.fuzz.test_rules_fuzz import BASE

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
COLUMNS = {t: [c.name for c in Base.metadata.tables[t].columns] for t in CONTROL_TABLES}


@st.composite
def rows_of(draw: st.DrawFn, table: str) -> dict[str, Any]:
    names = st.sampled_from(COLUMNS[table]) | st.text(max_size=6)
    return draw(st.dictionaries(names, json_values, max_size=6))


tables = st.sampled_from(list(CONTROL_TABLES))
pack_like = st.one_of(
    json_values,
    st.dictionaries(tables | st.just("settings") | st.text(max_size=8),
                    st.one_of(json_values, st.lists(json_values, max_size=3)), max_size=4),
    tables.flatmap(lambda t: st.lists(rows_of(t), max_size=4).map(lambda rows, t=t: {t: rows})),
    st.dictionaries(st.just("settings"), st.dictionaries(st.text(max_size=10), json_values, max_size=3)),
)


@FUZZ
@given(data=pack_like)
def test_any_structure_is_a_snapshot_or_a_clear_error(data: Any) -> None:
    try:
        snapshot = validate_pack(data)
    except ConfigValidationError as exc:
        assert exc.violations and all(v.table and v.reason for v in exc.violations)
    except PackError as exc:
        assert exc.message
    else:
        assert isinstance(snapshot.statistics()["tables"], dict)


@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_file_is_a_snapshot_or_a_clear_error(raw: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("packs") / "pack.yaml"
    path.write_bytes(raw)
    try:
        validate_pack(path)
    except PackError as exc:
        assert str(path) in exc.message or "pack" in exc.message
    except ConfigValidationError as exc:
        assert exc.violations


@pytest.fixture(scope="module")
def two_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[sa.Engine, sa.Engine]]:
    engines = []
    for name in ("first", "second"):
        url = parse_database_url(f"sqlite:///{tmp_path_factory.mktemp(name) / 'db.sqlite'}")
        upgrade(url)
        engines.append(create_sync_engine(url))
    yield engines[0], engines[1]
    for engine in engines:
        engine.dispose()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rules=rule_lists)
def test_valid_packs_round_trip_through_a_database(rules: list[dict[str, Any]],
                                                   two_databases: tuple[sa.Engine, sa.Engine]) -> None:
    pack = {**copy.deepcopy(BASE), "ce_rule": rules, "settings": {"flow": {"dialogue-act": {"resolute": "REGEX_ONLY"}}}}
    try:
        expected = validate_pack(pack)
    except ConfigValidationError:
        return
    first, second = two_databases
    imported = import_pack(first, pack)
    assert imported == expected
    exported = dump_pack(export_pack(first))
    reimported = import_pack(second, yaml.safe_load(exported))  # what reading the exported file gives
    assert reimported == imported == load_snapshot(second)
    assert dump_pack(export_pack(second)) == exported

