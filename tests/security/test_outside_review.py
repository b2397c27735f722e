"""An outside review: attacks tried against the finished security work, each named where it is run.

Every test here is an attack that the suite did not run before. Those that the system holds assert
that it holds; those that broke it were fixed (the test failed before the fix) or, when the fix is
not small, are marked ``xfail(strict=True)`` with the exact reproduction and the fix proposed.
Attacks run through the public surfaces: a live server on 127.0.0.1 (HTTP), the ``Engine`` with a
caller ``tool_request`` or a ``ScriptedLLM`` playing a prompt-injected planner, and bytes planted in
the database as someone with write access to checkpoints could. Memory is measured with
``tracemalloc`` (Python allocations of every thread, the tool query's worker thread included).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import ormsgpack
import pytest
import sqlalchemy as sa

from convengine.catalog.errors import ConversationNotFoundError, UnsafeCheckpointError
from convengine.db import create_sync_engine, parse_database_url
from convengine.llm import ScriptedLLM
from convengine.tools.http import HttpRequest
from tests.api.auth_support import (
    ADMIN,
    MESSAGE,
    USER_A,
    USER_B,
    assert_refused,
    auth_env,
    bearer,
    send,
    start,
)
from tests.helpers import engine_on, pack, payload_of, turn_events
from tests.http_stub import http_server
from tests.security.test_bounded_packs_templates import template_pack
from tests.security.test_sql_attacks import (
    RAW_ON_ENGINE_DB,
    ask,
    canary,
    canary_rows,
    conversations,
    refused,
    sql_pack,
)
from tests.security.world import assert_unchanged, packed_audit_text

pytestmark = pytest.mark.asyncio
__all__ = ["canary"]  # the fixture, imported for these tests

BEYOND_LOOPBACK = ("--host", "0.0.0.0")
MiB = 1024 * 1024


async def peak_allocation(work: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
    """``work()``'s result and the most memory Python held for it at once (bytes above the start)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start_size, _ = tracemalloc.get_traced_memory()
        result = await work()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak - start_size


# --- SQL guard -------------------------------------------------------------------------------------

# Attack: one row whose single value doubles in a recursive CTE (``s || s``, both operators allowed)
# reaches 32 MiB; the byte cap was checked only after the whole row had been read into the server
# process, so `n < 30` asked the engine to hold 512 MiB (x3 as str, JSON and bytes) from a 150-byte query.
DOUBLING = ("WITH RECURSIVE t(n, s) AS (SELECT 1, 'x' UNION ALL SELECT n + 1, s || s FROM t WHERE n < 26) "
            "SELECT s FROM t ORDER BY n DESC LIMIT 1")


async def test_one_huge_value_is_refused_before_it_reaches_the_engine(canary: str, world: Any) -> None:
    async with engine_on(canary, sql_pack(**RAW_ON_ENGINE_DB)) as engine:
        victim, cid = await conversations(engine)
        before = world(attacker=cid)
        events, peak = await peak_allocation(lambda: ask(engine, cid, DOUBLING))
        assert "larger than mcp.max-result-bytes (262144 bytes as JSON) at row 1;" in \
            refused(events, "TOOL_RESULT_TOO_LARGE")
        assert peak < 8 * MiB, f"the engine held {peak / MiB:.0f} MiB for a refused 32 MiB value"
        assert_unchanged(before, world(attacker=cid))
        assert (await engine.aprocess("still here", victim)).intent == "LOAN"


async def test_values_larger_than_the_result_budget_may_still_be_filtered_on(canary: str) -> None:
    """The bound is on what a query builds or returns, not on what it reads to filter."""
    engine_ = create_sync_engine(parse_database_url(canary))
    with engine_.begin() as conn:
        conn.execute(sa.text("CREATE TABLE docs (id INTEGER PRIMARY KEY, body TEXT)"))
        conn.execute(sa.text("INSERT INTO docs VALUES (1, :b)"), {"b": "x" * 2_000_000 + "needle"})
    engine_.dispose()
    async with engine_on(canary, sql_pack(**RAW_ON_ENGINE_DB)) as engine:
        _, cid = await conversations(engine)
        found = await ask(engine, cid, "SELECT id, length(body) AS n FROM docs WHERE body LIKE '%needle'")
        whole = await ask(engine, cid, "SELECT body FROM docs")
    assert payload_of(found, "TOOL_ORCHESTRATION_RESULT")["result"] == [{"id": 1, "n": 2_000_006}]
    assert "at row 1;" in refused(whole, "TOOL_RESULT_TOO_LARGE")


# The same value asked for by a prompt-injected planner (the LLM's reply names the raw-SQL tool).
PLANNER_ANSWER = [{"intent_code": "LOAN", "state_code": "START", "exact_text": "{{context.mcp.finalAnswer}}",
                   "priority": 1}]


