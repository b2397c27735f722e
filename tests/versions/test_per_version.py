"""What each served version brings with it, on SQLite and PostgreSQL: its SEMANTIC examples and audit
settings follow the conversations pinned to it; the welcome event and a handoff resume run on the draft
or a chosen version; forgetting a user's conversations forgets their pins."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import sqlalchemy as sa

from convengine.catalog import stages
from convengine.db import create_sync_engine, parse_database_url
from convengine.db.models import CeConversationVersion
from convengine.engine import Engine
from convengine.knowledge import HashingEmbeddings
from tests.flows.packs import flows_pack
from tests.helpers import pack
from tests.versions.test_http import ADMIN, ALICE, served
from tests.versions.test_versions import WARM, versions_of, warm_pack

CANCEL = "Which order should I cancel?"
TRACK = "Your parcel is on its way."


class CountingEmbeddings(HashingEmbeddings):
    """HashingEmbeddings that remember every example text they embedded."""

    def __init__(self) -> None:
        super().__init__()
        self.documents: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return super().embed_documents(texts)


def semantic_pack(intent: str, examples: list[str], text: str, **settings: Any) -> dict[str, Any]:
    return pack(ce_intent=[{"intent_code": intent, "description": intent}],
                ce_intent_classifier=[{"intent_code": intent, "rule_type": "SEMANTIC", "priority": 30,
                                       "pattern": json.dumps({"examples": examples, "threshold": 0.6})}],
                ce_response=[{"intent_code": intent, "state_code": "ANY", "exact_text": text}],
                settings=settings)


V1 = semantic_pack("CANCEL_ORDER", ["cancel my order", "please stop my order"], CANCEL,
                   audit={"exclude_stages": [stages.USER_INPUT]})
V2 = semantic_pack("TRACK_ORDER", ["where is my parcel", "please track my order"], TRACK)


def test_a_pinned_conversation_keeps_its_versions_semantic_examples_and_audit_settings(db_url: str) -> None:
    embeddings = CountingEmbeddings()
    with Engine.open(db_url, pack=V1, embeddings=embeddings) as engine:
        pinned = engine.process("hello").conversation_id
        v1 = engine.versions.published_version
        engine.versions.draft(V2, author="ann")
        v2 = engine.versions.publish(author="ann").version.number

        kept = engine.process("stop the order please", pinned)
        assert (kept.intent, kept.text) == ("CANCEL_ORDER", CANCEL)  # v1's examples, not v2's
        fresh = engine.process("stop the order please")
        assert fresh.intent != "CANCEL_ORDER" and fresh.text != CANCEL
        tracked = engine.process("where is my parcel")
        assert (tracked.intent, tracked.text) == ("TRACK_ORDER", TRACK)
        assert versions_of(engine, pinned) == [(v1, "channel"), (v1, "pinned")]
        assert versions_of(engine, tracked.conversation_id) == [(v2, "channel")]

        # Each version's audit settings: v1 leaves USER_INPUT out, v2 keeps it.
        assert stages.USER_INPUT not in {e.stage for e in engine.audit(pinned)}
        assert stages.USER_INPUT in {e.stage for e in engine.audit(tracked.conversation_id)}

        # Examples are embedded once, when their version is first served; turns embed only the user's text.
        assert sorted(embeddings.documents) == sorted({*json.loads(V1["ce_intent_classifier"][-1]["pattern"])[
            "examples"], *json.loads(V2["ce_intent_classifier"][-1]["pattern"])["examples"]})
        before = len(embeddings.documents)
        engine.process("please stop my order", pinned)
        engine.process("track my order please")
        assert len(embeddings.documents) == before


def test_the_welcome_event_and_a_handoff_resume_run_on_the_draft_or_a_chosen_version(db_url: str) -> None:
    with Engine.open(db_url, pack=flows_pack()) as engine:
        v1 = engine.versions.published_version
        changed = copy.deepcopy(flows_pack())
        for row in changed["ce_flow_node"]:
            if row["node_id"] == "hi":
                row["config"]["text"] = "Hi, I am the new loan assistant."
            if row["node_id"] == "after_human":
                row["config"]["text"] = "The new bot is back."
        draft = engine.versions.draft(changed, author="ann").number

        simulated = engine.start(draft=True)
        assert simulated.payload.value["messages"][0]["text"] == "Hi, I am the new loan assistant."
        assert versions_of(engine, simulated.conversation_id) == [(draft, "draft")]
        users = engine.start()
        assert users.payload.value["messages"][0]["text"] == "Hi, I am the loan assistant."
        assert engine.start(version=draft).payload.value["messages"][0]["text"] == "Hi, I am the new loan assistant."

        cid = users.conversation_id
        for text in ("I want a loan", "lots", "umm", "no idea"):
            reply = engine.process(text, cid)
        assert reply.status == "HANDOFF"
        resumed = engine.resume_from_handoff(cid, version=draft)
        assert resumed.text == "The new bot is back.\nHow much would you like to borrow?"
        assert versions_of(engine, cid)[0] == (v1, "channel") and versions_of(engine, cid)[-1] == (draft, "version")
        with pytest.raises(Exception, match="draft=True or version=N, not both"):
            engine.start(draft=True, version=draft)


@pytest.mark.asyncio
async def test_the_http_simulator_starts_a_conversation_on_the_draft(db_url: str) -> None:
    async with served(db_url) as client:
        changed = copy.deepcopy(flows_pack())
        await client.post("/api/v1/versions/draft", json={"pack": flows_pack()}, headers=ADMIN)
        published = await client.post("/api/v1/versions/publish", json={}, headers=ADMIN)
        assert published.status_code == 200, published.text
        next(r for r in changed["ce_flow_node"] if r["node_id"] == "hi")["config"]["text"] = "Hi from the draft."
        drafted = await client.post("/api/v1/versions/draft", json={"pack": changed}, headers=ADMIN)
        assert drafted.status_code == 201, drafted.text

        started = await client.post("/api/v1/versions/simulate/start", json={}, headers=ADMIN)
        assert started.status_code == 200, started.text
        assert started.json()["payload"]["value"]["messages"][0]["text"] == "Hi from the draft."
        on_v = await client.post("/api/v1/versions/simulate/start",
                                 json={"version": published.json()["version"]["version"]}, headers=ADMIN)
        assert on_v.json()["payload"]["value"]["messages"][0]["text"] == "Hi, I am the loan assistant."
        users = await client.post("/api/v1/conversation/start", json={"draft": True}, headers=ALICE)
        assert users.json()["payload"]["value"]["messages"][0]["text"] == "Hi, I am the loan assistant."
        refused = await client.post("/api/v1/versions/simulate/start", json={}, headers=ALICE)
        assert refused.status_code == 403
        missing = await client.post("/api/v1/versions/simulate/start", json={"version": 999}, headers=ADMIN)
        assert missing.status_code == 404


def pins(db_url: str) -> dict[str, int]:
    engine = create_sync_engine(parse_database_url(db_url))
    table = CeConversationVersion.__table__
    try:
        with engine.connect() as conn:
            return {r[0]: r[1] for r in conn.execute(sa.select(table.c.conversation_id, table.c.version_no))}
    finally:
        engine.dispose()


def test_forgetting_a_users_conversations_forgets_their_pins(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        hers = engine.process("hello", user_id="ana").conversation_id
        his = engine.process("hello", user_id="ben").conversation_id
        engine.versions.draft(warm_pack(), author="ann")
        v2 = engine.versions.publish(author="ann").version.number

        assert engine.forget_user("ana", conversations=True)["conversations"] == 1
        assert set(pins(db_url)) == {his}
        again = engine.process("hello", hers, user_id="ana")  # the same id starts afresh, on today's version
        assert again.text == WARM and versions_of(engine, hers) == [(v2, "channel")]
        assert engine.process("hello", his).text == "Hello there"
