"""A chain as the runtime sees it: its enabled steps in order, read from a configuration snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from convengine.catalog import chains as vocab
from convengine.catalog.errors import InvalidInputError
from convengine.config.records import ChainStepRecord
from convengine.config.snapshot import ConfigSnapshot


@dataclass(frozen=True, slots=True)
class Chain:
    code: str
    description: str | None
    steps: tuple[ChainStepRecord, ...]
    """Enabled steps by position, then step id: the order a run takes them in when no step jumps."""
    every_s: int | None = None
    """The scheduler starts a run every this many seconds (None: only callers start runs)."""

    def step(self, step_id: str) -> ChainStepRecord:
        return next(s for s in self.steps if s.step_id == step_id)

    @property
    def first(self) -> str:
        return self.steps[0].step_id

    def following(self, step_id: str) -> str:
        """The step after ``step_id`` in order (``end`` after the last)."""
        ids = [s.step_id for s in self.steps]
        at = ids.index(step_id)
        return ids[at + 1] if at + 1 < len(ids) else vocab.END

    def next_of(self, step: ChainStepRecord) -> str:
        """Where a step goes when it finished: its ``next``, else the following step."""
        return str(config_of(step).get("next") or self.following(step.step_id))


def config_of(step: ChainStepRecord) -> dict[str, Any]:
    return step.config if isinstance(step.config, dict) else {}


def chains_of(snapshot: ConfigSnapshot) -> dict[str, Chain]:
    """Every enabled chain of a snapshot (validated when it loaded)."""
    out = {}
    for chain in snapshot.chains:
        if not chain.enabled:
            continue
        steps = sorted((s for s in snapshot.chain_steps if s.enabled and s.chain_code == chain.chain_code),
                       key=lambda s: (s.position, s.step_id))
        if steps:
            out[chain.chain_code] = Chain(chain.chain_code, chain.description, tuple(steps), chain.every_s)
    return out


def chain_of(snapshot: ConfigSnapshot, code: object) -> Chain:
    """The enabled chain ``code``; InvalidInputError naming the chains there are otherwise."""
    found = chains_of(snapshot)
    if not isinstance(code, str) or code not in found:
        raise InvalidInputError(f"no enabled chain {str(code)[:100]!r}; the configuration has "
                                f"{', '.join(sorted(found)) or 'none'}", details={"chain": str(code)[:100]})
    return found[code]
