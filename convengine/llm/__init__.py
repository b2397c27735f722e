"""The LLM gateway (named, audited, bounded calls) over LangChain chat models or ScriptedLLM (the offline
test double), spend accounting and prompt rendering. The call sites themselves are steps, in nodes/."""

from convengine.llm.gateway import CALL_SITES, LlmGateway, as_gateway
from convengine.llm.scripted import Delay, LlmCall, ScriptedLLM, UnscriptedCallError

__all__ = ["CALL_SITES", "Delay", "LlmCall", "LlmGateway", "ScriptedLLM", "UnscriptedCallError", "as_gateway"]