def injected_planner(*sqls: str) -> ScriptedLLM:
    """A planner whose every reply calls the raw-SQL tool with the next of ``sqls`` (a tool error ends
    a turn's plan, so one per turn)."""
    replies = [{"action": "CALL_TOOL", "answer": None, "operation_tag": None, "tool_code": "db.query",
                "args": {"sql": sql}} for sql in sqls]
    return ScriptedLLM({"MCP_PLANNER": replies}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})


async def test_a_prompt_injected_planner_gets_the_same_bounds(canary: str, world: Any) -> None:
    attacks = [(DOUBLING, "TOOL_RESULT_TOO_LARGE"),
               ("SELECT * FROM canary; DELETE FROM canary", "UNSAFE_SQL"),
               ("SELECT 1 /* /* */ , name FROM sqlite_master -- */", None)]  # last: on PostgreSQL it runs
    data = sql_pack(**RAW_ON_ENGINE_DB)
    data["ce_response"] = PLANNER_ANSWER + data["ce_response"]
    async with engine_on(canary, data, llm=injected_planner(*(sql for sql, _ in attacks))) as engine:
        hello = await engine.aprocess("hello")
        before = world(attacker=hello.conversation_id)
        outcomes = []
        for sql, code in attacks:
            _, peak = await peak_allocation(lambda: engine.aprocess("loan: run it", hello.conversation_id))
            events = await turn_events(engine, hello.conversation_id)
            outcomes.append((sql, code, peak, events))
        assert_unchanged(before, world(attacker=hello.conversation_id))
    assert canary_rows(canary) == 3
    for sql, code, peak, events in outcomes:
        assert peak < 8 * MiB, (sql, peak)
        if code is None:  # PostgreSQL reads only `SELECT 1`; SQLite's authorizer refuses sqlite_master
            ran = [e.payload for e in events if e.stage == "MCP_DB_SQL_EXECUTION"]
            assert ran == [] or ran[0]["rows"] == [{"?column?": 1}], ran
            continue
        assert "MCP_DB_SQL_EXECUTION" not in [e.stage for e in events], sql
        assert payload_of(events, "MCP_DB_SQL_REFUSED")["errorCode"] == code, sql
        assert payload_of(events, "MCP_TOOL_ERROR")["tool_code"] == "db.query"


# Attacks: SQLite-only syntax hidden from PostgreSQL's parser (PostgreSQL nests /* */ comments, SQLite
# does not, so SQLite runs text the guard never saw), SQLite's eponymous pragma tables (no `pg_` or
# `sqlite_` prefix: the guard's name check passes them) and other catalog or effect routes the guard's
# lists might miss. Each must be refused (or find nothing) and leave no data of the catalog behind.
SMUGGLED = [
    "SELECT 1 /* /* */ , name FROM sqlite_master -- */",
    "SELECT 1 /* /* */ , hex(label) FROM canary -- */",
    "SELECT 1 /* /* */ , file FROM pragma_database_list -- */",
    "SELECT * FROM pragma_database_list",
    "SELECT name FROM pragma_table_list",
    "SELECT * FROM pragma_table_info WHERE arg = 'ce_audit'",
    "SELECT U&\"\\0070g_sleep\"(5)",
    "SELECT * FROM ROWS FROM (pg_sleep(5))",
    "SELECT 1 WHERE EXISTS (SELECT set_config('default_transaction_read_only', 'off', false))",
    "SELECT label FROM canary WHERE label OPERATOR(public.=) 'a'",
    "SELECT CAST(label AS public.evil) FROM canary",
    "SELECT 1::pg_catalog.regproc",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM PG_CATALOG.PG_SHADOW",
    "SELECT c.id FROM canary c, LATERAL (SELECT id FROM canary FOR SHARE) x",
    "SELECT current_setting('data_directory')",
    "SELECT query_to_xml('DELETE FROM canary', true, true, '')",
    "SELECT lo_import('/etc/passwd')",
    "EXPLAIN ANALYZE DELETE FROM canary",
]


async def test_sqlite_only_syntax_pragma_tables_and_catalog_routes_are_refused(canary: str, world: Any,
                                                                               tmp_path: Path) -> None:
    async with engine_on(canary, sql_pack(**RAW_ON_ENGINE_DB)) as engine:
        _, cid = await conversations(engine)
        before = world(attacker=cid)
        started = time.monotonic()
        outcomes = [(sql, await ask(engine, cid, sql)) for sql in SMUGGLED]
        assert time.monotonic() - started < 30  # no pg_sleep ran
        assert_unchanged(before, world(attacker=cid))
    assert canary_rows(canary) == 3
    for sql, events in outcomes:
        assert str(tmp_path) not in str([e.payload for e in events]), sql  # no database file path came back
        ran = [e.payload for e in events if e.stage == "MCP_DB_SQL_EXECUTION"]
        if ran:  # PostgreSQL reads a nested comment as one comment: what it runs is `SELECT 1`, as checked
            assert sql.startswith("SELECT 1 /* /* */") and ran[0]["rows"] == [{"?column?": 1}], (sql, ran)
            continue
        assert payload_of(events, "MCP_DB_SQL_REFUSED")["errorCode"] in ("UNSAFE_SQL", "TOOL_EXECUTION_FAILED"), sql


