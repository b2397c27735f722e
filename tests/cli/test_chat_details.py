"""``convengine chat`` as a newcomer meets it: the trace's times, piped transcripts, Ctrl-C, unknown
commands, warnings, and ``export-test`` finding the pack's tasks as ``chat`` does."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.conftest import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CONVENGINE_DATABASE_URL", None)
    env.pop("COLUMNS", None)  # piped output, as in a shell: rich falls back to 80 columns
    return subprocess.run([sys.executable, "-m", "convengine.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env, check=False)


def test_trace_times_are_sub_millisecond_with_a_turn_total(tmp_path: Path) -> None:
    done = cli("chat", "--url", f"sqlite:///{tmp_path / 't.db'}", "--llm", "none", "--trace",
               stdin="hello\nwhere is my order\n")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if re.match(r"^[a-z_]+\s+\d+\.\d{3}\b", line)]
    times = [float(row[1]) for row in rows]
    assert len(times) > 20 and all(t >= 0 for t in times)
    assert any(0 < t < 1 for t in times)  # fast steps show their fraction of a millisecond, not 0.00
    totals = [float(line.split()[-1]) for line in done.stdout.splitlines() if line.startswith("turn total")]
    assert len(totals) == 2 and all(total >= max(times[:5]) for total in totals)


def test_piped_transcripts_are_neither_wrapped_nor_padded(tmp_path: Path) -> None:
    long_message = "my order " + " ".join(f"word{i}" for i in range(40))  # far beyond 80 columns
    done = cli("chat", "--url", f"sqlite:///{tmp_path / 'w.db'}", "--llm", "none", "--trace",
               stdin=f"{long_message}\nhelp\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"you> {long_message}" in lines
    assert any(len(line) > 100 for line in lines)  # the help answer is one line too
    assert [line for line in lines if line != line.rstrip()] == []

    imported = cli("pack", "import", str(EXAMPLES / "support_desk.yaml"), "--url",
                   f"sqlite:///{tmp_path / 'a-long-folder-name-for-a-database-file-that-runs-on.db'}")
    assert imported.returncode == 0 and len(imported.stdout.splitlines()) == 1, imported.stdout


def test_an_unknown_command_is_answered_not_sent(tmp_path: Path) -> None:
    done = cli("chat", "--url", f"sqlite:///{tmp_path / 'u.db'}", "--llm", "none",
               stdin="hello\n/bogus\n//help\n")
    assert done.returncode == 0, done.stderr
    assert "unknown command /bogus; /help lists the commands" in done.stdout
    assert done.stdout.count("bot>") == 2  # hello, and "/help" sent as a message through //
    assert "(turn 2)" in done.stdout and "(turn 3)" not in done.stdout


def test_a_pack_warning_is_printed_once(tmp_path: Path) -> None:
    pack = tmp_path / "p.yaml"
    pack.write_text(yaml.safe_dump({
        "ce_intent": [{"intent_code": "A", "description": "a"}],
        "ce_response": [{"state_code": "ANY", "exact_text": "hi {{nobody}}"}],
    }))
    done = cli("chat", "--url", f"sqlite:///{tmp_path / 'p.db'}", "--pack", str(pack), "--llm", "none",
               stdin="hello\n")
    assert done.stderr.count("'nobody' is not provided") == 1, done.stderr


def test_ctrl_c_ends_the_line_prints_the_conversation_and_exits_130(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "convengine.cli", "chat", "--url",
                                f"sqlite:///{tmp_path / 'c.db'}", "--llm", "none"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write("hello\n")
        process.stdin.flush()
        deadline = time.monotonic() + 60
        seen = ""
        while "(turn 1)" not in seen and time.monotonic() < deadline:
            seen += process.stdout.readline()
        assert "(turn 1)" in seen
        process.send_signal(signal.SIGINT)  # waiting for the next line, as at the prompt
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert re.search(r"^conversation [0-9a-f-]{36} \(continue it with --conversation", out, re.MULTILINE), out
    assert re.search(r"(^|\n)\nconversation ", out), out  # the interrupted line (a terminal's prompt) is ended


def test_export_test_finds_the_tasks_beside_the_pack_as_chat_does(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    chat = cli("chat", "--url", url, "--llm", "none", stdin="cancel my order\nit arrived damaged\nyes\n")
    assert chat.returncode == 0 and "is cancelled" in chat.stdout, chat.stdout + chat.stderr
    conversation = re.search(r"^conversation ([0-9a-f-]{36})", chat.stdout, re.MULTILINE)
    assert conversation is not None
    output = tmp_path / "replay.conv.yaml"
    exported = cli("export-test", conversation.group(1), "--url", url, "--pack",
                   str(EXAMPLES / "support_desk.yaml"), "-o", str(output), cwd=ROOT)
    assert exported.returncode == 0, exported.stderr
    assert "orderTasks" not in exported.stderr and "not registered" not in exported.stderr
    assert cli("test", str(output)).returncode == 0
