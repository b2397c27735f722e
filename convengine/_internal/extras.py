"""Optional dependencies (the package's extras): a feature whose packages are not installed says
which extra to install, in one line, instead of raising a bare ImportError.

``pip install convengine`` runs the engine on SQLite with the CLI; the extras add the rest:
``[api]`` (``convengine serve``), ``[postgres]`` (PostgreSQL URLs), ``[openai]`` (``llm="openai"``),
``[knowledge]`` (PDF documents), ``[mcp]`` (MCP servers), ``[studio]`` (``langgraph dev``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from convengine.catalog.errors import ConfigError

EXTRA_MODULES = {
    "api": ("fastapi", "uvicorn", "sse_starlette", "fastapi_offline", "starlette", "h11"),
    "postgres": ("psycopg", "psycopg_pool", "langgraph.checkpoint.postgres"),
    "openai": ("langchain_openai", "openai"),
    "knowledge": ("pypdf",),
    "mcp": ("mcp",),
}
"""Each extra and the top-level modules it brings."""


def missing_extra(extra: str, exc: ImportError) -> bool:
    """Whether ``exc`` is one of ``extra``'s modules not being installed (not some other import failure)."""
    name = exc.name or ""
    return any(name == module or name.startswith(f"{module}.") or module.startswith(f"{name}.")
               for module in EXTRA_MODULES[extra])


@contextlib.contextmanager
def needs_extra(extra: str, feature: str) -> Iterator[None]:
    """Turn a missing module of ``extra`` inside the block into a ConfigError naming the install command."""
    try:
        yield
    except ImportError as exc:
        if not missing_extra(extra, exc):
            raise
        raise ConfigError(f"{feature} needs the {exc.name} package, which is not installed: "
                          f"pip install 'convengine[{extra}]'") from exc
