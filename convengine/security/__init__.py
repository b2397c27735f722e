"""Security helpers shared by the engine: secret redaction, environment references, log hygiene."""
