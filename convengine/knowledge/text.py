"""Text as passages are made of it: bytes decoded by a fallback chain of encodings, paragraphs
reflowed (hard line breaks inside a sentence joined), sections cut at word and sentence boundaries.

Cutting is LangChain's ``RecursiveCharacterTextSplitter``: it tries paragraph breaks, then line
breaks, then sentence ends, then spaces (a word is cut only when longer than a whole passage),
and packs the pieces into passages of at most ``chunk_size`` characters that repeat up to
``chunk_overlap`` characters of the previous one.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence

from langchain_text_splitters import RecursiveCharacterTextSplitter

DEFAULT_ENCODINGS = ("utf-8", "cp1252", "latin-1")
"""Tried in order (a byte-order mark wins first); Latin-1 decodes any bytes, so it ends the chain."""
SEPARATORS = (r"\n\n", r"\n", r"(?<=[.!?;:])\s+", r"\s+", "")
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_BLOCK_LINE = re.compile(r"^\s*(?:[-*+]\s|\d{1,3}[.)]\s|\||>)")
"""A line that starts a list item, a table row or a quote keeps its own line."""


def decode(data: bytes, encodings: Sequence[str] = DEFAULT_ENCODINGS) -> tuple[str, str]:
    """The text of ``data`` and the encoding it was read with: the byte-order mark's, else the first
    of ``encodings`` that decodes every byte, else Latin-1 (which decodes anything)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace"), encoding
    for encoding in encodings:
        try:
            return data.decode(encoding), encoding
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1"), "latin-1"


def reflow(paragraph: str) -> str:
    """A paragraph's lines joined with spaces, except list items, table rows, quotes, Markdown hard
    breaks (two trailing spaces or a backslash) and code (fenced or indented), which keep their lines."""
    lines = paragraph.splitlines()
    if not lines or lines[0].lstrip().startswith(("```", "~~~")) or all(
            line.startswith(("    ", "\t")) for line in lines):
        return paragraph
    out: list[str] = []
    for line in lines:
        hard_break = bool(out) and (out[-1].endswith("  ") or out[-1].endswith("\\"))
        if out and not hard_break and not _BLOCK_LINE.match(line):
            out[-1] = f"{out[-1].rstrip()} {line.strip()}"
        else:
            if out:
                out[-1] = out[-1].rstrip().removesuffix("\\").rstrip()
            out.append(line.strip())
    return "\n".join(out)


def splitter(chunk_size: int, chunk_overlap: int) -> RecursiveCharacterTextSplitter:
    """Cuts text at the largest boundary that fits: paragraph, line, sentence, word."""
    return RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=min(chunk_overlap, chunk_size // 2),
                                          separators=list(SEPARATORS), is_separator_regex=True, keep_separator="end",
                                          strip_whitespace=True)