# Attack: queries that never end (an unbounded recursive CTE aggregated, a cross join of cross joins).
FOREVER = ["WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c",
           "SELECT count(*) FROM " + ", ".join(f"canary c{i}" for i in range(24))]


async def test_queries_that_never_end_stop_at_the_statement_timeout(canary: str, world: Any) -> None:
    async with engine_on(canary, sql_pack(**{**RAW_ON_ENGINE_DB, "statement-timeout-ms": 500})) as engine:
        victim, cid = await conversations(engine)
        before = world(attacker=cid)
        for sql in FOREVER:
            started = time.monotonic()
            error = refused(await ask(engine, cid, sql), "TOOL_EXECUTION_FAILED")
            assert time.monotonic() - started < 10 and "ran longer than 500 ms and was stopped" in error, sql
        assert_unchanged(before, world(attacker=cid))
        assert (await engine.aprocess("still here", victim)).intent == "LOAN"  # the pooled connection is fine


# --- checkpoint serializer ----------------------------------------------------------------------


def plant_raw(url: str, cid: str, kind: str, blob: bytes) -> None:
    """Replace the conversation's stored checkpoint (SQLite) or ``context`` channel (PostgreSQL)."""
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                changed = conn.execute(sa.text("UPDATE checkpoint_blobs SET type = :k, blob = :b WHERE thread_id = :t "
                                               "AND channel = 'context'"), {"k": kind, "b": blob, "t": cid})
            else:
                changed = conn.execute(sa.text("UPDATE checkpoints SET type = :k, checkpoint = :b "
                                               "WHERE thread_id = :t"), {"k": kind, "b": blob, "t": cid})
            assert changed.rowcount
    finally:
        engine.dispose()


def nested_constructors(depth: int) -> bytes:
    """A frozenset of a frozenset of ... ``depth`` allowed constructor extensions deep."""
    data = ormsgpack.packb(("builtins", "frozenset", []))
    for _ in range(depth):
        data = ormsgpack.packb(("builtins", "frozenset", [[ormsgpack.Ext(1, data)]]))
    return ormsgpack.packb(ormsgpack.Ext(1, data))


# Attacks: stored bytes that exhaust the reader rather than run code: JSON-typed rows nested 100,000
# deep or with a 10,000-digit number (the "json" kind went to json.loads unguarded: a RecursionError,
# an unexplained internal error, instead of CHECKPOINT_REJECTED), allowed constructors nested 2,000
# deep, msgpack headers claiming 4 GiB arrays, maps and strings in a few bytes.
HOSTILE_BLOBS = {
    "json nested 100,000 deep": ("json", b"[" * 100_000 + b"]" * 100_000),
    "json 10,000-digit number": ("json", b"1" * 10_000),
    "constructors nested 2,000 deep": ("msgpack", nested_constructors(2000)),
    "array header of 4 GiB": ("msgpack", b"\xdd\xff\xff\xff\xff\xc0"),
    "map header of 4 GiB": ("msgpack", b"\xdf\xff\xff\xff\xff\xc0\xc0"),
    "string header of 4 GiB": ("msgpack", b"\xdb\xff\xff\xff\xffab"),
    "arrays nested 100,000 deep": ("msgpack", b"\x91" * 100_000 + b"\xc0"),
}


@pytest.mark.parametrize("name", list(HOSTILE_BLOBS))
async def test_hostile_checkpoint_bytes_are_rejected_quickly(db_url: str, world: Any, name: str) -> None:
    kind, blob = HOSTILE_BLOBS[name]
    async with engine_on(db_url, pack()) as writer:
        bystander = await writer.aprocess("hello")
        victim = await writer.aprocess("hello")
    plant_raw(db_url, victim.conversation_id, kind, blob)
    # read by an engine that did not write the checkpoint (another worker, a restart): the writer's own
    # process starts from the copy it kept and never reads the planted bytes
    async with engine_on(db_url, pack()) as engine:
        before = world(attacker=victim.conversation_id)
        started = time.monotonic()
        with pytest.raises(UnsafeCheckpointError) as raised:
            await engine.aprocess("hello again", victim.conversation_id)
        assert time.monotonic() - started < 5
        assert raised.value.code.value == "CHECKPOINT_REJECTED" and not raised.value.recoverable
        assert_unchanged(before, world(attacker=victim.conversation_id))
        assert (await engine.aprocess("hello", bystander.conversation_id)).turn == 2


# --- HTTP API: authentication, ownership, hosts ----------------------------------------------------


