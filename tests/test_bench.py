"""The benchmarks stay honest: the turn-overhead JSON carries the fair baseline beside the bare graph
and the floor, the executed nodes per turn and the load average, and ``run_all --update-docs``
refuses to write figures measured on a loaded machine. Timings are never asserted."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bench import common, retrieval, run_all, turn_overhead
from bench.fair_baseline import fair_turns, profile
from bench.http_client import KeepAlive, TurnFailed, post_bytes
from convengine.db.models import CeConversationHistory


def test_turn_overhead_json_carries_every_baseline_the_nodes_run_and_the_load(tmp_path: Path) -> None:
    path = turn_overhead.main(["--turns", "2", "--warmup", "1", "--sqlite-only", "--results", str(tmp_path)])
    data = json.loads(path.read_text())
    for moment in ("start", "end"):
        assert {"load1", "load5", "load15", "cpus", "load1_per_cpu"} <= set(data["load"][moment])
    assert data["load"]["limit_per_cpu"] == common.LOAD_PER_CPU_LIMIT
    rows = data["turn_overhead"]
    assert [r["flow"] for r in rows] == [flow.name for flow in common.FLOWS]
    for r in rows:
        assert r["backend"] == "sqlite"
        # the engine's routing runs fewer nodes than it compiled; the fair baseline runs that many
        assert 0 < r["executed_nodes_per_turn"] < r["nodes"]
        assert r["fair_nodes"] == max(1, round(r["executed_nodes_per_turn"]))
        assert r["state_keys"] > 2 and r["state_bytes"] > 0
        for baseline in ("fair", "bare", "floor"):
            assert r[f"ratio_to_{baseline}"] == pytest.approx(r["engine_median_ms"] / r[f"{baseline}_median_ms"])


async def test_fair_baseline_commits_a_history_row_and_an_engine_sized_checkpoint_per_turn(tmp_path: Path) -> None:
    flow = common.SUPPORT_DESK
    prof = await profile(f"sqlite:///{tmp_path / 'probe.db'}", flow, turns=3)
    url = f"sqlite:///{tmp_path / 'fair.db'}"
    async with fair_turns(url, flow, prof) as turn:
        for i in range(3):
            await turn(i)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        texts = conn.execute(sa.select(CeConversationHistory.user_input)).scalars().all()
        checkpoints = conn.execute(sa.text("SELECT COUNT(*) FROM checkpoints")).scalar_one()
    engine.dispose()
    assert texts == list(flow.messages[:3])
    assert checkpoints == 3  # durability="exit": one checkpoint per turn, committed with the row
    assert prof.executed_nodes_per_turn > 0 and len(prof.state) > 2


@pytest.fixture
def docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "performance.md"
    path.write_text(f"# Performance\n{run_all.START}\nold figures\n{run_all.END}\n", encoding="utf-8")
    monkeypatch.setattr(run_all, "DOCS", path)
    monkeypatch.setattr(run_all, "postgres_server", lambda: nullcontext(None))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    return path


def loads(monkeypatch: pytest.MonkeyPatch, *values: float) -> None:
    """The 1-minute load averages the run reads, in order (the last one repeated)."""
    seq: Iterator[float] = iter(values)
    last = [values[-1]]

    def read() -> tuple[float, float, float]:
        last[0] = next(seq, last[0])
        return last[0], last[0], last[0]

    monkeypatch.setattr(common, "read_load", read)


async def one_table(args: Any, pg_url: str | None, folder: Path) -> list[tuple[str, list[str], list[list[Any]]]]:
    return [("A table", ["a"], [[1]])]


async def must_not_run(args: Any, pg_url: str | None, folder: Path) -> Any:
    raise AssertionError("the benchmarks ran on a loaded machine with --update-docs")


def test_update_docs_is_refused_before_running_when_the_machine_is_loaded(
        docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loads(monkeypatch, 0.8)  # 0.4 per CPU
    monkeypatch.setattr(run_all, "run", must_not_run)
    with pytest.raises(SystemExit, match=r"refusing --update-docs: before the run the 1-minute load average was "
                                         r"0\.80 on 2 CPU\(s\).*limit of 0\.25 per CPU"):
        run_all.main(["--update-docs", "--results", str(tmp_path)])
    assert "old figures" in docs.read_text()


def test_the_load_threshold_is_injectable(docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loads(monkeypatch, 0.8)
    monkeypatch.setattr(run_all, "run", must_not_run)
    with pytest.raises(SystemExit, match=r"limit of 0\.1 per CPU"):
        run_all.main(["--update-docs", "--max-load-per-cpu", "0.1", "--results", str(tmp_path)])
    monkeypatch.setattr(run_all, "run", one_table)
    run_all.main(["--update-docs", "--max-load-per-cpu", "0.5", "--results", str(tmp_path)])
    text = docs.read_text()
    assert "old figures" not in text and "A table" in text and "load average 0.80 before the run" in text


def test_update_docs_is_refused_when_the_load_rose_during_the_run(
        docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # quiet before; at the end 3.0, i.e. 2.0 once the benchmark's own busy process is discounted
    loads(monkeypatch, 0.1, 3.0)
    monkeypatch.setattr(run_all, "run", one_table)
    with pytest.raises(SystemExit, match="at the end of the run the 1-minute load average was 3.00"):
        run_all.main(["--update-docs", "--results", str(tmp_path)])
    assert "old figures" in docs.read_text()
    assert "A table" in (tmp_path / "summary.md").read_text()  # the figures are kept, just not committed


def test_a_quick_run_never_updates_the_docs(docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loads(monkeypatch, 0.0)
    monkeypatch.setattr(run_all, "run", must_not_run)
    with pytest.raises(SystemExit, match="--quick"):
        run_all.main(["--update-docs", "--quick", "--results", str(tmp_path)])
    assert "old figures" in docs.read_text()


def test_retrieval_json_has_each_mode_its_index_and_the_memory_its_process_holds(tmp_path: Path) -> None:
    path = retrieval.main(["--chunks", "300", "--queries", "5", "--turns", "2", "--warmup", "1", "--sqlite-only",
                           "--results", str(tmp_path)])
    rows = json.loads(path.read_text())["retrieval"]
    assert [(r["mode"], r["index"]) for r in rows] == [("lexical", "-"), ("hybrid", "brute-force"),
                                                       ("hybrid", "sqlite-vec")]
    for r in rows:
        assert r["chunks"] == 300 and 0 <= r["recall_at_5"] <= 1 and r["rss_mb"] > 0
        assert {"held_mb", "search_p50_ms", "search_p99_ms", "ingest_s", "index_reason", "turn_ratio"} <= set(r)
    assert rows[2]["index_build_s"] is not None and rows[1]["index_build_s"] is None


async def _http_answers(answers: list[tuple[int, bytes, bool, bool]]) -> tuple[int, asyncio.AbstractServer, list[int]]:
    """A server on 127.0.0.1 answering each request with the next (status, body, chunked, close); it
    closes the connection after an answer whose ``close`` is set. Returns its port, the server and
    the connection each request arrived on."""
    arrivals: list[int] = []
    queue = list(answers)
    opened = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal opened
        opened += 1
        this = opened
        while queue:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
            await reader.readexactly(length)
            arrivals.append(this)
            status, body, chunked, close = queue.pop(0)
            framing = (b"transfer-encoding: chunked\r\n\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
                       if chunked else f"content-length: {len(body)}\r\n\r\n".encode() + body)
            writer.write(f"HTTP/1.1 {status} X\r\n".encode() + framing)
            await writer.drain()
            if close:
                break
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server.sockets[0].getsockname()[1], server, arrivals


async def test_the_http_load_client_reads_whole_answers_checks_them_and_reconnects() -> None:
    ok = b'{"success": true, "conversationId": "c"}'
    port, server, arrivals = await _http_answers([
        (200, ok, False, False), (200, ok, True, True),  # a chunked answer, then the server closes
        (200, ok, False, False), (200, b'{"success": false}', False, False), (503, ok, False, False)])
    client = KeepAlive("127.0.0.1", port)
    request = post_bytes("127.0.0.1", port, "/api/v1/conversation/message", {"message": "hi"})
    try:
        assert (await client.send(request))["success"] is True
        assert (await client.send(request))["conversationId"] == "c"
        assert (await client.send(request))["success"] is True  # on a new connection
        with pytest.raises(TurnFailed):
            await client.send(request)  # 200, but the turn did not succeed
        with pytest.raises(TurnFailed):
            await client.send(request)  # not 200
    finally:
        await client.close()
        server.close()
    assert arrivals == [1, 1, 2, 2, 2]
