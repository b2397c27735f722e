"""The release artefacts: ``python -m build`` makes a wheel and an sdist that pass ``twine check``, and
the wheel installed into a fresh virtual environment with no extras runs the first hour of a new user:
``convengine --version``, ``convengine init``, ``convengine test`` on what init made, and a chat turn.

No network: the build runs without isolation (hatchling comes with the dev extras), and the fresh
environment gets the base dependencies, and only those, from this environment's site-packages: the
files of every distribution in the closure of convengine's base requirements are linked into one
folder that the new environment's ``.pth`` file names. An import of anything outside the base
(FastAPI, psycopg, langchain-openai...) fails there as it would after ``pip install convengine``.
"""

from __future__ import annotations

import email
import os
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import convengine

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist lines (its METADATA)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name)).get_all("Requires-Dist") or []


def base_closure(requirements: list[str]) -> dict[str, metadata.Distribution]:
    """The base requirements (no extras of convengine) and theirs, with the extras they ask for
    (``sqlalchemy[asyncio]``), as installed here (markers evaluated)."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        found.setdefault(name, metadata.distribution(requirement.name))
        for wanted in ("", *requirement.extras):
            if (name, wanted) not in seen:
                seen.add((name, wanted))
                todo.extend((Requirement(r), wanted) for r in found[name].requires or [])
    return found


def link_files(dists: dict[str, metadata.Distribution], into: Path) -> int:
    """Symlink each distribution's installed files (its RECORD) under ``into``; the count linked."""
    count = 0
    for name, dist in dists.items():
        files = dist.files
        assert files is not None, f"{name} has no RECORD: cannot tell its files"
        for file in files:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue  # console scripts, bytecode
            target = into / file
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(Path(str(file.locate())).resolve())
                count += 1
    return count


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None,
        stdin: str = "") -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT, cwd=ROOT)
    yield out


def test_build_makes_a_wheel_and_an_sdist_that_pass_twine_check(dist: Path) -> None:
    wheels, sdists = list(dist.glob("convengine-*.whl")), list(dist.glob("convengine-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    checked = run(sys.executable, "-m", "twine", "check", "--strict", *wheels, *sdists, cwd=dist)
    assert checked.stdout.count("PASSED") == 2, checked.stdout


def test_the_wheel_without_extras_runs_init_test_and_chat(dist: Path, tmp_path: Path) -> None:
    home = tmp_path / "venv"
    venv.create(home, with_pip=False, symlinks=True)
    python = home / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path)
                .stdout.strip())
    (wheel,) = dist.glob("convengine-*.whl")
    base = tmp_path / "base-dependencies"
    assert link_files(base_closure(wheel_requirements(wheel)), base) > 100
    (site / "base-dependencies.pth").write_text(f"{base}\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel,
        cwd=tmp_path)

    env = {"PATH": f"{home / 'bin'}:{os.environ.get('PATH', '')}", "HOME": str(tmp_path)}
    missing = subprocess.run([python, "-c", "import fastapi"], capture_output=True, text=True, check=False)
    assert missing.returncode != 0  # no extras: the API's dependencies are not there
    cli = home / "bin" / "convengine"
    version = run(cli, "--version", cwd=tmp_path, env=env).stdout.strip()
    assert version == f"convengine {convengine.__version__}"

    run(cli, "init", "desk", cwd=tmp_path, env=env)
    tested = run(cli, "test", "desk", cwd=tmp_path, env=env)
    assert "4 passed, 0 failed" in tested.stdout
    chat = run(cli, "chat", "--url", "sqlite:///desk.db", "--pack", "desk/desk.yaml", cwd=tmp_path, env=env,
               stdin="hello\n")
    assert "bot> Hello! I can ask someone to call you back." in chat.stdout

    demo = run(cli, "chat", "--url", "sqlite:///demo.db", cwd=tmp_path, env=env, stdin="where is my order\n")
    assert "should arrive tomorrow" in demo.stdout  # the bundled support desk, from the wheel

    serve = subprocess.run([cli, "serve", "--url", "sqlite:///desk.db", "--port", "1"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300, check=False)
    assert serve.returncode == 2 and "pip install 'convengine[api]'" in serve.stderr, serve.stderr
