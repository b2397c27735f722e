"""Package namespaces whose names load on first use (PEP 562).

A package ``__init__`` that imports its submodules runs them whenever any one submodule is
imported, in an order the import graph does not show; a submodule low in the layers then pulls in
modules above it. The packages below keep their public names (``from convengine.config_loader
import ConfigSnapshot``) but load each from its home module only when it is asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``homes`` maps each public name to its submodule
    (or to a module's full name when the name lives in another package)."""

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = home if "." in home else f"{package}.{home}"  # a submodule, or a module elsewhere
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return getattr_, dir_
