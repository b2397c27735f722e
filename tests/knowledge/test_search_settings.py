"""The search options where packs set them (flow and workflow knowledge nodes, ``knowledge.fallback.filters``),
checked at load; and a base searched with another embeddings model than its own: full text only, warned
once in the log and in every turn it affects. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from convengine import ConfigError, Engine
from convengine.catalog.errors import ConfigValidationError
from convengine.config_loader.build import SnapshotInput, build_snapshot
from convengine.knowledge import HashingEmbeddings, Knowledge
from convengine.knowledge.search import ModelMismatch
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on, payload_of, turn_events

ROOT = Path(__file__).parents[2]
FAQ_PACK = yaml.safe_load((ROOT / "examples" / "faq_assistant.yaml").read_text())
SEARCH_LOG = "convengine.knowledge.search"


def test_a_base_searched_with_another_model_is_searched_by_full_text_and_warned_once(
        db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    old = Knowledge.open(db_url, embeddings=HashingEmbeddings(384))
    new = Knowledge.open(db_url, embeddings=HashingEmbeddings(256))
    plain = Knowledge.open(db_url)
    try:
        old.add_text("faq", "returns.md", "Return any item within 30 days for a refund.")
        plain.add_text("bare", "hours.md", "The shop opens at nine.")
        assert old.search("faq", "refund an item")[0].vector is not None  # its own model: hybrid
        caplog.set_level(logging.WARNING, logger=SEARCH_LOG)
        for _ in range(3):
            [hit] = new.search("faq", "refund an item")
            assert hit.vector is None and hit.score == hit.lexical  # never a cosine across two models
        warnings = [r.getMessage() for r in caplog.records if r.name == SEARCH_LOG]
        assert warnings == [("knowledge base 'faq' was embedded with HashingEmbeddings:hashing-384, not "
                             "HashingEmbeddings:hashing-256: it is searched by full text only; ingest it again "
                             "with reembed=True (CLI: --reembed) to search it with HashingEmbeddings:hashing-256")]
        new.search("bare", "when does the shop open")
        assert "knowledge base 'bare' holds no vectors, not HashingEmbeddings:hashing-256" in caplog.records[-1].getMessage()
        assert len([r for r in caplog.records if r.name == SEARCH_LOG]) == 2  # once per base and model
        with new.engine.connect() as conn:
            found: list[ModelMismatch] = []
            new.retriever.search(conn, None, "refund", 3, new.retriever.embed("refund"), mismatches=found)
        assert sorted((m.kb_name, m.base_model) for m in found) == [
            ("bare", None), ("faq", "HashingEmbeddings:hashing-384")]
        assert plain.search("faq", "refund an item")  # no model, no comparison: nothing to warn about
        new.add_documents("faq", [], reembed=True)  # the base now belongs to the new model: hybrid, no warning
        assert new.search("faq", "refund an item")[0].vector is not None
        assert len([r for r in caplog.records if r.name == SEARCH_LOG]) == 2
    finally:
        for k in (old, new, plain):
            k.close()


def test_a_turn_audits_the_model_mismatch_and_still_answers_by_full_text(db_url: str, tmp_path: Path) -> None:
    old = Knowledge.open(db_url, embeddings=HashingEmbeddings(384))
    try:
        old.add_text("faq", "shipping.md", "Shipping takes three to five working days.")
    finally:
        old.close()
    engine = Engine.open(db_url, pack=copy.deepcopy(FAQ_PACK), embeddings=HashingEmbeddings(256))
    try:
        for _ in range(2):  # every turn it affects says so (the log, once)
            answer = engine.process("how long does shipping take?")
            assert answer.text == "Shipping takes three to five working days."
            assert answer.payload.sources[0]["score"] == 1.0  # the lexical score alone, not a mixed one
            events = engine.audit(answer.conversation_id)
            [mismatch] = [e.payload for e in events if e.stage == "KNOWLEDGE_MODEL_MISMATCH"]
            assert (mismatch["kb"], mismatch["baseModel"], mismatch["queryModel"]) == (
                "faq", "HashingEmbeddings:hashing-384", "HashingEmbeddings:hashing-256")
            answered = next(e.payload for e in events if e.stage == "KNOWLEDGE_FALLBACK_ANSWERED")
            assert answered["candidates"][0]["vector"] is None
    finally:
        engine.close()


def _fallback_pack(**fallback: Any) -> dict[str, Any]:
    pack = copy.deepcopy(FAQ_PACK)
    pack["settings"]["knowledge"]["fallback"].update(fallback)
    return pack


def test_the_fallback_searches_only_the_documents_its_filters_name(db_url: str) -> None:
    engine = Engine.open(db_url, pack=_fallback_pack(filters={"lang": "en", "tier": ["gold", "silver"]}))
    try:
        for source, lang, tier, text in [
                ("fr.md", "fr", "gold", "Refunds for returned items take ten days (fr)."),
                ("bronze.md", "en", "bronze", "Refunds for returned items take ten days (bronze)."),
                ("en.md", "en", "silver", "Refunds for returned items take five days.")]:
            engine.knowledge.add_text("faq", source, text, metadata={"lang": lang, "tier": tier})
        answer = engine.process("how long do refunds for returned items take")
        assert answer.text == "Refunds for returned items take five days."
        assert [s["source"] for s in answer.payload.sources] == ["en.md"]
        audit = next(e.payload for e in engine.audit(answer.conversation_id)
                     if e.stage == "KNOWLEDGE_FALLBACK_ANSWERED")
        assert audit["filters"] == {"lang": "en", "tier": ["gold", "silver"]}
    finally:
        engine.close()


@pytest.mark.parametrize(("filters", "message"), [
    ({"la ng": "en"}, "filter key 'la ng' must be 1-64 letters"),
    ({"lang": {"$ne": "en"}}, "knowledge.fallback.filters.lang"),
    ({"lang": []}, "filter 'lang' needs at least one value"),
])
def test_bad_fallback_filters_are_refused_at_load(db_url: str, filters: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        Engine.open(db_url, pack=_fallback_pack(filters=filters)).close()


def _kb_flow(**options: Any) -> dict[str, Any]:
    nodes = [node("KB", "start", "start"),
             node("KB", "lang", "set", variable="lang", value="en"),
             node("KB", "ask", "entity", variable="q", prompt="What is your question?"),
             node("KB", "search", "knowledge", query="{{ session.q }}", knowledge_bases=["faq"], min_score=0.6,
                  **options),
             node("KB", "none", "message", text="I could not find that."),
             node("KB", "end", "end")]
    edges = [*chain("KB", "start", "lang", "ask", "search", "end"), edge("KB", "search", "none", outcome="not_found"),
             edge("KB", "none", "end")]
    return flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "KB", "intent_code": "GREETING",
                                                        "priority": 1}])


@pytest.mark.asyncio
async def test_a_flow_knowledge_node_takes_filters_fusion_mmr_and_earlier_turns(db_url: str) -> None:
    pack = _kb_flow(where={"lang": "{{ session.lang }}", "public": True}, fusion="rrf", mmr=0.7, dedupe=True,
                    query_turns=2)
    async with engine_on(db_url, pack) as engine:
        for source, lang, public, text in [
                ("hours-fr.md", "fr", True, "Opening hours of the branch: nine to five (fr)."),
                ("hours-private.md", "en", False, "Opening hours of the branch: staff only."),
                ("hours.md", "en", True, "Opening hours of the branch: nine to five.")]:
            await asyncio.to_thread(engine.knowledge.add_text, "faq", source, text,
                                    metadata={"lang": lang, "public": public})
        cid = (await engine.aprocess("hello")).conversation_id
        found = await engine.aprocess("opening hours of the branch", cid)
        assert found.text == "Opening hours of the branch: nine to five."
        assert [s["source"] for s in found.payload.sources] == ["hours.md"]
        searched = payload_of(await turn_events(engine, cid), "FLOW_KNOWLEDGE")
        assert searched["filters"] == {"lang": "en", "public": True}
    pack = _kb_flow(query_turns=2)
    async with engine_on(db_url, pack) as engine:
        await asyncio.to_thread(engine.knowledge.add_text, "faq", "express.md", "Express delivery arrives the next day.")
        alone = (await engine.aprocess("hello")).conversation_id
        assert (await engine.aprocess("and how long does that take?", alone)).text == "I could not find that."
        cid = (await engine.aprocess("hello")).conversation_id
        assert (await engine.aprocess("tell me about express delivery", cid)).text.startswith("Express delivery")
        await engine.aprocess("hello", cid)
        follow = await engine.aprocess("and how long does that take?", cid)  # no topic of its own
        assert follow.text == "Express delivery arrives the next day."
        searched = payload_of(await turn_events(engine, cid), "FLOW_KNOWLEDGE")
        assert searched["message"] == "and how long does that take?" and "express delivery" in searched["query"]


@pytest.mark.parametrize(("options", "reason"), [
    ({"where": {"lang": {"$ne": "en"}}}, "where: 'lang': dict values cannot be matched"),
    ({"where": ["lang"]}, "where: must be an object of metadata keys to values (got list)"),
    ({"where": {"a b": "x"}}, "where: key 'a b' must be 1-64 letters"),
    ({"where": {"lang": []}}, "where: 'lang' needs at least one value"),
    ({"fusion": "borda"}, "fusion must be one of weighted, rrf (got 'borda')"),
    ({"mmr": 1.5}, "mmr must be a number from 0 to 1 (got '1.5')"),
    ({"query_turns": 11}, "query_turns must be a whole number from 0 to 10 (got '11')"),
    ({"query_turns": "2"}, "query_turns must be a whole number from 0 to 10"),
    ({"dedupe": "no"}, "dedupe must be true or false (got 'no')"),
    ({"top_k": 0}, "top_k must be a whole number from 1 to 20 (got '0')"),
])
def test_bad_knowledge_node_options_are_refused_naming_flow_node_and_option(options: dict[str, Any],
                                                                            reason: str) -> None:
    data = _kb_flow(**options)
    tables = {k: v for k, v in data.items() if k != "settings"}
    with pytest.raises(ConfigValidationError) as caught:
        build_snapshot(SnapshotInput(tables, settings_overrides={"flows": data["settings"]["flows"]}))
    assert any(f"flow KB node search: {reason}" in str(v) for v in caught.value.violations), caught.value.violations


def test_the_fallback_searches_the_standalone_query_the_rewrite_call_wrote(db_url: str) -> None:
    from convengine.llm import ScriptedLLM

    llm = ScriptedLLM({"DIALOGUE_ACT": [
        {"dialogueAct": "QUESTION", "confidence": 0.9},
        {"dialogueAct": "QUESTION", "confidence": 0.9, "standaloneQuery": "how long does express delivery take"}],
        "INTENT_AGENT": {"intent": None, "confidence": 0}})
    pack = copy.deepcopy(FAQ_PACK)
    pack["settings"]["flow"] = {"dialogue-act": {"resolute": "LLM_ONLY"}, "query-rewrite": {"enabled": True}}
    engine = Engine.open(db_url, pack=pack, llm=llm)
    try:
        engine.knowledge.ingest("faq", [ROOT / "examples" / "faq"])
        first = engine.process("how much does express delivery cost")
        follow = engine.process("and how long does that take?", first.conversation_id)
        assert "express delivery takes 1 to 2 business days" in follow.text
        answered = [e for e in engine.audit(first.conversation_id) if e.stage == "KNOWLEDGE_FALLBACK_ANSWERED"][-1]
        assert answered.payload["query"] == "how long does express delivery take"
    finally:
        engine.close()


def test_a_workflow_knowledge_node_is_checked_the_same_way() -> None:
    from tests.workflows.packs import chain as wf_chain
    from tests.workflows.packs import node as wf_node
    from tests.workflows.packs import workflow, workflows_pack

    data = workflows_pack([workflow("W")], [wf_node("W", "in", "trigger"),
                                            wf_node("W", "kb", "knowledge", fusion="borda", where={"lang": []}),
                                            wf_node("W", "end", "end")], wf_chain("W", "in", "kb", "end"))
    with pytest.raises(ConfigValidationError) as caught:
        build_snapshot(SnapshotInput({k: v for k, v in data.items() if k != "settings"},
                                     settings_overrides=data["settings"]))
    found = [str(v) for v in caught.value.violations]
    assert any("workflow W node kb: fusion must be one of weighted, rrf (got 'borda') (rule: node-config)" in v
               for v in found), found
    assert any("workflow W node kb: where: 'lang' needs at least one value" in v for v in found), found


@pytest.mark.asyncio
async def test_a_flow_knowledge_node_without_a_query_searches_the_rewritten_standalone_query(db_url: str) -> None:
    from convengine.llm import ScriptedLLM

    llm = ScriptedLLM({"DIALOGUE_ACT": [
        {"dialogueAct": "GREETING", "confidence": 0.9},
        {"dialogueAct": "QUESTION", "confidence": 0.9, "standaloneQuery": "how long does express delivery take"}],
        "INTENT_AGENT": {"intent": None, "confidence": 0}})
    nodes = [node("KB", "start", "start"), node("KB", "wait", "entity", variable="q", prompt="Ask away."),
             node("KB", "search", "knowledge", knowledge_bases=["faq"], min_score=0.6),
             node("KB", "none", "message", text="I could not find that."), node("KB", "end", "end")]
    edges = [*chain("KB", "start", "wait", "search", "end"), edge("KB", "search", "none", outcome="not_found"),
             edge("KB", "none", "end")]
    pack = flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "KB", "intent_code": "GREETING", "priority": 1}])
    pack["settings"]["flow"] = {"dialogue-act": {"resolute": "LLM_ONLY"}, "query-rewrite": {"enabled": True}}
    async with engine_on(db_url, pack, llm=llm) as engine:
        await asyncio.to_thread(engine.knowledge.add_text, "faq", "express.md", "Express delivery arrives the next day.")
        cid = (await engine.aprocess("hello")).conversation_id
        answer = await engine.aprocess("and how long does that take?", cid)
        assert answer.text == "Express delivery arrives the next day."
        assert payload_of(await turn_events(engine, cid), "FLOW_KNOWLEDGE")["query"] == (
            "how long does express delivery take")


def test_the_cli_says_when_it_searches_a_base_of_another_model(db_url: str, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    from typer.testing import CliRunner

    from convengine.cli.app import app

    (tmp_path / "small.py").write_text("from convengine.knowledge import HashingEmbeddings\n"
                                       "small = HashingEmbeddings(128)\n")
    old = Knowledge.open(db_url, embeddings=HashingEmbeddings(384))
    try:
        old.add_text("faq", "shipping.md", "Shipping takes three to five working days.")
    finally:
        old.close()
    import sys
    sys.path.insert(0, str(tmp_path))
    try:
        caplog.set_level(logging.WARNING, logger=SEARCH_LOG)
        done = CliRunner().invoke(app, ["knowledge", "search", "faq", "shipping", "--url", db_url,
                                        "--embeddings", "small:small"])
    finally:
        sys.path.remove(str(tmp_path))
    assert done.exit_code == 0, done.output
    assert "vector -" in done.output and "shipping.md" in done.output
    assert any("was embedded with HashingEmbeddings:hashing-384, not HashingEmbeddings:hashing-128" in r.getMessage()
               for r in caplog.records)
