"""Conversation memory: users, conversation steps, the lifecycle, undo and redo.

See ``docs/memory.md``. The pieces: :mod:`.service` (what the runtime calls, under the
conversation's turn lock: admission, a turn's memory rows, undo and redo, the reads, erasure),
:mod:`.host` (what it needs of the engine, handed in by it), :mod:`.steps` (one row per completed
turn), :mod:`.scopes` (long-term and secret properties within a turn), :mod:`.longterm` (users'
long-term properties in LangGraph's store) and :mod:`.pruning` (checkpoint pruning that keeps undo).
"""

from convengine.catalog.memory import LIFECYCLE_STATES, Lifecycle
from convengine.checkpointing.timeline import UndoResult

__all__ = ["LIFECYCLE_STATES", "Lifecycle", "UndoResult"]
