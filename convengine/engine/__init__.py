"""The engine: the public :class:`Engine`, what a turn returns, and the runtime behind it.

- :mod:`convengine.engine.core`: :class:`Engine`, the synchronous and async API.
- :mod:`convengine.engine.results`: :class:`TurnResult`, :class:`Payload`, :class:`EngineOptions`.
- :mod:`convengine.engine.runtime`: :class:`EngineRuntime`, an open engine: its resources
  (:mod:`~convengine.engine.resources`) and its parts, one per concern: the turn
  (:mod:`~convengine.engine.turn`), memory operations (:mod:`~convengine.engine.memory_ops`), reads
  (:mod:`~convengine.engine.reads`), feedback (:mod:`~convengine.engine.feedback_desk`) and the served
  configuration (:mod:`~convengine.engine.config_follow`).
- :mod:`convengine.engine.commit`: the one place a turn's rows and audit batch are committed.

The names are resolved on first use (PEP 562): the conversation-test runner imports
:mod:`convengine.engine.results` while the engine itself is loading (publishing a configuration
version runs conversation tests), so importing a submodule must not load the whole engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convengine._internal.lazy import lazy_names

if TYPE_CHECKING:  # the names below, for type checkers and the import-graph checks
    from convengine.engine.core import Engine
    from convengine.engine.results import EngineOptions, Payload, TurnResult
    from convengine.engine.runtime import EngineRuntime

__all__ = ["Engine", "EngineOptions", "EngineRuntime", "Payload", "TurnResult"]

__getattr__, __dir__ = lazy_names(__name__, {"Engine": "core", "EngineOptions": "results", "Payload": "results",
                                             "TurnResult": "results", "EngineRuntime": "runtime"})
