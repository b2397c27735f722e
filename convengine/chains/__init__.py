"""Chains: durable runs of primitive steps (assistant, agent, webhook, human, decide, notify,
schedule), defined in the ``ce_chain`` / ``ce_chain_step`` tables; see docs/chains.md."""

from convengine.chains.runtime import ChainRun, Chains

__all__ = ["ChainRun", "Chains"]
