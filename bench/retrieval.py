"""Retrieval: search latency, recall@5 and the memory the searching process holds, with the vector
index and without it, and the turn overhead of a knowledge-fallback turn against a bare LangGraph
graph of the same size on the same saver.

The corpus is made here (no download): documents of paragraphs of pseudo-words, one passage each;
a query takes four words of one passage (one of them misspelt) plus a common word, and counts as
found when that passage is in the top five. Each backend's database is ingested once with
``HashingEmbeddings`` vectors; then each mode searches it from a fresh process of its own
(``spawn``), so its memory is its own:

- ``lexical``: no embeddings model (full-text search only);
- ``hybrid, brute-force``: every vector loaded into a NumPy matrix in the process;
- ``hybrid, sqlite-vec``: the vec0 index in the SQLite file (SQLite only; built once, timed apart);
  PostgreSQL has no index here unless its server has pgvector, which the row's ``index`` says.

``held MB`` is the growth of the process's resident memory from just before its first search to
after the last one (the vectors it keeps, caches); ``rss MB`` its resident memory at the end.

    python bench/retrieval.py [--chunks 100000] [--queries 200] [--turns 200] [--warmup 20] [--sqlite-only]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import resource
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import EXAMPLES, RESULTS, fresh_database, run_and_report, time_interleaved
from bench.turn_overhead import bare_turns
from convengine.engine import Engine
from convengine.knowledge import Document, HashingEmbeddings, Knowledge, SearchSettings

TITLE = "Retrieval (generated corpus; recall@5 of a passage from 4 of its words, one misspelt)"
HEADER = ["saver", "mode", "index", "chunks", "ingest s", "index build s", "search p50 ms", "search p99 ms",
          "recall@5", "held MB", "rss MB", "fallback turn p50 ms", "bare p50 ms", "turn/bare"]
MODES = (("lexical", None), ("hybrid", "brute-force"), ("hybrid", "sqlite-vec"))
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


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ingest(url: str, documents: list[Document]) -> float:
    """Seconds to ingest ``documents`` with hashing vectors (what every mode then searches)."""
    knowledge = Knowledge.open(url, embeddings=HashingEmbeddings(), max_chars=600)
    try:
        began = time.perf_counter()
        knowledge.add_documents("bench", documents)
        return time.perf_counter() - began
    finally:
        knowledge.close()


def search_in_process(url: str, chunks: int, hybrid: bool, index: str, count: int) -> dict[str, Any]:
    """One mode's searches, run in a fresh process: latency, recall@5, memory, the index it got."""
    _, paragraphs = corpus(chunks)
    texts = {" ".join(p): i for i, p in enumerate(paragraphs)}
    asked = queries(paragraphs, count)
    del paragraphs
    settings = SearchSettings(vector_index=index) if hybrid else None  # type: ignore[arg-type]
    knowledge = Knowledge.open(url, embeddings=HashingEmbeddings() if hybrid else None, settings=settings,
                               migrate=False)
    try:
        chosen = knowledge.vector_index if hybrid else None
        before = rss_mb()
        began = time.perf_counter()
        knowledge.search("bench", "warm up the cache")  # loads the matrix or builds the index, once
        first_s = time.perf_counter() - began
        found, samples = 0, []
        for text, target in asked:
            began = time.perf_counter()
            hits = knowledge.search("bench", text, k=5)
            samples.append(time.perf_counter() - began)
            found += any(texts.get(h.text) == target for h in hits)
        after = rss_mb()
    finally:
        knowledge.close()
    samples.sort()
    return {"index": chosen.kind if chosen else "-", "index_reason": chosen.reason if chosen else "no vectors searched",
            "first_search_s": first_s,
            "search_p50_ms": samples[len(samples) // 2] * 1000,
            "search_p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000,
            "recall_at_5": found / count, "held_mb": after - before, "rss_mb": after}


def measure_search(url: str, chunks: int, hybrid: bool, index: str, count: int) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(search_in_process, url, chunks, hybrid, index, count).result()


async def measure_fallback_turn(backend: str, pg_url: str | None, folder: Path, turns: int,
                                warmup: int = 20) -> dict[str, Any]:
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
            timings = await time_interleaved({"engine": turn, "bare": bare}, turns, warmup=warmup)
    finally:
        await engine.aclose()
    return {"turn_p50_ms": timings["engine"].median_ms, "bare_p50_ms": timings["bare"].median_ms,
            "turn_ratio": timings["engine"].median_ms / timings["bare"].median_ms}


async def measure(chunks: int, count: int, turns: int, pg_url: str | None,
                  folder: Path, warmup: int = 20) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    documents, _ = corpus(chunks)
    results = []
    for backend in ["sqlite"] + (["postgres"] if pg_url else []):
        turn = await measure_fallback_turn(backend, pg_url, folder, turns, warmup)
        url = fresh_database(backend, pg_url, folder)
        ingest_s = ingest(url, documents)
        for mode, index in MODES:
            if backend == "postgres" and index == "sqlite-vec":
                continue
            search = measure_search(url, chunks, mode == "hybrid", index or "auto", count)
            build = search["first_search_s"] if search["index"] == "sqlite-vec" else None
            results.append({"backend": backend, "mode": mode, "chunks": chunks, "ingest_s": ingest_s,
                            "index_build_s": build, **search, **turn})
    rows = [[r["backend"], r["mode"], r["index"], r["chunks"], f"{r['ingest_s']:.1f}",
             "-" if r["index_build_s"] is None else f"{r['index_build_s']:.1f}", f"{r['search_p50_ms']:.2f}",
             f"{r['search_p99_ms']:.2f}", f"{r['recall_at_5']:.2f}", f"{r['held_mb']:.0f}", f"{r['rss_mb']:.0f}",
             f"{r['turn_p50_ms']:.2f}", f"{r['bare_p50_ms']:.2f}", f"{r['turn_ratio']:.2f}x"] for r in results]
    return rows, results


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="untimed fallback and bare turns first")
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of the JSON result")
    args = parser.parse_args(argv)
    return run_and_report("retrieval", TITLE, HEADER,
                          lambda folder, pg_url: measure(args.chunks, args.queries, args.turns, pg_url, folder,
                                                          args.warmup),
                          postgres=not args.sqlite_only, results=args.results)


if __name__ == "__main__":
    main()
