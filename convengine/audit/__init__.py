"""Audit trail: events, filters, the per-turn collector, live fan-out and the trace view."""

from convengine.audit.bus import AuditBus, Subscription
from convengine.audit.collector import TurnAudit
from convengine.audit.events import AuditEvent
from convengine.audit.filters import AuditFilter

__all__ = ["AuditBus", "AuditEvent", "AuditFilter", "Subscription", "TurnAudit"]
