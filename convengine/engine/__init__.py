"""The engine: the public :class:`Engine`, what a turn returns, and the runtime behind it.

- :mod:`convengine.engine.core`: :class:`Engine`, the synchronous and async API.
- :mod:`convengine.engine.results`: :class:`TurnResult`, :class:`Payload`, :class:`EngineOptions`.
- :mod:`convengine.engine.runtime`: :class:`EngineRuntime`, an open engine's resources and the turn itself.
- :mod:`convengine.engine.commit`: the one place a turn's rows and audit batch are committed.
"""

from convengine.engine.core import Engine
from convengine.engine.results import EngineOptions, Payload, TurnResult
from convengine.engine.runtime import EngineRuntime

__all__ = ["Engine", "EngineOptions", "EngineRuntime", "Payload", "TurnResult"]