def spellings(cid: str) -> list[str]:
    """The same UUID as a path segment, every way the engine accepts or a router might: case, braces,
    URN, no hyphens, percent-encoded hyphens and surrounding (encoded) blanks."""
    u = uuid.UUID(cid)
    return [cid.upper(), "{" + cid + "}", u.urn, u.hex, cid.replace("-", "%2D"), "%20" + cid + "%20",
            "%7B" + cid.upper() + "%7D"]


async def test_no_spelling_of_a_conversation_id_reaches_another_callers_conversation(serve: Any,
                                                                                     world: Any) -> None:
    server = serve(*BEYOND_LOOPBACK, env=auth_env())
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        victim = await start(client, USER_A)
        before = world()
        for spelled in spellings(victim):
            for path in (f"/api/v1/conversation/audit/{spelled}", f"/api/v1/conversation/audit/{spelled}/trace",
                         f"/api/v1/conversation/stream/{spelled}"):
                other = await client.get(path, headers=bearer(USER_B))
                if "/stream/" in path:
                    assert_refused(other, 404, "CONVERSATION_NOT_FOUND")
                else:  # reads answer as for a conversation with no turns: nothing of the victim's shows
                    body = other.json()
                    assert other.status_code == 200 and (body == [] or (body["steps"], body["stages"]) == ([], [])), \
                        (spelled, other.text)
                own = await client.get(path.replace("stream", "audit"), headers=bearer(USER_A))
                assert own.status_code == 200, (spelled, own.text)  # the spelling names the victim's conversation
            body_id = spelled.replace("%2D", "-").replace("%20", " ").replace("%7B", "{").replace("%7D", "}")
            for reset in (False, True):
                assert_refused(await send(client, USER_B, "hello", body_id, reset=reset), 404,
                               "CONVERSATION_NOT_FOUND")
        assert_unchanged(before, world())


# Attacks on the key check: near misses, the key elsewhere in the request, a valid key in the second
# header while the first carries a wrong one, proxy headers claiming loopback, and an admin path
# spelled differently.
async def test_key_presentation_tricks_are_refused(serve: Any, world: Any) -> None:
    server = serve(*BEYOND_LOOPBACK, env=auth_env())
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        cid = await start(client, USER_A)
        audit = f"/api/v1/conversation/audit/{cid}"
        before = world()
        tricks: list[dict[str, str]] = [
            bearer(USER_A + "x"), bearer(USER_A[:-1]), bearer(USER_A.upper()), bearer(" " + ADMIN[1:]),
            {"Authorization": f"Basic {USER_A}"}, {"Authorization": USER_A}, {"X-Api-Key": USER_A + ","},
            {"Authorization": "Bearer wrong-key-0123456789abc", "X-API-Key": ADMIN},
            {"X-Forwarded-For": "127.0.0.1", "X-Real-IP": "127.0.0.1", "Forwarded": "for=127.0.0.1"},
            {"Host": "localhost"}, {"Cookie": f"api_key={USER_A}"}]
        for headers in tricks:
            response = await client.get(audit, headers=headers)
            assert response.status_code in (400, 401), (headers, response.status_code)
        for query in (f"?api_key={USER_A}", f"?key={ADMIN}", f"?access_token={ADMIN}"):
            assert (await client.get(audit + query)).status_code == 401
        for path in ("/api/v1/cache/refresh/", "//api/v1/cache/refresh", "/api/v1/cache/../cache/refresh",
                     "/API/V1/CACHE/REFRESH", "/api/v1/cache/refresh;x", "/health/../api/v1/cache/refresh"):
            response = await client.post(path, headers=bearer(USER_A), follow_redirects=True)
            assert response.status_code in (403, 404, 405), (path, response.status_code)
        for path in ("/health/../api/v1/cache/analyze", "/health/%2e%2e/api/v1/cache/analyze"):
            assert (await client.get(path)).status_code in (401, 404), path
        assert_unchanged(before, world())


# Attack: two callers race for the first turn of the same new conversation id (a client-chosen id
# that leaked), on two processes sharing the database: both check "no such conversation" before
# either has written its row. Exactly one may own it; the other must not run a turn or add a row.
async def test_two_callers_racing_for_a_new_id_on_two_replicas_get_one_owner(db_url: str) -> None:
    async with engine_on(db_url, pack()) as first, engine_on(db_url, pack()) as second:
        for _ in range(4):
            cid = str(uuid.uuid4())
            outcomes = await asyncio.gather(first.aprocess("a loan please", cid, owner="alice"),
                                            second.aprocess("a loan please", cid, owner="mallory"),
                                            return_exceptions=True)
            won = [o for o in outcomes if not isinstance(o, BaseException)]
            lost = [o for o in outcomes if isinstance(o, BaseException)]
            assert len(won) == 1 and len(lost) == 1, outcomes
            assert isinstance(lost[0], ConversationNotFoundError), lost
            winner = "alice" if not isinstance(outcomes[0], BaseException) else "mallory"
            loser = "mallory" if winner == "alice" else "alice"
            texts = [e.payload.get("text") for e in await first.aaudit(cid, owner=winner) if e.stage == "USER_INPUT"]
            assert texts == ["a loan please"]  # one turn ran: the loser's left nothing
            for engine in (first, second):
                with pytest.raises(ConversationNotFoundError):
                    await engine.aaudit(cid, owner=loser)
                with pytest.raises(ConversationNotFoundError):
                    await engine.aprocess("mine now", cid, owner=loser)


