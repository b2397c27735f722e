"""Log setup of ``convengine serve``: uvicorn's and convengine's records, all redacted.

A filter on a handler sees every record the handler writes, whichever logger made it, so the
server's handlers (uvicorn's ``default`` and ``access``, and one for the ``convengine`` loggers)
all carry :class:`~convengine.security.redact.RedactingFilter`: a secret in an error, a startup
traceback or a request line is masked before it is written.
"""

from __future__ import annotations

import copy
from typing import Any

from convengine.security.redact import install_log_redaction

FILTER_NAME = "convengine_redact"


def server_log_config(level: str = "info") -> dict[str, Any]:
    """uvicorn's logging config with redacting handlers, plus a stderr handler for ``convengine``."""
    from uvicorn.config import LOGGING_CONFIG  # optional dependency (the ``api`` extra)

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {**config.get("filters", {}),
                         FILTER_NAME: {"()": "convengine.security.redact.RedactingFilter"}}
    for handler in config["handlers"].values():
        handler["filters"] = [*handler.get("filters", []), FILTER_NAME]
    config["loggers"]["convengine"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    install_log_redaction()
    return config
