"""Reading documents (text, Markdown, HTML, PDF) and splitting them into passages.

Every reader is bounded (see :class:`~convengine.settings.KnowledgeIngestSettings`): the bytes
read, the text extracted, the time taken; PDF is parsed in a separate process (:mod:`.pdf`).
"""

from __future__ import annotations

import hashlib
import html.parser
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convengine.catalog.errors import ConfigError, ErrorCode
from convengine.knowledge.files import (
    HTML_SUFFIXES,
    PDF_SUFFIXES,
    SUFFIXES,
    Found,
    Skipped,
    discover_files,
    read_bounded,
)
from convengine.knowledge.pdf import pdf_text
from convengine.knowledge.text import decode, reflow, splitter
from convengine.settings import KnowledgeIngestSettings

__all__ = ["SUFFIXES", "Document", "Found", "Passage", "Skipped", "discover", "discover_files", "read_document",
           "split"]

MAX_TITLE_CHARS = 200
"""A heading longer than this is cut: every passage under it carries its title."""
HTML_FEED_CHARS = 65_536
_HEADING = re.compile(r"^(#{1,6})[ \t]+(\S.*)$")  # no nested quantifiers: linear on any line


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
    """Every document under ``paths`` that ingest would read (see :func:`discover_files`), sorted."""
    return [item.path for item in discover_files(paths)[0]]


def read_document(item: Found | Path, source: str | None = None, *,
                  limits: KnowledgeIngestSettings | None = None) -> Document:
    """A file as a :class:`Document`; the title is its first heading (or the file name).

    Raises:
        ConfigError: the file is not a regular file inside its folder, of an unsupported type, or
            passes one of ``limits`` (bytes, extracted text, time, PDF pages or content).
    """
    limits = limits or KnowledgeIngestSettings()
    if isinstance(item, Path):
        found, skipped = discover_files([item])
        if skipped:
            raise ConfigError(str(skipped[0]), code=ErrorCode.INVALID_INPUT)
        item = found[0]
    name = source or item.source
    suffix = item.path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ConfigError(f"{name}: unsupported file type {suffix or '(none)'}; supported: "
                          f"{', '.join(sorted(SUFFIXES))}", code=ErrorCode.INVALID_INPUT)
    deadline = time.monotonic() + limits.max_seconds
    data = read_bounded(item, limits.max_file_bytes)
    metadata: dict[str, Any] = {"type": suffix.lstrip(".")}
    if suffix in PDF_SUFFIXES:
        title, text = None, pdf_text(data, name, limits)
    else:
        text, metadata["encoding"] = decode(data, limits.encodings)
        if suffix in HTML_SUFFIXES:
            title, text = _html_text(text, name, limits, deadline)
        else:
            title = _first_heading(text)
    _check_size(name, len(text), limits)
    stem = Path(name).stem.replace("_", " ").replace("-", " ")
    return Document(name, text, (title or stem)[:MAX_TITLE_CHARS], metadata)


def _check_size(name: str, chars: int, limits: KnowledgeIngestSettings) -> None:
    if chars > limits.max_text_chars:
        raise ConfigError(f"{name}: more than {limits.max_text_chars} characters of text "
                          "(knowledge.ingest.max_text_chars)", code=ErrorCode.INVALID_INPUT)


def split(text: str, *, max_chars: int = 800, overlap: int = 100) -> list[Passage]:
    """Passages of at most ``max_chars`` characters, each under its latest Markdown heading, cut at
    paragraph, sentence or word boundaries and repeating up to ``overlap`` characters of the one
    before (see :mod:`.text`); lines inside a paragraph are joined (no hard breaks mid-sentence)."""
    cutter = splitter(max_chars, overlap)
    passages: list[Passage] = []
    for title, body in _sections(text):
        passages.extend(Passage(len(passages) + i, title, piece) for i, piece in enumerate(cutter.split_text(body)))
    return passages


def _sections(text: str) -> list[tuple[str | None, str]]:
    """The text's sections: (the Markdown heading above it, its reflowed paragraphs)."""
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    for paragraph in _paragraphs(text):
        heading = _HEADING.match(paragraph.splitlines()[0])
        if heading:
            sections.append((heading.group(2).rstrip()[:MAX_TITLE_CHARS], []))
            paragraph = "\n".join(paragraph.splitlines()[1:]).strip()
            if not paragraph:
                continue
        sections[-1][1].append(reflow(paragraph))
    return [(title, "\n\n".join(body)) for title, body in sections if body]


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text.replace("\r\n", "\n")) if p.strip()]


def _first_heading(text: str) -> str | None:
    for line in text.splitlines()[:50]:
        match = _HEADING.match(line)
        if match:
            return match.group(2).rstrip()[:MAX_TITLE_CHARS]
    return None


class _HtmlText(html.parser.HTMLParser):
    _SKIP = frozenset({"script", "style", "head", "nav", "noscript"})
    _BLOCK = frozenset({"p", "div", "section", "article", "li", "br", "tr", "table", "ul", "ol", "pre"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.size = 0
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
            self.title = ((self.title or "") + data.strip())[:MAX_TITLE_CHARS]
        elif not self._skipping:
            self.parts.append(re.sub(r"\s+", " ", data))
            self.size += len(self.parts[-1])


def _html_text(markup: str, name: str, limits: KnowledgeIngestSettings, deadline: float) -> tuple[str | None, str]:
    """The text of an HTML page, fed in slices so that its time and size are checked as it goes."""
    parser = _HtmlText()
    for start in range(0, len(markup), HTML_FEED_CHARS):
        parser.feed(markup[start:start + HTML_FEED_CHARS])
        _check_size(name, parser.size, limits)
        if time.monotonic() > deadline:
            raise ConfigError(f"{name}: took longer than {limits.max_seconds:g} s to read "
                              "(knowledge.ingest.max_seconds)", code=ErrorCode.INVALID_INPUT)
    parser.close()
    text = re.sub(r"\n{3,}", "\n\n", "".join(parser.parts)).strip()
    return parser.title or _first_heading(text), text
