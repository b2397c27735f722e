"""The matching order of a turn: small talk scored before intents, then the classifiers' substring
and pattern match, the LLM matcher when they miss, the knowledge fallback when no intent matched,
then the fallback response. Through the public API and the audit, on SQLite and PostgreSQL."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from convengine import Engine, ScriptedLLM
from tests.knowledge.test_knowledge import FAQ_PACK, write_docs

NO_INTENT = {"intent": None, "confidence": 0}


def stages(engine: Engine, cid: str) -> list[str]:
    events = engine.audit(cid)
    last = max(i for i, e in enumerate(events) if e.stage == "USER_INPUT")
    return [e.stage for e in events[last:]]


def small_talk(engine: Engine, cid: str) -> dict[str, Any] | None:
    events = engine.audit(cid)
    last = max(i for i, e in enumerate(events) if e.stage == "USER_INPUT")
    found = [e.payload for e in events[last:] if e.stage == "INTENT_SMALL_TALK_MATCHED"]
    return found[0] if found else None


def open_engine(db_url: str, tmp_path: Path, llm: ScriptedLLM, **flows: Any) -> Engine:
    pack = copy.deepcopy(FAQ_PACK)
    pack["settings"]["flows"] = flows
    engine = Engine.open(db_url, pack=pack, llm=llm)
    engine.knowledge.ingest("faq", [write_docs(tmp_path / "docs")])
    return engine


def test_small_talk_then_classifiers_then_llm_then_knowledge_then_fallback(db_url: str, tmp_path: Path) -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [{"intent": "HUMAN_AGENT", "confidence": 0.9}, NO_INTENT, NO_INTENT]},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    engine = open_engine(db_url, tmp_path, llm, **{"small-talk-intents": ["greeting"], "small-talk-min-score": 0.5})
    try:
        hello = engine.process("Hello!")
        cid = hello.conversation_id
        assert hello.intent == "GREETING" and hello.text.startswith("Hello!")
        assert small_talk(engine, cid) == {"intent": "GREETING", "classifierId": 1, "score": 1.0,
                                           "minScore": 0.5, "outright": True}
        assert llm.count("INTENT_AGENT") == 0

        # small talk covering little of the message loses to an intent's classifier (no collision)
        person = engine.process("hello, can I talk to a person about my order?", cid)
        assert person.intent == "HUMAN_AGENT" and small_talk(engine, cid) is None
        assert "INTENT_CLASSIFIER_COLLISION" not in stages(engine, cid)

        # ... and wins when no other classifier matches
        chat = engine.process("hey there, lovely weather today", cid)
        assert chat.intent == "GREETING"
        assert small_talk(engine, cid)["outright"] is False
        assert llm.count("INTENT_AGENT") == 0

        # no classifier: the LLM matcher
        courier = engine.process("could somebody from your team phone me", cid)
        assert courier.intent == "HUMAN_AGENT" and llm.count("INTENT_AGENT") == 1
        assert "INTENT_RESOLVED_BY_AGENT" in stages(engine, cid)

        # no intent at all: the knowledge fallback answers
        damaged = engine.process("my parcel arrived damaged, what now?", cid)
        assert damaged.text.startswith("A damaged parcel is replaced for free")
        assert "KNOWLEDGE_FALLBACK_ANSWERED" in stages(engine, cid)

        # nothing in the knowledge base either: the fallback response
        pizza = engine.process("do you sell pizza")
        assert pizza.text.startswith("Sorry, I don't know that one") and pizza.intent == "UNKNOWN"
        assert "KNOWLEDGE_FALLBACK_NO_MATCH" in stages(engine, pizza.conversation_id)
        assert llm.count("INTENT_AGENT") == 3
    finally:
        engine.close()


def test_without_small_talk_topics_a_greeting_and_an_intent_collide(db_url: str, tmp_path: Path) -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [NO_INTENT]}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    engine = open_engine(db_url, tmp_path, llm)
    try:
        mixed = engine.process("hello, can I talk to a person about my order?")
        assert "INTENT_CLASSIFIER_COLLISION" in stages(engine, mixed.conversation_id)
        assert mixed.intent != "HUMAN_AGENT"
    finally:
        engine.close()
