"""Ingesting a folder someone else can write to: bombs, links and special files.

Attacks (each failed before its fix):
- a 46 KB PDF whose 200 pages draw one 5 MB content stream was still being read after 120 s (pypdf
  re-extracts the stream per page); a FlateDecode stream that inflates to 100 MB, a Markdown
  heading followed by a megabyte of spaces (quadratic heading regex), a heading a megabyte long
  (copied into every passage) likewise had no bound. Now each fails alone, in seconds, with the
  limit named, and the rest of the folder is ingested.
- ``notes.md -> <file outside the folder>`` and ``env.txt -> /proc/self/environ`` were stored as
  passages (the ingesting process's environment became searchable, servable by the knowledge
  fallback); a FIFO hung ingest forever. Now they are skipped, each with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url
from convengine.knowledge import Knowledge
from convengine.settings import KnowledgeIngestSettings

ROOT = Path(__file__).parents[2]
SECRET = "ce-secret-4242"


def pdf_bytes(pages: int, content: bytes, *, compress: bool = True) -> bytes:
    """A valid PDF whose ``pages`` pages all draw the one content stream ``content``."""
    data = zlib.compress(content, 9) if compress else content
    kids = " ".join(f"{10 + i} 0 R" for i in range(pages))
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        4: b"<< /Length %d%s >>\nstream\n" % (len(data), b" /Filter /FlateDecode" if compress else b"")
           + data + b"\nendstream",
    }
    for i in range(pages):
        objects[10 + i] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                           b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets: dict[int, int] = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    size = max(objects) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number] if number in offsets else b"0000000000 65535 f \n"
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


TEXT_OP = b"BT /F1 12 Tf 72 712 Td (refund policy text) Tj ET\n"
BOMBS: dict[str, bytes] = {
    "shared_stream.pdf": pdf_bytes(200, TEXT_OP * (5_000_000 // len(TEXT_OP))),
    "inflate.pdf": pdf_bytes(1, b"0" * 100_000_000),
    "spaces.md": b"# " + b" " * 1_000_000 + b"\nbody\n",
    "huge_heading.md": b"# " + b"H" * 1_000_000 + b"\n\n" + b"word " * 100_000,
    "nested.html": b"<div>" * 200_000 + b"deep" + b"</div>" * 200_000,
    "entities.html": b"&amp;" * 2_500_000,
    "one_line.md": b"x" * 6_000_000,
    "unclosed.html": b"<!--" + b"a" * 5_000_000,
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "refunds.md").write_text("# Refunds\n\nRefunds take five working days.\n")
    (shared / "good.pdf").write_bytes(pdf_bytes(2, b"BT /F1 12 Tf 72 712 Td (Shipping takes two days) Tj ET\n"))
    return shared


def chunk_texts(url: str) -> str:
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.connect() as conn:
            return "\n".join(conn.execute(sa.text("SELECT text FROM ce_knowledge_chunk")).scalars())
    finally:
        engine.dispose()


def test_bombs_fail_alone_in_seconds(db_url: str, folder: Path) -> None:
    for name, data in BOMBS.items():
        (folder / name).write_bytes(data)
    limits = KnowledgeIngestSettings(max_text_chars=2_000_000, max_seconds=20)
    knowledge = Knowledge.open(db_url, limits=limits)
    try:
        started = time.monotonic()
        report = knowledge.ingest("faq", [folder])
        elapsed = time.monotonic() - started
        failed = {Path(p.source).name: p.reason for p in report.failed}
        added = {Path(s).name for s in report.added}
        assert {"good.pdf", "huge_heading.md", "nested.html", "refunds.md", "spaces.md"} <= added
        assert {"shared_stream.pdf", "inflate.pdf", "entities.html", "one_line.md"} <= set(failed)
        assert len(added) + len(failed) == len(BOMBS) + 2  # every file read or refused, none lost
        assert "knowledge.ingest.max_pdf_content_bytes" in failed["shared_stream.pdf"]
        assert "max_pdf_content_bytes" in failed["inflate.pdf"] or "limit" in failed["inflate.pdf"].lower()
        for name in ("entities.html", "one_line.md"):
            assert "knowledge.ingest.max_text_chars" in failed[name]
        assert elapsed < 90, elapsed  # measured under load; the shared stream alone took over 120 s before
        assert knowledge.search("faq", "refunds working days")[0].source.endswith("refunds.md")
        assert knowledge.search("faq", "shipping two days")[0].source.endswith("good.pdf")
        titles = [h.title or "" for h in knowledge.search("faq", "word", k=50)]
        assert titles and max(len(t) for t in titles) <= 200  # a huge heading is not copied into every passage
    finally:
        knowledge.close()


def test_pdf_reading_is_bounded_in_time(db_url: str, folder: Path) -> None:
    (folder / "slow.pdf").write_bytes(pdf_bytes(1, TEXT_OP * (5_000_000 // len(TEXT_OP))))
    knowledge = Knowledge.open(db_url, limits=KnowledgeIngestSettings(max_seconds=3))
    try:
        started = time.monotonic()
        report = knowledge.ingest("faq", [folder / "slow.pdf", folder / "refunds.md"])
        assert time.monotonic() - started < 30
        assert [(Path(p.source).name, p.reason) for p in report.failed] == [
            ("slow.pdf", "took longer than 3 s to read (knowledge.ingest.max_seconds)")]
        assert [Path(s).name for s in report.added] == ["refunds.md"]
    finally:
        knowledge.close()


def test_a_failed_document_keeps_what_was_stored_and_prune_keeps_it(db_url: str, folder: Path) -> None:
    knowledge = Knowledge.open(db_url, limits=KnowledgeIngestSettings(max_file_bytes=1000))
    try:
        knowledge.ingest("faq", [folder], prune=True)
        (folder / "refunds.md").write_text("# Refunds\n\n" + "Refunds take ten days. " * 100)
        report = knowledge.ingest("faq", [folder], prune=True)
        assert [(Path(p.source).name, p.reason) for p in report.failed] == [
            ("refunds.md", "larger than 1000 bytes (knowledge.ingest.max_file_bytes)")]
        assert report.removed == []
        assert "five working days" in chunk_texts(db_url)
    finally:
        knowledge.close()


def test_links_leaving_the_folder_and_special_files_are_skipped(db_url: str, folder: Path, tmp_path: Path) -> None:
    outside = tmp_path / "private.md"
    outside.write_text(f"# Private\n\nThe admin password is {SECRET}.\n")
    (folder / "notes.md").symlink_to(outside)
    (folder / "env.txt").symlink_to("/proc/self/environ")
    (folder / "up.md").symlink_to("../private.md")
    (folder / "inside.md").symlink_to(folder / "refunds.md")  # a link within the folder is fine
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "more.md").write_text(f"# More\n\n{SECRET}\n")
    (folder / "linked_dir").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    os.mkfifo(folder / "pipe.md")
    os.environ["CE_INGEST_PROBE"] = SECRET
    knowledge = Knowledge.open(db_url)
    try:
        report = knowledge.ingest("faq", [folder])
        skipped = {Path(s.source).name: s.reason for s in report.skipped}
        assert skipped == {
            "notes.md": "a symbolic link to something outside the folder is not followed",
            "env.txt": "a symbolic link to something outside the folder is not followed",
            "up.md": "a symbolic link to something outside the folder is not followed",
            "linked_dir": "a symbolic link to a folder is not followed",
            "pipe.md": "not a regular file (a FIFO)",
        }
        assert sorted(Path(s).name for s in report.added) == ["good.pdf", "inside.md", "refunds.md"]
        assert SECRET not in chunk_texts(db_url)
        assert knowledge.search("faq", SECRET) == []
        # named directly, a link out of its folder and a FIFO are refused the same way
        direct = knowledge.ingest("faq", [folder / "env.txt", folder / "pipe.md"])
        assert [s.reason for s in direct.skipped] == [skipped["env.txt"], skipped["pipe.md"]]
        assert SECRET not in chunk_texts(db_url)
    finally:
        os.environ.pop("CE_INGEST_PROBE", None)
        knowledge.close()


def test_the_cli_reports_what_it_skipped_and_what_failed(db_url: str, folder: Path, tmp_path: Path) -> None:
    (folder / "env.txt").symlink_to("/proc/self/environ")
    (folder / "shared_stream.pdf").write_bytes(BOMBS["shared_stream.pdf"])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "300", "CE_INGEST_PROBE": SECRET}
    done = subprocess.run([sys.executable, "-m", "convengine.cli", "knowledge", "ingest", "faq", str(folder),
                           "--url", db_url], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 1, done.stderr
    assert "skipped" in done.stderr and "env.txt: a symbolic link to something outside the folder" in done.stderr
    assert "failed" in done.stderr and "shared_stream.pdf: its pages draw more than" in done.stderr
    assert "2 added" in done.stdout and "1 skipped, 1 failed" in done.stdout
    assert SECRET not in chunk_texts(db_url)
