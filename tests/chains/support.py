"""Packs and helpers for the chain tests."""

from __future__ import annotations

from typing import Any

from tests.helpers import pack


def chain_pack(*steps: dict[str, Any], code: str = "C", settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pack with one chain of ``steps`` (positions in the order given)."""
    rows = [{"chain_code": code, "position": i, **s} for i, s in enumerate(steps, 1)]
    return pack(ce_chain=[{"chain_code": code, "description": "a test chain"}], ce_chain_step=rows,
                settings=settings or {})


def step(step_id: str, step_type: str, **config: Any) -> dict[str, Any]:
    return {"step_id": step_id, "step_type": step_type, "config": config}
