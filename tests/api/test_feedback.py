"""Feedback on answers: stored in ConvEngine's ce_mcp_user_feedback with the turn it refers to,
readable back, audited, refused for conversations the caller does not own (both backends)."""

from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa

from convengine.catalog.errors import ConversationNotFoundError, InvalidInputError
from convengine.db import create_sync_engine, parse_database_url, upgrade
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio


async def test_feedback_keeps_the_turn_it_was_given_on(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        first = await engine.aprocess("hello")
        cid = first.conversation_id
        await engine.aprocess("a loan please", cid)
        down = await engine.afeedback(cid, "thumbs_down", message_id="bubble-7",
                                      metadata={"comment": "wrong product", "question": "a loan please"})
        up = await engine.afeedback(cid, "THUMBS_UP", assistant_response="Loan started!")
        assert (down.feedback_type, down.intent_code, down.state_code, down.user_query) == (
            "THUMBS_DOWN", "LOAN", "START", "a loan please")
        assert down.assistant_response == "Loan started"  # the stored answer when the client sends none
        assert up.assistant_response == "Loan started!" and up.message_id is None
        assert down.metadata == {"comment": "wrong product", "question": "a loan please"}
        assert down.response() == {"success": True, "feedbackId": down.feedback_id, "capturedQueryKnowledgeCount": 0,
                                   "capturedUserQueryKnowledgeCount": 0, "embeddedUserQueryKnowledgeCount": 0,
                                   "message": "Feedback saved."}
        stored = await engine.afeedbacks(cid)
        assert [f.feedback_id for f in stored] == [down.feedback_id, up.feedback_id]
        assert stored[0] == down
        audited = [e for e in await engine.aaudit(cid) if e.stage == "MCP_USER_FEEDBACK"]
        assert [(e.payload["feedback_id"], e.payload["feedback_type"], e.payload["turn"]) for e in audited] == [
            (down.feedback_id, "THUMBS_DOWN", 2), (up.feedback_id, "THUMBS_UP", 2)]
        assert audited[0].payload["message_id"] == "bubble-7"


async def test_feedback_is_refused_for_unknown_or_foreign_conversations_and_bad_input(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("hello", owner="alice")).conversation_id
        with pytest.raises(ConversationNotFoundError, match=f"no conversation {cid}"):
            await engine.afeedback(cid, "THUMBS_UP", owner="bob")
        with pytest.raises(ConversationNotFoundError):
            await engine.afeedbacks(cid, owner="bob")
        unknown = str(uuid.uuid4())
        with pytest.raises(ConversationNotFoundError, match=f"no conversation {unknown}"):
            await engine.afeedback(unknown, "THUMBS_UP")
        for kwargs, says in (({"feedback_type": "MEH"}, "feedbackType must be THUMBS_UP or THUMBS_DOWN"),
                             ({"feedback_type": None}, "feedbackType must be THUMBS_UP or THUMBS_DOWN"),
                             ({"message_id": "m" * 129}, "messageId is 129 characters; the limit is 128"),
                             ({"metadata": [1]}, "metadata must be an object"),
                             ({"metadata": {"c": "x" * 70_000}}, "metadata is 700.. bytes as JSON; the limit is 65536"),
                             ({"assistant_response": "a\x00b"}, "assistantResponse contains a NUL character")):
            arguments = {"feedback_type": "THUMBS_UP", **kwargs}
            with pytest.raises(InvalidInputError, match=says):
                await engine.afeedback(cid, **arguments)
        assert await engine.afeedbacks(cid, owner="alice") == []
        assert "MCP_USER_FEEDBACK" not in [e.stage for e in await engine.aaudit(cid)]


async def test_migration_keeps_a_feedback_table_convengine_created(empty_db_url: str) -> None:
    url = parse_database_url(empty_db_url)
    engine = create_sync_engine(url)
    cid = str(uuid.uuid4())
    uid, js = ("uuid", "jsonb") if url.is_postgres else ("VARCHAR(36)", "TEXT")
    try:
        with engine.begin() as conn:  # ConvEngine's own DDL, trimmed to what the row needs
            conn.execute(sa.text(f"CREATE TABLE ce_conversation (conversation_id {uid} PRIMARY KEY, "
                                 "status TEXT NOT NULL, intent_code TEXT NOT NULL, state_code TEXT NOT NULL, "
                                 f"context_json {js} NOT NULL, last_user_text TEXT, last_assistant_json {js}, "
                                 f"input_params_json {js} NOT NULL, created_at TIMESTAMP, updated_at TIMESTAMP)"))
            conn.execute(sa.text("CREATE TABLE ce_mcp_user_feedback (feedback_id INTEGER PRIMARY KEY, "
                                 f"conversation_id {uid} NOT NULL, feedback_type VARCHAR(32) NOT NULL, "
                                 "message_id VARCHAR(128), intent_code VARCHAR(255), state_code VARCHAR(255), "
                                 "user_query TEXT, assistant_response TEXT, mcp_tool_code VARCHAR(255), "
                                 "captured_query_knowledge_count INTEGER DEFAULT 0 NOT NULL, "
                                 f"applied_query_knowledge_json {js}, metadata_json {js}, created_at TIMESTAMP)"))
            conn.execute(sa.text("INSERT INTO ce_mcp_user_feedback (feedback_id, conversation_id, feedback_type, "
                                 f"metadata_json) VALUES (1, :cid, 'THUMBS_UP', CAST(:meta AS {js}))"),
                         {"cid": cid, "meta": json.dumps({"from": "ConvEngine"})})
        upgrade(url)
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT feedback_id, feedback_type FROM ce_mcp_user_feedback")).all()
        assert [tuple(r) for r in rows] == [(1, "THUMBS_UP")]
    finally:
        engine.dispose()
