"""Chains: start, resume, schedule and read chain runs over an open :class:`~convengine.engine.Engine`.

A run is pinned to the configuration version served when it started and is a thread of the engine's
checkpointer, so a paused run survives a restart and any worker continues it. A worker runs a run only
after claiming it (:mod:`convengine.chains.store`): a ``human`` answer or a due ``schedule`` resumes it
exactly once, whichever worker gets there first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphInterrupt, GraphRecursionError
from langgraph.types import Command

from convengine._internal.storable import storable_value
from convengine._internal.turn_io import check_params, normalise_conversation_id
from convengine.audit import AuditEvent
from convengine.catalog import chains as vocab
from convengine.catalog import stages
from convengine.catalog.errors import (
    ChainRunNotFoundError,
    ChainRunNotPausedError,
    ChainStepError,
    ConvEngineError,
    ErrorCode,
    InvalidInputError,
)
from convengine.chains.graph import ChainContext, ChainGraphs, ChainState, thread_of
from convengine.chains.model import Chain, chain_of, chains_of
from convengine.chains.steps import EXECUTORS, StepRun
from convengine.chains.store import RunStore, now
from convengine.checkpointing.persistence import insert_events
from convengine.config.snapshot import ConfigSnapshot
from convengine.engine import Engine
from convengine.security.redact import redact_text
from convengine.settings import EngineSettings

logger = logging.getLogger(__name__)
MAX_INPUT_BYTES = 65_536


@dataclass
class ChainRun:
    """A run as callers see it: where it is, what it waits for, and (with ``steps``) each step it took."""

    run_id: str
    chain: str
    status: str
    conversation_id: str
    version: int
    trigger: str
    current_step: str | None = None
    due_at: str | None = None
    input: Any = None
    output: Any = None
    error: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, row: Mapping[str, Any], steps: list[dict[str, Any]] | None = None) -> ChainRun:
        return cls(run_id=str(row["run_id"]), chain=row["chain_code"], status=row["status"],
                   conversation_id=str(row["conversation_id"]), version=row["version_no"], trigger=row["trigger"],
                   current_step=row["current_step"], due_at=_iso(row["due_at"]), input=row["input_json"],
                   output=row["output_json"], error=row["error"], created_at=_iso(row["created_at"]),
                   updated_at=_iso(row["updated_at"]), steps=[_step(s) for s in steps or []])

    def to_dict(self) -> dict[str, Any]:
        return {"runId": self.run_id, "chain": self.chain, "status": self.status,
                "conversationId": self.conversation_id, "version": self.version, "trigger": self.trigger,
                "currentStep": self.current_step, "dueAt": self.due_at, "input": self.input, "output": self.output,
                "error": self.error, "createdAt": self.created_at, "updatedAt": self.updated_at, "steps": self.steps}


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _step(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"seq": row["seq"], "step": row["step_id"], "type": row["step_type"], "status": row["status"],
            "output": row["output_json"], "error": row["error"], "startedAt": _iso(row["started_at"]),
            "finishedAt": _iso(row["finished_at"])}


class Chains:
    """The chain runtime of an engine: ``Chains(engine).start("APPROVAL", {...})``; see the module docstring."""

    def __init__(self, engine: Engine, *, worker: str | None = None) -> None:
        self.engine = engine
        self.store = RunStore(engine.runtime.async_engine)
        self.graphs = ChainGraphs(engine.runtime.saver)
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    # --- synchronous API (scripts, notebooks) ----------------------------------------------

    def start(self, chain: str, input: Mapping[str, Any] | None = None, *, conversation_id: str | None = None,
              owner: str | None = None) -> ChainRun:
        """Start a run of ``chain`` and run it until it pauses or ends."""
        return self.engine.portal.call(self.astart(chain, input, conversation_id=conversation_id, owner=owner))

    def resume(self, run_id: str, answer: Any = None, *, owner: str | None = None) -> ChainRun:
        """Resume a run paused at a ``human`` step with the person's ``answer`` (any JSON)."""
        return self.engine.portal.call(self.aresume(run_id, answer, owner=owner))

    def run_due(self) -> list[ChainRun]:
        """Resume every due ``schedule`` step (and runs whose worker was lost), each exactly once."""
        return self.engine.portal.call(self.arun_due())

    def get(self, run_id: str, owner: str | None = None) -> ChainRun:
        return self.engine.portal.call(self.aget(run_id, owner))

    def runs(self, *, owner: str | None = None, status: str | None = None, chain: str | None = None,
             limit: int = 50) -> list[ChainRun]:
        return self.engine.portal.call(self.aruns(owner=owner, status=status, chain=chain, limit=limit))

    # --- async API --------------------------------------------------------------------------

    async def astart(self, chain: str, input: Mapping[str, Any] | None = None, *, conversation_id: str | None = None,
                     owner: str | None = None, trigger: str = "api") -> ChainRun:
        number, snapshot = await self._served()
        spec = chain_of(snapshot, chain)
        values = _checked_input(input, self.engine.settings.api.max_input_depth)
        cid = normalise_conversation_id(conversation_id) if conversation_id else str(uuid.uuid4())
        if conversation_id:
            await self.engine.acheck_access(cid, owner)
        await self.engine.runtime.store.ensure_conversation(cid, owner=owner)
        run_id = str(uuid.uuid4())
        row = {"run_id": run_id, "chain_code": spec.code, "version_no": number, "conversation_id": cid,
               "owner_id": owner, "status": vocab.RUNNING, "current_step": spec.first, "trigger": trigger,
               "input_json": values, "claimed_by": self.worker,
               "claimed_until": now() + _ttl(snapshot)}
        await self.store.insert_run(row)
        await self._audit(row, stages.CHAIN_RUN_STARTED, {"trigger": trigger, "version": number})
        start: ChainState = {"seq": 0, "at": spec.first, "outputs": {}, "input": values}
        return await self._drive(row, start)

    async def aresume(self, run_id: str, answer: Any = None, *, owner: str | None = None) -> ChainRun:
        row = await self._row(run_id, owner)
        answer = _checked_answer(answer, self.engine.settings)
        if row["status"] != vocab.WAITING:
            raise ChainRunNotPausedError(f"chain run {row['run_id']} is {row['status']}, not waiting for a person",
                                         details={"runId": row["run_id"], "status": row["status"]})
        if not await self.store.claim(row["run_id"], (vocab.WAITING,), self.worker, self._ttl_s()):
            raise ChainRunNotPausedError(f"chain run {row['run_id']} was resumed by someone else",
                                         details={"runId": row["run_id"]})
        await self._audit(row, stages.CHAIN_RESUMED, {"by": "person", "step": row["current_step"]})
        return await self._drive(row, Command(resume=answer))

    async def arun_due(self) -> list[ChainRun]:
        settings = self.engine.settings.chains
        done = await self._start_scheduled()
        for run_id, before in await self.store.claim_due(self.worker, settings.claim_ttl_s, settings.batch):
            row = await self.store.run(run_id)
            if row is None:
                continue
            if before == vocab.SCHEDULED:
                fired = {"dueAt": _iso(row["due_at"]), "firedAt": now().isoformat(), "worker": self.worker}
                await self._audit(row, stages.CHAIN_RESUMED, {"by": "scheduler", "step": row["current_step"], **fired})
                done.append(await self._drive(row, Command(resume=fired)))
            else:  # a worker was lost while running it: continue from its last checkpoint
                await self._audit(row, stages.CHAIN_RESUMED, {"by": "recovery", "step": row["current_step"]})
                done.append(await self._drive(row, None))
        return done

    async def _start_scheduled(self) -> list[ChainRun]:
        """Start the runs chains with ``every_s`` are due for: one per chain and period, whichever worker
        inserts the period's run first (its id is derived from the chain and the period)."""
        number, snapshot = await self._served()
        started = []
        for chain in chains_of(snapshot).values():
            if chain.every_s is None:
                continue
            period = int(now().timestamp()) // chain.every_s
            run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"convengine-chain:{chain.code}:{chain.every_s}:{period}"))
            cid = str(uuid.uuid4())
            row = {"run_id": run_id, "chain_code": chain.code, "version_no": number, "conversation_id": cid,
                   "owner_id": None, "status": vocab.RUNNING, "current_step": chain.first, "trigger": "schedule",
                   "input_json": {}, "claimed_by": self.worker, "claimed_until": now() + _ttl(snapshot)}
            if not await self.store.insert_run_once(row):
                continue
            await self.engine.runtime.store.ensure_conversation(cid)
            await self._audit(row, stages.CHAIN_RUN_STARTED, {"trigger": "schedule", "version": number,
                                                              "period": period})
            start: ChainState = {"seq": 0, "at": chain.first, "outputs": {}, "input": {}}
            started.append(await self._drive(row, start))
        return started

    async def aget(self, run_id: str, owner: str | None = None) -> ChainRun:
        row = await self._row(run_id, owner)
        return ChainRun.of(row, await self.store.steps(row["run_id"]))

    async def aruns(self, *, owner: str | None = None, status: str | None = None, chain: str | None = None,
                    limit: int = 50) -> list[ChainRun]:
        if status is not None and status not in vocab.RUN_STATUSES:
            raise InvalidInputError(f"status must be one of {', '.join(vocab.RUN_STATUSES)}")
        rows = await self.store.runs(owner=owner, status=status, chain=chain, limit=max(1, min(limit, 500)))
        return [ChainRun.of(r) for r in rows]

    def chains(self) -> dict[str, Chain]:
        """The enabled chains of the configuration the engine serves now."""
        return chains_of(self.engine.snapshot)

    async def serve(self, stop: asyncio.Event) -> None:
        """Poll for due runs until ``stop`` is set (a server's scheduler); a failed poll is logged and retried."""
        while not stop.is_set():
            try:
                await self.arun_due()
            except Exception:
                logger.exception("chains: a scheduler poll failed; retrying")
            try:
                await asyncio.wait_for(stop.wait(), self.engine.settings.chains.poll_interval_s)
            except TimeoutError:
                pass

    async def studio_context(self, code: str, thread_id: str) -> ChainContext:
        """The context of a LangGraph Studio thread running chain ``code``: the thread is a run (its checkpoints
        are Studio's; its steps and audit are stored like any run's, and it is never the scheduler's)."""
        number, snapshot = await self._served()
        spec = chain_of(snapshot, code)
        try:
            run_id = str(uuid.UUID(thread_id))
        except ValueError:
            run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"convengine-studio:{thread_id}"))
        row = await self.store.run(run_id)
        if row is None:
            cid = str(uuid.uuid4())
            await self.engine.runtime.store.ensure_conversation(cid)
            row = {"run_id": run_id, "chain_code": spec.code, "version_no": number, "conversation_id": cid,
                   "owner_id": None, "status": vocab.RUNNING, "current_step": spec.first, "trigger": "studio",
                   "input_json": {}, "claimed_by": "studio", "claimed_until": None}
            await self.store.insert_run(row)
            await self._audit(row, stages.CHAIN_RUN_STARTED, {"trigger": "studio", "version": number})
        fixed = row

        async def run_step(step_id: str, state: ChainState) -> ChainState:
            result = await self._step(fixed, snapshot, spec, step_id, state)
            if result.get("at") == vocab.END:
                await self.store.update_run(run_id, status=vocab.COMPLETED, current_step=None,
                                            output_json=result.get("outputs"), claimed_by=None)
                await self._audit(fixed, stages.CHAIN_RUN_COMPLETED, {"steps": len(result.get("outputs") or {})})
            return result

        return ChainContext(run_step)

    # --- running ----------------------------------------------------------------------------

    async def _served(self) -> tuple[int, ConfigSnapshot]:
        serving = self.engine.runtime.versions
        assert serving is not None  # set when the engine opens
        number = (await serving.served()).version
        return number, (await serving.snapshot(number))[1]

    def _ttl_s(self) -> float:
        return self.engine.settings.chains.claim_ttl_s

    async def _row(self, run_id: str, owner: str | None) -> dict[str, Any]:
        try:
            rid = str(uuid.UUID(str(run_id)))
        except ValueError:
            raise InvalidInputError(f"run id {str(run_id)[:60]!r} is not a UUID") from None
        row = await self.store.run(rid)
        if row is None or (owner is not None and row["owner_id"] != owner):
            raise ChainRunNotFoundError(f"no chain run {rid}", details={"runId": rid})
        return row

    async def _drive(self, row: dict[str, Any], payload: ChainState | Command[Any] | None) -> ChainRun:
        """Run the run's graph from ``payload`` (the start state, a resume command, or None to continue)
        until it pauses or ends, then record where it is and release the claim."""
        serving = self.engine.runtime.versions
        assert serving is not None
        version_hash, snapshot = await serving.snapshot(row["version_no"])
        chain = chain_of(snapshot, row["chain_code"])
        graph = self.graphs.get(version_hash, chain)
        config: RunnableConfig = {"configurable": {"thread_id": thread_of(row["run_id"])},
                                  "recursion_limit": vocab.MAX_STEPS_PER_RUN + 1}
        context = ChainContext(lambda step_id, state: self._step(row, snapshot, chain, step_id, state))
        try:
            await graph.ainvoke(payload, config, context=context)
        except GraphRecursionError:
            return await self._failed(row, ChainStepError(f"chain {chain.code} run {row['run_id']}: more than "
                                                          f"{vocab.MAX_STEPS_PER_RUN} steps",
                                                          code=ErrorCode.CHAIN_STEP_LIMIT))
        except ConvEngineError as exc:
            return await self._failed(row, exc)
        state = await graph.aget_state(config)
        if state.interrupts:
            return await self._paused(row, dict(state.interrupts[0].value))
        outputs = dict(state.values.get("outputs") or {})
        await self.store.update_run(row["run_id"], status=vocab.COMPLETED, current_step=None, output_json=outputs,
                                    claimed_by=None, claimed_until=None, due_at=None)
        await self._audit(row, stages.CHAIN_RUN_COMPLETED, {"steps": len(outputs)})
        return await self.aget(row["run_id"])

    async def _paused(self, row: dict[str, Any], waiting: dict[str, Any]) -> ChainRun:
        scheduled = waiting.get("kind") == vocab.SCHEDULE
        due = waiting.get("dueAt") if scheduled else None
        await self.store.update_run(row["run_id"], status=vocab.SCHEDULED if scheduled else vocab.WAITING,
                                    current_step=waiting.get("step"), claimed_by=None, claimed_until=None,
                                    due_at=datetime.fromisoformat(due) if due else None)
        await self._audit(row, stages.CHAIN_SCHEDULED if scheduled else stages.CHAIN_WAITING, waiting)
        return await self.aget(row["run_id"])

    async def _failed(self, row: dict[str, Any], exc: ConvEngineError) -> ChainRun:
        await self.store.update_run(row["run_id"], status=vocab.FAILED, error=redact_text(exc.message)[:2000],
                                    claimed_by=None, claimed_until=None)
        return await self.aget(row["run_id"])

    async def _step(self, row: dict[str, Any], snapshot: ConfigSnapshot, chain: Chain, step_id: str,
                    state: ChainState) -> ChainState:
        step, seq, outputs = chain.step(step_id), int(state.get("seq") or 0), dict(state.get("outputs") or {})

        async def audit(stage: str, payload: dict[str, Any]) -> None:
            await self._audit(row, stage, {"seq": seq, **payload})

        values = dict(state.get("input") or row.get("input_json") or {})
        run = StepRun(self.engine, snapshot, chain, step, row, outputs, audit, seq, values)
        await self.store.update_run(row["run_id"], current_step=step_id)
        if step.step_type in vocab.PAUSING_TYPES:
            await self.store.record_step(row["run_id"], seq, step_id, step.step_type, vocab.STEP_WAITING)
        try:
            output = _json(await EXECUTORS[step.step_type](run))
        except GraphInterrupt:
            raise
        except Exception as caught:  # any failure fails the step, named (a bug too, logged)
            failure = caught if isinstance(caught, ConvEngineError) else ChainStepError(
                f"chain {chain.code} step {step_id}: internal error {type(caught).__name__}")
            if failure is not caught:
                logger.exception("chain %s run %s step %s failed", chain.code, row["run_id"], step_id)
            message = redact_text(failure.message)
            await self.store.record_step(row["run_id"], seq, step_id, step.step_type, vocab.STEP_FAILED, error=message)
            await audit(stages.CHAIN_STEP_FAILED, {"step": step_id, "type": step.step_type,
                                                   "errorCode": failure.code.value, "message": message})
            raise failure from None
        await self.store.record_step(row["run_id"], seq, step_id, step.step_type, vocab.STEP_DONE, output)
        await audit(stages.CHAIN_STEP, {"step": step_id, "type": step.step_type, "output": output})
        return {"seq": seq + 1, "at": run.next or chain.next_of(step), "outputs": {**outputs, step_id: output},
                "input": values}

    async def _audit(self, row: Mapping[str, Any], stage: str, payload: dict[str, Any]) -> None:
        """An audit event of the run on its conversation: stored, and published to live streams."""
        event = AuditEvent(str(row["conversation_id"]), stage,
                           {"runId": str(row["run_id"]), "chain": row["chain_code"], **payload})
        await self.engine.runtime.store.run(lambda conn: insert_events(conn, [event]))
        self.engine.bus.publish(event)


