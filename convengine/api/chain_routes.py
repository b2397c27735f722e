"""HTTP endpoints of chains: start a run (any authenticated caller: the inbound trigger), list and read
runs (a caller's own; every run with the ``chains`` scope or as admin) and resume a run waiting for a
person (the ``chains`` scope or admin)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, Field

from convengine.api.auth import CHAINS_SCOPE
from convengine.api.body import DepthCheckedRoute
from convengine.api.refusals import ApiRefusal
from convengine.api.routes import REFUSALS, Caller, CallerDep
from convengine.api.schemas import ErrorBody
from convengine.catalog.errors import ErrorCode
from convengine.chains import Chains
from convengine.chains.model import chains_of

router = APIRouter(route_class=DepthCheckedRoute, tags=["chains"])
RunId = Annotated[str, Path(description="The chain run's UUID.", json_schema_extra={"format": "uuid"})]
FORBIDDEN = {**REFUSALS, 403: {"model": ErrorBody}}


async def chains_of_app(request: Request) -> Chains:
    return request.app.state.chains


ChainsDep = Annotated[Chains, Depends(chains_of_app)]


def _reader(caller: Caller) -> str | None:
    """Whose runs a caller reads: every run with the chains scope, else its own (as for conversations)."""
    return None if caller.principal.may(CHAINS_SCOPE) else caller.owner


async def operator_of(caller: CallerDep) -> Caller:
    if not caller.principal.may(CHAINS_SCOPE):
        raise ApiRefusal(403, ErrorCode.FORBIDDEN, "resuming a chain run needs a key with the chains scope "
                         "(settings api.auth.chain_keys) or an admin key")
    return caller


OperatorDep = Annotated[Caller, Depends(operator_of)]


class StartRunRequest(BaseModel):
    chain: str = Field(..., min_length=1, max_length=200, description="The chain to run (ce_chain.chain_code).")
    input: dict[str, Any] | None = Field(None, description="The run's input (templates and expressions: `input`).")
    conversationId: str | None = Field(None, description="The conversation the run belongs to (new when absent).")


class ResumeRequest(BaseModel):
    answer: Any = Field(None, description="The person's answer (any JSON): the human step's `answer`.")


@router.get("/api/v1/chains", responses=REFUSALS)
async def chain_list(chains: ChainsDep, _: CallerDep) -> list[dict[str, Any]]:
    """The enabled chains of the configuration served now, with their steps in order."""
    return [{"chain": c.code, "description": c.description,
             "steps": [{"step": s.step_id, "type": s.step_type} for s in c.steps]}
            for c in chains_of(chains.engine.snapshot).values()]


@router.post("/api/v1/chains/runs", responses={**REFUSALS, 413: {"model": ErrorBody}})
async def start_run(body: StartRunRequest, chains: ChainsDep, caller: CallerDep) -> dict[str, Any]:
    """Start a run of ``chain`` (owned by the caller) and run it until it pauses or ends."""
    run = await chains.engine.portal.acall(chains.astart(body.chain, body.input, conversation_id=body.conversationId,
                                                         owner=caller.owner, trigger="http"))
    return run.to_dict()


@router.get("/api/v1/chains/runs", responses=REFUSALS)
async def run_list(chains: ChainsDep, caller: CallerDep, status: str | None = None, chain: str | None = None,
                   limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[dict[str, Any]]:
    """Runs, newest first: the caller's own, or every run with the chains scope."""
    runs = await chains.engine.portal.acall(chains.aruns(owner=_reader(caller), status=status, chain=chain,
                                                         limit=limit))
    return [r.to_dict() for r in runs]


@router.get("/api/v1/chains/runs/{run_id}", responses=REFUSALS)
async def run_view(run_id: RunId, chains: ChainsDep, caller: CallerDep) -> dict[str, Any]:
    """A run with every step it took (404 for a run the caller may not read)."""
    return (await chains.engine.portal.acall(chains.aget(run_id, _reader(caller)))).to_dict()


@router.post("/api/v1/chains/runs/{run_id}/resume", responses=FORBIDDEN)
async def resume_run(run_id: RunId, body: ResumeRequest, chains: ChainsDep, _: OperatorDep) -> dict[str, Any]:
    """Resume a run waiting at a ``human`` step with the person's answer (the chains scope or admin)."""
    return (await chains.engine.portal.acall(chains.aresume(run_id, body.answer))).to_dict()
