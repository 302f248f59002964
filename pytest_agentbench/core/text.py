"""Text that someone else chose (a model's output, a child's stderr, an agent's paths and answers), made safe to show.

A record's message reaches the terminal (pytest's failure line and warnings summary), CI logs, JUnit XML and the
reports. Raw control characters in it would let the text redraw what a human reads: ``\\x1b[2K\\r\\x1b[32mPASSED``
erases the line and paints a green PASSED; a carriage return or a Unicode line separator starts a new line in
a Markdown renderer (a forged ``### capsule: pass`` heading); a bidi override shows the text backwards.
``printable`` is the one gate every such string passes before any of those sinks: it keeps the text readable and
makes every such character visible as its Python escape instead. With ``markdown=True`` it also makes the text
one inert line of Markdown (a table cell, a bullet): no table, heading, list, quote, code or HTML syntax of its
own survives. HTML pages escape with ``html.escape`` on top of it.
"""

from __future__ import annotations

import re
from typing import TypeVar, cast

# C0 controls except \t and \n, DEL, and the C1 controls (U+0080-U+009F: CSI, OSC, ... on some terminals)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# characters that move or reorder what is shown without being control characters: the Unicode line and paragraph
# separators (a line break to Markdown and many editors) and the bidirectional controls (embeddings, overrides,
# isolates, marks), which make text read backwards
_INVISIBLE = re.compile("[\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
# Markdown that text inside one line can still make: escapes, code spans, emphasis, links and images, table
# cells, raw HTML (GitHub renders some; a ">" alone makes nothing but at a line's start), strikethrough
_MARKDOWN_INLINE = re.compile(r"([\\`*_\[\]|<~])")
# Markdown only at a line's start: headings, lists, quotes, setext underlines, numbered lists
_MARKDOWN_LEADING = re.compile(r"^(\s*)(?:([#>+=-])|(\d+)([.)])(?=\s|$))")
ELLIPSIS = "…"


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _leading_escaped(match: re.Match[str]) -> str:
    space, mark, number, dot = match.groups()
    return f"{space}\\{mark}" if mark else f"{space}{number}\\{dot}"


def printable(text: object, *, markdown: bool = False, one_line: bool = False, limit: int | None = None) -> str:
    """``text`` with every control character except newline and tab written as a visible escape
    (ESC -> ``\\x1b``, CR -> ``\\x0d``), and the line and paragraph separators and bidi controls too
    (U+2028 -> ``\\u2028``, U+202E -> ``\\u202e``), so no escape sequence survives; other text is kept as is.

    ``one_line``: a newline is shown as ``\\n`` and a tab as a space, for a sink that is one line (a progress
    line, a file name, a JUnit property). ``markdown``: one line, and Markdown's own characters backslash-escaped
    (``|``, backticks, ``*``, ``_``, ``[``, ``<``, ...; ``#``, ``-``, ``>`` and the like at the start), so the text
    renders as the characters it holds and never as structure. ``limit``: at most that many characters of the
    original, an ellipsis marking a cut. Backslashes are left alone except in Markdown: the result is for
    reading, not for decoding back."""
    shown = text if isinstance(text, str) else str(text)
    if limit is not None and len(shown) > limit:
        shown = shown[: max(limit - 1, 0)] + ELLIPSIS
    shown = _INVISIBLE.sub(_visible, _CONTROL.sub(_visible, shown))
    if one_line or markdown:
        shown = shown.replace("\n", "\\n").replace("\t", " ")
    if markdown:
        shown = _MARKDOWN_LEADING.sub(_leading_escaped, _MARKDOWN_INLINE.sub(r"\\\1", shown))
    return shown


# ---- repair: text from outside made valid UTF-8, once, where it enters ------------------------------------
# A lone UTF-16 surrogate (what a JSON "\udc80" escape decodes to, or what surrogateescape makes of a byte)
# cannot be encoded as UTF-8: one such character in a record, a cache entry or an xdist report would end the
# run. Repair replaces exactly those (and undecodable bytes) by U+FFFD and says how many it replaced.
REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def repair(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD, and how many were replaced. Nothing else
    changes (no normalisation, no control characters touched: that is ``printable``'s job)."""
    if text.isascii():
        return text, 0
    fixed, count = _SURROGATE.subn(REPLACEMENT, text)
    return fixed, count


def repaired(text: str) -> str:
    """``repair(text)`` without the count (for text whose count is kept elsewhere or does not matter)."""
    return repair(text)[0]


def decode(data: bytes) -> tuple[str, int]:
    """UTF-8 ``data`` as text, every undecodable byte sequence replaced by U+FFFD, and how many were replaced
    (replacement characters the bytes spelled themselves are not counted)."""
    text = bytes(data).decode("utf-8", "replace")
    if REPLACEMENT not in text:
        return text, 0
    return text, text.count(REPLACEMENT) - bytes(data).count(REPLACEMENT.encode("utf-8"))


_T = TypeVar("_T")


def repair_value(value: _T) -> tuple[_T, int]:
    """A JSON-like value (dicts, lists, tuples, strings; keys too) with every string repaired, and the total
    number of characters replaced. Other values are returned as they are; a repaired one keeps its type."""
    fixed, count = _repaired(value)
    return cast(_T, fixed), count  # (a str, dict, list or tuple is rebuilt as one)


def _repaired(value: object) -> tuple[object, int]:
    if isinstance(value, str):
        return repair(value)
    if isinstance(value, dict):
        total = 0
        out = {}
        for key, item in value.items():
            key, n_key = _repaired(key)
            item, n_item = _repaired(item)
            out[key] = item
            total += n_key + n_item
        return (out, total) if total else (value, 0)
    if isinstance(value, (list, tuple)):
        parts = [_repaired(item) for item in value]
        total = sum(n for _, n in parts)
        if not total:
            return value, 0
        items = [item for item, _ in parts]
        return (items if isinstance(value, list) else tuple(items)), total
    return value, 0


def clipped(text: str, limit: int) -> str:
    """``text`` on one line, whole when it fits in ``limit`` characters, else cut at the last word boundary before
    the limit and ended with "...": a cut never leaves half a word that reads as another ("for t")."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    cut = flat[: max(0, limit - 3)]
    space = cut.rfind(" ")
    if space > limit // 2:  # a long word with no space near the limit is cut where it must be
        cut = cut[:space]
    return cut.rstrip(" .,;:") + "..."
