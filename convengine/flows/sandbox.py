"""python nodes: a script run in a separate, isolated process.

The child is ``python -I`` (no environment, user site or current directory on the path) in an
empty temporary directory with an empty environment, under ``resource`` limits (address space,
CPU seconds, no file writes, few descriptors), killed with its process group at the wall-clock
limit. Before the script runs, the child installs an audit hook that refuses opening files,
sockets, starting processes, forking, loading native code and importing any module not already
loaded, so the script sees only what is passed in on stdin: ``session``, ``user``, ``flow`` and
``tool_response`` (JSON), plus ``json``, ``math`` and ``re``. Changes to ``session`` and ``flow``
come back as JSON on stdout with the script's ``print()`` output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from typing import Any

from convengine.config_loader.records import FlowNodeRecord
from convengine.flows import vocab
from convengine.flows.catalog import Flow
from convengine.flows.walk import NEXT, Result, Walk

CHILD = r'''
import sys, json, math, re, io
_data = json.loads(sys.stdin.read())
_out = sys.stdout
_buf = io.StringIO()
_BLOCKED = ("open", "os.", "socket.", "subprocess.", "ctypes.", "import", "compile", "signal.", "resource.",
            "shutil.", "mmap.", "sys._getframe", "sys.addaudithook", "sys._current_frames", "syslog.", "fcntl.",
            "msvcrt.", "winreg.", "webbrowser.", "urllib.", "http.", "ftplib.", "smtplib.", "telnetlib.", "glob.",
            "pathlib.", "tempfile.", "sqlite3.", "marshal.", "pickle.", "cpython.", "code.__new__", "function.__new__")
def _hook(event, args):
    if event == "exec" or event == "object.__setattr__":
        return
    if event.startswith(_BLOCKED):
        raise PermissionError("not allowed in a python node: " + event)
_code = compile(_data["code"], "<python node>", "exec")
_scope = {"session": _data["session"], "user": _data["user"], "flow": _data["flow"],
          "tool_response": _data["tool_response"], "json": json, "math": math, "re": re,
          "__builtins__": __builtins__}
sys.stdout = _buf
sys.addaudithook(_hook)
_error = None
try:
    exec(_code, _scope)
except BaseException as _exc:
    _error = type(_exc).__name__ + ": " + str(_exc)[:500]
sys.stdout = _out
try:
    _result = json.dumps({"session": _scope["session"], "flow": _scope["flow"], "stdout": _buf.getvalue()[-_data["max_out"]:],
                          "error": _error}, default=str)
except BaseException as _exc:
    _result = json.dumps({"error": "the script left values JSON cannot hold: " + str(_exc)[:200],
                          "stdout": _buf.getvalue()[-_data["max_out"]:]})
_out.write(_result)
_out.flush()
'''


def _limits(memory_mb: int, cpu_s: int) -> Any:
    def apply() -> None:
        import resource

        memory = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


async def run_script(code: str, inputs: dict[str, Any], *, timeout_s: float, memory_mb: int,
                     max_output_chars: int) -> dict[str, Any]:
    """Run ``code``; returns ``session``, ``flow``, ``stdout`` and ``error`` (None when it succeeded)."""
    data = json.dumps({**inputs, "code": code, "max_out": max_output_chars}, default=str).encode()
    with tempfile.TemporaryDirectory(prefix="ce-flow-py-") as home:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", "-c", CHILD, cwd=home, env={}, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_limits(memory_mb, max(1, int(timeout_s) + 1)))
        try:
            out, _ = await asyncio.wait_for(proc.communicate(data), timeout_s)
        except TimeoutError:
            _kill(proc.pid)
            await proc.wait()
            return {"error": f"TimeoutError: the script ran longer than {timeout_s:g} s and was stopped",
                    "stdout": "", "timedOut": True}
        finally:
            _kill(proc.pid)
    try:
        result = json.loads(out.decode("utf-8", "replace") or "null")
    except ValueError:
        result = None
    if not isinstance(result, dict):
        code_ = proc.returncode
        why = "killed (memory or CPU limit)" if code_ is not None and code_ < 0 else f"exit status {code_}"
        return {"error": f"ProcessError: the script's process ended without a result ({why})", "stdout": ""}
    return result


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_script_node(walk: Walk, flow: Flow, node: FlowNodeRecord, config: dict[str, Any]) -> Result:
    settings = walk.turn.settings.flows
    timeout = float(config.get("timeout_s") or settings.python_timeout_s)
    inputs = {"session": walk.variables, "user": dict(walk.turn.read_params()), "flow": walk.frame_vars(),
              "tool_response": walk.last_service}
    result = await run_script(str(config["code"]), inputs, timeout_s=min(timeout, 60.0),
                              memory_mb=int(config.get("memory_mb") or settings.python_memory_mb),
                              max_output_chars=settings.python_max_output_chars)
    audit = {"flow": flow.code, "node": node.node_id, "stdout": result.get("stdout", "")}
    if result.get("error"):
        walk.turn.audit(vocab.FLOW_SCRIPT_FAILED, {**audit, "error": result["error"]})
        return Result("next", vocab.ERROR)
    if isinstance(result.get("session"), dict):
        walk.data["vars"] = result["session"]
    if isinstance(result.get("flow"), dict) and walk.stack:
        walk.stack[-1]["vars"] = result["flow"]
    walk.turn.audit(vocab.FLOW_SCRIPT_RAN, audit)
    return NEXT
