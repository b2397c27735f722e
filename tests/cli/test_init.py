"""``convengine init`` makes a pack that passes its own conversation tests at once; ``--version``."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

import convengine
from convengine.cli.app import app

runner = CliRunner()


def test_version_prints_the_package_version() -> None:
    done = runner.invoke(app, ["--version"])
    assert done.exit_code == 0
    assert done.output.strip() == f"convengine {convengine.__version__}"


def test_init_makes_a_pack_its_tasks_tests_and_readme_that_pass_at_once(tmp_path: Path) -> None:
    folder = tmp_path / "Front-Desk bot"
    made = runner.invoke(app, ["init", str(folder)])
    assert made.exit_code == 0, made.output
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["README.md", "front_desk_bot.conv.yaml", "front_desk_bot.yaml", "front_desk_bot_tasks.py"]
    assert "convengine test" in (folder / "README.md").read_text()

    validated = runner.invoke(app, ["pack", "validate", str(folder / "front_desk_bot.yaml")])
    assert validated.exit_code == 0, validated.output
    assert "warning" not in validated.output  # the task the pack calls is defined beside it

    tested = runner.invoke(app, ["test", str(folder)])
    assert tested.exit_code == 0, tested.output
    assert "4 passed, 0 failed" in tested.output


def test_the_made_pack_runs_its_python_task_in_chat(tmp_path: Path) -> None:
    assert runner.invoke(app, ["init", str(tmp_path), "--name", "desk"]).exit_code == 0
    chat = runner.invoke(app, ["chat", "--url", f"sqlite:///{tmp_path / 'desk.db'}", "--pack",
                               str(tmp_path / "desk.yaml"), "--llm", "none"], input="call me back\nyes\n")
    assert chat.exit_code == 0, chat.output
    assert "your callback reference is CB-0001" in chat.output


def test_init_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "desk.yaml").write_text("mine\n")
    done = runner.invoke(app, ["init", str(tmp_path), "--name", "desk"])
    assert done.exit_code == 2
    assert "not overwriting" in done.output and (tmp_path / "desk.yaml").read_text() == "mine\n"
    assert not (tmp_path / "desk_tasks.py").exists()