def _ttl(snapshot: ConfigSnapshot) -> timedelta:
    return timedelta(seconds=snapshot.settings.chains.claim_ttl_s)


def _json(value: Any) -> Any:
    """A step's output as stored: JSON values only (anything else as its text), every NUL or lone surrogate
    (a webhook's or a model's reply is untrusted) replaced, so either backend stores it."""
    return storable_value(json.loads(json.dumps(value, default=str)))


def _checked_input(values: Mapping[str, Any] | None, max_depth: int) -> dict[str, Any]:
    """A run's input: a JSON object the database can store (no NUL, finite numbers, bounded depth and size)."""
    checked = check_params(values, max_depth, name="a chain run's input")
    if len(json.dumps(checked)) > MAX_INPUT_BYTES:
        raise InvalidInputError(f"a chain run's input is larger than {MAX_INPUT_BYTES} bytes as JSON")
    return checked


def _checked_answer(answer: Any, settings: EngineSettings) -> Any:
    """A person's answer: any JSON value, checked as a run's input is, at most ``chains.max_answer_bytes``."""
    limit = settings.chains.max_answer_bytes
    try:
        size = len(json.dumps(answer, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        raise InvalidInputError("a human step's answer must be JSON (text, numbers, lists, objects)") from None
    if size > limit:
        raise InvalidInputError(f"a human step's answer is {size} bytes as JSON; the limit is {limit} "
                                "(settings chains.max_answer_bytes)")
    return check_params({"answer": answer}, settings.api.max_input_depth + 1, name="a human step's")["answer"]
