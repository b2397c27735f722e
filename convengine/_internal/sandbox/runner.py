"""Run one python node's script behind the host's boundary, bounded in time and in output.

The request goes in on stdin; the reply is read by a bounded reader that keeps draining the pipe
(a script flooding its real stdout never blocks the turn) and kills the script's process group
past :data:`MAX_REPLY_BYTES` or the wall-clock limit. Every way out ends within ``timeout_s`` plus
:data:`REAP_S`, on any event loop, with a result whose ``error`` says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import tempfile
from typing import Any, Literal

from convengine._internal import numbers
from convengine._internal.sandbox import host
from convengine._internal.working import waiting_outside

SandboxMode = Literal["strict", "weak"]
STRICT: SandboxMode = "strict"
WEAK: SandboxMode = "weak"
MAX_REPLY_BYTES = 8 * 1024 * 1024
"""What a script may write back (its scopes, its print() output) on top of twice what it was handed."""
MAX_STATE_BYTES = 8 * 1024 * 1024
"""What a script's ``session`` and ``flow`` may hold as JSON once it ran (more only if it was handed more)."""
KEPT_SCOPES = ("session", "flow", "user")
"""The scopes a script's changes come back from (``workspace`` and ``params`` are read-only)."""
MAX_REPLY_DEPTH = 64
"""How deeply the script's answer may nest (its ``session`` and ``flow`` values count from level 3)."""
REAP_S = 2.0
"""How long a killed script's pipe is drained and its process awaited before the turn moves on."""
_CHUNK = 64 * 1024


class _TooMuchOutput(Exception):
    pass


async def run_script(code: str, inputs: dict[str, Any], *, timeout_s: float, memory_mb: int,
                     max_output_chars: int, mode: SandboxMode = STRICT) -> dict[str, Any]:
    """Run ``code``; returns ``session``, ``flow``, ``user``, ``stdout`` and ``error`` (None when it succeeded).

    ``mode`` ``strict`` refuses to run (a ``SandboxError``) where :func:`host.boundary` reports a
    problem; ``weak`` runs with what the host has (see docs/security.md).
    """
    box = host.boundary()
    if box.problem and mode != WEAK:
        return {"error": f"SandboxError: python nodes need an operating-system sandbox: {box.problem}", "stdout": ""}
    request = json.dumps({**inputs, "code": code, "max_out": max_output_chars, "seccomp": box.seccomp.hex(),
                          "limits": _limits(memory_mb, timeout_s, confined=bool(box.bwrap))}, default=str).encode()
    cap = MAX_REPLY_BYTES + 2 * len(request)
    # in bwrap the script's working directory is its empty root; a plain child gets an empty temporary one
    where = contextlib.nullcontext("/") if box.bwrap else tempfile.TemporaryDirectory(prefix="ce-flow-py-")
    with where as home:
        proc = await asyncio.create_subprocess_exec(
            *host.child_argv(box.bwrap), cwd=home, env={}, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
        try:
            async with waiting_outside():  # the turn's work slot is lent while the script runs
                out = await asyncio.wait_for(_exchange(proc, request, cap), timeout_s)
        except TimeoutError:
            return {"error": f"TimeoutError: the script ran longer than {timeout_s:g} s and was stopped",
                    "stdout": "", "timedOut": True}
        except _TooMuchOutput:
            return {"error": f"OutputError: the script wrote more than {cap} bytes and was stopped", "stdout": ""}
        finally:
            await _stop(proc)
    return _bounded(_reply(out, proc.returncode), inputs)


def _limits(memory_mb: int, timeout_s: float, *, confined: bool) -> list[tuple[str, int]]:
    """Resource limits the child sets on itself before loading the script (the kernel enforces them)."""
    memory = memory_mb * 1024 * 1024
    cpu = math.ceil(timeout_s) + 1
    limits = [("RLIMIT_AS", memory), ("RLIMIT_CPU", cpu), ("RLIMIT_FSIZE", 0), ("RLIMIT_NOFILE", 16),
              ("RLIMIT_CORE", 0)]
    # outside a PID namespace the child runs as the server's user: no new process for that user either
    return limits if confined else [*limits, ("RLIMIT_NPROC", 0)]


async def _exchange(proc: asyncio.subprocess.Process, request: bytes, cap: int) -> bytes:
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(request)
        await proc.stdin.drain()
        proc.stdin.close()
    chunks: list[bytes] = []
    size = 0
    while chunk := await proc.stdout.read(_CHUNK):
        size += len(chunk)
        if size > cap:
            raise _TooMuchOutput
        chunks.append(chunk)
    return b"".join(chunks)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Kill the script's process group, drain its pipe to the end and reap it, within :data:`REAP_S`."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)

    async def drain_and_wait() -> None:
        assert proc.stdout is not None
        while await proc.stdout.read(_CHUNK):
            pass
        await proc.wait()

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(drain_and_wait(), REAP_S)


def _reply(out: bytes, returncode: int | None) -> dict[str, Any]:
    """The script's answer; its bytes are the script's to choose, so they are read like untrusted input."""
    try:
        result = json.loads(out.decode("utf-8", "replace") or "null")
    except RecursionError:
        result = _TOO_DEEP
    except ValueError:
        result = None
    if result is _TOO_DEEP or _depth(result) > MAX_REPLY_DEPTH:
        return {"error": f"ValueError: the script's values nest deeper than {MAX_REPLY_DEPTH} levels", "stdout": ""}
    if not isinstance(result, dict):
        why = "killed (memory or CPU limit)" if returncode is not None and returncode < 0 else f"exit status {returncode}"
        return {"error": f"ProcessError: the script's process ended without a result ({why})", "stdout": ""}
    return result


_TOO_DEEP = object()


def _bounded(result: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Refuse values that grew past :data:`MAX_STATE_BYTES` (or past what the script was handed, when more):
    they are kept in the conversation, so a script doubling them every turn would grow it without end."""
    if result.get("error"):
        return result
    if (big := numbers.first_out_of_range([result.get(k) for k in KEPT_SCOPES])) is not None:
        return {"error": f"ValueError: the script left {numbers.shown(big)}, past {numbers.RANGE_TEXT}",
                "stdout": result.get("stdout", "")}
    handed = len(json.dumps([inputs.get(k) for k in KEPT_SCOPES], default=str))
    returned = len(json.dumps([result.get(k) for k in KEPT_SCOPES], default=str))
    if returned > max(MAX_STATE_BYTES, handed):
        return {"error": f"OutputError: the script's session, flow and user values hold {returned} bytes as JSON, more than "
                         f"{max(MAX_STATE_BYTES, handed)}", "stdout": result.get("stdout", "")}
    return result


def _depth(value: object) -> int:
    """How deeply ``value`` (parsed JSON) nests, without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            todo.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
