"""LLM call sites over LangChain chat models, and ScriptedLLM (the offline test double)."""

from convengine.llm.gateway import CALL_SITES, LlmGateway, as_gateway
from convengine.llm.scripted import Delay, LlmCall, ScriptedLLM, UnscriptedCallError

__all__ = ["CALL_SITES", "Delay", "LlmCall", "LlmGateway", "ScriptedLLM", "UnscriptedCallError", "as_gateway"]
