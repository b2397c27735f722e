"""Retrieval: search latency and recall@5 on a generated corpus, and the turn overhead of a
knowledge-fallback turn against a bare LangGraph graph of the same size on the same saver.

The corpus is made here (no download): documents of paragraphs of pseudo-words, one passage
each; a query takes four words of one passage (one of them misspelt) plus a common word, and
counts as found when that passage is in the top five. Lexical-only (no embeddings model) and
hybrid (``HashingEmbeddings``) are measured on SQLite and PostgreSQL.

    python bench/retrieval.py [--chunks 10000] [--queries 200]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import EXAMPLES, fresh_database, run_and_report, time_interleaved
from bench.turn_overhead import bare_turns
from convengine.engine import Engine
from convengine.knowledge import Document, HashingEmbeddings, Knowledge

TITLE = "Retrieval (generated corpus; recall@5 of a passage from 4 of its words, one misspelt)"
HEADER = ["saver", "mode", "chunks", "ingest s", "search p50 ms", "search p99 ms", "recall@5",
          "fallback turn p50 ms", "bare p50 ms", "turn/bare"]
PARAGRAPHS_PER_DOCUMENT = 10
SYLLABLES = ["ba", "ko", "ri", "tu", "me", "sa", "lo", "ni", "ve", "da", "pu", "gre", "tho", "mal", "zen", "qui"]


def vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def corpus(chunks: int, seed: int = 7) -> tuple[list[Document], list[list[str]]]:
    rng = random.Random(seed)
    words = vocabulary(rng, 6000)
    paragraphs = [[rng.choice(words) for _ in range(rng.randint(30, 50))] for _ in range(chunks)]
    documents = [Document(f"doc-{d:05d}", "\n\n".join(" ".join(p) for p in paragraphs[start:start + PARAGRAPHS_PER_DOCUMENT]),
                          f"Document {d}")
                 for d, start in enumerate(range(0, chunks, PARAGRAPHS_PER_DOCUMENT))]
    return documents, paragraphs


def queries(paragraphs: list[list[str]], count: int, seed: int = 11) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        target = rng.randrange(len(paragraphs))
        picked = rng.sample(sorted(set(paragraphs[target])), 4)
        picked[0] = picked[0][:-1] + ("x" if picked[0][-1] != "x" else "y")  # one misspelt word
        out.append((" ".join([*picked, "the"]), target))
    return out


def measure_search(url: str, documents: list[Document], paragraphs: list[list[str]], hybrid: bool,
                   count: int) -> dict[str, Any]:
    knowledge = Knowledge.open(url, embeddings=HashingEmbeddings() if hybrid else None, max_chars=600)
    try:
        began = time.perf_counter()
        knowledge.add_documents("bench", documents)
        ingest_s = time.perf_counter() - began
        texts = {" ".join(p): i for i, p in enumerate(paragraphs)}
        knowledge.search("bench", "warm up the cache")
        found, samples = 0, []
        for text, target in queries(paragraphs, count):
            began = time.perf_counter()
            hits = knowledge.search("bench", text, k=5)
            samples.append(time.perf_counter() - began)
            found += any(texts.get(h.text) == target for h in hits)
        samples.sort()
        return {"chunks": len(paragraphs), "ingest_s": ingest_s, "search_p50_ms": samples[len(samples) // 2] * 1000,
                "search_p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000,
                "recall_at_5": found / count}
    finally:
        knowledge.close()


async def measure_fallback_turn(backend: str, pg_url: str | None, folder: Path, turns: int) -> dict[str, Any]:
    """Engine turns answered by the knowledge fallback (FAQ example) against the bare graph."""
    url = fresh_database(backend, pg_url, folder)
    engine = await Engine.aopen(url, pack=EXAMPLES / "faq_assistant.yaml", embeddings=HashingEmbeddings())
    engine.knowledge.ingest("faq", [EXAMPLES / "faq"])
    nodes = len(engine.graph.get_graph().nodes) - 2
    questions = ("how much does express delivery cost", "what are your opening hours on saturday",
                 "my item arrived damaged")

    async def turn(i: int) -> None:
        result = await engine.aprocess(questions[i % len(questions)], str(uuid.uuid4()))
        assert result.payload.sources, result.text

    try:
        async with AsyncExitStack() as stack:
            bare = await stack.enter_async_context(bare_turns(fresh_database(backend, pg_url, folder), nodes))
            timings = await time_interleaved({"engine": turn, "bare": bare}, turns, warmup=20)
    finally:
        await engine.aclose()
    return {"turn_p50_ms": timings["engine"].median_ms, "bare_p50_ms": timings["bare"].median_ms,
            "turn_ratio": timings["engine"].median_ms / timings["bare"].median_ms}


async def measure(chunks: int, count: int, turns: int, pg_url: str | None,
                  folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    documents, paragraphs = corpus(chunks)
    results = []
    for backend in ["sqlite"] + (["postgres"] if pg_url else []):
        turn = await measure_fallback_turn(backend, pg_url, folder, turns)
        for hybrid in (False, True):
            search = measure_search(fresh_database(backend, pg_url, folder), documents, paragraphs, hybrid, count)
            results.append({"backend": backend, "mode": "hybrid (hashing)" if hybrid else "lexical", **search, **turn})
    rows = [[r["backend"], r["mode"], r["chunks"], f"{r['ingest_s']:.1f}", f"{r['search_p50_ms']:.2f}",
             f"{r['search_p99_ms']:.2f}", f"{r['recall_at_5']:.2f}", f"{r['turn_p50_ms']:.2f}",
             f"{r['bare_p50_ms']:.2f}", f"{r['turn_ratio']:.2f}x"] for r in results]
    return rows, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    run_and_report("retrieval", TITLE, HEADER,
                   lambda folder, pg_url: measure(args.chunks, args.queries, args.turns, pg_url, folder))


if __name__ == "__main__":
    main()
