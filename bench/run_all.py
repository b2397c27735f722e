"""Every benchmark in one run (about 20 minutes on 2 quiet cores): prints each table, writes JSON, and a
Markdown summary; ``--update-docs`` also puts the summary into docs/performance.md.

    python bench/run_all.py [--quick] [--update-docs [--max-load-per-cpu 0.25]] [--results DIR]

``--update-docs`` refuses to start when the machine is loaded: a 1-minute load average per CPU above
``LOAD_PER_CPU_LIMIT`` (0.25) before the run, or above it after the run once the benchmark's own busy
process is discounted. Every JSON result records the load average at its start and end.

PostgreSQL comes from CONVENGINE_BENCH_PG_URL (or CONVENGINE_TEST_PG_URL); otherwise a throwaway
server is started with scripts/pg-server.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (
    bytes_per_turn,
    growth,
    llm_economy,
    retrieval,
    security_overhead,
    serving,
    throughput,
    turn_overhead,
    versions_overhead,
)
from bench.common import (
    LOAD_PER_CPU_LIMIT,
    RESULTS,
    ROOT,
    load_sample,
    machine,
    postgres_server,
    print_table,
    refuse_if_loaded,
    write_results,
)

START, END = "<!-- bench:start -->", "<!-- bench:end -->"
DOCS = ROOT / "docs" / "performance.md"


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


async def run(args: argparse.Namespace, pg_url: str | None, folder: Path) -> list[tuple[str, list[str], list[list[Any]]]]:
    # throughput_seconds: per level and mode, in 8 interleaved slices (the ratios between modes at one
    # conversation moved by up to 0.1 from one 5-second run to the next)
    sizes = {"turns": 100, "growth": 300, "window": 50, "seconds": 2.0, "throughput_seconds": 2.0, "conversations": 5,
             "chunks": 2000, "queries": 50, "bytes_turns": 12} if args.quick else \
            {"turns": 300, "growth": 1000, "window": 100, "seconds": 5.0, "throughput_seconds": 10.0, "conversations": 20,
             "chunks": 100_000, "queries": 200, "bytes_turns": 23}
    tables = []
    steps: list[tuple[str, Any, list[str], str]] = [
        ("turn_overhead", lambda: turn_overhead.measure(sizes["turns"], pg_url, folder), turn_overhead.HEADER,
         turn_overhead.TITLE),
        ("growth", lambda: growth.measure(sizes["growth"], sizes["window"], pg_url, folder), growth.HEADER,
         growth.TITLE),
        ("throughput", lambda: throughput.measure([1, 4, 16, 64], sizes["throughput_seconds"], pg_url, folder),
         throughput.HEADER, throughput.TITLE),
        ("llm_economy", lambda: llm_economy.measure(sizes["conversations"], folder), llm_economy.HEADER,
         llm_economy.TITLE),
        ("security_overhead", lambda: security_overhead.measure(sizes["turns"], pg_url, folder),
         security_overhead.HEADER, security_overhead.TITLE),
        ("serving", lambda: serving.measure([1, 4, 16, 64], sizes["seconds"], pg_url, folder), serving.HEADER,
         serving.TITLE),
        ("bytes_per_turn", lambda: bytes_per_turn.measure(sizes["bytes_turns"], pg_url, folder), bytes_per_turn.HEADER,
         bytes_per_turn.TITLE),
        ("retrieval", lambda: retrieval.measure(sizes["chunks"], sizes["queries"], sizes["turns"], pg_url, folder),
         retrieval.HEADER, retrieval.TITLE),
        ("versions_overhead", lambda: versions_overhead.measure(sizes["turns"], pg_url, folder),
         versions_overhead.HEADER, versions_overhead.TITLE),
    ]
    for name, measure, header, title in steps:
        began = time.perf_counter()
        load_start = load_sample()
        rows, results = await measure()
        print_table(f"{title}  [{time.perf_counter() - began:.0f} s]", header, rows)
        write_results(name, {name: results}, load_start, args.results)
        tables.append((title, header, rows))
    return tables


def summary(tables: list[tuple[str, list[str], list[list[Any]]]], seconds: float, load_start: dict[str, Any]) -> str:
    info = machine()
    end = load_sample()
    parts = [(f"Measured by `python bench/run_all.py` on {time.strftime('%Y-%m-%d')}: {info['cpus']} CPUs "
             f"({info['processor']}), Python {info['python']}, {info['platform']}; total {seconds:.0f} s; "
             f"1-minute load average {load_start['load1']:.2f} before the run, {end['load1']:.2f} after it. "
             "JSON in `bench/results/`.")]
    for title, header, rows in tables:
        parts.append(f"### {title}\n\n{markdown_table(header, rows)}")
    return "\n\n".join(parts) + "\n"


def update_docs(text: str, path: Path | None = None) -> None:
    path = path or DOCS
    doc = path.read_text(encoding="utf-8")
    if START not in doc or END not in doc:
        raise SystemExit(f"{path} has no {START} ... {END} section")
    head, rest = doc.split(START, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{START}\n{text}{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test, not figures to quote)")
    parser.add_argument("--update-docs", action="store_true", help="write the summary into docs/performance.md "
                        "(refused on a loaded machine)")
    parser.add_argument("--max-load-per-cpu", type=float, default=LOAD_PER_CPU_LIMIT,
                        help="the 1-minute load average per CPU above which --update-docs is refused "
                             f"(default {LOAD_PER_CPU_LIMIT})")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of the JSON results and summary")
    args = parser.parse_args(argv)
    if args.update_docs and args.quick:
        raise SystemExit("refusing --update-docs with --quick: quick runs are smoke tests, not figures to quote")
    began, load_start = time.perf_counter(), load_sample()
    if args.update_docs:
        refuse_if_loaded(load_start, args.max_load_per_cpu, "before the run")
    with tempfile.TemporaryDirectory() as tmp, postgres_server() as pg_url:
        tables = asyncio.run(run(args, pg_url, Path(tmp)))
    text = summary(tables, time.perf_counter() - began, load_start)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "summary.md").write_text(text, encoding="utf-8")
    if args.update_docs:
        # the benchmark's own process is still in the 1-minute average: discount one busy process
        refuse_if_loaded(load_sample(), args.max_load_per_cpu, "at the end of the run", own_processes=1)
        update_docs(text)
    print(f"\nall benchmarks done in {time.perf_counter() - began:.0f} s; summary in {args.results / 'summary.md'}")


if __name__ == "__main__":
    main()
