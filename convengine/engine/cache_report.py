"""What the engine keeps in memory, in ConvEngine's ``/api/v1/cache/analyze`` shape.

ConvEngine caches each control table separately; convengine keeps them all in one immutable
configuration snapshot (reloaded whole by a cache refresh, a pack import or a changed stamp). So
``staticCaches`` names each control table with the rows the snapshot holds, ``runtimeCaches`` the
per-process state a turn uses (turn locks, audit rate-limit buckets, live stream
subscriptions, the ce_verbose publisher), and ``warmupTimingMs`` times reading each table from the
database (``firstCallMs``) against reading it from the snapshot (``secondCallMs``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import sqlalchemy as sa

from convengine.config.snapshot import ConfigSnapshot
from convengine.db.models import CONTROL_TABLES, MODEL_BY_TABLE
from convengine.engine.runtime import EngineRuntime

PROVIDER = "convengine.config_loader.ConfigSnapshot"


def _snapshot_rows(snapshot: ConfigSnapshot) -> dict[str, tuple[Any, ...]]:
    held = snapshot.tables()
    return {table: held.get(table, ()) for table in CONTROL_TABLES}


def _static(snapshot: ConfigSnapshot, counted: dict[str, int] | None) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for table, rows in _snapshot_rows(snapshot).items():
        entry = {"exists": True, "hasSimpleKeyEntry": True, "valueType": "tuple", "listSize": len(rows),
                 "enabledCount": sum(1 for r in rows if getattr(r, "enabled", True)), "nativeEntryCount": 1}
        if counted is not None:
            entry["databaseRowCount"] = counted[table]
            entry["inSync"] = counted[table] == len(rows)
        report[table] = entry
    return report


def _runtime(runtime: EngineRuntime) -> dict[str, Any]:
    rate_limit = runtime.audit_filter.settings.rate_limit
    verbose = runtime.verbose[1].rows if runtime.verbose is not None else runtime.holder.current.verbose
    return {
        "ce_conversation_turn_locks": {"exists": True, "nativeEntryCount": runtime.locks.held()},
        "ce_audit_rate_limit_buckets": {"exists": bool(rate_limit.enabled),
                                        "nativeEntryCount": runtime.audit_filter.bucket_count()},
        "ce_audit_stream_subscriptions": {"exists": True, "nativeEntryCount": runtime.bus.subscriber_count()},
        "ce_verbose_publisher": {"exists": True, "nativeEntryCount": sum(1 for r in verbose if r.enabled)},
    }


def _warmup(sync_engine: sa.Engine, snapshot: ConfigSnapshot) -> tuple[dict[str, Any], dict[str, int]]:
    """Per table: the time to read it from the database and from the snapshot; and its database row count."""
    timings: dict[str, Any] = {}
    counted: dict[str, int] = {}
    held = _snapshot_rows(snapshot)
    with sync_engine.connect() as conn:
        for table in CONTROL_TABLES:
            started = time.perf_counter()
            rows = conn.execute(sa.select(MODEL_BY_TABLE[table].__table__)).all()
            first = (time.perf_counter() - started) * 1000
            started = time.perf_counter()
            list(held[table])
            second = (time.perf_counter() - started) * 1000
            timings[table] = {"firstCallMs": round(first, 3), "secondCallMs": round(second, 3)}
            counted[table] = len(rows)
    return timings, counted


async def cache_report(runtime: EngineRuntime, warmup: bool) -> dict[str, Any]:
    snapshot = runtime.holder.current
    report: dict[str, Any] = {
        "cacheProvider": {
            "cacheManagerBeanClass": PROVIDER, "snapshotVersion": snapshot.version,
            "configStamp": runtime.holder.stamp, "database": runtime.url.redacted(),
            "registeredCacheNames": [*CONTROL_TABLES, *_runtime(runtime)],
            "reloadedBy": "POST /api/v1/cache/refresh, a pack import, or a changed configuration stamp",
            "warnings": list(snapshot.warnings),
        },
        "warmupAndTimingEnabled": warmup,
    }
    counted = None
    if warmup:
        report["warmupTimingMs"], counted = await asyncio.to_thread(_warmup, runtime.sync_engine, snapshot)
    report["staticCaches"] = _static(snapshot, counted)
    report["runtimeCaches"] = _runtime(runtime)
    return report
