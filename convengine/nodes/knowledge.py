"""knowledge_fallback: when no intent matched, answer from the knowledge bases.

"No intent matched" means the intent is still UNKNOWN, or intent resolution ran this turn and
neither a classifier nor the agent matched (``intent_unmatched``); a turn that answers the
engine's question (AFFIRM, NEGATE, EDIT, RESET) or runs while a form collects is never taken.

The best passage must score at least ``knowledge.fallback.min_score``; then it is the answer (or
the KNOWLEDGE_SYNTHESIS call writes one from the top passages, citing them), the payload carries
the sources, and response resolution is skipped. Below the score the turn goes on to the fallback
response as before. Either way the query, the candidates and their scores are audited.

With ``knowledge.fallback.query_turns``, a message that finds nothing alone is searched again after
the last user messages (a follow-up keeps its topic); the audit then names both.
"""

from __future__ import annotations

import asyncio
from typing import Any

from convengine.catalog import names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.catalog.errors import ConvEngineError
from convengine.catalog.vocab import UNKNOWN
from convengine.knowledge.search import ModelMismatch, SearchHit, SearchOptions
from convengine.llm.spend import capped
from convengine.nodes.common import SkipAudit, Step
from convengine.nodes.turn import Turn

SYNTHESIS_SYSTEM = (
    "Answer the user's question using only the numbered passages. Cite the passages you use as [1], [2]. "
    "If the passages do not answer the question, say that you do not know.")
MAX_QUERY_CHARS = 1000
ANSWER_ACTS = frozenset({"AFFIRM", "NEGATE", "EDIT", "RESET"})
"""Dialogue acts that answer the engine's own question: never taken for a knowledge question."""


async def knowledge_fallback(turn: Turn) -> None:
    settings = turn.settings.knowledge.fallback
    kbs = settings.knowledge_bases or None
    query = (turn.standalone_query or turn.user_text)[:MAX_QUERY_CHARS]
    options, warned = SearchOptions(filters=settings.filters or None), set[str]()
    hits = await search(turn, query, kbs, settings.top_k, options, warned)
    alone = query
    contextual = with_earlier_turns(turn, query, settings.query_turns) if not turn.standalone_query else None
    if contextual and (not hits or hits[0].score < settings.min_score):
        more = await search(turn, contextual, kbs, settings.top_k, options, warned)
        if more and (not hits or more[0].score > hits[0].score):
            query, hits = contextual, more
    audit = {"query": query, "minScore": settings.min_score, "knowledgeBases": settings.knowledge_bases or "ALL",
             "candidates": [_candidate(h) for h in hits]}
    if settings.filters:
        audit["filters"] = settings.filters
    if query != alone:
        audit["message"] = alone
    if not hits or hits[0].score < settings.min_score:
        turn.audit(stages.KNOWLEDGE_FALLBACK_NO_MATCH, audit)
        return
    kept = [h for h in hits if h.score >= settings.min_score]
    answer = await synthesise(turn, query, kept) if settings.synthesis else None
    payload = {"type": "TEXT", "value": answer or kept[0].text, "sources": [source_of(h) for h in kept]}
    turn.set(keys.PAYLOAD, payload)
    turn.audit(stages.KNOWLEDGE_FALLBACK_ANSWERED, {**audit, "synthesised": answer is not None,
                                               "sources": payload["sources"]})
    turn.audit(stages.ASSISTANT_OUTPUT, {"output": payload["value"], "outputFormat": "TEXT", "responseType": "KNOWLEDGE",
                                    "intent": turn.intent, "state": turn.state})
    turn.route_to(names.POST_RESPONSE_RULES)


def with_earlier_turns(turn: Turn, query: str, count: int) -> str | None:
    """``query`` after the last ``count`` user messages (None when there are none to add)."""
    if count <= 0:
        return None
    earlier = [str(t.get("user") or "").strip() for t in (turn.get(keys.RECENT_TURNS) or [])[-count:]]
    context = " ".join(t for t in earlier if t)
    if not context:
        return None
    room = MAX_QUERY_CHARS - len(query) - 1
    return f"{context[-room:]} {query}" if room > 0 else None


async def search(turn: Turn, query: str, kbs: list[str] | None, k: int, options: SearchOptions | None = None,
                 warned: set[str] | None = None) -> list[SearchHit]:
    """The ``k`` best passages for ``query``; an embeddings outage leaves the lexical leg (audited), and a
    base embedded by another model than the engine's is audited (once per turn with ``warned``)."""
    retriever, store = turn.ctx.services.retriever, turn.ctx.services.store
    if retriever is None or store is None:
        raise RuntimeError("knowledge search needs the engine's retriever and store "
                           "(open the engine with Engine.open)")
    vector = None
    try:
        vector = await retriever.aembed(query)
    except Exception as exc:  # noqa: BLE001 - any embeddings outage leaves the lexical leg
        turn.audit(stages.KNOWLEDGE_EMBEDDING_FAILED, {"error": type(exc).__name__, "message": str(exc)[:200]})
    engine = store.sync_engine
    mismatches: list[ModelMismatch] = []

    def run() -> list[SearchHit]:
        with engine.connect() as conn:
            return retriever.search(conn, kbs, query, k, vector, options, mismatches)

    hits = await asyncio.to_thread(run)
    warned = set() if warned is None else warned
    for mismatch in mismatches:
        if mismatch.kb_name not in warned:
            warned.add(mismatch.kb_name)
            turn.audit(stages.KNOWLEDGE_MODEL_MISMATCH, mismatch.to_dict())
    return hits


