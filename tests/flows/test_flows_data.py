"""Flows are rows like every other control table: exported and re-imported unchanged, reloaded
live, and a bad reload is refused with the running flows kept. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from convengine.catalog.errors import ConfigValidationError
from convengine.config_loader import dump_pack, export_pack, validate_pack
from convengine.config_loader.packs import load_yaml
from tests.flows.packs import flows_pack
from tests.helpers import engine_on

pytestmark = pytest.mark.asyncio


def flow_rows(snapshot: object) -> tuple[set, set, set]:
    return ({(f.flow_code, f.intent_code) for f in snapshot.flows},  # type: ignore[attr-defined]
            {(n.flow_code, n.node_id, n.node_type, str(n.config)) for n in snapshot.flow_nodes},  # type: ignore[attr-defined]
            {(e.flow_code, e.from_node, e.to_node, e.outcome, e.condition) for e in snapshot.flow_edges})  # type: ignore[attr-defined]


async def test_export_reimport_and_live_reload(db_url: str, sync_engine: sa.Engine) -> None:
    async with engine_on(db_url, flows_pack()) as engine:
        exported = dump_pack(export_pack(sync_engine))
        assert flow_rows(validate_pack(load_yaml(exported, "export"))) == flow_rows(engine.snapshot)

        assert (await engine.aprocess("hello")).text == "Hello! How can I help?"
        with sync_engine.begin() as conn:
            conn.execute(sa.text("UPDATE ce_flow_node SET config = :c WHERE flow_code = 'GREET' AND node_id = 'hello'"),
                         {"c": '{"text": "Hi again, from the reloaded flow."}'})
        await engine.areload()
        assert (await engine.aprocess("hello")).text == "Hi again, from the reloaded flow."

        with sync_engine.begin() as conn:
            conn.execute(sa.text("UPDATE ce_flow_edge SET to_node = 'nowhere' WHERE flow_code = 'GREET' "
                                 "AND from_node = 'hello'"))
        with pytest.raises(ConfigValidationError, match="flow GREET edge hello->nowhere"):
            await engine.areload()
        assert (await engine.aprocess("hello")).text == "Hi again, from the reloaded flow."  # the last good flows run
