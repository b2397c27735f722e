"""Unreadable documents in a folder: each is reported by name and the rest is ingested.

Attack (failed before its fix, issue 30): one corrupt PDF in a folder ended the whole ingest with a
raw ``pypdf.errors.PdfStreamError`` traceback naming no file, and the good files were not ingested
(the Python API the same). Now every unreadable file is listed in ``IngestReport.failed`` with its
name and the reason, the others are ingested, and the CLI exits 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from convengine.cli.app import app
from convengine.knowledge import Knowledge
from tests.security.test_knowledge_ingest import pdf_bytes

CORRUPT = {
    "truncated.pdf": b"%PDF-1.4\n1 0 obj\n<< /Length 99999 >>\nstream\nxx",
    "garbage.pdf": b"%PDF-1.7\n" + bytes(range(256)) * 40,
    "not_a_pdf.pdf": b"PK\x03\x04 this is a zip archive, not a PDF",
    "empty.pdf": b"",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "refunds.md").write_text("# Refunds\n\nRefunds take five working days.\n")
    (docs / "good.pdf").write_bytes(pdf_bytes(1, b"BT /F1 12 Tf 72 712 Td (Parcels ship within two days) Tj ET\n"))
    for name, data in CORRUPT.items():
        (docs / name).write_bytes(data)
    return docs


def test_each_corrupt_pdf_fails_alone_by_name_and_the_rest_is_ingested(db_url: str, folder: Path) -> None:
    knowledge = Knowledge.open(db_url)
    try:
        report = knowledge.ingest("faq", [folder])
        assert sorted(report.added) == ["good.pdf", "refunds.md"]
        assert sorted(p.source for p in report.failed) == sorted(CORRUPT)
        assert all(p.reason and "Traceback" not in p.reason for p in report.failed)
        assert not report.ok and "4 failed" in str(report)
        assert knowledge.search("faq", "when do parcels ship")[0].source == "good.pdf"
        again = knowledge.ingest("faq", [folder], prune=True)  # a failed file is kept out, nothing else lost
        assert sorted(again.unchanged) == ["good.pdf", "refunds.md"] and again.removed == []
    finally:
        knowledge.close()


def test_the_cli_names_each_failed_file_and_exits_1(db_url: str, folder: Path) -> None:
    done = CliRunner().invoke(app, ["knowledge", "ingest", "faq", str(folder), "--url", db_url],
                              env={"COLUMNS": "300"})
    assert done.exit_code == 1, done.output
    for name in CORRUPT:
        assert f"failed {name}: " in done.output
    assert "2 added" in done.output and "4 failed" in done.output
    assert "Traceback" not in done.output
