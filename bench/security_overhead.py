"""Security overhead: what authentication, ownership and the turn's checks add to an HTTP turn.

For each saver (SQLite, PostgreSQL) one support-desk conversation per variant is driven over
HTTP (in process, through the ASGI app, so the network does not blur the figures):

* ``open``: ``api.auth.mode=off`` - no authentication, no ownership check;
* ``keys``: an API key on every request (``Authorization: Bearer``), ownership on, so every turn
  also checks that the conversation belongs to the caller.

The two run in alternating blocks, on one database each, and the ratio keys/open is the cost of
authentication and ownership (target: within 5%). The turn's other checks (caller-param
filtering, the strict checkpoint serializer, bounded templates) are in both variants; their cost
shows in ``bench/turn_overhead.py``'s engine/bare ratio against the figures before they existed.

    python bench/security_overhead.py [--turns 300]
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import SUPPORT_DESK, fresh_database, run_and_report, time_interleaved
from convengine.api import create_app
from convengine.engine import Engine

TITLE = "Security overhead over HTTP (support desk; API key + ownership vs open; target <= 1.05x)"
HEADER = ["saver", "open p50 ms", "open p99 ms", "keys p50 ms", "keys p99 ms", "keys/open"]
KEY = "bench-key-" + "k" * 32
VARIANTS: dict[str, dict[str, Any]] = {
    "open": {"mode": "off"},
    "keys": {"mode": "on", "api_keys": [KEY], "conversation_ownership": True},
}


@asynccontextmanager
async def http_turns(url: str, auth: dict[str, Any]) -> AsyncIterator[Callable[[int], Awaitable[Any]]]:
    engine = await Engine.aopen(url, **SUPPORT_DESK.options(), api={"auth": auth})
    app = create_app(engine=engine, close_engine=True)
    headers = {"Authorization": f"Bearer {KEY}"} if auth["mode"] == "on" else {}
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", headers=headers) as client:
        cid = str(uuid.uuid4())

        async def turn(i: int) -> None:
            body = {"conversationId": cid, "message": SUPPORT_DESK.messages[i % len(SUPPORT_DESK.messages)]}
            response = await client.post("/api/v1/conversation/message", json=body)
            response.raise_for_status()

        yield turn


async def measure_backend(backend: str, pg_url: str | None, folder: Path, turns: int) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        calls = {name: await stack.enter_async_context(http_turns(fresh_database(backend, pg_url, folder), auth))
                 for name, auth in VARIANTS.items()}
        timings = await time_interleaved(calls, turns, warmup=max(10, turns // 10))
    result: dict[str, Any] = {"backend": backend, "turns": turns}
    for name, timing in timings.items():
        result[f"{name}_median_ms"] = timing.median_ms
        result[f"{name}_p99_ms"] = timing.p99_ms
    result["ratio"] = result["keys_median_ms"] / result["open_median_ms"]
    return result


def row(result: dict[str, Any]) -> list[Any]:
    return [result["backend"], f"{result['open_median_ms']:.2f}", f"{result['open_p99_ms']:.2f}",
            f"{result['keys_median_ms']:.2f}", f"{result['keys_p99_ms']:.2f}", f"{result['ratio']:.3f}x"]


async def measure(turns: int, pg_url: str | None, folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    backends = ["sqlite"] + (["postgres"] if pg_url else [])
    results = [await measure_backend(backend, pg_url, folder, turns) for backend in backends]
    return [row(r) for r in results], results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    run_and_report("security_overhead", TITLE, HEADER, lambda folder, pg_url: measure(args.turns, pg_url, folder))


if __name__ == "__main__":
    main()
