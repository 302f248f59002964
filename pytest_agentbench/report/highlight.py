"""Code shown as code in report.html: numbered lines, highlighted at render time, no script needed.

Python is split with the standard tokenizer; shell commands and JSON with a few regular expressions.
Each piece becomes a ``<span>`` with a one-letter class the page's CSS colours (k keyword, b builtin,
s string, c comment, m number, f defined name, v variable, a option, o operator). The text of the
pieces is exactly the source (escaped): what a reader copies is what the model wrote. A source the
tokenizer cannot finish (cut off, bad indentation) keeps its highlighting up to there, the rest is
plain. Line numbers are CSS counters, so they are neither copied nor part of the page's text.
"""

from __future__ import annotations

import builtins
import html
import io
import json
import keyword
import re
import tokenize
from collections.abc import Iterator
from typing import Any

Segment = tuple[str, str]  # (css class or "", text)
TEXT_LIMIT = 20_000  # characters of one code, output or message shown (the files keep everything)

PY_KEYWORDS = frozenset(keyword.kwlist)
PY_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))
PY_STRING_TOKENS = frozenset(
    name for name in ("STRING", "FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, name)
)  # f-string tokens exist from Python 3.12
SKIPPED_TOKENS = (tokenize.ENDMARKER, tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)

SHELL = re.compile(
    r"""
    (?P<c>(?<![^\s;|&(])\#[^\n]*)                             # a comment: # at a word's start
  | (?P<s>'[^']*'?|"(?:\\.|[^"\\])*"?)                         # quoted text
  | (?P<v>\$\{[^}\n]*\}?|\$[A-Za-z_]\w*|\$[0-9@#?$!*-])        # $NAME, ${...}, $1
  | (?P<k>(?<![\w.-])(?:if|then|else|elif|fi|for|while|until|do|done|case|esac|function|in|export|cd)(?![\w.-]))
  | (?P<o>&&|\|\||[|;&<>]+)
  | (?P<a>(?<!\S)--?[A-Za-z][\w-]*)                           # an option
""",
    re.VERBOSE,
)
JSON = re.compile(
    r"""(?P<f>"(?:\\.|[^"\\])*"(?=\s*:))|(?P<s>"(?:\\.|[^"\\])*")|(?P<m>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
                      |(?P<k>\b(?:true|false|null)\b)""",
    re.VERBOSE,
)
FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
LANGUAGES = {
    "python": "python",
    "py": "python",
    "python3": "python",
    "bash": "shell",
    "sh": "shell",
    "shell": "shell",
    "console": "shell",
    "zsh": "shell",
    "json": "json",
}


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def clip(text: Any, limit: int = TEXT_LIMIT) -> str:
    """``text`` as a page shows it: whole, unless it is really long (a quarter over ``limit``, and at least half of
    it or 500 characters over): a cut that hides a few characters saves nothing and costs the reader the end."""
    shown = "" if text is None else text if isinstance(text, str) else json.dumps(text, indent=1, default=str)
    if len(shown) <= limit + max(limit // 4, min(500, limit // 2)):
        return shown
    return shown[:limit] + f"\n… ({len(shown) - limit} more characters: the whole text is in the run's records)"


def python_segments(source: str) -> list[Segment]:
    """``source`` cut into classed pieces by Python's tokenizer; the pieces' texts add up to ``source``."""
    lines = io.StringIO(source).readlines()
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(row: int, col: int) -> int:
        return starts[row - 1] + col if row - 1 < len(starts) else len(source)

    out: list[Segment] = []
    pos, previous = 0, ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in SKIPPED_TOKENS:
                continue
            start, end = offset(*tok.start), offset(*tok.end)
            if start < pos or end <= start:  # never emit a piece twice or out of order
                continue
            cls = python_class(tok, previous)
            previous = tok.string
            if start > pos:
                out.append(("", source[pos:start]))
            out.append((cls, source[start:end]))
            pos = end
    except Exception:  # noqa: BLE001  cut-off, badly indented or absurd code (the model's): the rest is plain text
        pass
    if pos < len(source):
        out.append(("", source[pos:]))
    return out


def python_class(tok: tokenize.TokenInfo, previous: str) -> str:
    name = tokenize.tok_name.get(tok.type, "")
    if tok.type == tokenize.COMMENT:
        return "c"
    if tok.type == tokenize.NUMBER:
        return "m"
    if name in PY_STRING_TOKENS:
        return "s"
    if tok.type == tokenize.NAME:
        if previous in ("def", "class"):
            return "f"
        if tok.string in PY_KEYWORDS:
            return "k"
        if tok.string in PY_BUILTINS:
            return "b"
    return ""


def regex_segments(text: str, pattern: re.Pattern[str]) -> list[Segment]:
    out: list[Segment] = []
    pos = 0
    for match in pattern.finditer(text):
        if match.start() == match.end():
            continue
        if match.start() > pos:
            out.append(("", text[pos : match.start()]))
        out.append((match.lastgroup or "", match.group(0)))
        pos = match.end()
    if pos < len(text):
        out.append(("", text[pos:]))
    return out


def segments(text: str, language: str) -> list[Segment]:
    if language == "python":
        return python_segments(text)
    if language == "shell":
        return regex_segments(text, SHELL)
    if language == "json":
        return regex_segments(text, JSON)
    return [("", text)]


def numbered_lines(pieces: list[Segment]) -> Iterator[str]:
    """One ``<span class="l">`` per source line; a piece spanning lines (a docstring) is closed and reopened."""
    line: list[str] = []
    for cls, text in pieces:
        for i, part in enumerate(text.split("\n")):
            if i:
                yield "".join(line)
                line = []
            if part:
                escaped = html.escape(part, quote=False)
                line.append(f'<span class="{cls}">{escaped}</span>' if cls else escaped)
    if line:
        yield "".join(line)


def code_html(text: str, language: str = "") -> str:
    """``<pre class="code">`` of ``text`` with numbered, highlighted lines; ``language`` is python, shell,
    json or "" (plain)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # a lone CR would start a line with no number
    lines = "\n".join(f'<span class="l">{line}</span>' for line in numbered_lines(segments(text, language)))
    return f'<pre class="code" data-lang="{html.escape(language)}">{lines}</pre>'


def language_of(name: str) -> str:
    return LANGUAGES.get(name.lower(), "")


def fenced_parts(text: str) -> Iterator[tuple[str, str | None]]:
    """Markdown text cut at its fenced code blocks: (prose, None) and (code, language) in order; a fence
    left open runs to the end (a reply cut off at the token limit)."""
    pos = 0
    for match in FENCE.finditer(text):
        if match.start() > pos:
            yield text[pos : match.start()], None
        yield match.group(2).rstrip("\n"), language_of(match.group(1))
        pos = match.end()
    if pos < len(text):
        yield text[pos:], None
