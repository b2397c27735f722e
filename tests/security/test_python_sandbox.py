"""Attacks on the python node's sandbox from inside the script.

Each attack first switches the in-process audit hook off (the two ways an outside review found:
emptying its block list, or swapping its code) and then goes for what the hook was guarding: the
server's files and environment, the network, other processes, new processes, raised limits. The
operating-system boundary (namespaces and seccomp, docs/security.md) must stop every one.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convengine._internal.sandbox import run_script
from convengine._internal.sandbox.runner import REAP_S

pytestmark = pytest.mark.asyncio
SECRET = "top-secret-server-file"
ESCAPES = {
    "empty_block_list": "re.enum.sys.modules['__main__']._BLOCKED = ()\n",
    "swap_hook_code": "re.enum.sys.modules['__main__']._hook.__code__ = (lambda e, a: None).__code__\n",
}
POSIX = "p = re.enum.sys.modules['posix']\n"


async def script(code: str, timeout_s: float = 3.0) -> dict[str, Any]:
    return await run_script(code, {"session": {"name": "x"}, "user": {}, "flow": {}, "tool_response": None},
                            timeout_s=timeout_s, memory_mb=256, max_output_chars=2000)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(SECRET)
    return path


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the server's user the script must not be able to signal."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def escaped(escape: str, attack: str) -> str:
    return ESCAPES[escape] + attack


@pytest.mark.parametrize("escape", sorted(ESCAPES))
@pytest.mark.parametrize("attack", [
    "session['leak'] = open({path!r}).read()",
    POSIX + "session['leak'] = p.read(p.open({path!r}, 0), 100).decode()",
    # an object graph walk from object's subclasses to a module's globals, to sys and posix
    ("g = [c.__init__.__globals__ for c in ().__class__.__base__.__subclasses__()\n"
    "     if 'sys' in getattr(c.__init__, '__globals__', {{}})][0]\n"
    "p = g['sys'].modules['posix']\nsession['leak'] = p.read(p.open({path!r}, 0), 100).decode()"),
    # gc finds the posix module without importing anything
    ("gc = __import__('gc')\n"
    "p = [o for o in gc.get_objects() if type(o).__name__ == 'module' and o.__name__ == 'posix'][0]\n"
    "session['leak'] = p.read(p.open({path!r}, 0), 100).decode()"),
    # native code: libc's open and read
    ("ct = __import__('ctypes')\nlibc = ct.CDLL(None)\nbuf = ct.create_string_buffer(200)\n"
    "libc.read(libc.open({path!r}.encode(), 0), buf, 200)\nsession['leak'] = buf.value.decode()"),
])
async def test_a_script_that_switches_the_hook_off_still_cannot_read_the_servers_files(
        escape: str, attack: str, secret_file: Path) -> None:
    result = await script(escaped(escape, attack.format(path=str(secret_file))))
    assert result["error"], result
    assert SECRET not in repr(result)


@pytest.mark.parametrize("target", ["/etc/passwd", "/proc/{ppid}/environ", "/proc/self/environ", "{cwd}/pyproject.toml"])
async def test_system_files_the_servers_environment_and_working_dir_are_out_of_reach(target: str) -> None:
    path = target.format(ppid="' + str(p.getppid()) + '", cwd=Path.cwd())
    result = await script(escaped("empty_block_list", POSIX + f"session['leak'] = open('{path}').read()"))
    assert result["error"], result
    for marker in ("root:", "PATH=", "[project]"):
        assert marker not in repr(result)


async def test_no_socket_reaches_the_server_side() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        result = await script(escaped("swap_hook_code", f"s = __import__('_socket').socket()\n"
                                                        f"s.connect(('127.0.0.1', {port}))\ns.send(b'leak')"))
        with pytest.raises(TimeoutError):
            listener.accept()
    assert result["error"], result


@pytest.mark.parametrize("attack", [
    POSIX + "p.kill({pid}, 9)",
    POSIX + "sig = __import__('signal')\np.killpg({pid}, sig.SIGKILL)",
])
async def test_other_processes_cannot_be_signalled(attack: str, victim: subprocess.Popen[bytes]) -> None:
    result = await script(escaped("empty_block_list", attack.format(pid=victim.pid)))
    assert result["error"], result
    assert victim.poll() is None  # still running


@pytest.mark.parametrize("attack", [
    POSIX + "pid = p.fork()\nif pid == 0:\n    p._exit(0)\nsession['forked'] = pid",
    POSIX + "session['status'] = p.system('echo pwned > {marker}')",
    POSIX + "session['pid'] = p.posix_spawn('/bin/sh', ['sh', '-c', 'echo pwned > {marker}'], {{}})",
])
async def test_no_new_process(attack: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    result = await script(escaped("swap_hook_code", attack.format(marker=marker)))
    session = result.get("session") or {}
    assert "forked" not in session and "pid" not in session, result
    assert session.get("status") != 0, result  # system() could not start a shell
    assert not marker.exists()


async def test_no_descriptor_beyond_its_pipes_is_inherited(tmp_path: Path) -> None:
    log = (tmp_path / "server.log").open("w")  # a descriptor the server holds open
    try:
        code = POSIX + ("found = []\nfor fd in range(3, 1024):\n    try:\n        p.write(fd, b'x')\n"
                        "        found.append(fd)\n    except OSError:\n        pass\nsession['written'] = found")
        result = await script(escaped("empty_block_list", code))
    finally:
        log.close()
    assert result["error"] is None and result["session"]["written"] == []
    assert (tmp_path / "server.log").read_text() == ""


async def test_raising_its_own_limits_is_refused_so_a_memory_bomb_stays_bounded() -> None:
    code = ("r = __import__('resource')\nr.setrlimit(r.RLIMIT_AS, (-1, -1))\n"
            "blob = bytearray(1536 * 1024 * 1024)\nsession['allocated'] = len(blob)")
    result = await script(escaped("swap_hook_code", code))
    assert result["error"], result
    assert "allocated" not in result.get("session", {})


async def test_a_cpu_loop_that_lifts_its_cpu_limit_is_still_stopped_on_time() -> None:
    import time

    code = ("r = __import__('resource')\ntry:\n    r.setrlimit(r.RLIMIT_CPU, (-1, -1))\nexcept Exception:\n    pass\n"
            "while True:\n    pass")
    started = time.monotonic()
    result = await script(escaped("empty_block_list", code), timeout_s=1.0)
    assert time.monotonic() - started < 1.0 + REAP_S + 1.0
    assert result["error"].startswith("TimeoutError")


async def test_the_script_runs_as_an_unprivileged_user_that_sees_no_other_process() -> None:
    result = await script(escaped("empty_block_list", POSIX + "session['uid'] = p.getuid()\n"
                                                              "session['pids'] = p.listdir('/proc')"))
    assert result["error"], result  # no /proc to list
    allowed = await script(POSIX + "session['uid'] = p.getuid()")
    assert allowed["error"] is None and allowed["session"]["uid"] != 0
