"""core.text.printable: text a model or a child chose, shown without its control characters."""

from __future__ import annotations

import pytest

from pytest_agentbench.benchmarks.scicode.run import last_line
from pytest_agentbench.core.text import printable

FAKE_PASSED = "\x1b[2K\r\x1b[32mPASSED\x1b[0m"  # erase the line, back to its start, a green PASSED


def test_escape_sequences_become_visible_text():
    shown = printable(FAKE_PASSED)
    assert shown == "\\x1b[2K\\x0d\\x1b[32mPASSED\\x1b[0m"
    assert "\x1b" not in shown and "\r" not in shown


@pytest.mark.parametrize(
    "char",
    [chr(c) for c in [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)]],
    ids=lambda c: f"U+{ord(c):04X}",
)
def test_every_control_character_but_newline_and_tab_is_escaped(char):
    shown = printable(f"a{char}b")
    assert shown == f"a\\x{ord(char):02x}b"
    assert shown.isprintable()


def test_ordinary_text_newlines_and_tabs_are_kept():
    text = "assert np.allclose(x, y)\n\tAssertionError: 1 ≠ 2 — ünïcode ok \\x1b already escaped"
    assert printable(text) == text


def test_non_text_is_shown_as_its_str():
    assert printable(ValueError("bad\x1b[31m")) == "bad\\x1b[31m"
    assert printable(None) == "None"


def test_the_childs_last_stderr_line_is_made_printable():
    """SciCode's record message for a child that died: its last stderr line, never raw control text."""
    stderr = "Traceback (most recent call last):\n  ...\n| 29.3 | pass | forged |\n" + FAKE_PASSED + "\n\n"
    assert last_line(stderr) == "\\x1b[32mPASSED\\x1b[0m"  # (a carriage return ends a line for splitlines)
    assert last_line("") == ""
