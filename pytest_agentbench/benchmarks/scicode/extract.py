"""Pulling the step's code out of a model reply.

Upstream takes the text after the first ```python (or the first ```) up to the next fence and then
deletes every line that starts with ``import``/``from ... import`` by regex. That breaks on a
``Python`` fence, on multi-line parenthesised imports (the continuation lines stay), on an import
that was the only statement of a ``try:``/``if`` body (an empty body is a syntax error) and on
docstring lines starting with "from ... import". Here the same intent (the step's code without its
imports, since the problem's dependencies are provided) is done on the syntax tree.
"""

from __future__ import annotations

import ast
import re

from ...core import pyast

# opening fence with an optional language tag, the body, and the closing fence (or end of text,
# so a reply cut off inside its code block still yields that block)
FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", re.MULTILINE | re.DOTALL)
PYTHON_TAGS = {"python", "py", "python3", "py3"}
DEF_NAME = re.compile(r"\bdef\s+(\w+)\s*\(")
CLASS_NAME = re.compile(r"\bclass\s+(\w+)\s*[(:]")
# A class step's header holds its first method too (`class Maxwell:` then `def __init__(...)`), and some
# docstrings say `env: class Block`: the name is the first definition at column 0 (upstream SciCode#49/#59).
TOP_LEVEL_DEF = re.compile(r"^(?:async[ \t]+def|def|class)[ \t]+(\w+)", re.MULTILINE)
# What CPython's parser may raise on text it cannot hold: a syntax error, a null byte (ValueError), and for
# code nested too deep (20000 unary minus, a long chain of binary operators) MemoryError or RecursionError.
# Model text that raises any of them does not parse: the model's parse_error, never an infrastructure error.
PARSE_FAILURES = (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError)


def function_name_of(header: str) -> str | None:
    """The function (or class) a SciCode step header declares: its first top-level definition."""
    header = header or ""
    match = TOP_LEVEL_DEF.search(header) or DEF_NAME.search(header) or CLASS_NAME.search(header)
    return match.group(1) if match else None


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag lower-cased, body) of every fenced block, in order."""
    return [(m.group(1).lower(), m.group(2)) for m in FENCE.finditer(text or "")]


def defines(code: str, name: str) -> bool:
    """Whether ``code`` defines ``name`` at top level (by regex if the code does not parse)."""
    try:
        tree = pyast.parse(code)
    except PARSE_FAILURES:
        return re.search(rf"^(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", code, re.MULTILINE) is not None
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name
        for node in tree.body
    )


def choose_block(text: str, function_name: str | None) -> str | None:
    blocks = fenced_blocks(text)
    python = [body for tag, body in blocks if tag in PYTHON_TAGS]
    if function_name:
        for candidates in (python, [body for _, body in blocks]):
            for body in candidates:
                if defines(body, function_name):
                    return body
    if python:
        return python[0]
    if blocks:
        return blocks[0][1]
    # no fence at all: accept the whole reply only if it is code that defines something
    stripped = (text or "").strip()
    if (
        stripped
        and parses(stripped)
        and (defines(stripped, function_name) if function_name else re.search(r"^(def|class)\s", stripped, re.M))
    ):
        return stripped
    return None


def parses(code: str) -> bool:
    """Whether ``code`` parses as Python (whatever the parser raises on it counts as no)."""
    try:
        pyast.parse(code)
    except PARSE_FAILURES:
        return False
    return True


def _statement_lists(tree: ast.AST):
    """Every statement list (bodies, else/finally branches, except handlers, match cases)."""
    for node in ast.walk(tree):
        for attr in ("body", "orelse", "finalbody"):
            value = getattr(node, attr, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


def strip_imports(code: str) -> str | None:
    """``code`` without import statements at any depth; None if it does not parse.

    A nested body left with nothing but imports keeps a ``pass`` in place of its first import, so
    ``try:``/``if``/``def`` blocks stay valid.
    """
    try:
        tree = pyast.parse(code)
    except PARSE_FAILURES:
        return None
    edits: list[tuple[ast.stmt, bool]] = []  # (import statement, leave a pass in its place?)
    for body in _statement_lists(tree):
        imports = [s for s in body if isinstance(s, (ast.Import, ast.ImportFrom))]
        emptied = bool(imports) and len(imports) == len(body) and body is not tree.body
        edits += [(node, emptied and position == 0) for position, node in enumerate(imports)]
    lines = code.splitlines(keepends=True)
    # bottom-up (and right to left on a line), so positions of the remaining edits stay valid
    for node, keep_pass in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        lines = _remove_statement(lines, node, keep_pass)
    result = "".join(lines)
    return result if parses(result) else None


def _remove_statement(lines: list[str], node: ast.stmt, keep_pass: bool) -> list[str]:
    assert node.end_lineno is not None and node.end_col_offset is not None  # (a parsed statement has both)
    first, last = node.lineno - 1, node.end_lineno - 1
    head = lines[first][: _char_index(lines[first], node.col_offset)]
    tail = lines[last][_char_index(lines[last], node.end_col_offset) :]
    before, after = lines[:first], lines[last + 1 :]
    rest = tail.lstrip()
    if not head.strip() and (not rest.strip() or rest.startswith("#")):
        # the statement has its lines to itself: drop them (or leave a pass at its indentation)
        return before + ([head + "pass\n"] if keep_pass else []) + after
    newline = "" if tail.endswith("\n") or not after and not tail else "\n"
    if rest.startswith(";"):  # `import x; y = 1` -> `y = 1`
        new = head + rest[1:].lstrip()
    elif head.rstrip().endswith(";"):  # `y = 1; import x` -> `y = 1`
        new = head.rstrip()[:-1] + tail
    else:  # `if c: import x` -> `if c: pass`
        new = head + "pass" + tail
    new += newline if not new.endswith("\n") else ""
    return before + ([new] if new.strip() else []) + after


def _char_index(line: str, utf8_offset: int) -> int:
    """ast column offsets count UTF-8 bytes; convert to a str index."""
    return len(line.encode("utf-8")[:utf8_offset].decode("utf-8", "ignore"))


def extract_code(text: str, function_name: str | None) -> str | None:
    """The step's code from a model reply, imports removed; None when there is no parseable code."""
    block = choose_block(text, function_name)
    if block is None:
        return None
    code = strip_imports(block)
    if code is None or not code.strip():
        return None
    return code
