"""Fidelity loose ends, pinned against upstream SciCode's rules.

* Symbol-keyed dicts compare as upstream's ``process_symbol_in_dict`` does: a Symbol value under a
  Symbol key stays a Symbol (so it equals no string target), a Symbol value under a str key is its name.
* Code extraction agrees with upstream's rule (first ```python block, else the first fenced block; lines
  that are imports removed) on replies with several fenced blocks, prose around them and imports, and
  differs only where the README says so.
"""

from __future__ import annotations

import ast
import re

import pytest
import sympy

from pytest_agentbench.benchmarks.scicode.compare import are_dicts_close, cmp_tuple_or_list
from pytest_agentbench.benchmarks.scicode.extract import extract_code

A, X = sympy.Symbol("a"), sympy.Symbol("x")


def test_symbol_value_under_a_symbol_key_stays_a_symbol():
    # the h5 gives strings for both; upstream then compares Symbol('x') == 'x', which is False
    assert not are_dicts_close({A: X}, {"a": "x"})
    assert are_dicts_close({"a": X}, {"a": "x"})  # under a str key the value is its name
    assert are_dicts_close({A: 1.0}, {"a": 1.0})  # the key is its name
    assert are_dicts_close({A: X}, {A: X})


def test_17_1_shape_compares_as_upstream():
    # 17.1 returns (names -> symbols, symbols -> values); its targets hold strings and floats
    names = {f"e{i}": sympy.Symbol(f"e{i}") for i in range(3)}
    values = {sympy.Symbol(f"e{i}"): float(i) for i in range(3)}
    target = ({f"e{i}": f"e{i}" for i in range(3)}, {f"e{i}": float(i) for i in range(3)})
    assert cmp_tuple_or_list((names, values), target)
    assert not cmp_tuple_or_list((names, {**values, sympy.Symbol("e2"): 5.0}), target)


def upstream_rule(reply: str) -> str:
    """Upstream's extraction rule, restated: the text after the first "```python" up to the next fence;
    without that tag, the text between the first two fences; without fences, the whole reply. Then every
    line that starts (after blanks) with `import ...` or `from ... import ...` loses its text."""
    fence = "`" * 3
    if fence in reply:
        tagged = fence + "python"
        start = reply.index(tagged) + len(tagged) if tagged in reply else reply.index(fence) + len(fence)
        end = reply.find(fence, start)
        body = reply[start:] if end < 0 else reply[start:end]
    else:
        body = reply
    import_line = re.compile(r"\s*(import\s|from\s.*\simport\s)")
    return "\n".join("" if import_line.match(line) else line for line in body.split("\n"))


def same_code(a: str, b: str) -> bool:
    return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))


F = "`" * 3
AGREE = {
    "prose, imports, a usage block after": (
        "Here is the implementation.\n\n" + F + "python\nimport numpy as np\nfrom scipy.linalg import eigh\n\n"
        "def f(x):\n    '''Docstring.'''\n    return np.sum(eigh(x)[0])\n" + F + "\n\nExample:\n\n" + F + "python\n"
        "print(f(np.eye(2)))\n" + F + "\nThat is all."
    ),
    "untagged fence": "Sure:\n" + F + "\nimport math\n\ndef f(x):\n    return math.sqrt(x)\n" + F + "\nDone.",
    "python block then a bash block": (
        "Install first:\n\n" + F + "python\nfrom numpy import (zeros)\nimport numpy as np\n"
        "def f(n):\n    # comment\n    return zeros(n) + np.ones(n)\n" + F + "\n" + F + "bash\npip install numpy\n" + F
    ),
    "import between functions and a class": (
        F + "python\nimport numpy as np\n\nclass Grid:\n    def __init__(self, n):\n        self.n = n\n\n"
        "import itertools\n\ndef f(n):\n    return Grid(n).n\n" + F + "\nNote the class above."
    ),
    "two python blocks, the first defines it": (
        "Step one:\n"
        + F
        + "python\ndef f(x):\n    return x + 1\n"
        + F
        + "\nStep two (a test):\n"
        + F
        + "python\nassert f(1) == 2\n"
        + F
    ),
}


@pytest.mark.parametrize("reply", list(AGREE.values()), ids=list(AGREE))
def test_extraction_agrees_with_upstream(reply):
    ours = extract_code(reply, "f")
    assert ours is not None
    assert same_code(ours, upstream_rule(reply))


def test_extraction_differs_only_where_documented():
    usage_first = (
        "Usage:\n" + F + "python\nprint(f(2))\n" + F + "\nCode:\n" + F + "python\n"
        "import numpy as np\ndef f(x):\n    return np.square(x)\n" + F
    )
    # upstream takes the first python block (a usage line); we take the block that defines the function
    assert same_code(upstream_rule(usage_first), "print(f(2))\n")
    assert same_code(extract_code(usage_first, "f"), "def f(x):\n    return np.square(x)\n")
    parenthesised = F + "python\nfrom numpy import (\n    zeros,\n    ones,\n)\ndef f(n):\n    return zeros(n)\n" + F
    with pytest.raises(SyntaxError):  # upstream leaves the continuation lines behind
        ast.parse(upstream_rule(parenthesised))
    assert same_code(extract_code(parenthesised, "f"), "def f(n):\n    return zeros(n)\n")
