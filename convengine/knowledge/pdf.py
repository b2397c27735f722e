"""PDF text, extracted in a separate process with a deadline and a memory ceiling.

A small PDF can be a bomb: pages that all draw one huge (compressed) content stream make the
parser redo that work per page, and pypdf's extraction cannot be interrupted from inside. So the
bytes go to ``pdf_worker.py`` (stdlib and pypdf only) in a child process that limits its own
memory, checks the page count and the content every page draws before extracting anything, and
stops at the text limit; the parent kills it at ``max_seconds``. The child gets no secrets: its
environment holds only what Python needs to start (``-P``: the worker's own folder is not put on
its import path).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from convengine.catalog.errors import ConfigError, ErrorCode
from convengine.settings import KnowledgeIngestSettings

WORKER = Path(__file__).with_name("pdf_worker.py")
_KEPT_ENVIRONMENT = ("PATH", "PYTHONPATH", "PYTHONHOME", "SYSTEMROOT", "LANG", "LC_ALL", "TMPDIR")
_STDERR_CHARS = 500


def pdf_text(data: bytes, name: str, limits: KnowledgeIngestSettings) -> str:
    """The text of a PDF's pages, blank-line separated.

    Raises:
        ConfigError: pypdf is missing, the PDF cannot be read, or it passes one of ``limits``.
    """
    if importlib.util.find_spec("pypdf") is None:
        raise ConfigError(f"{name}: reading PDF needs pypdf (pip install 'convengine[knowledge]')",
                          code=ErrorCode.INVALID_INPUT)
    budget = {"max_text_chars": limits.max_text_chars, "max_pdf_pages": limits.max_pdf_pages,
              "max_pdf_content_bytes": limits.max_pdf_content_bytes, "max_pdf_memory_mb": limits.max_pdf_memory_mb}
    env = {key: os.environ[key] for key in _KEPT_ENVIRONMENT if key in os.environ}
    try:
        done = subprocess.run([sys.executable, "-P", str(WORKER), json.dumps(budget)], input=data, capture_output=True,
                              timeout=limits.max_seconds, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{name}: took longer than {limits.max_seconds:g} s to read "
                          "(knowledge.ingest.max_seconds)", code=ErrorCode.INVALID_INPUT) from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        reason = why[-1][:_STDERR_CHARS] if why else f"the PDF reader stopped (exit status {done.returncode})"
        raise ConfigError(f"{name}: {reason}", code=ErrorCode.INVALID_INPUT)
    return done.stdout.decode("utf-8", errors="replace")
