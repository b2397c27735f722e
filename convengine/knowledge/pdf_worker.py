"""Extract a PDF's text within limits: PDF bytes on stdin, limits (JSON) as the argument, text on stdout.

Run by :mod:`convengine.knowledge.pdf` as a separate process; it imports nothing of convengine.
Refusals are one line on stderr with exit status 2 (3 when memory ran out).
"""

from __future__ import annotations

import io
import json
import sys
from typing import Any


class Refused(Exception):
    """The PDF passes one of the limits."""


def _limit_memory(megabytes: int) -> None:
    try:
        import resource
    except ImportError:  # not on this platform: the parent's deadline still bounds the work
        return
    ceiling = megabytes * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))


def _content_bytes(page: Any) -> int:
    """Decompressed bytes of the content streams ``page`` draws (a stream shared by pages counts for each)."""
    contents = page.get("/Contents")
    if contents is None:
        return 0
    contents = contents.get_object()
    streams = contents if isinstance(contents, list) else [contents]
    return sum(len(stream.get_object().get_data() or b"") for stream in streams)


def extract(data: bytes, limits: dict[str, int]) -> str:
    from pypdf import PdfReader  # optional: the knowledge extra

    reader = PdfReader(io.BytesIO(data))
    pages = reader.pages
    if len(pages) > limits["max_pdf_pages"]:
        raise Refused(f"has {len(pages)} pages, more than {limits['max_pdf_pages']} "
                         "(knowledge.ingest.max_pdf_pages)")
    work = 0
    for page in pages:
        work += _content_bytes(page)
        if work > limits["max_pdf_content_bytes"]:
            raise Refused(f"its pages draw more than {limits['max_pdf_content_bytes']} bytes of content "
                             "(knowledge.ingest.max_pdf_content_bytes)")
    texts: list[str] = []
    size = 0
    for page in pages:
        texts.append((page.extract_text() or "").strip())
        size += len(texts[-1]) + 2
        if size > limits["max_text_chars"]:
            raise Refused(f"more than {limits['max_text_chars']} characters of text "
                             "(knowledge.ingest.max_text_chars)")
    return "\n\n".join(texts)


def main() -> int:
    limits = json.loads(sys.argv[1])
    _limit_memory(int(limits["max_pdf_memory_mb"]))
    data = sys.stdin.buffer.read()
    try:
        text = extract(data, limits)
    except MemoryError:
        print(f"needs more than {limits['max_pdf_memory_mb']} MB to read (knowledge.ingest.max_pdf_memory_mb)",
              file=sys.stderr)
        return 3
    except Refused as exc:
        print(exc, file=sys.stderr)
        return 2
    except RecursionError:
        print("nested too deeply to read", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - any parser failure is this file's error, in one line
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"not a readable PDF: {message}", file=sys.stderr)
        return 2
    sys.stdout.buffer.write(text.encode("utf-8", errors="replace"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
