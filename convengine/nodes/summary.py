"""Conversation summaries: the ce_memory row that applies, and the MEMORY_SUMMARY call."""

from __future__ import annotations

import json
from typing import Any

from convengine.catalog import state as keys
from convengine.config.records import MemoryRecord
from convengine.nodes.common import most_specific
from convengine.nodes.turn import Turn
from convengine.templates.render import render_prompt
from convengine.templates.variables import template_variables

DEFAULT_SYSTEM = ("You maintain a running summary of a conversation between a user and an assistant. "
                  "Keep facts the user gave, decisions made and open questions. Be brief.")
DEFAULT_USER = ("Previous summary:\n{{previous_summary}}\n\nRecent turns (newest first):\n{{recent_turns}}\n\n"
                "Latest user message: {{user_input}}\nAssistant reply: {{assistant_reply}}\n\n"
                "Write the updated summary.")


def assistant_text(payload: dict[str, Any] | None) -> str:
    """The assistant's reply as text (a JSON payload serialised)."""
    if not payload:
        return ""
    value = payload.get("value")
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def memory_row(turn: Turn) -> MemoryRecord | None:
    """The most specific enabled ce_memory row for (intent, state); lower priority wins ties."""
    return most_specific(turn.snapshot.memory, turn.intent, turn.state, tie=lambda r: (-r.priority, r.memory_id))


async def summarise(turn: Turn, row: MemoryRecord) -> str:
    """Ask the model for the rolling summary (call site MEMORY_SUMMARY), capped at the row's max chars."""
    assert turn.ctx.services.llm is not None
    recent = list(reversed((turn.get(keys.RECENT_TURNS) or [])[-row.recent_turns:]))
    variables = template_variables(turn, {
        "previous_summary": (turn.read_context().get("memory") or {}).get("session_summary") or "",
        "recent_turns": "\n".join(f"user: {t.get('user')}\nassistant: {t.get('assistant')}" for t in recent),
        "assistant_reply": assistant_text(turn.get(keys.PAYLOAD)), "summary_max_chars": row.summary_max_chars})
    system = render_prompt(row.system_prompt or DEFAULT_SYSTEM, variables, template=f"ce_memory[{row.memory_id}].system_prompt")
    user = render_prompt(row.user_prompt or DEFAULT_USER, variables, template=f"ce_memory[{row.memory_id}].user_prompt")
    text = await turn.ctx.services.llm.text(turn, "MEMORY_SUMMARY", system=system, user=user)
    return " ".join(text.split())[: row.summary_max_chars]
