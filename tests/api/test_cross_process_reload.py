"""A refresh or an import through one process reaches every process serving the same database."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url
from tests.servers import Server

ROOT = Path(__file__).parents[2]
SUPPORT = ROOT / "examples" / "support_desk.yaml"
GREETING = "Hello! I can cancel an order or tell you where one is. What do you need?"


def reply(server: Server, text: str = "hello") -> str:
    body = httpx.post(server.base + "/api/v1/conversation/message", json={"message": text}, timeout=30).json()
    return str(body["payload"]["value"])


def eventually(server: Server, expected: str, within_s: float = 1.0) -> float:
    """Seconds until ``server`` answers ``expected`` (failing after ``within_s``)."""
    began = time.monotonic()
    while (answer := reply(server)) != expected:
        assert time.monotonic() - began < within_s, f"still answering {answer!r}"
        time.sleep(0.05)
    return time.monotonic() - began


def set_greeting(url: str, text: str) -> None:
    engine = create_sync_engine(parse_database_url(url))
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE ce_response SET exact_text = :t WHERE intent_code = 'GREETING'"), {"t": text})
    engine.dispose()


def test_a_refresh_on_one_server_reaches_the_other(db_url: str, tmp_path: Path) -> None:
    a = Server(db_url, tmp_path / "a.log", pack=SUPPORT)
    b = Server(db_url, tmp_path / "b.log", pack=SUPPORT)
    try:
        assert reply(a) == reply(b) == GREETING
        set_greeting(db_url, "Hi from the edited row.")
        assert reply(b) == GREETING  # an edit takes effect on refresh, as in ConvEngine
        assert httpx.post(a.base + "/api/v1/cache/refresh", timeout=30).status_code == 200
        assert reply(a) == "Hi from the edited row."
        eventually(b, "Hi from the edited row.")
    finally:
        a.stop()
        b.stop()


def test_a_pack_import_reaches_running_servers(db_url: str, tmp_path: Path) -> None:
    a = Server(db_url, tmp_path / "a.log", pack=SUPPORT)
    try:
        assert reply(a) == GREETING
        edited = tmp_path / "edited.yaml"
        edited.write_text(SUPPORT.read_text().replace(GREETING, "Hello from the new pack."))
        subprocess.run([sys.executable, "-m", "convengine.cli", "pack", "import", str(edited), "--url", db_url],
                       cwd=ROOT, check=True, capture_output=True, timeout=120)
        eventually(a, "Hello from the new pack.")
    finally:
        a.stop()