async def synthesise(turn: Turn, query: str, hits: list[SearchHit]) -> str | None:
    """An answer written by the KNOWLEDGE_SYNTHESIS call from ``hits`` only (None: no LLM, or it failed)."""
    if turn.ctx.services.llm is None:
        turn.audit(stages.KNOWLEDGE_SYNTHESIS_SKIPPED, {"reason": "NO_LLM_CONFIGURED", "callSite": "KNOWLEDGE_SYNTHESIS"})
        return None

    if await capped(turn, "KNOWLEDGE_SYNTHESIS"):
        turn.audit(stages.KNOWLEDGE_SYNTHESIS_SKIPPED, {"reason": "SPEND_CAP_REACHED", "callSite": "KNOWLEDGE_SYNTHESIS"})
        return None
    passages = "\n\n".join(f"[{i}] ({h.title or h.source})\n{h.text}" for i, h in enumerate(hits, 1))
    try:
        text = await turn.ctx.services.llm.text(turn, "KNOWLEDGE_SYNTHESIS", system=SYNTHESIS_SYSTEM,
                                                user=f"Passages:\n{passages}\n\nQuestion: {query}")
    except ConvEngineError as exc:
        turn.audit(stages.KNOWLEDGE_SYNTHESIS_FAILED, {"errorCode": exc.code.value, "message": exc.message})
        return None
    return text.strip() or None


async def semantic_scores(turn: Turn) -> dict[int, bool]:
    """Which SEMANTIC classifiers of enabled intents match the user's text (audited with every
    similarity); empty when there are none or no embeddings model is configured."""
    enabled = turn.snapshot.enabled_intent_codes
    rows = [(c, c.matcher) for c in turn.snapshot.classifiers
            if c.enabled and c.intent_code in enabled and c.rule_type == "SEMANTIC" and c.matcher is not None]
    index, retriever = turn.ctx.semantic_index, turn.ctx.services.retriever
    if not rows or not turn.user_text.strip():
        return {}
    if index is None or retriever is None:  # the index exists only with the retriever's embeddings model
        turn.audit(stages.INTENT_CLASSIFIER_SEMANTIC_SKIPPED, {"reason": "NO_EMBEDDINGS_CONFIGURED",
                                                          "classifiers": [r.classifier_id for r, _ in rows]})
        return {}
    try:
        await index.aprepare(matcher for _, matcher in rows)
        query = await retriever.aembed(turn.user_text[:MAX_QUERY_CHARS])
    except Exception as exc:  # noqa: BLE001 - any embeddings outage leaves the other classifiers
        turn.audit(stages.INTENT_CLASSIFIER_SEMANTIC_SKIPPED, {"reason": "EMBEDDING_FAILED", "error": type(exc).__name__,
                                                          "message": str(exc)[:200]})
        return {}
    default = turn.settings.knowledge.semantic_threshold
    scores, matched = {}, {}
    for row, matcher in rows:
        similarity = index.similarity(matcher, query) if query is not None else None
        threshold = matcher.threshold if matcher.threshold is not None else default
        scores[row.classifier_id] = {"intent": row.intent_code, "similarity": similarity, "threshold": threshold}
        matched[row.classifier_id] = similarity is not None and similarity >= threshold
    turn.audit(stages.INTENT_CLASSIFIER_SEMANTIC_SCORES, {"scores": scores,
                                                     "matched": [cid for cid, ok in matched.items() if ok]})
    return matched


def _candidate(hit: SearchHit) -> dict[str, Any]:
    return {"kb": hit.kb_name, "source": hit.source, "position": hit.position, "score": hit.score,
            "lexical": hit.lexical, "vector": hit.vector, "lexicalRank": hit.lexical_rank,
            "vectorRank": hit.vector_rank}


def source_of(hit: SearchHit) -> dict[str, Any]:
    """A passage as a payload's ``sources`` lists it."""
    return {"kb": hit.kb_name, "source": hit.source, "title": hit.title, "position": hit.position,
            "score": hit.score}


def _skip(turn: Turn) -> SkipAudit | None:
    if not turn.settings.knowledge.fallback.enabled:
        return None, {"reason": "KNOWLEDGE_FALLBACK_DISABLED"}
    if not (turn.standalone_query or turn.user_text).strip():
        return None, {"reason": "NO_TEXT"}
    act = turn.params.get(pk.DIALOGUE_ACT)
    if act in ANSWER_ACTS:
        return None, {"reason": "ANSWER_TO_A_QUESTION", "dialogueAct": act}
    if turn.intent and turn.intent != UNKNOWN and not turn.params.get(pk.INTENT_UNMATCHED):
        return None, {"reason": "INTENT_RESOLVED"}
    return None


STEPS = (Step(names.KNOWLEDGE_FALLBACK, knowledge_fallback, skip=_skip, routes=(names.POST_RESPONSE_RULES,)),)
