"""Reading documents (text, Markdown, HTML, PDF) and splitting them into passages."""

from __future__ import annotations

import hashlib
import html.parser
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convengine.errors import ConfigError, ErrorCode

TEXT_SUFFIXES = frozenset({".txt", ".text", ".md", ".markdown", ".rst"})
HTML_SUFFIXES = frozenset({".html", ".htm"})
PDF_SUFFIXES = frozenset({".pdf"})
SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES
MAX_DOCUMENT_BYTES = 20_000_000
_HEADING = re.compile(r"^(#{1,6})\s+(.*\S)\s*$")


@dataclass(frozen=True, slots=True)
class Passage:
    """One chunk of a document: its position, the heading it sits under, and its text."""

    position: int
    title: str | None
    text: str


@dataclass(frozen=True, slots=True)
class Document:
    """A document to ingest: where it comes from, its title and text, and extra metadata."""

    source: str
    text: str
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(f"{self.title}\n{self.text}".encode()).hexdigest()


def discover(paths: list[Path]) -> list[Path]:
    """Every readable document under ``paths`` (files as given, folders recursively), sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix.lower() in SUFFIXES)
        elif path.is_file():
            found.append(path)
        else:
            raise ConfigError(f"{path}: no such file or folder", code=ErrorCode.INVALID_INPUT)
    return found


def read_document(path: Path, source: str | None = None) -> Document:
    """A file as a :class:`Document`; the title is its first heading (or the file name)."""
    suffix = path.suffix.lower()
    if path.stat().st_size > MAX_DOCUMENT_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_DOCUMENT_BYTES} bytes", code=ErrorCode.INVALID_INPUT)
    if suffix in HTML_SUFFIXES:
        title, text = _html_text(path.read_text(encoding="utf-8", errors="replace"))
    elif suffix in PDF_SUFFIXES:
        title, text = None, _pdf_text(path)
    elif suffix in TEXT_SUFFIXES:
        text = path.read_text(encoding="utf-8", errors="replace")
        title = _first_heading(text)
    else:
        raise ConfigError(f"{path}: unsupported file type {suffix or '(none)'}; supported: "
                          f"{', '.join(sorted(SUFFIXES))}", code=ErrorCode.INVALID_INPUT)
    return Document(source or str(path), text, title or path.stem.replace("_", " ").replace("-", " "),
                    {"path": str(path), "type": suffix.lstrip(".")})


def split(text: str, *, max_chars: int = 800, overlap: int = 100) -> list[Passage]:
    """Paragraphs packed into passages of at most ``max_chars``, each under its latest Markdown
    heading; a paragraph longer than that is cut on sentence or word boundaries with ``overlap``."""
    passages: list[Passage] = []
    title: str | None = None
    buffer: list[str] = []

    def flush() -> None:
        if buffer:
            passages.append(Passage(len(passages), title, "\n\n".join(buffer)))
            buffer.clear()

    for paragraph in _paragraphs(text):
        heading = _HEADING.match(paragraph.splitlines()[0])
        if heading:
            flush()
            title = heading.group(2)
            paragraph = "\n".join(paragraph.splitlines()[1:]).strip()
            if not paragraph:
                continue
        for piece in _cut(paragraph, max_chars, overlap):
            if buffer and sum(len(b) + 2 for b in buffer) + len(piece) > max_chars:
                flush()
            buffer.append(piece)
    flush()
    return passages


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text.replace("\r\n", "\n")) if p.strip()]


def _cut(paragraph: str, max_chars: int, overlap: int) -> list[str]:
    if len(paragraph) <= max_chars:
        return [paragraph]
    pieces: list[str] = []
    start = 0
    while start < len(paragraph):
        end = min(len(paragraph), start + max_chars)
        if end < len(paragraph):
            cut = max(paragraph.rfind(". ", start, end), paragraph.rfind(" ", start, end))
            end = cut + 1 if cut > start + max_chars // 2 else end
        pieces.append(paragraph[start:end].strip())
        if end >= len(paragraph):
            break
        start = max(end - overlap, start + 1)
    return [p for p in pieces if p]


def _first_heading(text: str) -> str | None:
    for line in text.splitlines()[:50]:
        match = _HEADING.match(line)
        if match:
            return match.group(2)
    return None


class _HtmlText(html.parser.HTMLParser):
    _SKIP = frozenset({"script", "style", "head", "nav", "noscript"})
    _BLOCK = frozenset({"p", "div", "section", "article", "li", "br", "tr", "table", "ul", "ol", "pre"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: str | None = None
        self._skipping = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self._SKIP:
            self._skipping += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self._SKIP and self._skipping:
            self._skipping -= 1
        elif re.fullmatch(r"h[1-6]", tag) or tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title = (self.title or "") + data.strip()
        elif not self._skipping:
            self.parts.append(re.sub(r"\s+", " ", data))


def _html_text(markup: str) -> tuple[str | None, str]:
    parser = _HtmlText()
    parser.feed(markup)
    parser.close()
    text = re.sub(r"\n{3,}", "\n\n", "".join(parser.parts)).strip()
    return parser.title or _first_heading(text), text


def _pdf_text(path: Path) -> str:
    try:
        from pypdf import PdfReader  # optional: the knowledge extra
    except ImportError as exc:
        raise ConfigError(f"{path}: reading PDF needs pypdf (pip install 'convengine[knowledge]')",
                          code=ErrorCode.INVALID_INPUT) from exc
    reader = PdfReader(str(path))
    return "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
