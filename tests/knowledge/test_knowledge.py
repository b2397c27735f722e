"""Knowledge bases: ingest, hybrid search, the knowledge fallback, synthesis and SEMANTIC classifiers."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from convengine import ConfigError, Engine, ScriptedLLM
from convengine.knowledge import HashingEmbeddings, Knowledge

ROOT = Path(__file__).parents[2]
FAQ_PACK = yaml.safe_load((ROOT / "examples" / "faq_assistant.yaml").read_text())


def write_docs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "returns.md").write_text(
        "# Returns\n\nYou can return any item within 30 days of delivery for a full refund.\n\n"
        "# Damaged parcels\n\nA damaged parcel is replaced for free: send a photo within 7 days.\n")
    (folder / "shipping.txt").write_text("Express deliveries arrive in one or two business days and cost 9.90 EUR.\n")
    (folder / "hours.html").write_text(
        "<html><head><title>Hours</title><style>p {color: red}</style></head><body><h1>Opening hours</h1>"
        "<p>The shop is open Monday to Saturday from 9 am to 6 pm.</p><script>alert('x')</script></body></html>")
    return folder


def test_ingest_is_idempotent_and_follows_changed_and_removed_files(db_url: str, tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs")
    knowledge = Knowledge.open(db_url)
    try:
        first = knowledge.ingest("shop", [docs], description="shop FAQ")
        assert sorted(Path(s).name for s in first.added) == ["hours.html", "returns.md", "shipping.txt"]
        assert first.chunks == 4
        again = knowledge.ingest("shop", [docs])
        assert (again.added, again.updated, len(again.unchanged), again.chunks) == ([], [], 3, 0)
        (docs / "shipping.txt").write_text("Express deliveries now arrive the next business day.\n")
        (docs / "hours.html").unlink()
        changed = knowledge.ingest("shop", [docs], prune=True)
        assert [Path(s).name for s in changed.updated] == ["shipping.txt"]
        assert [Path(s).name for s in changed.removed] == ["hours.html"]
        [base] = knowledge.list()
        assert (base["kb_name"], base["documents"], base["chunks"], base["description"]) == ("shop", 2, 3, "shop FAQ")
        assert knowledge.search("shop", "opening hours saturday") == [] or all(
            "Saturday" not in h.text for h in knowledge.search("shop", "opening hours saturday"))
        hit = knowledge.search("shop", "when does an express delivery arrive")[0]
        assert "next business day" in hit.text
        assert knowledge.delete("shop") == 2 and knowledge.list() == []
    finally:
        knowledge.close()


def test_html_is_read_as_text_without_scripts_or_styles(db_url: str, tmp_path: Path) -> None:
    knowledge = Knowledge.open(db_url)
    try:
        knowledge.ingest("shop", [write_docs(tmp_path / "docs") / "hours.html"])
        [hit] = knowledge.search("shop", "opening hours", k=5)
        assert hit.title == "Opening hours" and "Monday to Saturday" in hit.text
        assert "alert" not in hit.text and "color" not in hit.text
    finally:
        knowledge.close()


def test_search_without_embeddings_is_lexical_and_with_them_hybrid(db_url: str, tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs")
    lexical = Knowledge.open(db_url)
    hybrid = Knowledge.open(db_url, embeddings=HashingEmbeddings())
    try:
        lexical.ingest("plain", [docs])
        hybrid.ingest("vectors", [docs])
        plain = lexical.search("plain", "how much does express delivery cost to Norway")
        assert plain[0].source.endswith("shipping.txt") and plain[0].vector is None
        # express, delivery, cost of express, delivery, cost, norway ("how much" asks for a price: no topic)
        assert plain[0].score == plain[0].lexical == pytest.approx(0.75)
        both = hybrid.search("vectors", "how much does express delivery cost")
        assert both[0].source.endswith("shipping.txt")
        assert both[0].vector is not None and both[0].vector > 0.2 and both[0].vector_rank == 1
        assert both[0].score == pytest.approx((both[0].lexical + both[0].vector) / 2, abs=1e-5)
        # a misspelling no full-text index matches is still found by the vector leg
        typo = hybrid.search("vectors", "damagd parsel fotto")
        assert typo and "damaged parcel" in typo[0].text and typo[0].lexical_rank is None
        assert lexical.search("plain", "damagd parsel fotto") == []
    finally:
        lexical.close()
        hybrid.close()


def _faq_engine(url: str, docs: Path, **options: Any) -> Engine:
    engine = Engine.open(url, pack=options.pop("pack", FAQ_PACK), **options)
    engine.knowledge.ingest("faq", [docs])
    return engine


def test_the_fallback_answers_with_its_sources_above_the_score_and_falls_through_below(
        db_url: str, tmp_path: Path) -> None:
    engine = _faq_engine(db_url, write_docs(tmp_path / "docs"))
    try:
        hello = engine.process("hello")
        assert hello.intent == "GREETING" and hello.payload.sources is None
        answer = engine.process("my parcel arrived damaged, what now?", hello.conversation_id)
        assert answer.intent == "GREETING"  # nothing matched: the intent stays, the knowledge base answers
        assert answer.text.startswith("A damaged parcel is replaced for free")
        assert answer.payload.sources[0]["source"].endswith("returns.md")
        assert answer.payload.sources[0]["score"] >= 0.5
        events = [e for e in engine.audit(answer.conversation_id) if e.stage.startswith("KNOWLEDGE_FALLBACK")]
        answered = events[-1].payload
        assert events[-1].stage == "KNOWLEDGE_FALLBACK_ANSWERED"
        assert answered["query"] == "my parcel arrived damaged, what now?" and answered["minScore"] == 0.5
        assert answered["candidates"][0]["lexical"] >= 0.5 and "lexicalRank" in answered["candidates"][0]
        again = engine.process("do you sell pizza", hello.conversation_id)  # below the score: as before
        assert again.text.startswith("Hello!") and again.payload.sources is None
        unknown = engine.process("do you sell pizza")
        assert unknown.text.startswith("Sorry, I don't know that one") and unknown.payload.sources is None
        last = [e for e in engine.audit(unknown.conversation_id) if e.stage.startswith("KNOWLEDGE_FALLBACK")][-1]
        assert last.stage == "KNOWLEDGE_FALLBACK_NO_MATCH"
        assert engine.history(answer.conversation_id)[1]["assistant_output"]["value"].startswith("A damaged parcel")
    finally:
        engine.close()


def test_synthesis_writes_the_answer_from_the_passages_only(db_url: str, tmp_path: Path) -> None:
    pack = copy.deepcopy(FAQ_PACK)
    pack["settings"]["knowledge"]["fallback"]["synthesis"] = True
    pack["settings"]["flow"] = {"dialogue_act": {"resolute": "REGEX_ONLY"}}
    llm = ScriptedLLM({"KNOWLEDGE_SYNTHESIS": ["Express delivery costs 9.90 EUR [1]."],
                       "INTENT_AGENT": {"intent": None, "confidence": 0}})
    engine = _faq_engine(db_url, write_docs(tmp_path / "docs"), pack=pack, llm=llm)
    try:
        result = engine.process("how much does express delivery cost")
        assert result.text == "Express delivery costs 9.90 EUR [1]."
        [call] = llm.calls_to("KNOWLEDGE_SYNTHESIS")
        assert "[1] (" in call.user_text and "9.90 EUR" in call.user_text
        assert "only the numbered passages" in call.system
        assert result.payload.sources[0]["source"].endswith("shipping.txt")
    finally:
        engine.close()


SEMANTIC_PACK = copy.deepcopy(FAQ_PACK)
SEMANTIC_PACK["ce_intent"].append({"intent_code": "CANCEL_ORDER", "description": "Cancel an order", "priority": 30})
SEMANTIC_PACK["ce_intent_classifier"].append(
    {"intent_code": "CANCEL_ORDER", "rule_type": "SEMANTIC", "priority": 30,
     "pattern": '{"examples": ["cancel my order", "please stop my order"], "threshold": 0.6}'})
SEMANTIC_PACK["ce_response"].append({"intent_code": "CANCEL_ORDER", "state_code": "ANY", "output_format": "TEXT",
                                     "response_type": "EXACT", "exact_text": "Which order should I cancel?"})


def test_a_semantic_classifier_resolves_an_intent_no_pattern_matches(db_url: str, tmp_path: Path) -> None:
    engine = _faq_engine(db_url, write_docs(tmp_path / "docs"), pack=SEMANTIC_PACK, embeddings=HashingEmbeddings())
    try:
        result = engine.process("stop the order please")
        assert (result.intent, result.text) == ("CANCEL_ORDER", "Which order should I cancel?")
        scores = [e for e in engine.audit(result.conversation_id) if e.stage == "INTENT_CLASSIFIER_SEMANTIC_SCORES"]
        [(_cid, score)] = scores[-1].payload["scores"].items()
        assert score["intent"] == "CANCEL_ORDER" and score["similarity"] >= 0.6 == score["threshold"]
        other = engine.process("what does express delivery cost", result.conversation_id)
        assert other.intent == "CANCEL_ORDER"  # sticky: the intent holds, no fallback answer
        fresh = engine.process("hello, I want a human")  # regex GREETING and HUMAN_AGENT collide as before
        assert fresh.intent not in ("CANCEL_ORDER",)
    finally:
        engine.close()


def test_semantic_matches_count_in_collisions(db_url: str, tmp_path: Path) -> None:
    pack = copy.deepcopy(SEMANTIC_PACK)
    pack["ce_intent_classifier"].append({"intent_code": "HUMAN_AGENT", "rule_type": "CONTAINS", "pattern": "stop my",
                                         "priority": 5})
    engine = _faq_engine(db_url, write_docs(tmp_path / "docs"), pack=pack, embeddings=HashingEmbeddings())
    try:
        result = engine.process("please stop my order")
        collision = [e for e in engine.audit(result.conversation_id) if e.stage == "INTENT_CLASSIFIER_COLLISION"]
        assert set(collision[-1].payload["matchedIntents"]) == {"HUMAN_AGENT", "CANCEL_ORDER"}
    finally:
        engine.close()


def test_semantic_rows_without_an_embeddings_model_are_refused_at_open(db_url: str) -> None:
    with pytest.raises(ConfigError, match="SEMANTIC and need an embeddings model"):
        Engine.open(db_url, pack=SEMANTIC_PACK)


def test_a_semantic_pattern_without_examples_is_refused_naming_the_row() -> None:
    from convengine.config_loader import validate_pack

    pack = copy.deepcopy(SEMANTIC_PACK)
    pack["ce_intent_classifier"][-1]["pattern"] = '{"examples": []}'
    with pytest.raises(ConfigError, match=r"ce_intent_classifier.*pattern.*no example phrases"):
        validate_pack(pack)


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF showing ``text`` (Helvetica), built by hand: no PDF writer needed."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>"),
               b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def test_pdf_documents_are_read_as_text(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "refunds.pdf").write_bytes(minimal_pdf("Refunds are paid within 5 business days."))
    knowledge = Knowledge.open(db_url)
    try:
        report = knowledge.ingest("pdfs", [tmp_path])
        assert [Path(s).name for s in report.added] == ["refunds.pdf"]
        [hit] = knowledge.search("pdfs", "when are refunds paid")
        assert hit.text == "Refunds are paid within 5 business days." and hit.title == "refunds"
    finally:
        knowledge.close()
