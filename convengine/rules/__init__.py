"""The rules engine: pure, no I/O (match types, actions, passes)."""
