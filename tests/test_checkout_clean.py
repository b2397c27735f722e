"""Following the README and docs/ leaves the checkout as it was: no database is committed, and every
file their commands write (SQLite databases, exported packs and tests) is one git ignores."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CODE = re.compile(r"^```[\w-]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)
WRITES = [
    re.compile(r"sqlite:///(?!/)([^\s\"'`)]+)"),  # a relative SQLite file
    re.compile(r"(?:\s-o|--output|--junit-xml)\s+([^\s\"'`]+)"),  # a command's output file
    re.compile(r"\s>\s*([^\s\"'`&|;]+)"),  # a shell redirection
]
PLACEHOLDERS = ("FILE", "<", "$", "/dev/")


def written_paths(text: str) -> set[str]:
    """The relative paths the code blocks of a page write to."""
    found: set[str] = set()
    for block in CODE.findall(text):
        for pattern in WRITES:
            found.update(m for m in pattern.findall(block) if not m.startswith(PLACEHOLDERS))
    return found


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def checkout() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist): nothing is committed here")


def test_no_database_is_committed(checkout: None) -> None:
    tracked = git("ls-files", "*.db", "*.sqlite", "*.db-wal").stdout.split()
    assert tracked == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_what_the_docs_write_is_ignored(checkout: None, page: Path) -> None:
    paths = sorted(written_paths(page.read_text(encoding="utf-8")))
    kept = [p for p in paths if git("check-ignore", "--no-index", "-q", p).returncode != 0]
    assert kept == [], f"{page.name} writes {kept} into the checkout where git does not ignore them"


def test_the_scan_sees_what_the_readme_writes() -> None:
    paths = written_paths((ROOT / "README.md").read_text(encoding="utf-8"))
    assert {"try/packs.db", "try/pack.yaml", "try/pizza-v2.yaml"} <= paths
