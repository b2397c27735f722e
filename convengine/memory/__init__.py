"""Conversation memory: users, conversation steps, the lifecycle, undo and redo.

See ``docs/memory.md``. The pieces: :mod:`.users` (who a conversation belongs to),
:mod:`.steps` (one row per completed turn), :mod:`.lifecycle` (READY / IN_PROGRESS / ENDED /
INTERRUPTED), :mod:`.timeline` (undo and redo over the conversation's checkpoints) and
:mod:`.service` (what the runtime calls, under the conversation's turn lock).
"""

from convengine.catalog.memory import LIFECYCLE_STATES, Lifecycle
from convengine.checkpointing.timeline import UndoResult

__all__ = ["LIFECYCLE_STATES", "Lifecycle", "UndoResult"]
