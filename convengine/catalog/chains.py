"""Names of the chain runtime (convengine.chains): step types, run and step statuses, what a run
waits for (its audit stages are in :mod:`convengine.catalog.stages`)."""

from __future__ import annotations

ASSISTANT = "assistant"
AGENT = "agent"
WEBHOOK = "webhook"
HUMAN = "human"
DECIDE = "decide"
NOTIFY = "notify"
SCHEDULE = "schedule"

STEP_TYPES: frozenset[str] = frozenset({ASSISTANT, AGENT, WEBHOOK, HUMAN, DECIDE, NOTIFY, SCHEDULE})
PAUSING_TYPES: frozenset[str] = frozenset({HUMAN, SCHEDULE})
"""Step types that pause a run (a LangGraph interrupt) until a person or a timer resumes it."""

END = "end"
"""A step's ``next`` (or a ``decide`` branch's ``goto``) naming no step: the run completes."""

# A run's status (ce_chain_run.status).
RUNNING = "RUNNING"
WAITING = "WAITING"
"""Paused at a ``human`` step: a person resumes it."""
SCHEDULED = "SCHEDULED"
"""Paused at a ``schedule`` step until ``due_at``: any worker's scheduler resumes it once."""
COMPLETED = "COMPLETED"
FAILED = "FAILED"
RUN_STATUSES: tuple[str, ...] = (RUNNING, WAITING, SCHEDULED, COMPLETED, FAILED)
PAUSED: frozenset[str] = frozenset({WAITING, SCHEDULED})

# A step's status (ce_chain_run_step.status).
STEP_DONE = "DONE"
STEP_WAITING = "WAITING"
STEP_FAILED = "FAILED"

# Bounds checked when a pack loads (and again when a step runs).
MAX_DELAY_S = 366 * 24 * 3600
"""The longest a ``schedule`` step may wait."""
MAX_STEPS_PER_RUN = 500
"""Steps one run may take (a ``decide`` loop is stopped there, FAILED with CHAIN_STEP_LIMIT)."""
MAX_NOTIFY_CHARS = 10_000


def run_thread(run_id: str) -> str:
    """The checkpointer thread of a chain run."""
    return f"chain:{run_id}"
