"""Python tasks for examples/support_desk.yaml (ce_pending_action bean ``orderTasks``)."""

from __future__ import annotations

from typing import Any


class OrderTasks:
    """What the support desk can do for real; here it records the cancellation in the context."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel(self, task: Any) -> None:
        order_id = str(task.params.get("order_id") or "A-1001")
        self.cancelled.append(order_id)
        task.context["cancelled_order"] = order_id


TASKS = {"orderTasks": OrderTasks()}
