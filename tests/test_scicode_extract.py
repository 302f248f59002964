"""Code extraction from model replies, including the cases upstream's regex gets wrong."""

from __future__ import annotations

import ast

import pytest

from pytest_agentbench.benchmarks.scicode.extract import extract_code, function_name_of, parses, strip_imports
from pytest_agentbench.benchmarks.scicode.run import parses as run_parses


def test_function_name_of_headers():
    assert function_name_of("def get_alpha(recvec, alpha_scaling=5):\n    '''doc'''") == "get_alpha"
    assert function_name_of("class Maxwell:\n    '''doc'''") == "Maxwell"
    assert function_name_of("class Block(object):") == "Block"
    assert function_name_of("no header here") is None


def test_capitalised_python_fence():
    reply = "Here you go:\n```Python\ndef f(x):\n    return x + 1\n```\nDone."
    assert extract_code(reply, "f") == "def f(x):\n    return x + 1\n"


def test_picks_the_block_defining_the_function():
    reply = (
        "First an example:\n```python\nprint(f(2))\n```\n"
        "The helper:\n```python\ndef helper():\n    return 1\n```\n"
        "The answer:\n```python\ndef f(x):\n    return helper() + x\n```\n"
    )
    assert extract_code(reply, "f") == "def f(x):\n    return helper() + x\n"


def test_falls_back_to_first_python_block_then_any_block():
    two = "```python\nx = 1\n```\n```python\ny = 2\n```"
    assert extract_code(two, "missing") == "x = 1\n"
    plain = "```\ndef f():\n    return 3\n```"
    assert extract_code(plain, "f") == "def f():\n    return 3\n"
    other = "```text\nz = 3\n```"
    assert extract_code(other, None) == "z = 3\n"


def test_defining_block_wins_over_python_tag():
    reply = "```python\nprint('demo')\n```\n```\ndef f():\n    return 1\n```"
    assert extract_code(reply, "f") == "def f():\n    return 1\n"


def test_unfenced_reply_is_accepted_only_when_it_is_the_code():
    assert extract_code("def f():\n    return 1\n", "f") == "def f():\n    return 1"
    assert extract_code("Hello", "f") is None
    assert extract_code("I cannot help with that.", "f") is None


@pytest.mark.parametrize("reply", ["", "No code today.", "```python\n```", "```python\nimport numpy as np\n```"])
def test_no_code_gives_none(reply):
    assert extract_code(reply, "f") is None


def test_unparseable_code_gives_none():
    assert extract_code("```python\ndef f(:\n    return\n```", "f") is None


def test_cut_off_block_without_closing_fence():
    reply = "```python\ndef f(x):\n    return x\n"
    assert extract_code(reply, "f") == "def f(x):\n    return x\n"


def test_multiline_parenthesised_import_is_removed_whole():
    # upstream's line regex leaves "    erfc,\n    gamma)\n" behind: a syntax error
    code = "from scipy.special import (\n    erfc,\n    gamma)\nimport numpy as np\n\ndef f(x):\n    return erfc(x)\n"
    assert extract_code(f"```python\n{code}```", "f") == "\ndef f(x):\n    return erfc(x)\n"


def test_import_inside_try_leaves_a_valid_body():
    # upstream's regex empties the try body: IndentationError
    code = (
        "try:\n    import numba\nexcept ImportError:\n    numba = None\n\n"
        "def f(x):\n    if x:\n        import math\n    return x\n"
    )
    result = extract_code(f"```python\n{code}```", "f")
    assert result == (
        "try:\n    pass\nexcept ImportError:\n    numba = None\n\ndef f(x):\n    if x:\n        pass\n    return x\n"
    )
    ast.parse(result)


def test_import_in_function_body_with_other_statements_is_dropped():
    code = "def f():\n    import os  # why not\n    return 1\n"
    assert strip_imports(code) == "def f():\n    return 1\n"


def test_semicolon_and_one_line_compound_imports():
    code = "import a; x = 1\ny = 2; import b\nif y: import c\n"
    assert strip_imports(code) == "x = 1\ny = 2\nif y: pass\n"


def test_docstring_line_starting_with_from_is_kept():
    # upstream's regex deletes this docstring line
    code = 'def f():\n    """Compute it.\n    from the data import pipeline\n    """\n    return 1\n'
    assert extract_code(f"```python\n{code}```", "f") == code


def test_background_comment_is_kept():
    reply = "```python\n# Background: Ewald sums split the sum.\nimport numpy as np\ndef f():\n    return 1\n```"
    assert extract_code(reply, "f") == "# Background: Ewald sums split the sum.\ndef f():\n    return 1\n"


def test_class_step():
    reply = (
        "```python\nclass Maxwell:\n    def __init__(self):\n"
        "        from numpy import zeros\n        self.z = zeros(3)\n```"
    )
    assert extract_code(reply, "Maxwell") == "class Maxwell:\n    def __init__(self):\n        self.z = zeros(3)\n"


# Code CPython's parser cannot hold: it gives up with MemoryError (20000 unary minus) or RecursionError, not a
# SyntaxError. For model text that is "does not parse" (the model's parse_error), never an exception.
TOO_DEEP = ["x = " + "-" * 20000 + "1", "x = " + "not " * 100000 + "y", "x = " + "~" * 50000 + "1"]


@pytest.mark.parametrize("expression", TOO_DEEP, ids=["unary-minus", "not-chain", "invert-chain"])
def test_code_the_parser_cannot_hold_does_not_parse(expression):
    code = f"def f(x):\n    return x\n{expression}\n"
    assert not parses(code) and not run_parses(code)
    assert strip_imports(code) is None
    assert extract_code(f"```python\n{code}```", "f") is None  # extract_code raises nothing: no code
    assert extract_code(code, "f") is None  # (an unfenced reply goes through the same parser)


def test_code_with_a_null_byte_does_not_parse():
    assert (
        not parses("def f():\n    return '\x00'\x00\n")
        and extract_code("```python\ndef f(): pass\x00\n```", "f") is None
    )