def raw_request(port: int, head: bytes) -> bytes:
    """One request written byte for byte (duplicate or odd Host headers no client library sends)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# Attack: DNS rebinding on a developer's keyless loopback server with Host headers a browser or a
# crafted request could send: look-alike names, a trusted name with a suffix, a second Host header,
# an absolute request target naming a trusted host.
async def test_host_header_tricks_do_not_reach_a_keyless_loopback_server(serve: Any, world: Any) -> None:
    server = serve()
    port = server.port
    before = world()
    body = b'{"message": "a loan please"}'
    for host in (b"localhost.evil.example", b"127.0.0.1.nip.io", b"evil.example#@localhost", b"localhost@evil.example",
                 b"evil.example:80@127.0.0.1", b"0x7f000001", b"2130706433", b"[::ffff:127.0.0.1]x"):
        reply = raw_request(port, b"POST " + MESSAGE.encode() + b" HTTP/1.1\r\nHost: " + host +
                            b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                            b"\r\nConnection: close\r\n\r\n" + body)
        assert reply.startswith(b"HTTP/1.1 400"), (host, reply[:200])
    for head in (b"POST " + MESSAGE.encode() + b" HTTP/1.1\r\nHost: evil.example\r\nHost: localhost\r\n",
                 b"POST http://localhost" + MESSAGE.encode() + b" HTTP/1.1\r\nHost: evil.example\r\n"):
        reply = raw_request(port, head + b"Content-Type: application/json\r\nContent-Length: " +
                            str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        assert reply.startswith(b"HTTP/1.1 400"), (head, reply[:200])
    assert_unchanged(before, world())


async def test_a_keyless_loopback_server_refuses_requests_relayed_by_a_proxy(serve: Any, world: Any) -> None:
    """Attack (broke, low; fixed): a server started the documented way for development (`convengine serve`,
    loopback, no keys: authentication off) and then exposed by a reverse proxy on the same host. nginx's
    default `proxy_pass http://127.0.0.1:8080` sends `Host: 127.0.0.1:8080` (trusted) and adds
    X-Forwarded-For; every Internet caller is then an admin that reads every conversation and refreshes
    the cache. Proposed fix (convengine/api/middleware.py, Authentication): when authentication is off
    because of loopback, refuse a request carrying Forwarded / X-Forwarded-For / X-Real-IP with 401
    saying to set api.auth.api_keys (or api.auth.mode=off on purpose)."""
    server = serve()
    relayed = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https", "Host": f"127.0.0.1:{server.port}"}
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        cid = (await client.post(MESSAGE, json={"message": "a loan please"})).json()["conversationId"]
        before = world()
        audit = await client.get(f"/api/v1/conversation/audit/{cid}", headers=relayed)
        refresh = await client.post("/api/v1/cache/refresh", headers=relayed)
        assert_unchanged(before, world())
    assert audit.status_code == 401 and refresh.status_code == 401


async def test_slow_request_bodies_do_not_hold_the_server(serve: Any) -> None:
    """Attack (broke, medium; fixed with api.body_timeout_s): a request head is bounded in time (api.header_timeout_s) but its body is
    not. Connections opened one at a time, each sending a complete head announcing 100 kB and then one
    body byte every 0.3 s, hold the api.max_concurrency slots (8 here, 512 by default) for as long as
    they like: every other caller gets 503. Proposed fix (convengine/api/serving.py, BoundedH11Protocol): keep the
    deadline armed until the request body is complete (their_state DONE), with its own setting
    (e.g. api.body_timeout_s, default 30 s) and drop the connection when it passes."""
    server = serve(env={"CONVENGINE_API__MAX_CONCURRENCY": "8", "CONVENGINE_API__HEADER_TIMEOUT_S": "1",
                        "CONVENGINE_API__BODY_TIMEOUT_S": "1"})
    head = (f"POST {MESSAGE} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n{").encode()
    slow = []
    try:
        for _ in range(7):  # one at a time, each below the limit when its head arrives: all accepted
            slow.append(await asyncio.open_connection("127.0.0.1", server.port))
            slow[-1][1].write(head)
            await slow[-1][1].drain()
        for _ in range(10):  # 3 s: three times the head deadline
            for _, writer in slow:
                writer.write(b" ")
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
            await asyncio.sleep(0.3)
        async with httpx.AsyncClient(timeout=10) as client:
            health = await client.get(server.base + "/health")
    finally:
        for _, writer in slow:
            writer.close()
    assert health.status_code == 200, health.status_code


# --- HTTP tools: SSRF ----------------------------------------------------------------------------

HTTP_TOOL = {"tool_id": 1, "tool_code": "fetch.page", "tool_group": "HTTP_API", "intent_code": "LOAN",
             "state_code": "ANY", "description": "Fetch a page the user names"}


def loopback_spellings(port: int) -> list[str]:
    """127.0.0.1 (and this machine) written every way a resolver or a URL parser may accept it."""
    return [f"http://{host}:{port}/admin" for host in (
        "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0", "0.0.0.0", "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]", "[::1]", "[::]", "localhost.", "LOCALHOST", "127.0.0.1.", "[0:0:0:0:0:ffff:127.0.0.1]")] + [
        f"http://user@evil.example@127.0.0.1:{port}/admin", f"http://127.0.0.1:{port}\\@evil.example/admin",
        f"http://evil.example#@127.0.0.1:{port}/admin"]


# Attack: a prompt-injected planner (or caller) steers the URL an HTTP tool builds from its
# arguments to a service listening on loopback only, spelled so a naive check misses it.
async def test_loopback_in_any_spelling_is_never_reached_by_an_http_tool(db_url: str, world: Any) -> None:
    with http_server(lambda path, body: (200, {"internal": "admin data"})) as internal:
        port = internal.server.server_address[1]
        tools = {"fetch.page": lambda args, ctx: HttpRequest(url=str(args["url"]))}
        async with engine_on(db_url, pack(ce_mcp_tool=[HTTP_TOOL]), tools=tools) as engine:
            first = await engine.aprocess("loan")
            before = world(first.conversation_id)
            errors = []
            for url in loopback_spellings(port):
                request = {"tool_request": {"tool_code": "fetch.page", "args": {"url": url}}}
                await engine.aprocess("fetch it", first.conversation_id, input_params=request)
                errors.append(payload_of(await turn_events(engine, first.conversation_id),
                                         "TOOL_ORCHESTRATION_ERROR")["error"])
        after = world(first.conversation_id)
    assert internal.requests == [], internal.requests
    assert "admin data" not in str(errors)
    assert_unchanged(before, after)


# Attack: an allowed host answers with a redirect to a host that is not allowed.
async def test_a_redirect_from_an_allowed_host_is_not_followed(db_url: str, world: Any) -> None:
    with http_server(lambda path, body: (200, {"internal": "admin data"})) as internal:
        target = f"http://localhost:{internal.server.server_address[1]}/admin"
        with http_server(lambda path, body: (302, {"location": target})) as partner:
            partner.reply = lambda path, body: (302, "")
            original = partner.server.RequestHandlerClass

            class Redirecting(original):  # type: ignore[misc, valid-type]
                def end_headers(self) -> None:
                    self.send_header("Location", target)
                    super().end_headers()

            partner.server.RequestHandlerClass = Redirecting
            tools = {"fetch.page": lambda args, ctx: HttpRequest(url=f"{partner.url}/start")}
            data = pack(ce_mcp_tool=[HTTP_TOOL], settings={"mcp": {"http-api": {"allowed-hosts": ["127.0.0.1"]}}})
            async with engine_on(db_url, data, tools=tools) as engine:
                first = await engine.aprocess("loan")
                before = world(first.conversation_id)
                await engine.aprocess("go", first.conversation_id,
                                      input_params={"tool_request": {"tool_code": "fetch.page", "args": {}}})
                shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_RESULT")
            after = world(first.conversation_id)
    assert len(partner.requests) == 1 and internal.requests == []
    assert shaped["result"]["status"] == 302 and "admin data" not in str(shaped)
    assert_unchanged(before, after)


class Flood(threading.Thread):
    """A server on 127.0.0.1 answering every request with ``chunks`` chunks of 1 MiB, ``pause`` s apart
    (the same bytes object written again: the test process allocates nothing while it serves)."""

    CHUNK = b"[" + b"0," * (MiB // 2 - 1) + b"0"

    def __init__(self, chunks: int, pause: float = 0.0, size: int = MiB) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.chunks, self.pause, self.chunk = chunks, pause, self.CHUNK[:size]
        self.served = 0

    def run(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                with conn:
                    conn.recv(65536)
                    self.served += 1
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                 + str(self.chunks * len(self.chunk)).encode() + b"\r\nConnection: close\r\n\r\n")
                    with contextlib.suppress(OSError):
                        for _ in range(self.chunks):
                            conn.sendall(self.chunk)
                            time.sleep(self.pause)

    def stop(self) -> None:
        self.sock.close()


async def flood_turn(db_url: str, flood: Flood, **http_api: Any) -> tuple[dict[str, Any], int, float]:
    """One caller turn whose HTTP tool fetches from ``flood`` (allow-listed); the tool's audited
    outcome, the most memory held and the turn's duration."""
    tools = {"fetch.page": lambda args, ctx: HttpRequest(url=f"http://127.0.0.1:{flood.port}/feed")}
    data = pack(ce_mcp_tool=[HTTP_TOOL], settings={"mcp": {"http-api": {"allowed-hosts": ["127.0.0.1"],
                                                                         **http_api}}})
    async with engine_on(db_url, data, tools=tools) as engine:
        first = await engine.aprocess("loan")
        request = {"tool_request": {"tool_code": "fetch.page", "args": {}}}
        started = time.monotonic()
        _, peak = await peak_allocation(lambda: engine.aprocess("go", first.conversation_id, input_params=request))
        elapsed = time.monotonic() - started
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_ERROR")
    return shaped, peak, elapsed


