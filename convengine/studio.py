"""The turn graph for LangGraph Studio / ``langgraph dev`` (see langgraph.json).

Compiled without a checkpointer (the server brings its own). A run through the server brings
no TurnContext, so the nodes get one from an engine opened on first use:
``CONVENGINE_DATABASE_URL`` (default ``sqlite:///convengine.db``) with the pack
``CONVENGINE_STUDIO_PACK`` (default: the bundled support desk). The thread id is the
conversation id; the input is ``{"turn_input": {"text": "hello"}}``. The pack's flows are drawn
as subgraphs of the ``flow`` step. Each run's projection, history row and audit trail are
committed by the graph's last node, ``commit_run``, through the engine's one commit path
(:func:`convengine.engine.commit.commit_turn`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict
from pathlib import Path

from langgraph.config import get_config

from convengine.audit import TurnAudit
from convengine.catalog import state as keys
from convengine.catalog.errors import ConvEngineError
from convengine.catalog.state import EngineState
from convengine.chains import Chains
from convengine.chains.graph import ChainContext, ChainGraph, build_chain_graph
from convengine.chains.model import chains_of
from convengine.config_loader.companions import default_pack, pack_options
from convengine.config_loader.loader import validate_pack
from convengine.engine import Engine
from convengine.engine.commit import commit_turn
from convengine.engine.runtime import TurnGraph
from convengine.flows.display import attach_flows
from convengine.graph.builder import build_graph
from convengine.nodes.context import TurnContext

_engine: Engine | None = None
_engine_lock: asyncio.Lock | None = None
_contexts: OrderedDict[str, TurnContext] = OrderedDict()
MAX_OPEN_RUNS = 256


async def _open_engine() -> Engine:
    global _engine, _engine_lock
    if _engine is not None:
        return _engine
    if _engine_lock is None:
        _engine_lock = asyncio.Lock()
    async with _engine_lock:
        if _engine is None:
            pack = _studio_pack()
            url = os.environ.get("CONVENGINE_DATABASE_URL") or "sqlite:///convengine.db"
            options = await asyncio.to_thread(pack_options, pack)
            _engine = await Engine.aopen(url, **options)
    assert _engine is not None
    return _engine


async def studio_context(state: EngineState) -> TurnContext:
    """The TurnContext of the current server run (one per run id)."""
    config = get_config()
    configurable = config.get("configurable") or {}
    run_id = str(config.get("run_id") or configurable.get("run_id") or (config.get("metadata") or {}).get("run_id"))
    if run_id in _contexts:
        return _contexts[run_id]
    engine = await _open_engine()
    runtime = engine.runtime
    snapshot = runtime.holder.current
    conversation_id = str(configurable.get("thread_id") or state.get(keys.CONVERSATION_ID))
    audit = TurnAudit(conversation_id, audit_filter=runtime.audit_filter, bus=engine.bus,
                      persist_meta=snapshot.settings.audit.persist_meta, turn_id=run_id)
    ctx = TurnContext(snapshot=snapshot, services=runtime.services, audit=audit, conversation_id=conversation_id,
                      turn_id=run_id, autocommit=True)
    _contexts[run_id] = ctx
    while len(_contexts) > MAX_OPEN_RUNS:
        _contexts.popitem(last=False)
    return ctx


async def commit_run(state: EngineState) -> None:
    """The run's turn, committed as the engine commits its own (no checkpoint: Studio's server keeps it)."""
    ctx = await studio_context(state)
    store = ctx.services.store
    if store is not None:
        await commit_turn(store, None, conversation_id=ctx.conversation_id, final=state,
                          events=list(ctx.audit.events), owner=ctx.owner)


def _studio_pack() -> Path:
    return Path(os.environ.get("CONVENGINE_STUDIO_PACK") or default_pack())


def _with_flows(compiled: TurnGraph) -> TurnGraph:
    """Draw the Studio pack's flows as subgraphs of the ``flow`` step (see convengine.flows.display)."""
    try:
        return attach_flows(compiled, validate_pack(_studio_pack()))
    except ConvEngineError as exc:  # the engine reports the pack's errors on first use
        logging.getLogger(__name__).warning("Studio draws no flows: %s", exc)
        return compiled


graph = _with_flows(build_graph(context_provider=studio_context, with_context_schema=False,
                                finish=("commit_run", commit_run)).compile(name="convengine"))


# --- chains --------------------------------------------------------------------------------------
# ``chain`` in langgraph.json: the chain CONVENGINE_STUDIO_CHAIN (default: the first) of the pack
# CONVENGINE_STUDIO_CHAIN_PACK (default: examples/chains_approvals.yaml), on its own database
# (CONVENGINE_STUDIO_CHAIN_DATABASE_URL, default sqlite:///convengine-chains.db: importing it must not
# replace the turn graph's pack). A Studio thread is a chain run (input: ``{"input": {"order": "A1",
# "amount": 300}}``): its steps are persisted in
# ce_chain_run_step and audited like any run's, a human step is an interrupt Studio resumes, and the
# thread's checkpoints are Studio's own.

_chain_engine: Engine | None = None
_chain_runs: OrderedDict[str, ChainContext] = OrderedDict()


def _chain_pack() -> Path:
    return Path(os.environ.get("CONVENGINE_STUDIO_CHAIN_PACK") or Path(default_pack()).with_name("chains_approvals.yaml"))


async def _open_chain_engine() -> Engine:
    global _chain_engine
    if _chain_engine is None:
        url = os.environ.get("CONVENGINE_STUDIO_CHAIN_DATABASE_URL") or "sqlite:///convengine-chains.db"
        _chain_engine = await Engine.aopen(url, **await asyncio.to_thread(pack_options, _chain_pack()))
    return _chain_engine


async def studio_chain_context(code: str) -> ChainContext:
    """The context of the current Studio run of chain ``code`` (one chain run per Studio thread)."""
    configurable = get_config().get("configurable") or {}
    thread = str(configurable.get("thread_id") or "")
    if thread not in _chain_runs:
        engine = await _open_chain_engine()
        _chain_runs[thread] = await Chains(engine, worker="studio").studio_context(code, thread)
        while len(_chain_runs) > MAX_OPEN_RUNS:
            _chain_runs.popitem(last=False)
    return _chain_runs[thread]


def _studio_chain() -> ChainGraph | None:
    try:
        found = chains_of(validate_pack(_chain_pack()))
    except ConvEngineError as exc:
        logging.getLogger(__name__).warning("Studio draws no chain: %s", exc)
        return None
    code = os.environ.get("CONVENGINE_STUDIO_CHAIN") or next(iter(sorted(found)), None)
    if code is None or code not in found:
        return None
    return build_chain_graph(found[code], studio_chain_context).compile(name=f"chain:{code}")


chain = _studio_chain()
