"""What this host offers a python node: the bubblewrap command line and the seccomp program.

The operating-system boundary is bubblewrap (``bwrap``) with new user, mount, PID, network, IPC,
UTS and cgroup namespaces: the script's interpreter sees only the system's read-only library
directories and Python's own installation (no ``/proc``, ``/dev``, ``/tmp``, home or working
directory), runs as uid 65534 with no capabilities, and dies with its parent. Inside, once the
interpreter has loaded what it needs, a seccomp allow-list (built here with libseccomp) leaves only
the system calls a running script needs: no ``open``, ``socket``, ``fork``/``clone``/``execve``,
``kill``, ``ptrace``... (each answered with ``EPERM``). :func:`boundary` checks once per process,
by running a real script through both, whether this host can set that up.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from convengine._internal.sandbox.child import SOURCE

ALLOWED_SYSCALLS = (
    "read", "write", "close", "fstat", "newfstatat", "lseek", "mmap", "munmap", "mprotect", "brk", "mremap",
    "madvise", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "exit", "exit_group", "getpid",
    "gettid", "getrandom", "clock_gettime", "clock_getres", "gettimeofday", "clock_nanosleep", "nanosleep", "futex",
    "getcwd", "sysinfo", "sched_yield", "getrusage", "times", "uname", "select", "pselect6", "poll", "ppoll",
    "getuid", "geteuid", "getgid", "getegid", "set_robust_list", "rseq", "restart_syscall", "fcntl",
)
"""What a script may still ask the kernel once the filter is loaded; anything else fails with EPERM."""
SANDBOX_UID = 65534
"""The uid (and gid) the script runs as inside its user namespace ("nobody")."""
SANDBOX_HOSTNAME = "sandbox"
"""The host name the script sees (its own UTS namespace): never the server's."""
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin")
"""Read-only in the sandbox when present (the interpreter's shared libraries)."""
PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class Boundary:
    """What :func:`boundary` found: the command prefix and seccomp program, or why they are missing."""

    bwrap: tuple[str, ...] = ()
    """The bubblewrap command line up to the interpreter ('' when bubblewrap is missing or broken)."""
    seccomp: bytes = b""
    """The seccomp BPF program ('' when libseccomp is missing)."""
    problem: str | None = None
    """Why this host cannot run a python node behind the full boundary; None when it can."""


def python_executable() -> str:
    return os.path.realpath(sys.executable)


def child_argv(prefix: tuple[str, ...] = ()) -> list[str]:
    return [*prefix, python_executable(), "-I", "-S", "-c", SOURCE]


def bwrap_prefix(bwrap: str) -> tuple[str, ...]:
    argv = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--clearenv",
            "--cap-drop", "ALL", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--chdir", "/",
            "--hostname", SANDBOX_HOSTNAME]
    for path in SYSTEM_DIRS:
        argv += ["--ro-bind-try", path, path]
    exe_prefix = os.path.dirname(os.path.dirname(python_executable()))
    for path in sorted({sys.base_prefix, sys.base_exec_prefix, exe_prefix}):
        argv += ["--ro-bind", path, path]
    return tuple(argv)


def seccomp_program() -> bytes:
    """The allow-list as a BPF program; raises (ImportError, OSError...) when libseccomp is missing."""
    import pyseccomp  # loads libseccomp.so.2: only when a python node needs it

    rules = pyseccomp.SyscallFilter(pyseccomp.ERRNO(1))  # EPERM
    for name in ALLOWED_SYSCALLS:
        rules.add_rule(pyseccomp.ALLOW, name)
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()


def _probe_run(argv: list[str], seccomp: bytes) -> str | None:
    """Run a trivial script the way a python node runs; None when it worked, else what went wrong."""
    request: dict[str, object] = {"code": "session['uid'] = re.enum.sys.modules['posix'].getuid()", "session": {}, "user": {},
               "flow": {}, "tool_response": None, "max_out": 100, "limits": [], "seccomp": seccomp.hex()}
    try:
        done = subprocess.run(argv, input=json.dumps(request).encode(), capture_output=True, env={},
                              timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        result = json.loads(done.stdout)
    except ValueError:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return tail[0][:300]
    if result.get("error") or result.get("session") != {"uid": SANDBOX_UID}:
        return str(result.get("error") or f"the script ran as uid {result.get('session')}")[:300]
    return None


@functools.cache
def boundary() -> Boundary:
    """What this host offers, checked once per process (a real script through bwrap and seccomp)."""
    missing: str | None = None
    try:
        seccomp = seccomp_program()
    except Exception as exc:  # noqa: BLE001 - ImportError, OSError (no libseccomp.so.2), a libseccomp error
        seccomp, missing = b"", f"libseccomp is not available ({type(exc).__name__}: {exc})"
    found = shutil.which("bwrap")
    if found is None:
        return Boundary(seccomp=seccomp, problem=missing or "bubblewrap (bwrap) is not installed")
    prefix = bwrap_prefix(found)
    if failed := _probe_run(child_argv(prefix), seccomp):
        return Boundary(seccomp=seccomp, problem=missing or f"bubblewrap cannot start a sandbox here: {failed}")
    return Boundary(bwrap=prefix, seccomp=seccomp, problem=missing)
