"""The console's test world: the pizza example pack, a scripted model that logs its calls, an app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from convengine.api.app import create_app
from convengine.config_loader.companions import load_module, pack_options
from tests.conftest import EXAMPLES

PACK = EXAMPLES / "pizza.yaml"
SCRIPTED = Path(__file__).parent / "scripted_pizza.py"


def scripted_model() -> Any:
    """The pizza model (slowed down by "slowly" in a message), fresh for each app."""
    return load_module(SCRIPTED).LLM


def console_app(url: str, *, pack: Path = PACK, **settings: Any) -> Any:
    """The API with the pizza pack, the scripted model and LLM calls logged (what export needs)."""
    merged = {"llm": {"log_calls": True}, **settings}
    return create_app(url, **pack_options(pack, None), llm=scripted_model(), settings=merged)
