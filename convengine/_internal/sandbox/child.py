"""The program the sandboxed interpreter runs (``python -I -S -c SOURCE``), as source text.

In order, before any of the script's code runs: read the request from stdin (the script, its
scopes, the limits and the seccomp program), lower the process's resource limits, load the
seccomp program (kernel-enforced from then on: no file can be opened, no socket, process, signal
or ``ptrace``), and install an audit hook as a second layer. Then it runs the script and writes one
JSON object to stdout: ``session``, ``flow``, ``user``, ``stdout`` (the script's ``print()`` output, capped)
and ``error``. Nothing here is imported by the engine; :mod:`convengine._internal.sandbox.runner`
passes :data:`SOURCE` on the command line.
"""

from __future__ import annotations

SOURCE = r'''
import sys, json, math, re, io, resource, ctypes
_data = json.loads(sys.stdin.buffer.read())
_out = sys.stdout
for _name, _value in _data["limits"]:
    resource.setrlimit(getattr(resource, _name), (_value, _value))
def _seccomp(program):
    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
    libc = ctypes.CDLL(None, use_errno=True)
    # PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP with SECCOMP_MODE_FILTER
    return libc.prctl(38, 1, 0, 0, 0) == 0 and libc.prctl(22, 2, ctypes.byref(_Prog(len(program) // 8, program)), 0, 0) == 0
if _data["seccomp"] and not _seccomp(bytes.fromhex(_data["seccomp"])):
    _out.write(json.dumps({"error": "SandboxError: the seccomp filter could not be loaded", "stdout": ""}))
    _out.flush()
    sys.exit(0)
del _seccomp, ctypes, sys.modules["ctypes"]
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
_error = None
_scope = {"session": _data["session"], "user": _data["user"], "flow": _data["flow"],
          "workspace": _data.get("workspace") or {}, "params": _data.get("params") or {},
          "tool_response": _data["tool_response"], "json": json, "math": math, "re": re,
          "__builtins__": __builtins__}
try:
    _code = compile(_data["code"], "<python node>", "exec")
except BaseException as _exc:
    _code, _error = None, type(_exc).__name__ + ": " + str(_exc)[:500]
sys.stdout = _buf
sys.addaudithook(_hook)
if _code is not None:
    try:
        exec(_code, _scope)
    except BaseException as _exc:
        _error = type(_exc).__name__ + ": " + str(_exc)[:500]
sys.stdout = _out
try:
    _result = json.dumps({"session": _scope["session"], "flow": _scope["flow"], "user": _scope["user"], "stdout": _buf.getvalue()[-_data["max_out"]:],
                          "error": _error}, default=str)
except BaseException as _exc:
    _result = json.dumps({"error": "the script left values JSON cannot hold: " + str(_exc)[:200],
                          "stdout": _buf.getvalue()[-_data["max_out"]:]})
_out.write(_result)
_out.flush()
'''