# Attack (broke, medium; fixed): an HTTP tool's response was read whole into memory before any limit
# applied (the mapped result was capped afterwards), so a prompt-injected URL naming a host that
# answers with 200 MiB (or a compressed body that inflates) cost the server that much memory per call.
async def test_a_huge_http_response_is_refused_while_it_is_read(db_url: str) -> None:
    flood = Flood(chunks=200)
    flood.start()
    try:
        shaped, peak, _ = await flood_turn(db_url, flood, defaults={"max-attempts": 1})
    finally:
        flood.stop()
    assert "is larger than 4194304 bytes; it was not read further" in shaped["error"], shaped
    assert peak < 32 * MiB, f"the engine held {peak / MiB:.0f} MiB of a refused response"


# Attack (broke, medium; fixed): a host that sends its response a little at a time, each piece within
# the read timeout, kept the turn (and one of the tool client's 100 pooled connections) busy for as
# long as it liked; 100 such calls starved every conversation's HTTP tools.
async def test_a_response_dripped_slowly_is_cut_off_at_the_read_timeout(db_url: str) -> None:
    flood = Flood(chunks=20, pause=0.5, size=1024)
    flood.start()
    try:
        shaped, _, elapsed = await flood_turn(db_url, flood, defaults={"max-attempts": 1, "read-timeout-ms": 2000})
    finally:
        flood.stop()
    assert elapsed < 6, f"the turn took {elapsed:.1f} s for a 2 s read timeout"
    assert "2000 ms" in shaped["error"], shaped


