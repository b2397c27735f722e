"""Python tasks for examples/loan_application.yaml (ce_pending_action bean ``loanTasks``)."""

from __future__ import annotations

import itertools
from typing import Any


class LoanTasks:
    """Submits applications; here it numbers them and records the submitted fields."""

    def __init__(self) -> None:
        self._numbers = itertools.count(1001)
        self.submitted: list[dict[str, Any]] = []

    def submit(self, task: Any) -> None:
        fields = {k: task.context.get(k) for k in ("customerName", "amount", "termMonths")}
        self.submitted.append(fields)
        task.context["application_id"] = f"LN-{next(self._numbers)}"


TASKS = {"loanTasks": LoanTasks()}
