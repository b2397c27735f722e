"""Unbounded packs and templates (security issue item 11).

Pack authors are trusted to configure the engine, not to take the server down: a small pack of
nested YAML aliases, a pack nested too deeply or too large is refused with PACK_INVALID naming
the limit before anything is built; a template that loops, multiplies strings or asks for a huge
range() stops at ``template_timeout_ms`` / ``template_max_output_chars`` with PROMPT_RENDER_FAILED,
and the server keeps answering ``/health``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from convengine.catalog.errors import ErrorCode, PackError, PromptRenderError
from convengine.config_loader import validate_pack
from convengine.config_loader.packs import MAX_DEPTH, MAX_EXPANDED_NODES, MAX_PACK_BYTES
from convengine.engine import Engine
from convengine.llm import ScriptedLLM
from tests.helpers import engine_on, pack, payload_of, turn_events
from tests.security.world import assert_unchanged

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

LAUGHS = "settings:\n  experimental:\n    l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 8))
"""Under 800 bytes; 9**8 (43 million) values once its aliases are expanded."""

SLOW = ("{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}"
        "{% endfor %}{% endfor %}{% endfor %}")
HUGE = "{{ 'a' * 10**8 }}"
WIDE = "{{ range(10**9) | list | length }}"
LIMITS = {"template-timeout-ms": 300, "template-max-output-chars": 100_000}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convengine.cli", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def hostile_packs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    files = {"aliases": (LAUGHS, f"expands to more than {MAX_EXPANDED_NODES} values through its aliases"),
             "depth": ("settings:\n  experimental: " + "[" * 200 + "]" * 200 + "\n",
                       f"nests deeper than {MAX_DEPTH} levels"),
             "size": ("# " + "x" * MAX_PACK_BYTES + "\n", f"is larger than {MAX_PACK_BYTES} bytes")}
    out = {}
    for name, (text, reason) in files.items():
        (tmp_path / f"{name}.yaml").write_text(text, encoding="utf-8")
        out[name] = (tmp_path / f"{name}.yaml", reason)
    return out


async def test_hostile_packs_are_refused_before_anything_is_built(db_url: str, world: Any,
                                                                    tmp_path: Path) -> None:
    assert len(LAUGHS.encode()) < 800
    before = world()
    for name, (path, reason) in hostile_packs(tmp_path).items():
        started = time.monotonic()
        with pytest.raises(PackError) as checked:
            validate_pack(path)
        with pytest.raises(PackError) as opened:
            await Engine.aopen(db_url, pack=path)
        imported = run_cli("pack", "import", str(path), "--url", db_url)
        assert time.monotonic() - started < 30, name
        for error in (checked.value, opened.value):
            assert error.code is ErrorCode.PACK_INVALID and reason in error.message, (name, error.message)
        assert imported.returncode == 2 and "PACK_INVALID" in imported.stderr and reason in imported.stderr
    assert_unchanged(before, world())


def template_pack(exact_text: str, prompt: str | None = None) -> dict[str, Any]:
    data = pack(settings=LIMITS)
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    data["ce_response"].insert(0, {"intent_code": "LOAN", "state_code": "START", "exact_text": exact_text})
    if prompt is not None:
        data["ce_response"][0] = {"intent_code": "LOAN", "state_code": "START", "response_type": "DERIVED",
                                  "output_format": "TEXT"}
        data["ce_prompt_template"] = [{"template_id": 9, "intent_code": "LOAN", "state_code": "START",
                                       "output_format": "TEXT", "system_prompt": "Be brief",
                                       "user_prompt": prompt}]
    return data


@pytest.mark.parametrize(("source", "limit"), [
    (SLOW, "took longer than 300 ms to render (settings.template_timeout_ms)"),
    (HUGE, "over the limit of 100000 (settings.template_max_output_chars)"),
    (WIDE, "range() of 1000000000 numbers is over the limit"),
])
async def test_a_hostile_response_template_stops_at_its_limit(db_url: str, world: Any, source: str,
                                                              limit: str) -> None:
    async with engine_on(db_url, template_pack(source)) as engine:
        first = await engine.aprocess("hello")
        before = world(first.conversation_id)
        started = time.monotonic()
        result = await engine.aprocess("loan", first.conversation_id)
        elapsed = time.monotonic() - started
        rendering = payload_of(await turn_events(engine, first.conversation_id), "EXACT_RESPONSE_RENDERING")
    after = world(first.conversation_id)
    assert elapsed < 5 and result.payload.value == source  # the unrendered text, never the blown-up one
    assert rendering["fallbackUsed"] is True
    assert rendering["errorClass"] in ("TemplateTimeout", "TemplateTooLarge")
    assert rendering["errorMessage"].startswith("ce_response[") and limit in rendering["errorMessage"]
    assert_unchanged(before, after)


async def test_a_hostile_prompt_fails_the_turn_with_prompt_render_failed(db_url: str, world: Any) -> None:
    llm = ScriptedLLM(default="never asked")
    async with engine_on(db_url, template_pack("", prompt="Hi " + SLOW), llm=llm) as engine:
        first = await engine.aprocess("hello")
        before = world(first.conversation_id)
        with pytest.raises(PromptRenderError) as failed:
            await engine.aprocess("loan", first.conversation_id)
    after = world(first.conversation_id)
    assert failed.value.code is ErrorCode.PROMPT_RENDER_FAILED and llm.count() == 0
    assert "ce_prompt_template[9].user_prompt took longer than 300 ms" in failed.value.message
    assert_unchanged(before, after)


async def test_health_answers_while_a_hostile_template_renders(db_url: str, serve: Any, world: Any,
                                                               tmp_path: Path) -> None:
    data = template_pack(SLOW)
    data["settings"]["template-timeout-ms"] = 1500
    (tmp_path / "hostile.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    server = serve(pack=tmp_path / "hostile.yaml")
    cid = str(uuid.uuid4())
    before = world(cid)
    async with httpx.AsyncClient(base_url=server.base, timeout=15) as client:
        turn = asyncio.create_task(client.post("/api/v1/conversation/message", json={"message": "loan",
                                                                                  "conversationId": cid}))
        await asyncio.sleep(0.3)  # the turn is rendering now
        asked = time.monotonic()
        health = await client.get("/health")
        waited = time.monotonic() - asked
        reply = await turn
    after = world(cid)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert waited < 1.5 + 2.0  # at most the template's own time limit, never the template's whole work
    assert reply.status_code == 200 and reply.json()["payload"]["value"] == SLOW
    assert_unchanged(before, after)
