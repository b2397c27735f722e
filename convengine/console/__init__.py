"""The web console: simulator, conversation browser, turn view, configuration and test export.

Everything here reads what the engine already records (audit events, the LLM call log, the
loaded configuration); the HTTP side lives in :mod:`convengine.api.console_routes`.
"""
