"""Text that someone else chose (a model's output, a child's stderr), made safe to show.

A record's message reaches the terminal (pytest's failure line), CI logs and the reports. Raw control
characters in it would let the text redraw what a human reads: ``\\x1b[2K\\r\\x1b[32mPASSED`` erases
the line and paints a green PASSED. ``printable`` keeps the text readable and makes every control
character visible as its Python escape instead.
"""
from __future__ import annotations

import re

# C0 controls except \t and \n, DEL, and the C1 controls (U+0080-U+009F: CSI, OSC, ... on some terminals)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def printable(text: object) -> str:
    """``text`` with every control character except newline and tab written as a visible escape
    (ESC -> ``\\x1b``, CR -> ``\\x0d``), so no escape sequence survives; other text is kept as is.
    Backslashes are left alone: the result is for reading, not for decoding back."""
    return _CONTROL.sub(_visible, text if isinstance(text, str) else str(text))
