"""LLM economy: model calls and prompt tokens per turn on the example flows, per call site.

Each flow's conversation is run several times against its instant scripted model (the
support desk needs none: its rows resolve everything deterministically). Prompt tokens are
estimated with langchain-core's ``count_tokens_approximately`` (about 4 characters a token,
plus per-message overhead) over the system and user messages, plus the JSON schema sent
with structured calls; no tokenizer is downloaded. A bare LangGraph graph makes no model
calls, so the baseline for every figure here is zero.

    python bench/llm_economy.py [--conversations 20]
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from bench.common import FLOWS, Flow, fresh_database, run_and_report
from convengine.engine import Engine
from convengine.llm import LlmCall

TITLE = "LLM economy per call site (instant scripted model; tokens estimated, ~4 chars/token)"
HEADER = ["flow", "call site", "calls/turn", "prompt tokens/call", "prompt tokens/turn"]


def prompt_tokens(call: LlmCall) -> int:
    tokens = count_tokens_approximately([SystemMessage(call.system), HumanMessage(call.user)])
    if call.schema:
        tokens += round(len(json.dumps(call.schema)) / 4)
    return int(tokens)


async def run_flow(url: str, flow: Flow, conversations: int) -> tuple[int, list[LlmCall]]:
    options = flow.options()
    llm = options.get("llm")
    engine = await Engine.aopen(url, **options)
    turns = 0
    try:
        for _ in range(conversations):
            cid = str(uuid.uuid4())
            for text in flow.messages:
                await engine.aprocess(text, cid)
                turns += 1
    finally:
        await engine.aclose()
    return turns, [logged.call for logged in getattr(llm, "calls", [])]


async def measure(conversations: int, folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    rows: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for flow in FLOWS:
        turns, calls = await run_flow(fresh_database("sqlite", None, folder), flow, conversations)
        by_site: dict[str, list[int]] = defaultdict(list)
        for call in calls:
            by_site[call.call_site].append(prompt_tokens(call))
        for site, tokens in [*sorted(by_site.items()), ("(all)", [t for v in by_site.values() for t in v])]:
            per_call = sum(tokens) / len(tokens) if tokens else 0.0
            rows.append([flow.name, site, f"{len(tokens) / turns:.2f}", f"{per_call:,.0f}",
                         f"{sum(tokens) / turns:,.0f}"])
            results.append({"flow": flow.name, "call_site": site, "turns": turns, "calls": len(tokens),
                            "calls_per_turn": len(tokens) / turns, "prompt_tokens_per_call": per_call,
                            "prompt_tokens_per_turn": sum(tokens) / turns})
    return rows, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=20)
    args = parser.parse_args()
    run_and_report("llm_economy", TITLE, HEADER, lambda folder, _: measure(args.conversations, folder), postgres=False)


if __name__ == "__main__":
    main()