# --- templates ----------------------------------------------------------------------------------

# Attack: text a user controls (the message, an inputParam) that looks like a template must come back
# as text: a value is never rendered as a template, in any of the syntaxes the engine rewrites.
INJECTED = "{{ 7*7 }} #{7*7} [(${7*7})] [[${7*7}]] {{ ''.__class__.__mro__ }} {% for i in range(9) %}x{% endfor %}"


async def test_user_text_that_looks_like_a_template_is_never_evaluated(db_url: str) -> None:
    echo = "You said: {{ user_input }} / [(${inputParams.note})]"
    async with engine_on(db_url, template_pack(echo)) as engine:
        result = await engine.aprocess("loan " + INJECTED, input_params={"note": INJECTED})
    assert result.payload.value == f"You said: loan {INJECTED} / {INJECTED}"
    assert "49" not in str(result.payload.value) and "<class" not in str(result.payload.value)


# Attacks (broke, medium): a pack template allocates far beyond template_max_output_chars before the
# budget looks at the result, because the size is checked after the call: str.translate with a long
# replacement, |wordwrap with a long wrap string, and aliasing (a list of N references to one list of
# N items is N long, but its JSON or |join is N*N). At the sizes below each holds 20 to 400 MB; at
# 10x the sizes it is 2 to 40 GB: the server is killed for memory (a 1 s time budget does not help: the
# allocation is one C call). Proposed fix (convengine/templates/sandbox.py): add `translate` to the
# str methods sized before the call (len * longest replacement), size |wordwrap as len + len(wrapstring)
# * (words + len/width + lines), and size serialisation (|string, |join of non-strings, |tojson, the
# finalize of lists and dicts) with a bounded encoder that stops at max_chars instead of after it.
BOMBS = {
    "str.translate": "{{ ('a' * 20000).translate({97: 'b' * 20000}) | length }}",
    "|wordwrap": "{{ ('a' * 20000) | wordwrap(1, true, 'x' * 20000) | length }}",
    "aliased list printed": "{% set row = [0] * 1500 %}{{ [row] * 1500 }}",
    "aliased list joined": "{% set row = [0] * 3000 %}{{ ([row] * 1500) | join | length }}",
}


@pytest.mark.parametrize("name", list(BOMBS))
async def test_a_template_cannot_allocate_past_its_budget(db_url: str, name: str) -> None:
    async with engine_on(db_url, template_pack(BOMBS[name])) as engine:
        first = await engine.aprocess("hello")
        result, peak = await peak_allocation(lambda: engine.aprocess("loan", first.conversation_id))
        rendering = payload_of(await turn_events(engine, first.conversation_id), "EXACT_RESPONSE_RENDERING")
    assert rendering["errorClass"] == "TemplateTooLarge" and result.payload.value == BOMBS[name]
    assert peak < 8 * MiB, f"{name}: the render held {peak / MiB:.0f} MiB"


