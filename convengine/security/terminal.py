"""Printing text the CLI did not write (replies, passages, audit, test reports...) inertly.

Such text may come from end users, LLMs, documents or stored rows. Printed as Rich markup,
``[/]`` crashes the command and ``[link=...]`` forges output; printed raw, control characters
reach the operator's terminal (``ESC[2J`` clears it, ``ESC]0;...`` retitles it, ``ESC]52`` writes
the clipboard) and bidirectional overrides reorder what is shown. :func:`inert` makes a
:class:`rich.text.Text` (never parsed as markup) in which every control character but newline
and tab, and every bidirectional control, is shown as an escape such as ``\\x1b``.
"""

from __future__ import annotations

import re

from rich.text import Text

# C0 and C1 controls (but \t and \n), DEL, and the bidirectional formatting characters
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: object) -> str:
    """``text`` as a string whose control characters are shown as escapes (``\\x1b``, ``\\u202e``)."""
    return _UNSAFE.sub(_escape, str(text))


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: object, style: str = "") -> Text:
    """Text to print as it is: no markup, no highlighting, control characters made visible."""
    return Text(visible(text), style=style)