# --- callers: resource exhaustion ----------------------------------------------------------------


# Attack: one request as large as allowed (just under 2 MB of inputParams) repeated, to grow the
# database far faster than the bytes sent. What a turn stores must stay within a small multiple of
# what the caller sent (about 3.3x today: audit, projection and checkpoint), or a caller with a fast
# link fills the disk at a multiple of its bandwidth.
async def test_a_large_request_is_not_amplified_in_storage(serve: Any, db_url: str) -> None:
    server = serve(*BEYOND_LOOPBACK, env=auth_env())
    params = {f"k{i}": "v" * 90 for i in range(15_000)}  # about 1.5 MB as JSON
    async with httpx.AsyncClient(base_url=server.base, timeout=120) as client:
        cid = await start(client, USER_A)
        before = stored_bytes(db_url, cid)
        sent = 0
        for _ in range(3):
            body = {"message": "hello", "conversationId": cid, "inputParams": params}
            sent += len(httpx.Request("POST", "http://x", json=body).content)
            response = await client.post(MESSAGE, json=body, headers=bearer(USER_A))
            assert response.status_code == 200, response.text[:300]
        grown = stored_bytes(db_url, cid) - before
    assert grown < 6 * sent, f"3 requests of {sent // 3} bytes stored {grown} bytes"


async def test_persisted_params_stay_bounded_when_every_turn_sends_new_keys(serve: Any, db_url: str) -> None:
    """Attack (broke, medium; fixed with api.max_persisted_params_bytes): every turn sends ~1.5 MB of inputParams under new key names. Keys a caller
    sent once persist, so the conversation's params grow by 1.5 MB a turn without limit: after 6 turns
    9 MB are read, written and checkpointed on every turn (each turn slower, the database growing
    quadratically until a prune); after a few hundred turns one conversation takes the server's memory.
    Each request is within api.max_body_bytes. Proposed fix (convengine/catalog/state.py persistent_params and
    nodes/bootstrap.py): bound what persists, e.g. the persisted caller params as JSON within
    api.max_body_bytes (the turn that would pass it refused with INVALID_INPUT naming the limit, nothing
    written), or only the keys a pack declares persistent."""
    server = serve(*BEYOND_LOOPBACK, env=auth_env())
    async with httpx.AsyncClient(base_url=server.base, timeout=120) as client:
        cid = await start(client, USER_A)
        refusals = 0
        for turn in range(6):
            params = {f"t{turn}_{i}": "v" * 90 for i in range(15_000)}
            response = await send(client, USER_A, "hello", cid, inputParams=params)
            refusals += response.status_code != 200 or not response.json()["success"]
    persisted = persisted_params_bytes(db_url, cid)
    assert refusals or persisted <= 2 * 1024 * 1024, f"the conversation persists {persisted} bytes of params"


def persisted_params_bytes(url: str, cid: str) -> int:
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT length(CAST(input_params_json AS TEXT)) FROM ce_conversation "
                                            "WHERE CAST(conversation_id AS TEXT) = :c"), {"c": cid}).scalar_one())
    finally:
        engine.dispose()


def stored_bytes(url: str, cid: str) -> int:
    """Bytes of the conversation's rows in ce_* tables and its checkpoints."""
    engine = create_sync_engine(parse_database_url(url))
    queries = {"ce_audit": "SELECT coalesce(sum(length(CAST(payload_json AS TEXT))), 0) FROM ce_audit "
                           "WHERE CAST(conversation_id AS TEXT) = :c",
               "ce_conversation": "SELECT coalesce(sum(length(CAST(input_params_json AS TEXT)) + "
                                  "length(CAST(context_json AS TEXT))), 0) FROM ce_conversation "
                                  "WHERE CAST(conversation_id AS TEXT) = :c"}
    try:
        with engine.connect() as conn:
            total = sum(int(conn.execute(sa.text(q), {"c": cid}).scalar_one()) for q in queries.values())
            total += sum(len(text) for text in packed_audit_text(conn, cid))  # the audit, unpacked
            if conn.dialect.name == "postgresql":
                checkpoint = ("SELECT coalesce(sum(length(blob)), 0) FROM checkpoint_blobs WHERE thread_id = :c",
                              "SELECT coalesce(sum(length(blob)), 0) FROM checkpoint_writes WHERE thread_id = :c")
            else:
                checkpoint = ("SELECT coalesce(sum(length(checkpoint)), 0) FROM checkpoints WHERE thread_id = :c",
                              "SELECT coalesce(sum(length(value)), 0) FROM writes WHERE thread_id = :c")
            return total + sum(int(conn.execute(sa.text(q), {"c": cid}).scalar_one() or 0) for q in checkpoint)
    finally:
        engine.dispose()
